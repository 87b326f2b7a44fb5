"""report.md for a study: environment, findings in plain sentences, tables and plots.

Every number comes from the study's results document; nothing is typed in here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..measure.timing import NOISY_IQR_FRACTION
from ..model.units import format_bytes
from ..study.documents import incomplete
from ..study.output import named
from .columns import columns_for, join_words, known
from .comparisons import cache_findings, sampling_findings, stated, variant_findings
from .plots import PLOTS, context, field_text, ok_records, one_provider, series, series_label
from .providers import baseline_of, providers_of, providers_table
from .table import markdown_table, present_columns, split_settings

#: The title of each section's table in the report.
TITLES = {
    "params": "Attention parameters per layer",
    "kvmem": "KV-cache memory (K and V)",
    "decode": "Decode speed",
    "fit": "What fits",
}


def _value(v) -> str:
    """An environment value: '-' for None, NaN or an infinity."""
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
        parts = [f"{first} {verb} {ratio:.1%} of MHA's {what}",
                 *(f"{variant} {r:.1%}" for variant, r in rest)]  # fmt: skip
        found.append(f"With {shape}, {join_words(parts)}.")
    return found


def _largest_caches(records: Sequence[dict]) -> list[str]:
    """The KV cache at the longest context studied, per model (or per shape)."""
    records = ok_records(records, "seq_len", "batch")
    presets = [r for r in records if r.get("model")] or list(records)
    if not presets:
        return []
    longest = max(r["seq_len"] for r in presets)
    batch = min(r["batch"] for r in presets if r["seq_len"] == longest)
    rows = [r for r in presets if r["seq_len"] == longest and r["batch"] == batch]
    shared = [f for f in ("num_layers", "dtype") if len({r.get(f) for r in rows}) == 1]
    own = [f for f in ("num_layers", "dtype") if f not in shared]
    setting = ", ".join([f"batch {batch}", *(_setting(f, rows[0].get(f)) for f in shared)])
    parts = [f"{_bytes(r['kv_bytes'])} for "
             + ", ".join([series_label(r), *(_setting(f, r.get(f)) for f in own)])
             for r in rows]  # fmt: skip
    return [
        f"At {longest:,} tokens of context ({setting}), the KV cache takes {join_words(parts)}."
    ]


def _setting(field: str, value) -> str:
    return f"{value} layers" if field == "num_layers" else str(value)


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
            lo, hi = both[0], both[-1]
            name = f"{label} ({rows[0]['provider']})" if several else label
            found.append(
                f"{name}: without the cache a decode step takes "
                f"{uncached[lo]['step_ms_median']:.3f} ms at context {lo:,} and "
                f"{uncached[hi]['step_ms_median']:.3f} ms at context {hi:,}; with it, "
                f"{cached[lo]['step_ms_median']:.3f} ms and {cached[hi]['step_ms_median']:.3f} ms."
            )
    found += variant_findings(records)
    found += cache_findings(records, where)
    found += _fastest_providers(timed_all)
    found += _peaks(records, several)
    noisy = [r for r in timed_all if r.get("noisy")]
    if noisy:
        found.append(f"{len(noisy)} of {len(timed_all)} decode steps (each timed at a fixed "
                     f"context) are flagged noisy: p25 to p75 wider than "
                     f"{NOISY_IQR_FRACTION:.0%} of the median.")  # fmt: skip
    found += sampling_findings(records, target)
    return found


def _fastest_providers(timed: Sequence[dict]) -> list[str]:
    """'Fastest cached decode step at context 256: MHA sdpa-flash (0.270 ms, 1.12x
    attnbench) and GQA-2 attnbench (0.280 ms, the baseline).' With two providers or more."""
    cached = [r for r in timed if r["mode"] == "cache"]
    if len(providers_of(cached)) < 2:
        return []
    baseline = baseline_of(cached)
    longest = max(r["prompt_len"] for r in cached)
    at_longest = [r for r in cached if r["prompt_len"] == longest]
    parts = []
    for label, rows in series(at_longest, "prompt_len", exclude=("mode", "provider")):
        best = min(rows, key=lambda r: r["step_ms_median"])
        if best["provider"] == baseline:
            versus = ", the baseline"
        elif known(best.get("x_of_baseline_ci_lo")) and known(best.get("x_of_baseline_median")):
            versus = f", {stated(best, 'x_of_baseline', inverse=True)} {baseline}"
        else:
            versus = ""
        parts.append(f"{label} {best['provider']} ({best['step_ms_median']:.3f} ms{versus})")
    return [f"Fastest cached decode step at context {longest:,}: {join_words(parts)}."]


def _peaks(records: Sequence[dict], several: bool) -> list[str]:
    """The decode step nearest the copy bandwidth, and the prefill nearest the matmul peak."""
    found = []

    def where(r: dict) -> str:
        parts = [series_label(r), *([r["provider"]] if several else [])]
        return ", ".join(parts)

    bandwidth = ok_records(records, "pct_of_peak_bw", "peak_gbps", "prompt_len", "mode")
    if bandwidth:
        best = max(bandwidth, key=lambda r: r["pct_of_peak_bw"])
        cached = "; over 100% means its data came from on-chip caches, not memory" * (
            best["pct_of_peak_bw"] > 100
        )
        found.append(
            f"The best decode step reaches {best['pct_of_peak_bw']:.1f}% of the measured peak "
            f"copy bandwidth of {best['peak_gbps']:.1f} GB/s ({where(best)}, "
            f"{best['mode'].replace('_', ' ')}, context {best['prompt_len']:,}){cached}."
        )
    prefill = ok_records(records, "achieved_tflops", "pct_of_peak_flops", "peak_tflops")
    if prefill:
        best = max(prefill, key=lambda r: r["pct_of_peak_flops"])
        found.append(
            f"The best prefill reaches {best['achieved_tflops']:.3g} TFLOPS, "
            f"{best['pct_of_peak_flops']:.1f}% of the measured {best['dtype']} matmul peak of "
            f"{best['peak_tflops']:.3g} TFLOPS ({where(best)}, {best['prompt_len']:,} tokens)."
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
        first, _, reason = str(r.get("status")).partition(":")
        if first != status:
            continue
        provider, reason = str(r.get("provider")), reason.strip()
        reason = reason if by_reason else reasons.setdefault(provider, reason)
        counts[provider, reason] = counts.get((provider, reason), 0) + 1
    return [f"{provider} at {n} point{'s' * (n != 1)} ({reason})"
            for (provider, reason), n in counts.items()]  # fmt: skip


def _not_timed(doc: dict) -> list[str]:
    """The points a provider could not run, and those whose output disagreed with the
    reference: rows of the results, not failures."""
    found = []
    records = doc["sections"].get("decode", {}).get("records", [])
    wrong = [r for r in records if str(r.get("status")).startswith("wrong")]
    if unsupported := provider_points(records, "unsupported", by_reason=True):
        found.append(f"Unsupported here, so not timed: {'; '.join(unsupported)}.")
    if wrong:
        found.append(f"{len(wrong)} point(s) disagree with the reference, so not timed: "
                     + "; ".join(describe_failure("decode", r) for r in wrong) + ".")  # fmt: skip
    return found


def findings(doc: dict) -> list[str]:
    """A few sentences computed from the records, for the report and the run's summary."""
    sections = {name: s["records"] for name, s in doc["sections"].items()}
    params = ok_records(sections.get("params", []), "ratio_vs_mha")
    kvmem = ok_records(sections.get("kvmem", []), "kv_bytes", "ratio_vs_mha")
    found = [
        *_share_of_mha(kvmem, "needs", "KV cache", ("num_heads",)),
        *_largest_caches(kvmem),
        *_share_of_mha(params, "has", "attention parameters", ("d_model", "num_heads")),
        *_decode_findings(sections.get("decode", []), doc["environment"], _target(doc)),
        *_not_timed(doc),
    ]
    failed = incomplete(doc)
    if failed:
        found.append(f"{len(failed)} point(s) did not complete: "
                     + "; ".join(describe_failure(s, r) for s, r in failed) + ".")  # fmt: skip
    return found


def _target(doc: dict) -> float | None:
    """The decode section's target_rel_ci, as its configuration records it."""
    config = doc["sections"].get("decode", {}).get("config", {})
    target = config.get("target_rel_ci")
    return target if isinstance(target, (int, float)) else None


def describe_failure(section: str, record: dict) -> str:
    """'decode MHA sdpa-flash d_model 64 batch 1 context 256 cache: oom'."""
    detail = [field_text(f, record[f]) for f in ("d_model", "batch", "seq_len", "prompt_len")
              if record.get(f) is not None]  # fmt: skip
    provider = [record["provider"]] if record.get("provider") else []
    mode = [record["mode"]] if record.get("mode") else []
    return (" ".join([section, series_label(record), *provider, *detail, *mode])
            + f": {record['status']}")  # fmt: skip


def providers_markdown(records: Sequence[dict]) -> list[str]:
    """The decode providers side by side (render.providers), as report lines: a heading,
    the settings every row shares, the table; nothing with fewer than two providers."""
    side = providers_table(_finite_rows(records))
    if not side.rows:
        return []
    shown, shared = split_settings(side.rows, present_columns(side.rows, side.columns))
    return [f"### {side.title}", "", *([f"{', '.join(shared)}.", ""] if shared else []),
            markdown_table(side.rows, shown), ""]  # fmt: skip


# --- the document ------------------------------------------------------------------------


def render_report(doc: dict, plots: Sequence[str]) -> str:
    """report.md: findings, environment, plots (file names beside the report), tables and
    the configuration file."""
    config, env = doc["config"], doc["environment"]
    lines = [
        "# attnbench study report",
        "",
        f"Study `{config.get('source')}`, created {doc['created']} with attnbench "
        f"{doc['attnbench_version']}.",
        "",
        "## Findings",
        "",
        *(f"- {f}" for f in findings(doc) or ["No completed points yet."]),
        "",
        "## Environment",
        "",
        "| Field | Value |",
        "|---|---|",
        *(f"| {k} | {_value(v)} |" for k, v in env.items()),
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
        lines += [f"## {TITLES.get(name, name)}", "", table, ""]
        if name == "decode":
            lines += providers_markdown(records)
    lines += [
        "## Configuration",
        "",
        f"Resolved configuration hash `{config.get('resolved_sha256')}`; "
        f"file SHA-256 `{config.get('file_sha256')}`.",
        "",
        "```yaml",
        str(config.get("file_text", "")).rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)


def write_report(doc: dict, out_dir: str | Path) -> Path:
    """Write report.md into `out_dir`, showing the plots already there."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = [name for name in PLOTS if (out / name).is_file()]
    path = out / "report.md"
    try:
        path.write_text(render_report(doc, plots))
    except OSError as exc:  # no half-written report is left behind
        path.unlink(missing_ok=True)
        raise named(exc, path) from None
    return path
