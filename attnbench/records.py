"""What each field of a record is. Every record type is a dataclass whose fields declare
their kind in the field's metadata, and everything that reads records (the regression
gate, the CSV and JSON writers, tables, plots and the report) goes by these declarations:

- `key`: an input of the sweep (shape, batch, dtype, mode...): rows are matched on keys;
- `exact`: a computed count or size (parameters, bytes, FLOPs): any change is a regression;
- `memory`: a measured allocation, gated with a tolerance;
- `timing`: a measured time, gated against noise; its statistics (percentiles, raw
  samples) are timing fields too, that name the field they describe with `of` and their
  `role` in it (`p25`, `p75`, `samples`). A measurement (measure.stats.Measurement) fills
  a timing's fields by these declarations (`flattened`), and the gate reads it back by them;
- `ratio`: a timing over another timed in the same rounds, interleaved with it sample by
  sample, and the ratio taken within each round (`x_of_reference`: a step over its
  kernels; `x_of_narrowest`, `x_of_no_cache`, `x_of_baseline`: the comparisons of a
  study's points): gated like a timing, with its own statistics, but between runs whose
  machines differed in load, as long as the device model and the library versions match
  (the machine's state cancels in the ratio). `against` names the info field that says
  what it was taken against: ratios to different things are not compared;
- `count`: a near-exact measured count (CPU instructions under callgrind): it does not
  depend on the machine's load, and a change beyond the gate's count threshold
  (gate.compare.Thresholds.count: 1% by default, which compare can change) either way
  is a verdict;
- `info`: everything else (rates, flags, status, intervals): shown, never gated or
  matched.

How a section's table shows its records is declared beside them too, as plain data
(`ColumnSpec`: a field, its header and its unit), for render.columns to format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any, Protocol


class Kind(str, Enum):
    KEY = "key"
    EXACT = "exact"
    MEMORY = "memory"
    TIMING = "timing"
    RATIO = "ratio"
    COUNT = "count"
    INFO = "info"


_NO_DEFAULT: Any = dataclasses.MISSING


def _field(
    kind: Kind,
    default: Any,
    csv: bool = True,
    of: str | None = None,
    against: str | None = None,
    role: str | None = None,
    signed: bool = False,
    **kw,
) -> Any:
    if (of is not None or role is not None) and role not in ROLES:
        raise ValueError(f"a statistic's role is one of {', '.join(ROLES)}, not {role!r}")
    metadata = {
        "kind": kind,
        "csv": csv,
        "of": of,
        "against": against,
        "role": role,
        "signed": signed,
    }
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata, **kw)


def key(default: Any = _NO_DEFAULT) -> Any:
    """A sweep input; rows of two runs are matched on their keys."""
    return _field(Kind.KEY, default)


def exact(default: Any = _NO_DEFAULT, signed: bool = False) -> Any:
    """A computed count or size: the same inputs must always give the same value.
    `signed`: a balance that may fall below 0 (the memory left after the weights)."""
    return _field(Kind.EXACT, default, signed=signed)


def memory(default: Any = None) -> Any:
    """A measured allocation in bytes."""
    return _field(Kind.MEMORY, default)


def timing(
    default: Any = None, of: str | None = None, csv: bool = True, role: str | None = None
) -> Any:
    """A measured time in ms, its median; `of` marks a statistic of another timing field,
    which is the one gated, and `role` says which (one of ROLES). Raw samples are JSON
    only (`csv=False`)."""
    return _field(Kind.TIMING, default, csv=csv, of=of, role=role)


def ratio(
    default: Any = None,
    of: str | None = None,
    csv: bool = True,
    against: str | None = None,
    role: str | None = None,
) -> Any:
    """An in-run ratio of two timings; `of`, `role` and `csv` as for `timing`; `against`
    (on the gated field) the info field naming what the ratio was taken against."""
    return _field(Kind.RATIO, default, csv=csv, of=of, against=against, role=role)


def count(default: Any = None) -> Any:
    """A measured count that the machine's load does not change (instructions)."""
    return _field(Kind.COUNT, default)


def info(default: Any = None) -> Any:
    """Derived or descriptive: a rate, a computed ratio or speed-up (an in-run ratio of two
    timings is a `ratio`), an interval's bounds, a flag, a status."""
    return _field(Kind.INFO, default)


def field_kinds(record_type: type) -> dict[str, Kind]:
    """Each field of a record type and its declared kind, in field order."""
    return {f.name: f.metadata["kind"] for f in dataclasses.fields(record_type)}


def signed_fields(record_type: type) -> set[str]:
    """The fields of a record type whose values may be below 0 (`exact(signed=True)`)."""
    return {f.name for f in dataclasses.fields(record_type) if f.metadata.get("signed")}


def key_fields(record_type: type, but: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The key fields of a record type, in field order, but those named in `but`."""
    return tuple(
        name
        for name, kind in field_kinds(record_type).items()
        if kind is Kind.KEY and name not in but
    )


#: Kinds whose fields are judged from a median, its percentiles and raw samples.
SAMPLED = (Kind.TIMING, Kind.RATIO)
#: The roles of a sampled field's statistics: its quartiles and its raw samples.
ROLES = ("p25", "p75", "samples")


def gated_timing(record_type: type) -> dict[str, dict[str, str]]:
    """The timing and ratio fields that are gated, each with its statistics by role: for
    step_ms_median {'p25': 'step_ms_p25', 'p75': 'step_ms_p75', 'samples': 'samples_ms'}."""
    fields = dataclasses.fields(record_type)
    gated = {f.name: {} for f in fields if f.metadata["kind"] in SAMPLED and not f.metadata["of"]}
    for f in fields:
        if f.metadata["of"]:
            gated[f.metadata["of"]][f.metadata["role"]] = f.name
    return gated


class Measured(Protocol):
    """A measurement's summary and raw samples (measure.stats.Measurement)."""

    @property
    def samples_ms(self) -> Sequence[float]: ...
    @property
    def median_ms(self) -> float: ...
    @property
    def p25_ms(self) -> float | None: ...
    @property
    def p75_ms(self) -> float | None: ...


def flattened(record_type: type, metric: str, measured: Measured) -> dict[str, Any]:
    """A measurement of the sampled field `metric` as the columns the record type declares
    for it: its median in `metric`, and each statistic in its field by role, e.g.
    {'step_ms_median': ..., 'step_ms_p25': ..., 'step_ms_p75': ..., 'samples_ms': [...]}."""
    by_role = {"p25": measured.p25_ms, "p75": measured.p75_ms, "samples": list(measured.samples_ms)}
    stats = gated_timing(record_type)[metric]
    return {metric: measured.median_ms, **{name: by_role[r] for r, name in stats.items()}}


def ratio_against(record_type: type) -> dict[str, str]:
    """Each gated ratio field that declares what it is taken against, and that info field."""
    return {
        f.name: f.metadata["against"]
        for f in dataclasses.fields(record_type)
        if f.metadata.get("against")
    }


def intervals(record_type: type) -> dict[str, tuple[str, str]]:
    """Each gated field that holds a 95% interval, and the info fields of its bounds: a
    comparison's `<stem>_ci_lo` and `<stem>_ci_hi` beside its `<stem>_median`."""
    names = {f.name for f in dataclasses.fields(record_type)}
    found = {}
    for median in gated_timing(record_type):
        stem = median.removesuffix("_median")
        bounds = (f"{stem}_ci_lo", f"{stem}_ci_hi")
        if set(bounds) <= names:
            found[median] = bounds
    return found


def bounds(record_type: type) -> list[tuple[str, str, str]]:
    """The statistics that hold a gated field's median between them, as (lower, median,
    upper): its quartiles, and its 95% interval where it has one."""
    quartiles = [
        (stats["p25"], median, stats["p75"])
        for median, stats in gated_timing(record_type).items()
        if "p25" in stats and "p75" in stats
    ]
    return quartiles + [(lo, median, hi) for median, (lo, hi) in intervals(record_type).items()]


def positive_fields(record_type: type) -> set[str]:
    """The fields that are ratios of two times, and so above 0: the `ratio` fields (their
    statistics and samples too) and the bounds of their intervals."""
    ratios = {f.name for f in dataclasses.fields(record_type) if f.metadata["kind"] is Kind.RATIO}
    spans = intervals(record_type)
    return ratios | {b for median in ratios & spans.keys() for b in spans[median]}


def csv_fields(record_type: type) -> list[str]:
    """The fields a CSV row holds: all but the raw samples."""
    return [f.name for f in dataclasses.fields(record_type) if f.metadata["csv"]]


def as_dict(record: Any) -> dict:
    """A record (dataclass or dict) as a plain dict."""
    if dataclasses.is_dataclass(record):
        return dataclasses.asdict(record)  # type: ignore[arg-type]
    return dict(record) if isinstance(record, Mapping) else record


@dataclasses.dataclass(frozen=True)
class Status:
    """A record's status as its text holds it, 'word: reason': the word ('ok', 'noisy',
    'oom', 'error', 'wrong', 'skipped', 'unsupported'...) and the reason after it ('' for
    none); a record without one is ok."""

    word: str
    reason: str = ""

    @classmethod
    def of(cls, text: Any) -> Status:
        """The status of a record's `status` value (None: ok)."""
        word, _, reason = str("ok" if text is None else text).partition(":")
        return cls(word.strip(), reason.strip())

    @property
    def failed(self) -> bool:
        """The point ran out of memory or raised: its record holds no measurement."""
        return self.word in ("oom", "error")


def failed(record: Mapping) -> bool:
    """The point ran out of memory or failed: its record holds no measurement."""
    return Status.of(record.get("status")).failed


#: How a declared column's cells read (render.columns gives each unit one formatter):
#: `label` as it is; `variant` the variant's name, marked on a what-if set's own row;
#: `flag` yes or no; `int` with thousands separators; `count` the same, or '67.1 M' where
#: the table is too narrow; `bytes` in binary units; `pct` a fraction as a percentage;
#: `rate` a rate (tokens/s) in whole numbers, two digits below 10; `aligned` a time or an
#: intensity, in the same decimals down the column.
UNITS = ("label", "variant", "flag", "int", "count", "bytes", "pct", "rate", "aligned")


@dataclasses.dataclass(frozen=True)
class ColumnSpec:
    """One column of a section's table, declared as plain data with the section (its
    experiment's COLUMNS), which render.columns makes a table column of: the record
    `field` it shows under `header`; how its cells read (`unit`, one of UNITS); its `rank`
    (lower is more important: the highest is hidden first when the table is too wide);
    whether it is a `setting` of the sweep (it moves to the title when every row shares
    it); and how the title names it then (`title`: a format string of the value,
    'd_model {:,}'; for a flag, its name when set and 'no ' + its name when not; None:
    the header and the cell)."""

    header: str
    field: str
    unit: str
    rank: int = 50
    setting: bool = False
    title: str | None = None

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(
                f"column {self.header!r}: unit must be one of {', '.join(UNITS)}, not {self.unit!r}"
            )
