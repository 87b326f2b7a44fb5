"""Findings about the comparisons of a decode study, stated with their intervals.

Each comparison is a ratio taken within each round of points sampled in turn
(experiments.interleave): its median over the rounds and a bootstrap 95% interval. A
finding states that interval, never a ratio of two medians, and says how far sampling
got when the interval did not reach the target.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..measure.timing import relative_half_width
from .columns import join_words, known
from .plots import ok_records, one_provider, series_label


def _x(value: float) -> str:
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def stated(record: dict, stem: str, inverse: bool = False, named: bool = True) -> str:
    """A comparison with its interval, '6.64x (95% interval 6.50-6.80x)', or '(6.50-6.80x)'
    unless `named`; `inverse` for a speed-up (1 / the ratio)."""
    median, lo, hi = (record[f"{stem}_{s}"] for s in ("median", "ci_lo", "ci_hi"))
    if inverse:
        median, lo, hi = 1 / median, 1 / hi, 1 / lo
    return f"{_x(median)} ({'95% interval ' * named}{_x(lo)[:-1]}-{_x(hi)})"


def _listed(rows: Sequence[dict], stem: str, inverse: bool = False) -> str:
    """'MHA 9.19x (95% interval 8.99-9.27x), GQA-2 1.91x (1.88-1.92x)'."""
    return ", ".join(
        f"{series_label(r)} {stated(r, stem, inverse, named=i == 0)}" for i, r in enumerate(rows)
    )


def _compared(records: Sequence[dict], stem: str) -> list[dict]:
    """The baseline provider's rows that have the comparison `stem`, with its interval."""
    needed = (f"{stem}_median", f"{stem}_ci_lo", f"{stem}_ci_hi", "prompt_len")
    return one_provider(ok_records(records, *needed))


def _rounds(rows: Sequence[dict]) -> str:
    counts = sorted({r["step_repeats"] for r in rows if known(r.get("step_repeats"))})
    if not counts:
        return ""
    span = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    return f", sampled in turn over {span} rounds"


def _longest(rows: Sequence[dict]) -> tuple[int, list[dict]]:
    longest = max(r["prompt_len"] for r in rows)
    return longest, [r for r in rows if r["prompt_len"] == longest]


def variant_findings(records: Sequence[dict]) -> list[str]:
    """'Cached step over MQA's at 4,096 tokens: MHA 9.19x (95% interval 8.99-9.27x),
    GQA-2 1.91x (1.88-1.92x), sampled in turn over 30 rounds.'"""
    rows = _compared(records, "x_of_narrowest")
    if not rows:
        return []
    longest, at = _longest(rows)
    narrowest = join_words(sorted({r["narrowest_variant"] for r in at}))
    widest_first = sorted(at, key=lambda r: -r["x_of_narrowest_median"])
    return [
        f"Cached step over {narrowest}'s at {longest:,} tokens: "
        f"{_listed(widest_first, 'x_of_narrowest')}{_rounds(at)}."
    ]


def cache_findings(records: Sequence[dict], where: str) -> list[str]:
    """'Cached decode over recomputing the prefix at 256 tokens: MHA 38.7x faster (95%
    interval 38.2-39.5x), ..., sampled in turn over 30 rounds, on ...'."""
    rows = _compared(records, "x_of_no_cache")
    if not rows:
        return []
    longest, at = _longest(rows)
    return [
        f"Cached decode over recomputing the prefix at {longest:,} tokens: "
        f"{_listed(at, 'x_of_no_cache', inverse=True)} faster{_rounds(at)}, {where}."
    ]


#: The comparisons of a decode record: the field stem and how a finding names it.
COMPARISONS = {
    "x_of_narrowest": "over {narrowest_variant}",
    "x_of_no_cache": "cache over no cache",
    "x_of_baseline": "over {baseline_provider}",
}


def sampling_findings(records: Sequence[dict], target: float | None) -> list[str]:
    """How far sampling got: the widest interval of a comparison, against the target
    ('the widest 95% interval of a comparison is ±4.2% (MHA over MQA, context 1,024),
    against a target of ±2.0%'); and the points sampled alone, whose comparisons are
    not made."""
    widest = None
    for r in ok_records(records, "prompt_len"):
        for stem, name in COMPARISONS.items():
            median, lo, hi = (r.get(f"{stem}_{s}") for s in ("median", "ci_lo", "ci_hi"))
            if not (known(median) and known(lo) and known(hi)) or median <= 0:
                continue
            width = relative_half_width(median, lo, hi)
            if widest is None or width > widest[0]:
                what = f"{series_label(r)} {name.format(**r)}, context {r['prompt_len']:,}"
                widest = (width, what)
    found = []
    if widest is not None:
        reached = "within" if target is not None and widest[0] <= target else "against"
        goal = f", {reached} a target of ±{target:.1%}" if target is not None else ""
        found.append(
            f"The widest 95% interval of a comparison is ±{widest[0]:.1%} ({widest[1]}){goal}."
        )
    alone = [r for r in ok_records(records, "step_ms_median") if r.get("sampling") == "alone"]
    if alone:
        found.append(
            f"{len(alone)} of {len(ok_records(records, 'step_ms_median'))} decode steps were "
            "sampled alone (no other point of their context fitted beside them, or "
            "tensor-parallel ranks): they have no comparisons."
        )
    return found
