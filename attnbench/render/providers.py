"""Decode providers side by side: one row per configuration of cached steps (variant,
context and the other settings), one column per provider holding its step time and its
speed-up over the baseline provider, and the fastest provider of the row.

Shown by the commands (rich, through build_table) and in the report (Markdown) when the
decode records hold more than one provider.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..experiments.decode import DecodeRecord
from ..records import key_fields
from .columns import NONE_TEXT, decode_columns, fmt_status, fmt_x2, join_words, known
from .comparisons import fastest, not_fastest, unresolved_evidence, why_not
from .selection import baseline_of, providers_of
from .table import TITLE_SEPARATOR, Column, as_row

#: The settings that tell one row from another besides the provider (the mode is "cache").
ROW_FIELDS = key_fields(DecodeRecord, but=("provider", "mode"))
#: The row's field naming its fastest provider.
FASTEST = "fastest"
#: The fastest cell of a row whose least median did not beat every other by a resolved
#: comparison (render.comparisons.fastest): the table's note says why.
UNRESOLVED = "not resolved"
#: The rank of the first provider other than the baseline: after the settings (ranks up
#: to 20 in DECODE), which tell rows apart, so a narrow table hides providers first.
OTHER_RANK = 21


@dataclass(frozen=True)
class ProviderCell:
    """One provider's cached step at one configuration: its median time (ms) and speed-up
    over the baseline provider, or the status that stands for them."""

    ms: float | None
    speedup: float | None
    status: str

    def full(self) -> str:
        """'0.230 (1.21x)'; the time alone without a speed-up (the baseline's own);
        'unsupported' (the status's first word) when not timed."""
        if not known(self.ms):
            return fmt_status(self.status) if self.status != "ok" else NONE_TEXT
        if known(self.speedup):
            return f"{self.ms:.3f} ({fmt_x2(self.speedup)})"
        return f"{self.ms:.3f}"

    def short(self) -> str:
        """The time alone: '0.230'."""
        return f"{self.ms:.3f}" if known(self.ms) else self.full()


class ProvidersTable(NamedTuple):
    """The side-by-side table: its title, columns and rows (no rows: nothing to show),
    and the notes to print under it (why a row's fastest is not resolved)."""

    title: str
    columns: list[Column]
    rows: list[dict]
    notes: tuple[str, ...] = ()


def cached_steps(records: Iterable[Any]) -> list[Mapping[str, Any]]:
    return [r for r in map(as_row, records) if r.get("mode") == "cache"]


def _named_by_variant(records: Sequence[Mapping[str, Any]], field: str) -> bool:
    """Each variant of the records has one value of `field` (the variant's name says it)."""
    values: dict[Any, set] = {}
    for r in records:
        values.setdefault((r.get("model"), r.get("variant")), set()).add(r.get(field))
    return all(len(v) == 1 for v in values.values())


def _cell(record: Mapping[str, Any], baseline: str) -> ProviderCell:
    """The record's cell; the baseline's own has no speed-up (1x over itself)."""
    speedup = None if record.get("provider") == baseline else record.get("speedup_vs_baseline")
    return ProviderCell(record.get("step_ms_median"), speedup, str(record.get("status") or "ok"))


def _provider_column(name: str, rank: int) -> Column:
    return Column(
        name,
        f"provider:{name}",
        lambda c: c.full() if c else NONE_TEXT,
        rank=rank,
        compact=lambda c: c.short() if c else NONE_TEXT,
        group="providers",
    )


def providers_table(records: Iterable[Any], environment: Mapping | None = None) -> ProvidersTable:
    """The cached decode steps of `records` (records or dicts), providers side by side:
    one row per configuration, one column per provider (the baseline first), then the
    fastest provider. No rows when the cached steps hold fewer than two providers.

    A row names its fastest provider only where that provider's step beat every other's,
    round by round, by a resolved comparison (render.comparisons.fastest, with the run's
    `environment`); otherwise it says "not resolved", and a note under the table says
    why (a least median over noisy or too few samples is no answer).

    Providers timed at no point (unsupported or wrong everywhere) are named in the
    title instead of given a column. In a narrow table the speed-ups go first (each cell
    keeps its time), then the providers from the last but the baseline; settings every
    row shares go to the title."""
    steps = cached_steps(records)
    baseline = baseline_of(steps)
    timed = {r.get("provider") for r in steps if known(r.get("step_ms_median"))}
    untimed = [p for p in providers_of(steps) if p not in timed and p != baseline]
    providers = [p for p in providers_of(steps) if p not in untimed]
    settings = [c for c in decode_columns(steps) if c.field in ROW_FIELDS]
    if _named_by_variant(steps, "num_kv_heads"):  # GQA-8 says it: no column of its own
        settings = [c for c in settings if c.field != "num_kv_heads"]
    columns = [
        *settings,
        *(
            _provider_column(p, 4 if p == baseline else OTHER_RANK + i)
            for i, p in enumerate(providers)
        ),
        Column(
            "fastest", FASTEST, lambda v: NONE_TEXT if v is None else str(v), rank=5, kind="label"
        ),
    ]
    title = "Cached decode step, ms by provider"
    if baseline in providers:
        title += f" (speed-up over {baseline})"
    if untimed:  # a column of nothing but "unsupported" says less than its name here
        title += f"{TITLE_SEPARATOR}not timed at any point: {', '.join(untimed)}"
    if len(providers) < 2:
        return ProvidersTable(title, columns, [])
    rows: dict[tuple, dict] = {}
    steps_of: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in steps:
        at = tuple(r.get(f) for f in ROW_FIELDS)
        row = rows.setdefault(at, {f: r.get(f) for f in ROW_FIELDS})
        row[f"provider:{r['provider']}"] = _cell(r, baseline)
        if r.get("provider") in providers and known(r.get("step_ms_median")):
            steps_of.setdefault(at, []).append(r)
    reasons: dict[str, list[str]] = {}
    weak: dict[str, list] = {}  # rows unresolved by their evidence alone: one note for all
    for at, row in rows.items():
        timed = steps_of.get(at, [])
        if len(timed) < 2:  # one provider timed: fastest of nothing
            row[FASTEST] = None
            continue
        found = fastest(timed, environment)
        row[FASTEST] = found.best["provider"] if found.resolved else UNRESOLVED
        if found.resolved:
            continue
        evidence = unresolved_evidence(found, environment)
        if evidence is None:
            reasons.setdefault(not_fastest(found, environment), []).append(_row_name(row))
        else:
            weak[_row_name(row)] = evidence
    if weak:
        why = why_not([j for judged in weak.values() for j in judged], environment)
        reasons.setdefault(why, []).extend(weak)
    every = sum(len(names) for names in reasons.values()) == len(rows) and len(reasons) == 1
    notes = [
        f"fastest not resolved {'in any row' if every else 'for ' + join_words(names)}: "
        f"{why}; least median: {_least(steps_of, rows, names)}"
        for why, names in reasons.items()
    ]
    return ProvidersTable(title, columns, list(rows.values()), tuple(notes))


def _row_name(row: Mapping[str, Any]) -> str:
    """The row as a note names it: its variant and context ('MQA at context 2,048')."""
    return f"{row.get('variant')} at context {row.get('prompt_len'):,}"


def _least(
    steps_of: Mapping[tuple, list[Mapping[str, Any]]],
    rows: Mapping[tuple, Mapping[str, Any]],
    names: Sequence[str],
) -> str:
    """The providers of the least median in the rows named (each once, in order)."""
    least = [
        min(steps_of[at], key=lambda r: r["step_ms_median"])["provider"]
        for at, row in rows.items()
        if _row_name(row) in names
    ]
    return join_words(list(dict.fromkeys(least)))
