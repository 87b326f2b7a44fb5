"""Findings about the comparisons of a decode study, stated only where their evidence holds.

Each comparison is a ratio taken within each round of points sampled in turn
(experiments.interleave): its median over the rounds and a bootstrap 95% interval. A
finding states that interval, never a ratio of two medians, and only when the comparison
is resolved (`judge`):

- its interval is within ±RESOLVED_WIDTH of its median (the larger side), or, for a
  ratio far from even, within EFFECT_SHARE of how far it is from even (`allowed_width`:
  an effect three times its uncertainty): "7.4x (5.5-9.5x)" says which step is faster
  and by about how much as surely as "1.05x (1.00-1.10x)" does;
- it was taken over MIN_SPREAD_SAMPLES rounds or more (over fewer, the bootstrap interval
  says little: over one round it has no width at all);
- the host's speed held during the run: the copy-peak probes taken before and after the
  timed points (study.runner) agree within HOST_MOVED. A ratio of a step that reads memory
  over one that stays in cache changes with the machine's bandwidth, so a run whose
  bandwidth moved measured a blend of two machines.

Otherwise the finding says that the comparison is not resolved, and why, from what the
run measured: the interval's width, the rounds, the probes, the spread of the steps
compared. A speed-up is written "3.2x faster" or "1.4x slower", never "0.7x faster".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..experiments.decode import DecodeRecord
from ..gate.compare import is_measured
from ..measure.stats import (
    MIN_SPREAD_SAMPLES,
    NOISY_IQR_FRACTION,
    median,
    next_run_interval,
    relative_half_width,
)
from ..measure.timing import drift
from ..records import key_fields
from .columns import join_words, known, spread_text
from .selection import busy, ok_records, one_provider, series_label

#: The widest 95% interval (its larger side, relative to the median) of a resolved
#: comparison: the rule that flags a timing noisy (p25 to p75 within 10% of the median),
#: applied to the comparison itself.
RESOLVED_WIDTH = 0.10
#: The share of a ratio's distance from even (1 - 1/m for a ratio m or 1/m, m > 1) its
#: interval may span and still resolve it: 1.6x within ±12.5%, 7x within ±29%.
EFFECT_SHARE = 1 / 3
#: Probes of one peak further apart than this (the largest over the smallest, less 1) say
#: the host's speed moved during the run.
HOST_MOVED = 0.20


def _x(value: float) -> str:
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def _span(lo: float, hi: float, named: bool) -> str:
    return f"({'95% interval ' * named}{_x(lo)[:-1]}-{_x(hi)})"


def stated(record: dict, stem: str, inverse: bool = False, named: bool = True) -> str:
    """A comparison with its interval, '6.64x (95% interval 6.50-6.80x)', or '(6.50-6.80x)'
    unless `named`; `inverse` for a speed-up (1 / the ratio)."""
    median, lo, hi = (record[f"{stem}_{s}"] for s in ("median", "ci_lo", "ci_hi"))
    if inverse:
        median, lo, hi = 1 / median, 1 / hi, 1 / lo
    return f"{_x(median)} {_span(lo, hi, named)}"


def speed(record: dict, stem: str, named: bool = True) -> str:
    """The step's speed against the other of a comparison (the step over the other's,
    `stem`), in words that hold over the whole interval: '36.4x faster (95% interval
    34.7-37.2x)', '1.43x slower (1.40-1.46x)', or, where the interval holds 1, the ratio
    itself: 'as fast within its interval (1.02x, 95% interval 0.97-1.07x)'."""
    ratio, lo, hi = (record[f"{stem}_{s}"] for s in ("median", "ci_lo", "ci_hi"))
    if hi < 1:
        return f"{_x(1 / ratio)} faster {_span(1 / hi, 1 / lo, named)}"
    if lo > 1:
        return f"{_x(ratio)} slower {_span(lo, hi, named)}"
    interval = _span(1 / hi, 1 / lo, True)[1:]
    return f"as fast within its interval (speed-up {_x(1 / ratio)}, {interval}"


def host_moved(environment: Mapping | None) -> float | None:
    """How far the run's copy-peak probes read apart (the largest over the smallest), when
    by more than HOST_MOVED; None when they agree, or the run probed once."""
    moved = drift((environment or {}).get("peak_gbps_probes") or [])
    return moved if moved is not None and moved > 1 + HOST_MOVED else None


def moved_text(environment: Mapping) -> str:
    """'the host's copy peak moved 1.8x during the run (11.6, then 6.5 GB/s)'."""
    moved = host_moved(environment)
    readings = ", then ".join(f"{v:.1f}" for v in environment["peak_gbps_probes"])
    return f"the host's copy peak moved {moved:.1f}x during the run ({readings} GB/s)"


def spread(record: Mapping) -> float | None:
    """How far a step's samples spread: its p75 over its p25 (1.0 for none); None unless
    both are measured times (gate.compare.is_measured)."""
    lo, hi = record.get("step_ms_p25"), record.get("step_ms_p75")
    return hi / lo if is_measured(lo) and is_measured(hi) else None


@dataclass(frozen=True)
class Judged:
    """A comparison judged: whether it is resolved, and the evidence: the relative width
    of its interval around its `median`, its rounds, how far the steps it compares spread
    (p75 over p25, the wider of the two), how far the host's copy-peak probes moved (None:
    they held), and the share of the sampling time its process ran for, when another
    process held the CPU for more than its due (None: it did not)."""

    median: float
    width: float
    rounds: int | None
    spread: float | None
    moved: float | None
    held: float | None

    @property
    def allowed(self) -> float:
        """The widest interval that resolves this comparison (allowed_width)."""
        return allowed_width(self.median)

    @property
    def ordered(self) -> bool:
        """Its interval may order the two steps: taken over enough rounds, on a host that
        held its speed. Which step is faster then asks only that the interval leave out
        1x; how much faster asks `resolved` too."""
        enough = self.rounds is not None and self.rounds >= MIN_SPREAD_SAMPLES
        return enough and self.moved is None and self.held is None

    @property
    def resolved(self) -> bool:
        return self.width <= self.allowed and self.ordered


def allowed_width(ratio: float) -> float:
    """The widest 95% interval (its larger side, relative to the median) that resolves a
    comparison of median `ratio`: RESOLVED_WIDTH, or EFFECT_SHARE of the ratio's distance
    from even where that is wider."""
    if not ratio > 0:
        return RESOLVED_WIDTH
    far = max(ratio, 1 / ratio)
    return max(RESOLVED_WIDTH, EFFECT_SHARE * (1 - 1 / far))


#: What the points of one group share: records alike in these were sampled in the same
#: rounds (experiments.interleave; the group's number alone repeats across the shares of a
#: merged study).
CONTEXT_FIELDS = (
    "sampling_group",
    *key_fields(DecodeRecord, but=("variant", "provider", "num_kv_heads", "mode")),
)


def _same_context(a: Mapping, b: Mapping) -> bool:
    return all(a.get(f) == b.get(f) for f in CONTEXT_FIELDS)


def _against(record: Mapping, stem: str) -> tuple:
    """(variant or KV heads, provider, mode) of the point the comparison `stem` of
    `record` is taken against."""
    if stem == "x_of_narrowest":
        return record.get("narrowest_variant"), record.get("provider"), "cache"
    if stem == "x_of_no_cache":
        return record.get("num_kv_heads"), record.get("provider"), "no_cache"
    return record.get("num_kv_heads"), record.get("baseline_provider"), record.get("mode")


def partner(record: Mapping, stem: str, records: Sequence[Mapping]) -> Mapping | None:
    """The record of the point `record`'s comparison `stem` is taken against."""
    which = "variant" if stem == "x_of_narrowest" else "num_kv_heads"
    wanted = _against(record, stem)
    found = (
        r
        for r in records
        if r is not record
        and _same_context(r, record)
        and (r.get(which), r.get("provider"), r.get("mode")) == wanted
    )
    return next(found, None)


def judge(
    record: Mapping, stem: str, records: Sequence[Mapping], environment: Mapping | None
) -> Judged:
    """The evidence of the record's comparison `stem` (see the module's docstring)."""
    median, lo, hi = (record[f"{stem}_{s}"] for s in ("median", "ci_lo", "ci_hi"))
    other = partner(record, stem, records)
    spreads = [s for s in (spread(record), other and spread(other)) if s is not None]
    rounds = record.get("step_repeats")
    return Judged(
        median,
        relative_half_width(median, lo, hi),
        rounds if known(rounds) else None,
        max(spreads, default=None),
        host_moved(environment),
        held(record, other),
    )


def held(*records: Mapping | None) -> float | None:
    """The least share of their sampling time the records' process ran for, when another
    process held the CPU (render.selection.busy); None when none did."""
    shares = [s for r in records if r is not None and (s := busy(r)) is not None]
    return min(shares, default=None)


def held_text(share: float) -> str:
    """'another process held the CPU: this one ran for only 33% of the sampling time'."""
    return f"another process held the CPU: this one ran for only {share:.0%} of the sampling time"


def paired(a: Mapping, b: Mapping) -> dict | None:
    """The comparison of two records sampled in the same rounds, as a record's comparison
    fields under the stem 'x' ({'x_median', 'x_ci_lo', 'x_ci_hi'}, a's step over b's, and
    the rounds), its interval the one the next run falls in, over the memory layouts the
    rounds span (stats.next_run_interval): None when they were not sampled together."""
    xs, ys = a.get("samples_ms") or [], b.get("samples_ms") or []
    together = a.get("sampling") == b.get("sampling") == "interleaved" and _same_context(a, b)
    if not together or not xs or len(xs) != len(ys) or not all(map(is_measured, xs + ys)):
        return None
    ratios = [x / y for x, y in zip(xs, ys, strict=True)]
    lo, hi = next_run_interval(ratios, a.get("layouts") or 1)
    return {
        "x_median": median(ratios),
        "x_ci_lo": lo,
        "x_ci_hi": hi,
        "step_repeats": len(ratios),
    }


def _percents(*shares: float) -> list[str]:
    """Spreads (spread_text) as whole percents, or to a tenth where whole ones would read
    alike ('±10.4% wide (over ±10.0%)', never '±10% wide (over ±10%)')."""
    whole = [spread_text(s, 0) for s in shares]
    return whole if len(set(whole)) == len(whole) else [spread_text(s) for s in shares]


def why_not(judged: Sequence[Judged], environment: Mapping | None) -> str:
    """Why comparisons are not resolved, from the evidence of each: 'its 95% interval is
    ±28% wide (over ±10%), the steps compared spread up to 2.9x from p25 to p75, and the
    host's copy peak moved 1.8x during the run (11.6, then 6.5 GB/s)'."""
    one = len(judged) == 1
    parts = []
    wide = [j for j in judged if j.width > j.allowed]
    if wide:
        widest = max(wide, key=lambda j: j.width - j.allowed)
        what = "its 95% interval is" if one else "their 95% intervals are up to"
        width, allowed = _percents(widest.width, widest.allowed)
        parts.append(f"{what} {width} wide (over {allowed})")
    rounds = [j.rounds or 0 for j in judged]
    if min(rounds) < MIN_SPREAD_SAMPLES:
        span = f"{min(rounds)}" if len(set(rounds)) == 1 else f"{min(rounds)} to {max(rounds)}"
        who = "it was" if one else "they were"
        parts.append(f"{who} sampled over only {span} rounds ({MIN_SPREAD_SAMPLES} needed)")
    spreads = [j.spread for j in judged if j.spread is not None]
    if spreads and max(spreads) > 1 + NOISY_IQR_FRACTION:
        parts.append(f"the steps compared spread up to {max(spreads):.1f}x from p25 to p75")
    shares = [j.held for j in judged if j.held is not None]
    if shares:
        parts.append(held_text(min(shares)))
    if any(j.moved is not None for j in judged) and environment is not None:
        parts.append(moved_text(environment))
    return join_words(parts) if parts else "its evidence does not hold"


def judge_pair(comparison: Mapping, a: Mapping, b: Mapping, environment: Mapping | None) -> Judged:
    """The evidence of a paired comparison (`paired`) of a's step over b's."""
    median, lo, hi = (comparison[f"x_{s}"] for s in ("median", "ci_lo", "ci_hi"))
    spreads = [s for s in (spread(a), spread(b)) if s is not None]
    return Judged(
        median,
        relative_half_width(median, lo, hi),
        comparison["step_repeats"],
        max(spreads, default=None),
        host_moved(environment),
        held(a, b),
    )


@dataclass(frozen=True)
class Fastest:
    """The fastest step of rows alike but in their provider: `best` (the least median),
    each other row `against` it with their paired comparison (None: not sampled in
    turn), and whether `best` beat every one of them, the whole interval of an ordered
    comparison (Judged.ordered) under 1x (`resolved`): which step is fastest, not by how
    much, which a wide interval still leaves open. Only a resolved one is named fastest."""

    best: Mapping
    against: list[tuple[Mapping, dict | None]]
    resolved: bool


def fastest(rows: Sequence[Mapping], environment: Mapping | None) -> Fastest:
    """The fastest of `rows` (at least two timed steps), and whether it is resolved."""
    best = min(rows, key=lambda r: r["step_ms_median"])
    against = [(r, paired(best, r)) for r in rows if r is not best]
    resolved = all(
        p is not None and judge_pair(p, best, r, environment).ordered and p["x_ci_hi"] < 1
        for r, p in against
    )
    return Fastest(best, against, resolved)


def not_fastest(found: Fastest, environment: Mapping | None) -> str:
    """Why the provider of the least median is not named fastest: 'attnbench was not
    sampled in turn with hf', 'attnbench and hf are as fast within the 95% interval of
    their comparison', or why the comparisons are not resolved (`why_not`)."""
    best = found.best
    apart = [r["provider"] for r, p in found.against if p is None]
    if apart:
        return f"{best['provider']} was not sampled in turn with {join_words(apart)}"
    judged = [judge_pair(p, best, r, environment) for r, p in found.against if p]
    if all(j.ordered for j in judged):
        tied = [r["provider"] for r, p in found.against if p and p["x_ci_hi"] >= 1]
        return (
            f"{best['provider']} and {join_words(tied)} are as fast within the 95% "
            "interval of their comparison"
        )
    return why_not([j for j in judged if not j.ordered], environment)


def unresolved_evidence(found: Fastest, environment: Mapping | None) -> list[Judged] | None:
    """The comparisons that leave `found` unresolved, when that is all there is to say (no
    provider apart, none as fast within a resolved interval): their evidence, which
    several rows' can share one `why_not`; None otherwise."""
    if any(p is None for _, p in found.against):
        return None
    judged = [judge_pair(p, found.best, r, environment) for r, p in found.against if p]
    weak = [j for j in judged if not j.ordered]
    return weak or None


def _listed(rows: Sequence[dict], stem: str, inverse: bool = False) -> str:
    """'MHA 9.19x (95% interval 8.99-9.27x), GQA-2 1.91x (1.88-1.92x)', or with `inverse`
    'MHA 38.7x faster (95% interval ...), GQA-2 1.20x slower (...)'."""
    if inverse:
        return ", ".join(
            f"{series_label(r)} {speed(r, stem, named=i == 0)}" for i, r in enumerate(rows)
        )
    return ", ".join(
        f"{series_label(r)} {stated(r, stem, named=i == 0)}" for i, r in enumerate(rows)
    )


def _compared(records: Sequence[dict], stem: str) -> list[dict]:
    """The baseline provider's rows that have the comparison `stem`, with its interval: a
    median and bounds that are all measured ratios (gate.compare.is_measured), which a
    speed-up can invert."""
    needed = [f"{stem}_{s}" for s in ("median", "ci_lo", "ci_hi")]
    rows = ok_records(records, *needed, "prompt_len")
    return one_provider([r for r in rows if all(is_measured(r[f]) for f in needed)])


def _rounds(rows: Sequence[dict]) -> str:
    counts = sorted({r["step_repeats"] for r in rows if known(r.get("step_repeats"))})
    if not counts:
        return ""
    span = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    return f", sampled in turn over {span} rounds"


def _longest(rows: Sequence[dict]) -> tuple[int, list[dict]]:
    longest = max(r["prompt_len"] for r in rows)
    return longest, [r for r in rows if r["prompt_len"] == longest]


def _split(
    rows: Sequence[dict], stem: str, records: Sequence[dict], environment: Mapping | None
) -> tuple[list[dict], list[dict], list[Judged]]:
    """The rows whose comparison `stem` is resolved, those whose is not, and the latter's
    evidence."""
    judged = [judge(r, stem, records, environment) for r in rows]
    held = [r for r, j in zip(rows, judged, strict=True) if j.resolved]
    not_held = [(r, j) for r, j in zip(rows, judged, strict=True) if not j.resolved]
    return held, [r for r, _ in not_held], [j for _, j in not_held]


def variant_findings(records: Sequence[dict], environment: Mapping | None = None) -> list[str]:
    """'Cached step over MQA's at 4,096 tokens: MHA 9.19x (95% interval 8.99-9.27x),
    GQA-2 1.91x (1.88-1.92x), sampled in turn over 30 rounds.'; the variants whose
    comparison is not resolved in a line of their own: 'Cached step of GQA-2 over MQA's at
    4,096 tokens: not resolved, its 95% interval is ±28% wide (over ±10%)'."""
    rows = _compared(records, "x_of_narrowest")
    if not rows:
        return []
    longest, at = _longest(rows)
    narrowest = join_words(sorted({r["narrowest_variant"] for r in at}))
    widest_first = sorted(at, key=lambda r: -r["x_of_narrowest_median"])
    return _resolved_or_not(
        widest_first,
        "x_of_narrowest",
        records,
        environment,
        held=lambda rows: (
            f"Cached step over {narrowest}'s at {longest:,} tokens: "
            f"{_listed(rows, 'x_of_narrowest')}{_rounds(rows)}."
        ),
        not_held=lambda names: f"Cached step of {names} over {narrowest}'s at {longest:,} tokens",
    )


def cache_findings(
    records: Sequence[dict], where: str, environment: Mapping | None = None
) -> list[str]:
    """'Cached decode over recomputing the prefix at 256 tokens: MHA 38.7x faster (95%
    interval 38.2-39.5x), ..., sampled in turn over 30 rounds, on ...'; the variants whose
    comparison is not resolved in a line of their own, saying why."""
    rows = _compared(records, "x_of_no_cache")
    if not rows:
        return []
    longest, at = _longest(rows)
    return _resolved_or_not(
        at,
        "x_of_no_cache",
        records,
        environment,
        held=lambda rows: (
            f"Cached decode over recomputing the prefix at {longest:,} tokens: "
            f"{_listed(rows, 'x_of_no_cache', inverse=True)}{_rounds(rows)}, {where}."
        ),
        not_held=lambda names: (
            f"Cached decode of {names} over recomputing the prefix at {longest:,} tokens"
        ),
    )


def _resolved_or_not(
    rows: Sequence[dict],
    stem: str,
    records: Sequence[dict],
    environment: Mapping | None,
    held: Callable[[list[dict]], str],
    not_held: Callable[[str], str],
) -> list[str]:
    """A finding of the rows whose comparison `stem` is resolved (`held` words it), and
    one naming those whose is not (`not_held` words what they compare) and saying why."""
    resolved, unresolved, judged = _split(rows, stem, records, environment)
    found = [held(resolved)] if resolved else []
    if unresolved:
        names = join_words([series_label(r) for r in unresolved])
        found.append(f"{not_held(names)}: not resolved, {why_not(judged, environment)}.")
    return found


#: The comparisons of a decode record: the field stem and how a finding names it.
COMPARISONS = {
    "x_of_narrowest": "over {narrowest_variant}",
    "x_of_no_cache": "cache over no cache",
    "x_of_baseline": "over {baseline_provider}",
}


def sampling_findings(records: Sequence[dict], target: float | None) -> list[str]:
    """How far sampling got: the widest interval of a comparison, against the target
    ('the widest 95% interval of a comparison is ±4.2% (MHA over MQA, context 1,024),
    against a target of ±2.0%'), among those sampled over MIN_SPREAD_SAMPLES rounds or
    more; how many were sampled over fewer; and the points sampled alone, whose
    comparisons are not made."""
    widest, few = None, 0
    for r in ok_records(records, "prompt_len"):
        for stem, name in COMPARISONS.items():
            median, lo, hi = (r.get(f"{stem}_{s}") for s in ("median", "ci_lo", "ci_hi"))
            if not all(map(is_measured, (median, lo, hi))):
                continue
            rounds = r.get("step_repeats")
            if not known(rounds) or rounds < MIN_SPREAD_SAMPLES:  # an interval of nothing
                few += 1
                continue
            width = relative_half_width(median, lo, hi)
            if widest is None or width > widest[0]:
                what = f"{series_label(r)} {name.format(**r)}, context {r['prompt_len']:,}"
                widest = (width, what)
    found = []
    if widest is not None:
        reached = "within" if target is not None and widest[0] <= target else "against"
        goal = f", {reached} a target of ±{target:.1%}" if target is not None else ""
        width = spread_text(widest[0])
        found.append(f"The widest 95% interval of a comparison is {width} ({widest[1]}){goal}.")
    if few:
        found.append(
            f"{few} comparison{'s' * (few != 1)} {'was' if few == 1 else 'were'} sampled over "
            f"under {MIN_SPREAD_SAMPLES} rounds: too few for an interval to tell (over one "
            "round it has no width)."
        )
    alone = [r for r in ok_records(records, "step_ms_median") if r.get("sampling") == "alone"]
    if alone:
        found.append(
            f"{len(alone)} of {len(ok_records(records, 'step_ms_median'))} decode steps were "
            "sampled alone (no other point of their context fitted beside them, or "
            "tensor-parallel ranks): they have no comparisons."
        )
    return found
