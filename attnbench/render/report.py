"""report.md for a study: environment, findings in plain sentences, tables and plots.

Every number comes from the study's results document; nothing is typed in here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

from ..measure.stats import MIN_SPREAD_SAMPLES, NOISY_IQR_FRACTION
from ..measure.timing import drift
from ..model.units import format_bytes
from ..records import Status
from ..study.documents import incomplete
from ..study.output import named, replace_with, writable_target
from ..study.sections import sets_providers_side_by_side, title_of
from .columns import columns_for, join_words, known
from .comparisons import (
    HOST_MOVED,
    cache_findings,
    fastest,
    held,
    held_text,
    host_moved,
    moved_text,
    not_fastest,
    sampling_findings,
    speed,
    variant_findings,
)
from .plots import PLOTS
from .predict import predict_findings
from .providers import providers_table
from .selection import (
    baseline_of,
    busy,
    context,
    few_samples,
    field_text,
    ok_records,
    one_provider,
    providers_of,
    series,
    series_label,
    steady,
)
from .table import (
    markdown_code,
    markdown_fence,
    markdown_table,
    markdown_text,
    present_columns,
    split_settings,
)

#: The record sets written beside the sections' (a model's parts, its layer kinds), and
#: the titles of their tables.
BESIDE_TITLES = {
    "model_parts": "Whole models, part by part",
    "layer_kinds": "Layer kinds (one sequence)",
}


def _value(v) -> str:
    """An environment value: '-' for None, NaN or an infinity; a list or a mapping (the
    probes of a peak, a peak per dtype) item by item."""
    if isinstance(v, list):
        return ", ".join(map(_value, v)) or "-"
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_value(x)}" for k, x in v.items()) or "-"
    if not known(v):
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _bytes(v) -> str:
    return format_bytes(v) if known(v) else "-"


def _finite_rows(records: Sequence[dict]) -> list[dict]:
    """Records for a table, a NaN or an infinity shown as a missing value ('-')."""
    return [{k: v if known(v) or v is None else None for k, v in r.items()} for r in records]


# --- findings ----------------------------------------------------------------------------


SHAPE_TEXT = {"num_heads": "{:,} query heads", "d_model": "d_model {:,}"}


def _share_of_mha(records: Sequence[dict], verb: str, what: str, group: Sequence[str]) -> list[str]:
    """'With 8 query heads, GQA-2 needs 25.0% of MHA's KV cache and MQA 12.5%.' A variant
    whose rows disagree (other settings change its share) is left out."""
    groups: dict[tuple, dict[str, set[float]]] = {}
    for r in records:
        if r.get("model") is None and r.get("variant") not in (None, "MHA"):
            ratios = groups.setdefault(tuple(r.get(f) for f in group), {})
            ratios.setdefault(r["variant"], set()).add(r["ratio_vs_mha"])
    found = []
    for key, by_variant in groups.items():
        ratios = {v: rs.pop() for v, rs in by_variant.items() if len(rs) == 1}
        if not ratios:
            continue
        if None in key:
            continue
        shape = join_words([SHAPE_TEXT[f].format(v) for f, v in zip(group, key, strict=True)])
        (first, ratio), *rest = ratios.items()
        parts = [
            f"{first} {verb} {ratio:.1%} of MHA's {what}",
            *(f"{variant} {r:.1%}" for variant, r in rest),
        ]
        found.append(f"With {shape}, {join_words(parts)}.")
    return found


def _state(record: dict) -> str:
    """' (plus 74.25 MiB of state in 36 gated deltanet layers)' for a hybrid's record."""
    if not record.get("state_bytes"):
        return ""
    return (
        f" (plus {_bytes(record['state_bytes'])} of state in its "
        f"{record['state_layers']:,} state layers, whatever the context)"
    )


def _largest_caches(records: Sequence[dict]) -> list[str]:
    """The KV cache at the longest context studied, per model (or per shape)."""
    records = ok_records(records, "seq_len", "batch")
    presets = [r for r in records if r.get("model")] or list(records)
    if not presets:
        return []
    longest = max(r["seq_len"] for r in presets)
    batch = min(r["batch"] for r in presets if r["seq_len"] == longest)
    rows = [r for r in presets if r["seq_len"] == longest and r["batch"] == batch]
    rows = [{**r, "kv_dtype": r.get("kv_dtype") or r.get("dtype")} for r in rows]  # the cache's
    shared = [f for f in ("num_layers", "kv_dtype") if len({r.get(f) for r in rows}) == 1]
    own = [f for f in ("num_layers", "kv_dtype") if f not in shared]
    setting = ", ".join([f"batch {batch}", *(_setting(f, rows[0].get(f)) for f in shared)])
    parts = [f"{_bytes(r['kv_bytes'])}{_state(r)} for {_cache_label(r, own)}" for r in rows]
    return [
        f"At {longest:,} tokens of context ({setting}), the KV cache takes "
        f"{join_words(parts, apart=True)}."
    ]


def _cache_label(record: dict, own: Sequence[str]) -> str:
    """'llama-2-7b (MHA, 32 layers, float16)': the model, then in one parenthesis its
    variant, the settings of its own (`own`), a sliding window that caps its cache and a
    context past the positions it declares;
    'GQA-2' for a layer shape that has none of these."""
    window = record.get("sliding_window")
    windowed, layers = record.get("windowed_layers") or 0, record.get("num_layers")
    inside = [_setting(f, record.get(f)) for f in own]
    if window and windowed:
        where = "" if windowed == layers else f" in {windowed:,} of its {layers:,} layers"
        inside.append(f"a {window:,}-token sliding window{where}")
    positions = record.get("max_positions")
    if positions and record.get("seq_len", 0) > positions:
        inside.append(f"past its {positions:,} positions")
    model, variant = record.get("model"), str(record.get("variant"))
    if model:
        return f"{model} ({', '.join([variant, *inside])})"
    return f"{variant} ({', '.join(inside)})" if inside else variant


def _setting(field: str, value) -> str:
    if field == "num_layers":
        return f"{value} layer" if value == 1 else f"{value} layers"
    return str(value)


def _noise(rows: Sequence[dict]) -> str:
    """What makes steps noisy, in words: 'p25 to p75 spans up to 48% of the median', 'too
    few samples (under 11) to judge the spread', or both."""
    parts = []
    spans = [
        (r["step_ms_p75"] - r["step_ms_p25"]) / r["step_ms_median"]
        for r in rows
        if not few_samples(r)
        and r.get("noisy")
        and busy(r) is None
        and known(r.get("step_ms_p25"))
        and known(r.get("step_ms_p75"))
        and r["step_ms_median"] > 0
    ]
    if spans:
        parts.append(
            f"p25 to p75 spans {'up to ' * (len(spans) > 1)}{max(spans):.0%} of the median"
        )
    if any(few_samples(r) for r in rows):
        parts.append(f"too few samples (under {MIN_SPREAD_SAMPLES}) to judge the spread")
    if (share := held(*rows)) is not None:
        parts.append(held_text(share))
    return join_words(parts) if parts else "noisy"


def _step_times(name: str, cached: dict, uncached: dict, lo: int, hi: int) -> str:
    """'MHA: without the cache a decode step takes 4.786 ms at context 64 and 22.195 ms at
    context 256; with it, 0.403 ms and 0.615 ms.' A noisy step's time is not stated: the
    line says which steps were noisy, and how."""
    steps = [(uncached, lo), (uncached, hi), (cached, lo), (cached, hi)]
    if all(steady(mode[c]) for mode, c in steps):
        return (
            f"{name}: without the cache a decode step takes "
            f"{uncached[lo]['step_ms_median']:.3f} ms at context {lo:,} and "
            f"{uncached[hi]['step_ms_median']:.3f} ms at context {hi:,}; with it, "
            f"{cached[lo]['step_ms_median']:.3f} ms and "
            f"{cached[hi]['step_ms_median']:.3f} ms."
        )
    noisy = [mode[c] for mode, c in steps if not steady(mode[c])]
    if len(noisy) == len(steps):
        return (
            f"{name}: decode step times at contexts {lo:,} and {hi:,} not stated, all "
            f"{len(steps)} steps there are noisy ({_noise(noisy)})."
        )

    def times(mode: dict) -> str:
        return join_words(
            [
                f"{mode[c]['step_ms_median']:.3f} ms at context {c:,}"
                for c in (lo, hi)
                if steady(mode[c])
            ]
        )

    clauses = []
    if any(steady(uncached[c]) for c in (lo, hi)):
        clauses.append(f"without the cache a decode step takes {times(uncached)}")
    if any(steady(cached[c]) for c in (lo, hi)):
        lead = "with it, " if clauses else "with the cache a decode step takes "
        clauses.append(lead + times(cached))
    which = []
    for mode, word in (("no_cache", "uncached"), ("cache", "cached")):
        contexts = [f"{r['prompt_len']:,}" for r in noisy if r["mode"] == mode]
        if contexts:
            plural = "s" * (len(contexts) > 1)
            which.append(f"{word} step{plural} at context{plural} {join_words(contexts)}")
    clauses.append(f"not stated for the {join_words(which)}, noisy ({_noise(noisy)})")
    return f"{name}: {'; '.join(clauses)}."


def busy_findings(records: Sequence[dict]) -> list[str]:
    """'Another process held the CPU while 12 of 18 decode steps were sampled: ...', when
    some were sampled while their process ran for under BUSY_CPU_SHARE of the time."""
    timed = ok_records(records, "step_ms_median")
    shares = [s for r in timed if (s := busy(r)) is not None]
    if not shares:
        return []
    span = f"{min(shares):.0%}" + (f" to {max(shares):.0%}" if max(shares) > min(shares) else "")
    return [
        f"Another process held the CPU while {len(shares)} of {len(timed)} decode steps were "
        f"sampled: this one ran for only {span} of their sampling time, so the host ran them "
        "slower than it can, and their times and comparisons are not stated."
    ]


def host_findings(environment: dict) -> list[str]:
    """'The host's speed moved during the run: ...', when the peaks probed before and
    after the timed points read more than HOST_MOVED apart."""
    if host_moved(environment) is None:
        return []
    found = moved_text(environment)
    matmul = []
    for dtype, probes in (environment.get("peak_tflops_probes") or {}).items():
        moved = drift(probes)
        if moved is not None and moved > 1 + HOST_MOVED:
            readings = ", then ".join(f"{v:.3g}" for v in probes)
            matmul.append(f"the {dtype} matmul peak {readings} TFLOPS, {moved:.2g}x")
    also = f" ({join_words(matmul)})" if matmul else ""
    return [
        f"{found[0].upper()}{found[1:]}{also}, more than {HOST_MOVED:.0%} apart: the "
        "run's timings hold for neither moment, and its comparisons are not resolved."
    ]


def _decode_findings(
    records: Sequence[dict], environment: dict, target: float | None = None
) -> list[str]:
    """The decode section's findings; `target` is the sampling's target_rel_ci."""
    timed_all = ok_records(records, "step_ms_median", "prompt_len", "mode")
    if not timed_all:
        return []
    several = len(providers_of(timed_all)) > 1
    # cache against no cache: the baseline provider's (the providers have their own line)
    timed = one_provider(timed_all)
    where = context(timed, environment, ("provider",) if several else ())
    found = []
    for label, rows in series(timed, "prompt_len", exclude=("mode",)):
        cached = {r["prompt_len"]: r for r in rows if r["mode"] == "cache"}
        uncached = {r["prompt_len"]: r for r in rows if r["mode"] == "no_cache"}
        both = sorted(set(cached) & set(uncached))
        if len(both) >= 2:
            name = f"{label} ({rows[0]['provider']})" if several else label
            found.append(_step_times(name, cached, uncached, both[0], both[-1]))
    found += variant_findings(records, environment)
    found += cache_findings(records, where, environment)
    found += _fastest_providers(timed_all, environment)
    found += _peaks(records, several, environment)
    found += paged_findings(records)
    found += prefill_memory_findings(records, environment)
    noisy = [r for r in timed_all if r.get("noisy") or few_samples(r)]
    if noisy:
        found.append(_noisy_count(noisy, len(timed_all)))
    found += sampling_findings(records, target)
    return found


#: What a paged row's finding states: the comparison, its interval, the blocks and their
#: empty share (a contiguous row, block_size null, has none of them).
PAGED_FIELDS = (
    "x_of_contiguous_median",
    "x_of_contiguous_ci_lo",
    "x_of_contiguous_ci_hi",
    "block_size",
    "kv_waste_pct",
)


def paged_findings(records: Sequence[dict]) -> list[str]:
    """Per variant and provider, its step over a paged cache against its step over the
    contiguous one, sampled in the same rounds (x_of_contiguous): the median ratio and its
    bootstrap 95% interval at each block size, and the share of the blocks left empty."""
    rows: dict[tuple, list[dict]] = {}
    for r in ok_records(records, *PAGED_FIELDS):
        rows.setdefault((r["variant"], r["provider"], r["batch"], r["prompt_len"]), []).append(r)
    found = []
    for (variant, provider, batch, length), paged in rows.items():
        parts = [
            f"{r['x_of_contiguous_median']:.2f}x ({r['x_of_contiguous_ci_lo']:.2f}-"
            f"{r['x_of_contiguous_ci_hi']:.2f}x) in blocks of {r['block_size']:,} "
            f"({r['kv_waste_pct']:.1f}% of them empty)"
            for r in sorted(paged, key=lambda r: r["block_size"])
        ]
        found.append(
            f"Paged KV cache, {variant} {provider} at batch {batch} and context {length:,}: "
            f"the step takes {join_words(parts)} of the contiguous cache's time, sampled "
            "in turn (95% intervals)."
        )
    return found


#: The memory a prefill's peak is held against where the device's is not known: an
#: 80 GB GPU's.
REFERENCE_MEMORY_BYTES = 80 << 30


def prefill_memory_findings(records: Sequence[dict], environment: dict) -> list[str]:
    """Per variant and batch, how each provider's prefill peak (prefill_memory) grows with
    the context S, as S^e from its shortest to its longest context, how the longest's
    compares with what the provider declares it holds (prefill_analytic_bytes), and the
    context at which that growth would pass the device's memory (an 80 GB GPU's on the
    CPU): the math kernel's e is near 2 (it holds whole score matrices), a flash kernel's
    near 1."""
    budget = environment.get("gpu_memory_bytes") or REFERENCE_MEMORY_BYTES
    where = "the GPU's" if environment.get("gpu_memory_bytes") else "about an 80 GB GPU's"
    series: dict[tuple, dict[str, dict[int, int]]] = {}
    for r in records:
        if r.get("prefill_peak_bytes") and r.get("mode") == "cache":
            case = (r["variant"], r["batch"], r["dtype"])
            by_context = series.setdefault(case, {}).setdefault(r["provider"], {})
            by_context[r["prompt_len"]] = (r["prefill_peak_bytes"], r.get("prefill_analytic_bytes"))
    found = []
    for (variant, batch, dtype), providers in series.items():
        parts = []
        for provider, peaks in providers.items():
            if len(peaks) < 2:
                continue
            (short, (low, _)), (long, (high, declared)) = min(peaks.items()), max(peaks.items())
            exponent = math.log(high / low) / math.log(long / short)
            if exponent <= 0:
                continue  # no growth to extrapolate
            reach = long * (budget / high) ** (1 / exponent)
            held = f", {high / declared:.2f}x what it declares" if declared else ""
            parts.append(
                f"{provider} as S^{exponent:.2f} ({format_bytes(low)} at {short:,} to "
                f"{format_bytes(high)} at {long:,}{held}; past {format_bytes(budget)} at S of "
                f"about {reach:,.0f})"
            )
        if parts:
            found.append(
                f"Prefill peak memory of {variant} at batch {batch} ({dtype}), by the context "
                f"S: {'; '.join(parts)}. {format_bytes(budget)} is {where} memory."
            )
    return found


def _noisy_count(noisy: Sequence[dict], timed: int) -> str:
    """'3 of 12 decode steps (...) are flagged noisy: p25 to p75 wider than 10% of the
    median.', with how many for each reason when some have another."""
    few = [r for r in noisy if few_samples(r)]
    held_up = [r for r in noisy if not few_samples(r) and busy(r) is not None]
    wide = len(noisy) - len(few) - len(held_up)
    rule = f"p25 to p75 wider than {NOISY_IQR_FRACTION:.0%} of the median"
    are = "is" if len(noisy) == 1 else "are"
    lead = f"{len(noisy)} of {timed} decode steps (each timed at a fixed context) {are} flagged"
    lead += " noisy"
    if not few and not held_up:
        return f"{lead}: {rule}."
    parts = [f"{wide} with {rule}"] * bool(wide)
    parts += [f"{len(few)} with too few samples (under {MIN_SPREAD_SAMPLES})"] * bool(few)
    parts += [f"{len(held_up)} sampled while another process held the CPU"] * bool(held_up)
    return f"{lead}: {join_words(parts)}."


def _fastest_providers(timed: Sequence[dict], environment: dict | None = None) -> list[str]:
    """'Fastest cached decode step at context 256: MHA sdpa-flash (0.270 ms, 1.12x faster
    (95% interval 1.10-1.14x) than attnbench) and GQA-2 attnbench (0.280 ms, the
    baseline).' With two providers or more. A provider is named fastest only where its
    step beat every other provider's, round by round, by a resolved comparison
    (render.comparisons.fastest); otherwise the line says that the variant's fastest is
    not resolved, and why."""
    cached = [r for r in timed if r["mode"] == "cache"]
    if len(providers_of(cached)) < 2:
        return []
    baseline = baseline_of(cached)
    longest = max(r["prompt_len"] for r in cached)
    at_longest = [r for r in cached if r["prompt_len"] == longest]
    parts, unresolved = [], []
    for label, rows in series(at_longest, "prompt_len", exclude=("mode", "provider")):
        if len(rows) < 2:
            continue  # one provider timed here: nothing to be fastest against
        found = fastest(rows, environment)
        if not found.resolved:
            unresolved.append((label, found))
            continue
        best = found.best
        if best["provider"] == baseline:
            versus = ", the baseline"
        elif all(known(best.get(f"x_of_baseline_{s}")) for s in ("median", "ci_lo", "ci_hi")):
            versus = f", {speed(dict(best), 'x_of_baseline')} than {baseline}"
        else:
            versus = ""
        parts.append(f"{label} {best['provider']} ({best['step_ms_median']:.3f} ms{versus})")
    lines = []
    if parts:
        lines.append(f"Fastest cached decode step at context {longest:,}: {join_words(parts)}.")
    for label, found in unresolved:
        lines.append(
            f"Fastest cached decode step of {label} at context {longest:,}: not "
            f"resolved, {not_fastest(found, environment)}."
        )
    return lines


def _peak_cause(best: dict, environment: dict) -> str:
    """Why a decode step reached over 100% of the copy peak, from what the run measured:
    its bytes fit in the device's last-level cache (`cache_bytes`), or a probe of the peak
    read more than the first, the one the steps are held against (it was taken in a slower
    moment); both possible causes where the run cannot tell."""
    causes = []
    cache, step = environment.get("cache_bytes"), best.get("bytes_per_step")
    if known(cache) and known(step) and step <= cache:
        causes.append(
            f"its {format_bytes(step)} a step fit in the device's "
            f"{format_bytes(cache)} last-level cache, so they need not come from "
            "memory"
        )
    probes = [v for v in environment.get("peak_gbps_probes") or [] if known(v)]
    if len(probes) > 1 and max(probes) > 1.05 * probes[0]:
        readings = ", then ".join(f"{v:.1f}" for v in probes)
        causes.append(f"the peak was probed in a slower moment (the probes read {readings} GB/s)")
    if causes:
        return f"; over 100% because {join_words(causes)}"
    return (
        "; over 100% means the peak was probed in a slower moment, or the step's data "
        "came from on-chip caches, not memory"
    )


def _flops_cause(best: dict, environment: dict) -> str:
    """Why a prefill reached over 100% of the matmul peak: a later probe of the peak in its
    dtype read more than the first (which was taken in a slower moment), or, where the
    probes agree, the prefill's kernels ran faster than the square matmul of the probe."""
    probes = (environment.get("peak_tflops_probes") or {}).get(best.get("dtype"), [])
    probes = [v for v in probes if known(v)]
    if len(probes) > 1 and max(probes) > 1.05 * probes[0]:
        readings = ", then ".join(f"{v:.3g}" for v in probes)
        return (
            f"; over 100% because the peak was probed in a slower moment (the probes "
            f"read {readings} TFLOPS)"
        )
    return (
        "; over 100% means the peak was probed in a slower moment, or the prefill's "
        "kernels ran faster than the one square matmul the peak is probed with"
    )


def _prefill_steady(record: dict) -> bool:
    """The prefill's time can be stated: enough samples, p25 to p75 within
    NOISY_IQR_FRACTION of the median."""
    samples = record.get("prefill_samples_ms")
    median, lo, hi = (record.get(f"prefill_ms_{s}") for s in ("median", "p25", "p75"))
    if isinstance(samples, list) and len(samples) < MIN_SPREAD_SAMPLES:
        return False
    if not (known(median) and known(lo) and known(hi)) or median <= 0:
        return False
    return hi - lo <= NOISY_IQR_FRACTION * median


def _nearest_peak(
    records: Sequence[dict],
    held: Callable[[dict], bool],
    share: str,
    cause: Callable[[dict, dict], str],
    environment: dict,
) -> tuple[dict, str] | None:
    """The record whose `share` (its percent of a measured peak) is highest among those
    `held` (not noisy), with `cause(record, environment)` when it is over 100%; None when
    none is held."""
    kept = [r for r in records if held(r)]
    if not kept:
        return None
    best = max(kept, key=lambda r: r[share])
    return best, cause(best, environment) if best[share] > 100 else ""


def _noisy_above(records: Sequence[dict], share: float) -> str:
    """What the best steady step leaves out: the noisy steps (drawn hollow in
    decode_bandwidth.png) that read a higher share of the copy peak, by mode, so that the
    finding and the plot say the same: '; 6 cached steps read 41-90% but are noisy
    (hollow in the bandwidth plot), so left out'. Empty when none reads higher."""
    above = [r for r in records if not steady(r) and r["pct_of_peak_bw"] > share]
    if not above:
        return ""
    parts = []
    for mode in sorted({r["mode"] for r in above}):
        shares = [r["pct_of_peak_bw"] for r in above if r["mode"] == mode]
        what = {"cache": "cached", "no_cache": "uncached"}.get(mode, mode)
        noun = "step" if len(shares) == 1 else "steps"
        span = f"{min(shares):.0f}%"
        if len(shares) > 1:
            span = f"{min(shares):.0f}-{max(shares):.0f}%"
        parts.append(f"{len(shares)} {what} {noun} read {span}")
    verb = "is" if len(above) == 1 else "are"
    return f"; {join_words(parts)} but {verb} noisy (hollow in the bandwidth plot), so left out"


def _peaks(records: Sequence[dict], several: bool, environment: dict | None = None) -> list[str]:
    """The decode step nearest the copy bandwidth, and the prefill nearest the matmul peak,
    among those whose time is not noisy; a result over 100% of its peak names its cause."""
    environment = environment or {}
    found = []

    def where(r: dict) -> str:
        parts = [series_label(r), *([r["provider"]] if several else [])]
        return ", ".join(parts)

    bandwidth = ok_records(records, "pct_of_peak_bw", "peak_gbps", "prompt_len", "mode")
    nearest = _nearest_peak(bandwidth, steady, "pct_of_peak_bw", _peak_cause, environment)
    if nearest:
        best, cause = nearest
        above = _noisy_above(bandwidth, best["pct_of_peak_bw"])
        which = "best decode step not flagged noisy" if above else "best decode step"
        found.append(
            f"The {which} reaches {best['pct_of_peak_bw']:.1f}% of the measured peak "
            f"copy bandwidth of {best['peak_gbps']:.1f} GB/s ({where(best)}, "
            f"{best['mode'].replace('_', ' ')}, context {best['prompt_len']:,}){cause}{above}."
        )
    elif bandwidth:
        found.append(
            f"The decode steps' share of the copy bandwidth is not stated: every "
            f"step is noisy ({_noise(bandwidth)})."
        )
    prefill = ok_records(records, "achieved_tflops", "pct_of_peak_flops", "peak_tflops")
    nearest = _nearest_peak(
        prefill, _prefill_steady, "pct_of_peak_flops", _flops_cause, environment
    )
    if nearest:
        best, cause = nearest
        found.append(
            f"The best prefill reaches {best['achieved_tflops']:.3g} TFLOPS, "
            f"{best['pct_of_peak_flops']:.1f}% of the measured {best['dtype']} matmul peak of "
            f"{best['peak_tflops']:.3g} TFLOPS ({where(best)}, {best['prompt_len']:,} "
            f"tokens){cause}."
        )
    elif prefill:
        found.append(
            f"The prefills' share of the matmul peak is not stated: every prefill "
            f"is noisy (p25 to p75 wider than {NOISY_IQR_FRACTION:.0%} of the "
            f"median, or under {MIN_SPREAD_SAMPLES} samples)."
        )
    return found


def provider_points(records: Sequence[dict], status: str, by_reason: bool) -> list[str]:
    """The records whose status is `status` (its first word), counted per provider:
    'sdpa-efficient at 4 points (no memory-efficient kernel on the CPU)'. With
    `by_reason` each distinct reason counts apart; otherwise a provider's first reason
    stands for all of its points (reasons that carry numbers, as errors do)."""
    counts: dict[tuple[str, str], int] = {}
    reasons: dict[str, str] = {}
    for r in records:
        found = Status.of(r.get("status"))
        if found.word != status:
            continue
        provider, reason = str(r.get("provider")), found.reason
        reason = reason if by_reason else reasons.setdefault(provider, reason)
        counts[provider, reason] = counts.get((provider, reason), 0) + 1
    return [
        f"{provider} at {n} point{'s' * (n != 1)} ({reason})"
        for (provider, reason), n in counts.items()
    ]


def _not_timed(doc: dict) -> list[str]:
    """The points a provider could not run, and those whose output disagreed with the
    reference: rows of the results, not failures."""
    found = []
    records = doc["sections"].get("decode", {}).get("records", [])
    wrong = [r for r in records if Status.of(r.get("status")).word == "wrong"]
    if unsupported := provider_points(records, "unsupported", by_reason=True):
        found.append(f"Unsupported here, so not timed: {'; '.join(unsupported)}.")
    if wrong:
        found.append(
            f"{len(wrong)} point(s) disagree with the reference, so not timed: "
            + "; ".join(describe_failure("decode", r) for r in wrong)
            + "."
        )
    return found


def findings(doc: dict) -> list[str]:
    """A few sentences computed from the records, for the report and the run's summary."""
    sections = {name: s["records"] for name, s in doc["sections"].items()}
    params = ok_records(sections.get("params", []), "ratio_vs_mha")
    kvmem = ok_records(sections.get("kvmem", []), "kv_bytes", "ratio_vs_mha")
    found = [
        *host_findings(doc["environment"]),
        *busy_findings(sections.get("decode", [])),
        *_share_of_mha(kvmem, "needs", "KV cache", ("num_heads",)),
        *_largest_caches(kvmem),
        *_share_of_mha(params, "has", "attention parameters", ("d_model", "num_heads")),
        *_decode_findings(sections.get("decode", []), doc["environment"], _target(doc)),
        *predict_findings(sections.get("predict", [])),
        *_not_timed(doc),
    ]
    failed = incomplete(doc)
    if failed:
        found.append(
            f"{len(failed)} point(s) did not complete: "
            + "; ".join(describe_failure(s, r) for s, r in failed)
            + "."
        )
    return found


def _target(doc: dict) -> float | None:
    """The decode section's target_rel_ci, as its configuration records it."""
    config = doc["sections"].get("decode", {}).get("config", {})
    target = config.get("target_rel_ci")
    return target if isinstance(target, (int, float)) else None


def describe_failure(section: str, record: dict) -> str:
    """'decode MHA sdpa-flash d_model 64 batch 1 context 256 cache: oom'."""
    detail = [
        field_text(f, record[f])
        for f in ("d_model", "batch", "seq_len", "prompt_len")
        if record.get(f) is not None
    ]
    provider = [record["provider"]] if record.get("provider") else []
    mode = [record["mode"]] if record.get("mode") else []
    return (
        " ".join([section, series_label(record), *provider, *detail, *mode])
        + f": {record['status']}"
    )


def providers_markdown(records: Sequence[dict], environment: dict | None = None) -> list[str]:
    """The decode providers side by side (render.providers), as report lines: a heading,
    the settings every row shares, the table, and why a row names no fastest provider;
    nothing with fewer than two providers."""
    side = providers_table(_finite_rows(records), environment)
    if not side.rows:
        return []
    shown, shared = split_settings(side.rows, present_columns(side.rows, side.columns))
    settings = [markdown_text(f"{', '.join(shared)}."), ""] if shared else []
    notes = [markdown_text(f"Note: {note}."), ""] if (note := "; ".join(side.notes)) else []
    table = markdown_table(side.rows, shown)
    return [f"### {markdown_text(side.title)}", "", *settings, table, "", *notes]


# --- the document ------------------------------------------------------------------------


def _study_source(source: object) -> str:
    """The sweep file a study ran, as the report names it: the packaged default study by
    that name, another file relative to the working directory where it lies under it
    (the document keeps its absolute path)."""
    from ..study.plan import DEFAULT_CONFIG

    if not isinstance(source, str):
        return markdown_code(str(source))
    path = Path(source)
    if path == DEFAULT_CONFIG:
        return f"the default study ({markdown_code('attnbench/configs/default.yaml')})"
    if path.is_relative_to(Path.cwd()):
        path = path.relative_to(Path.cwd())
    return markdown_code(str(path))


def render_report(doc: dict, plots: Sequence[str]) -> str:
    """report.md: findings, environment, plots (file names beside the report), tables and
    the configuration file."""
    config, env = doc["config"], doc["environment"]
    lines = [
        "# attnbench study report",
        "",
        f"Study {_study_source(config.get('source'))}, created {doc['created']} with "
        f"attnbench {doc['attnbench_version']}.",
        "",
        "## Findings",
        "",
        *(f"- {markdown_text(f)}" for f in findings(doc) or ["No completed points yet."]),
        "",
        "## Environment",
        "",
        "| Field | Value |",
        "|---|---|",
        *(f"| {markdown_text(k)} | {markdown_text(_value(v))} |" for k, v in env.items()),
        "",
    ]
    if plots:
        lines += ["## Plots", ""]
        for name in plots:
            caption = PLOTS.get(name, (name, None))[0]
            lines += [f"![{caption}]({name})", ""]
    for name, section in doc["sections"].items():
        records = section["records"]
        rows = _finite_rows(records)
        table = markdown_table(rows, columns_for(name, rows)) if rows else "No rows."
        lines += [f"## {title_of(name)}", "", table, ""]
        if sets_providers_side_by_side(name):
            lines += providers_markdown(records, env)
    for name, title in BESIDE_TITLES.items():
        rows = _finite_rows(doc.get(name) or [])
        if rows:
            lines += [f"## {title}", "", markdown_table(rows, columns_for(name, rows)), ""]
    lines += [
        "## Configuration",
        "",
        f"Resolved configuration hash `{config.get('resolved_sha256')}`; "
        f"file SHA-256 `{config.get('file_sha256')}`.",
        "",
        *markdown_fence(str(config.get("file_text", "")).rstrip(), "yaml"),
        "",
    ]
    return "\n".join(lines)


def write_report(doc: dict, out_dir: str | Path) -> Path:
    """Write report.md into `out_dir`, showing the plots already there."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = [name for name in PLOTS if (out / name).is_file()]
    path = out / "report.md"
    text = render_report(doc, plots)
    try:  # a failure midway (a full disk, Ctrl-C) leaves the report there whole
        replace_with(writable_target(path), lambda fh: fh.write(text))
    except OSError as exc:
        raise named(exc, path) from None
    return path
