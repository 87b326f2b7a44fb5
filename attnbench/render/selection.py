"""Which records a table, a finding or a plot reads, and how it names them: the records
that completed, those whose step time can be stated (steady), the settings that tell one
line of records from another and their words, the providers compared. No drawing here:
render.plots draws, render.comparisons and render.providers judge and tabulate."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from ..measure.stats import BUSY_CPU_SHARE, MIN_SPREAD_SAMPLES
from ..records import Kind, failed, field_kinds
from ..study.sections import KINDS
from .columns import join_words, known

#: The baseline provider when the records do not name one.
DEFAULT_BASELINE = "attnbench"
#: Fields that are inputs of some section: what tells one line of a plot from another.
SETTINGS = frozenset(
    name
    for kind in KINDS.values()
    for name, k in field_kinds(kind.record).items()
    if k is Kind.KEY and name != "variant"
)
#: How fields read in legends and titles.
FIELD_NAMES = {
    "num_heads": "query heads",
    "num_kv_heads": "KV heads",
    "num_layers": "layers",
    "seq_len": "context",
    "prompt_len": "context",
    "gen_len": "gen",
    "dtype": "",
    "batch_spec": "sequences",
    "kv_dtype": "KV",
    "scale_dtype": "scales",
}
#: Settings a model preset fixes: a line named by its model does not repeat them.
MODEL_FIXED = frozenset({"d_model", "num_heads", "head_dim", "num_layers"})
#: Settings not named when every record has this value: no generations, no CUDA graphs.
UNSAID = {"gen_len": 0, "cuda_graph": False}


def few_samples(record: Mapping) -> bool:
    """The record's step has too few samples to judge their spread (measure.stats)."""
    repeats = record.get("step_repeats")
    return known(repeats) and repeats < MIN_SPREAD_SAMPLES


def busy(record: Mapping) -> float | None:
    """The share of its sampling time the record's process ran for, when under
    BUSY_CPU_SHARE (another process held the CPU); None otherwise."""
    share = record.get("cpu_share")
    return share if known(share) and share < BUSY_CPU_SHARE else None


def steady(record: Mapping) -> bool:
    """The record's step time can be stated: not flagged noisy, with samples enough to
    tell, sampled while its process had the CPU (a record written before the status said
    so has its `noisy` flag alone)."""
    return not record.get("noisy") and not few_samples(record) and busy(record) is None


def unsteady(record: Mapping) -> bool:
    """Not `steady`: a point a plot draws hollow."""
    return not steady(record)


def ok_records(records: Iterable[dict], *needed: str) -> list[dict]:
    """Records that completed (no oom or error status) and have every `needed` field, with
    a finite value (a NaN or an infinity is no value to draw or to write down)."""
    return [r for r in records if not failed(r) and all(known(r.get(f)) for f in needed)]


def setting_fields(records: Iterable[dict]) -> list[str]:
    """The record fields that are settings of a study (the sweep file's axes, and the
    model): what tells one line from another. Fields derived from them (variant,
    kv_heads_per_gpu) are not, and settings added to the sweep later are included."""
    fields: list[str] = []
    for r in records:
        fields.extend(f for f in r if f not in fields and f in SETTINGS)
    return fields


def series(
    records: Sequence[dict], x: str, exclude: Sequence[str] = (), named: bool = True
) -> list[tuple[str, list[dict]]]:
    """Records grouped into lines, one per configuration (x and `exclude` aside), sorted by
    x, each labelled by its variant or model, or (not `named`: lines across variants) by
    its models where every point has one, plus whatever else varies between lines."""
    keys = [f for f in setting_fields(records) if f != x and f not in exclude]
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(tuple(r.get(f) for f in keys), []).append(r)
    varying = [
        f
        for i, f in enumerate(keys)
        if len({k[i] for k in groups}) > 1 and f not in ("model", "variant", "num_kv_heads", "mode")
    ]
    lines = [sorted(rows, key=lambda r: r[x]) for rows in groups.values()]
    return [(_line_label(rows, varying, named), rows) for rows in lines]


def _line_label(rows: Sequence[dict], extra: Sequence[str], named: bool) -> str:
    """A line's series_label; a line across variants (not `named`) of model presets is
    named by them, in the order of its points, and by the shape they share where shapes
    tell lines apart, as a line of no preset is: 'llama-3-8b and llama-2-7b, query heads
    32, head_dim 128'."""
    models = list(dict.fromkeys(r.get("model") for r in rows))
    if named or None in models:
        return series_label(rows[0], extra, named)
    return _joined([join_words(models)], rows[0], extra, by_model=False)


def same_points(
    lines: Sequence[tuple[str, list[dict]]], points: Callable[[list[dict]], Hashable]
) -> list[list[int]]:
    """The lines (their indices) whose `points` are identical, grouped, each group in the
    order of its first line: lines a plot would draw one on top of the other."""
    groups: dict[Hashable, list[int]] = {}
    for i, (_, rows) in enumerate(lines):
        groups.setdefault(points(rows), []).append(i)
    return list(groups.values())


def merge_identical(
    lines: Sequence[tuple[str, list[dict]]], points: Callable[[list[dict]], Hashable]
) -> list[tuple[str, list[dict]]]:
    """`lines` with those whose `points` are identical drawn as one, under a joint_label:
    a line hidden under another would leave its legend entry naming nothing to be seen."""
    return [
        (joint_label([lines[i][0] for i in group]), lines[group[0]][1])
        for group in same_points(lines, points)
    ]


def joint_label(labels: Sequence[str]) -> str:
    """One label for lines whose points are identical: their own words joined by ' = ',
    then the words they all share, once: 'llama-3-8b (GQA-8) = mixtral-8x7b (GQA-8),
    bfloat16, KV bfloat16'."""
    if len(labels) == 1:
        return labels[0]
    parts = [label.split(", ") for label in labels]
    shared = [p for p in parts[0][1:] if all(p in q[1:] for q in parts[1:])]
    own = [", ".join(q[:1] + [p for p in q[1:] if p not in shared]) for q in parts]
    return ", ".join([" = ".join(own), *shared])


def series_label(record: dict, extra: Sequence[str] = (), named: bool = True) -> str:
    """'MHA', 'llama-3-8b (GQA-8)', or 'GQA-2, batch 4' when batch tells lines apart."""
    model, variant = record.get("model"), record.get("variant")
    name = [f"{model} ({variant})" if model else str(variant)] if named else []
    return _joined(name, record, extra, by_model=named and bool(model))


def _joined(name: list[str], record: dict, extra: Sequence[str], by_model: bool) -> str:
    """`name`, then the settings `extra` that the record sets (less those its model fixes,
    where a model names the line), or 'all' when that says nothing."""
    fields = [f for f in extra if not (by_model and f in MODEL_FIXED)]
    texts = [field_text(f, record[f]) for f in fields]
    return ", ".join([*name, *(t for t in texts if t)]) or "all"


def field_text(field: str, value) -> str:
    """How a setting reads in a label: 'context 4,096', 'KV int8'; '' for an option left
    unset (None), which would read 'scale_dtype None'."""
    if field == "cuda_graph":
        return "CUDA graphs" if value else "eager"
    if field == "block_size":
        return "contiguous cache" if value is None else f"blocks of {value:,}"
    if value is None:
        return ""
    name = FIELD_NAMES.get(field, field)
    text = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
    return f"{name} {text}".strip()


def context(
    records: Sequence[dict], environment: dict, fields: Sequence[str], machine: str | None = "on"
) -> str:
    """'on Intel Xeon (cpu), float32, batch 1': the settings every record shares (but a
    default nobody set, like gen 0: see UNSAID). `machine` is the words before the
    machine's name ('checked by allocation on'); None names no machine (a plot of counts
    that no machine measured)."""
    device = environment.get("device_name") or environment.get("device", "?")
    parts = [] if machine is None else [f"{machine} {device} ({environment.get('device', '?')})"]
    for f in fields:
        values = {r.get(f) for r in records}
        value = values.pop() if len(values) == 1 else None
        if value is not None and not (f in UNSAID and value == UNSAID[f]):
            parts.append(field_text(f, value))
    return ", ".join(parts)


def baseline_of(records: Sequence[Mapping[str, Any]]) -> str:
    """The baseline provider the records were compared with."""
    named = [r["baseline_provider"] for r in records if r.get("baseline_provider")]
    return named[0] if named else DEFAULT_BASELINE


def providers_of(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The providers of the records, the baseline first, then as they first appear."""
    names = list(dict.fromkeys(str(r.get("provider")) for r in records if r.get("provider")))
    baseline = baseline_of(records)
    return sorted(names, key=lambda n: n != baseline)


def one_provider(records: Sequence[dict]) -> list[dict]:
    """With several providers, the records of one: the baseline (else the first), since
    decode_providers compares them; the records as they are otherwise."""
    names = providers_of(records)
    if len(names) < 2:
        return list(records)
    return [r for r in records if r.get("provider") == names[0]]
