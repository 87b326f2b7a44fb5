"""Tables that fit an 80-column terminal: attnbench.render.table and its column specs."""

from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from rich.console import Console

from attnbench.experiments.context import Context, grid_order, no_links
from attnbench.records import UNITS, ColumnSpec, as_dict, exact, info, key
from attnbench.render.columns import (
    KVMEM,
    MODELS,
    UNIT_COLUMNS,
    VS_BASELINE,
    WHOLE_MODEL,
    columns_for,
    decode_columns,
    fmt_int,
    fmt_ms,
    fmt_pct,
    fmt_pct_value,
    fmt_plain,
    fmt_si,
    fmt_status,
    fmt_x,
    fmt_x2,
    format_bytes,
    iqr_cell,
    kvmem_columns,
    spread_text,
)
from attnbench.render.providers import ProviderCell, providers_table
from attnbench.render.report import render_report
from attnbench.render.table import (
    Column,
    TableView,
    build_table,
    fit_note,
    markdown_table,
    print_view,
    table_width,
    terminal_width,
    wrap_title,
)
from attnbench.study.sections import KINDS, SectionKind

HINT = "--wide, or --csv"  # what the CLI passes
#: The params section's table, as its kind declares it.
PARAMS = columns_for("params", [])


# --- rows, computed by hand ---------------------------------------------------------------

D_MODEL, HEADS, HEAD_DIM = 4096, 32, 128
VARIANTS = {32: "MHA", 8: "GQA-8", 4: "GQA-4", 1: "MQA"}
PARAM_TOTALS = {32: 67_108_864, 8: 41_943_040, 4: 37_748_736, 1: 34_603_008}


def params_rows() -> list[dict]:
    rows = []
    for kv, variant in VARIANTS.items():
        q = o = D_MODEL * HEADS * HEAD_DIM
        k = v = D_MODEL * kv * HEAD_DIM
        total = q + k + v + o
        rows.append(
            dict(
                model=None,
                variant=variant,
                d_model=D_MODEL,
                num_heads=HEADS,
                num_kv_heads=kv,
                head_dim=HEAD_DIM,
                bias=False,
                biases="no bias",
                q_params=q,
                k_params=k,
                v_params=v,
                o_params=o,
                total_params=total,
                module_params=total,
                ratio_vs_mha=total / PARAM_TOTALS[32],
            )
        )
    return rows


# llama-3-70b: 80 layers, 8 KV heads of 128, bfloat16: 2 (K, V) * 80 * 8 * 128 * 2 bytes.
LLAMA3_70B_PER_TOKEN = 327_680


def kvmem_row(model="llama-3-70b", seq_len=8192, layers=80, heads=64, kv=8, **extra) -> dict:
    per_token = 2 * layers * kv * HEAD_DIM * 2
    row = dict(
        model=model,
        variant=VARIANTS.get(kv, f"GQA-{kv}"),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=HEAD_DIM,
        batch=1,
        seq_len=seq_len,
        dtype="bfloat16",
        bytes_per_token=per_token,
        kv_bytes_per_layer=per_token // layers * seq_len,
        kv_bytes=per_token * seq_len,
        measured_bytes=per_token * seq_len,
        ratio_vs_mha=kv / heads,
        status="ok",
        kv_dtype="bfloat16",
        kv_scale_group=None,
        scale_dtype=None,
        scale_bytes=0,
        sliding_window=None,
        windowed_layers=0,
        page_size=None,
        tp=1,
        kv_heads_per_gpu=kv,
        kv_bytes_per_gpu=per_token * seq_len,
        kv_bytes_all_gpus=per_token * seq_len,
        used_bytes=None,
        paged_bytes=None,
        contiguous_bytes=None,
        paged_waste_pct=None,
        contiguous_waste_pct=None,
        measured_paged_bytes=None,
    )
    row.update(extra)
    return row


CONTEXTS = (1024, 8192, 32768, 131072)


def kvmem_rows() -> list[dict]:
    return [kvmem_row(seq_len=n) for n in CONTEXTS]


#: Each provider's step time relative to the baseline's (attnbench), and its statuses.
PROVIDER_FACTORS = {"attnbench": 1.0, "sdpa-flash": 0.8, "naive": 3.0, "sdpa-math": 0.5, "hf": 0.25}
UNSUPPORTED = "unsupported: no cuDNN kernel on the CPU"


def decode_row(variant: str, kv: int, prompt: int, provider: str, mode: str, step) -> dict:
    """One decode record: every field, long floats as measured; `step` None: not timed."""
    timed = step is not None
    prefill = timed and mode == "cache"
    return dict(
        model=None,
        variant=variant,
        provider=provider,
        device="cpu",
        dtype="float32",
        batch=1,
        d_model=D_MODEL,
        num_heads=HEADS,
        num_kv_heads=kv,
        head_dim=HEAD_DIM,
        prompt_len=prompt,
        gen_len=4,
        mode=mode,
        cuda_graph=False,
        step_ms_median=step,
        step_ms_p25=step * 0.9876 if timed else None,
        # the spread differs between modes, as a run's do (a column that reads the same in
        # every row is the first a narrow table hides)
        step_ms_p75=step * (1.04321 if mode == "cache" else 1.06) if timed else None,
        samples_ms=[step] * 3 if timed else [],
        step_repeats=123 if timed else None,
        step_stop="target_ci" if timed else None,
        step_ci_pct=1.5 if timed else None,
        tokens_per_s=1000.0 / step if timed else None,
        speedup_vs_no_cache=None,
        baseline_provider="attnbench",
        speedup_vs_baseline=None,
        bytes_per_step=10**7,
        achieved_gbps=10**4 / step if timed else None,
        peak_gbps=45.678901,
        pct_of_peak_bw=2.7027 / step if timed else None,
        flops_per_step=10**8,
        prefill_ms_median=step * 3.3333333 if prefill else None,
        prefill_ms_p25=None,
        prefill_ms_p75=None,
        prefill_samples_ms=[],
        prefill_flops=10**9,
        achieved_tflops=0.0123456 if prefill else None,
        peak_tflops=0.1,
        pct_of_peak_flops=12.3456 if prefill else None,
        gen_ms_median=step * 4.0001 if timed else None,
        gen_ms_p25=None,
        gen_ms_p75=None,
        gen_samples_ms=[],
        gen_tokens_per_s=4321.06 if timed else None,
        noisy=False if timed else None,
        status="ok" if timed else UNSUPPORTED,
        projection_path="onednn-packed" if timed else None,
    )


def decode_rows(providers=("attnbench",), unsupported=()) -> list[dict]:
    """MHA, GQA-8 and MQA, two contexts, each provider without and with the cache (the
    order `attnbench decode-speed` runs them in); the speed-ups linked as the run does."""
    rows = []
    for kv in (32, 8, 1):
        for prompt in (512, 4096):
            base = 0.123456789 * (1 + kv / 8) * (prompt / 512) ** 0.5
            for provider in (*providers, *unsupported):
                for mode, factor in (("no_cache", 7.891011), ("cache", 1.0)):
                    step = None
                    if provider in PROVIDER_FACTORS:
                        step = base * factor * PROVIDER_FACTORS[provider]
                    rows.append(decode_row(VARIANTS[kv], kv, prompt, provider, mode, step))
    steps = {
        (r["variant"], r["prompt_len"], r["provider"], r["mode"]): r["step_ms_median"] for r in rows
    }
    for r in rows:
        if r["step_ms_median"] is None:
            continue
        key = (r["variant"], r["prompt_len"])
        if r["mode"] == "cache":
            slow = steps[(*key, r["provider"], "no_cache")]
            r["speedup_vs_no_cache"] = slow / r["step_ms_median"]
        r["speedup_vs_baseline"] = steps[(*key, "attnbench", r["mode"])] / r["step_ms_median"]
    return rows


def sampled_in_turn(rows: list[dict], rounds: int = 20) -> list[dict]:
    """The timed rows sampled in the same `rounds`, as a run samples the points of one
    context: each round's step a little off its median, alike for every provider, so
    that each comparison's interval is narrow."""
    for r in rows:
        if r["step_ms_median"] is not None:
            r["sampling"] = "interleaved"
            r["samples_ms"] = [r["step_ms_median"] * (1 + (i % 3 - 1) / 500) for i in range(rounds)]
    return rows


# --- helpers ------------------------------------------------------------------------------


def render(view: TableView, width: int = 80) -> str:
    """The table and its footer as a terminal `width` characters wide shows them."""
    console = Console(width=width, file=io.StringIO(), record=True)
    print_view(console, view)
    return console.export_text()


def flat(text: str) -> str:
    """The text with every run of whitespace as one space (a title may wrap)."""
    return " ".join(text.split())


def header_line(text: str) -> str:
    """The line of column headers (the first line drawn with the heavy vertical border)."""
    return next(line for line in text.splitlines() if line.startswith("┃"))


def assert_fits(text: str, width: int) -> None:
    assert "…" not in text
    for line in text.splitlines():
        assert len(line) <= width, line


# --- formatters ---------------------------------------------------------------------------


def test_format_bytes_binary_units():
    assert format_bytes(None) == "-"
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(LLAMA3_70B_PER_TOKEN) == "320.00 KiB"
    assert format_bytes(LLAMA3_70B_PER_TOKEN * 131072) == "40.00 GiB"
    assert format_bytes(3 * 2**50) == "3.00 PiB"
    assert format_bytes(2**70) == "1,024.00 EiB"  # the largest unit, its digits grouped


def test_count_and_percent_formatters():
    assert fmt_int(67_108_864) == "67,108,864"
    assert fmt_si(67_108_864) == "67.1 M"
    assert fmt_si(16_777_216) == "16.8 M"
    assert fmt_si(6_738_415_616) == "6.74 G"
    assert fmt_si(9_999) == "10.0 k"
    assert fmt_si(4_096) == "4.10 k"
    assert fmt_si(999) == "999"
    assert fmt_si(12_345) == "12.3 k"
    assert fmt_si(999_999) == "1.00 M"
    assert fmt_si(100_000) == "100 k"
    assert fmt_si(None) == "-"
    assert fmt_pct(0.25) == "25.00%"
    assert fmt_pct_value(12.5) == "12.50%"
    assert fmt_ms(1.23456) == "1.235"
    assert fmt_x(11.2345) == "11.2x"
    assert fmt_plain(None) == "-"
    assert fmt_status("error: RuntimeError: CUDA out of memory") == "error"


def test_iqr_cell_is_half_the_iqr_over_the_median():
    cell = iqr_cell()
    assert cell({"step_ms_median": 2.0, "step_ms_p25": 1.9, "step_ms_p75": 2.1}) == "±5.0%"
    assert cell({"step_ms_median": 2.0, "step_ms_p25": None, "step_ms_p75": 2.1}) == "-"
    assert cell({}) == "-"


# --- params -------------------------------------------------------------------------------


def test_params_table_fits_80_columns_without_cutting():
    view = build_table("Attention parameters per layer", params_rows(), PARAMS, 80, hint=HINT)
    text = render(view)
    assert_fits(text, 80)
    assert view.needed_width <= 80
    title = "Attention parameters per layer · d_model 4,096 · 32 heads · head_dim 128 · no bias"
    assert view.title == title
    assert flat(title) in flat(text)
    assert view.shared == ["d_model 4,096", "32 heads", "head_dim 128", "no bias"]
    headers = header_line(text)
    for gone in ("d_model", "head_dim", "bias", "Model"):
        assert gone not in headers
    for kv, total in PARAM_TOTALS.items():
        assert f"{total:,}" in text or fmt_si(total) in text
        assert VARIANTS[kv] in text
    # the counts switch to their compact form together: one form in every row and column
    assert "67.1 M" in text and "51.56%" in text
    assert "Attention parameters" in text and "," not in text.split("┡")[1].split("└")[0]
    assert {"q_proj", "k_proj", "v_proj", "total", "module"} <= set(view.compacted)
    # o_proj reads 16.8 M in every row, as q_proj does: of the two it goes (the higher rank)
    assert view.hidden == ["o_proj"] and view.footer() in flat(text)


def test_params_table_at_120_columns_is_in_full():
    view = build_table("Attention parameters per layer", params_rows(), PARAMS, 120, hint=HINT)
    text = render(view, 120)
    assert_fits(text, 120)
    assert view.hidden == [] and view.compacted == [] and view.footer() is None
    assert "16,777,216" in text and "524,288" in text and "34,603,008" in text
    assert "M " not in text


def test_params_kv_heads_column_stays_when_it_varies():
    view = build_table("Attention parameters per layer", params_rows(), PARAMS, 200, hint=HINT)
    assert "kv heads" in header_line(render(view, 200))
    rows = [r for r in params_rows() if r["num_kv_heads"] == 8]
    view = build_table("Attention parameters per layer", rows, PARAMS, 200, hint=HINT)
    assert "8 kv heads" in view.shared
    assert "kv heads" not in header_line(render(view, 200))


def test_narrow_params_table_hides_the_least_important_first():
    view = build_table("Attention parameters per layer", params_rows(), PARAMS, 60, hint=HINT)
    text = render(view, 60)
    assert_fits(text, 60)
    headers = header_line(text)
    for kept in ("Variant", "total", "vs MHA"):
        assert kept in headers
    # first what reads the same in every row (q_proj, o_proj: every variant's), then by
    # rank (module, 46: the check of total on a built module): k_proj and v_proj stay, the
    # parameters GQA saves, and kv heads
    assert view.hidden == ["q_proj", "o_proj", "module"]
    assert view.compacted == ["k_proj", "v_proj", "total"]
    assert "16.8 M" in text and "524 k" in text and "34.6 M" in text
    # the title breaks between settings, never inside one
    assert view.needed_width == 59
    lines = text.splitlines()
    assert lines[0].rstrip() == "Attention parameters per layer · d_model 4,096 · 32 heads ·"
    assert lines[1].rstrip() == "head_dim 128 · no bias"
    assert view.footer() in flat(text)


def test_wide_keeps_every_column_in_full():
    view = build_table(
        "Attention parameters per layer", params_rows(), PARAMS, 80, wide=True, hint=HINT
    )
    assert view.hidden == [] and view.compacted == []
    assert view.needed_width > 80
    text = render(view, 80)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) == view.needed_width
    headers = header_line(text)
    for header in (
        "Variant",
        "kv heads",
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "total",
        "module",
        "vs MHA",
    ):
        assert header in headers
    assert "524,288" in text and "16,777,216" in text


# --- kvmem --------------------------------------------------------------------------------


def test_kvmem_table_llama3_70b_at_80_columns():
    rows = kvmem_rows()
    view = build_table("KV-cache memory on cpu", rows, kvmem_columns(rows), 80, hint=HINT)
    text = render(view)
    assert_fits(text, 80)
    for part in (
        "llama-3-70b",
        "80 layers",
        "64 heads",
        "8 kv heads",
        "head_dim 128",
        "batch 1",
        "bfloat16",
        "320.00 KiB per token",  # the same at every context
    ):
        assert part in view.shared
        assert part in flat(text)
    for n in CONTEXTS:
        assert format_bytes(LLAMA3_70B_PER_TOKEN * n) in text
        assert f"{n:,}" in text
    assert "40.00 GiB" in text and "12.50%" in text
    headers = header_line(text)
    for kept in ("Variant", "context", "per layer", "whole model", "vs MHA", "Status"):
        assert kept in headers
    assert view.hidden == [] and view.footer() is None


def test_kvmem_constant_context_moves_to_the_title():
    rows = [
        kvmem_row("llama-3-8b", layers=32, heads=32),
        kvmem_row(),
        kvmem_row("falcon-7b", layers=32, heads=71, kv=1),
    ]
    view = build_table("KV-cache memory on cpu", rows, kvmem_columns(rows), 80, hint=HINT)
    text = render(view)
    assert_fits(text, 80)
    assert "context 8,192" in view.shared and "batch 1" in view.shared
    headers = header_line(text)
    assert "Model" in headers and "context" not in headers
    for r in rows:
        assert r["model"] in text
        assert format_bytes(r["kv_bytes"]) in text


def test_kvmem_long_status_is_shortened_not_cut():
    """llama-3-70b at 131,072 tokens, its allocation skipped for lack of memory: at 80
    columns the cell says what was not done ('not allocated', not 'skipped', beside bytes
    that stand), and the reason is a note under the table, never hidden."""
    rows = kvmem_rows()
    rows[-1].update(measured_bytes=None, status="skipped: needs 40.00 GiB, 23.50 GiB free")
    rows[-2].update(measured_bytes=None, status="skipped: needs 30.00 GiB, 23.50 GiB free")
    view = build_table("KV-cache memory on cpu", rows, kvmem_columns(rows), 80, hint=HINT)
    text = render(view)
    assert_fits(text, 80)
    # what each needed is its row's bytes: the two share one note
    reason = (
        "not allocated: more than the 23.50 GiB free (the bytes are computed; only "
        "their check by allocation was skipped) (2 rows)"
    )
    assert "│ not allocated │" in text and "skipped │" not in text
    assert "Status" in view.compacted and view.notes == [reason]
    table, under = text.split("┘\n")
    assert " ".join(under.split(view.footer())[0].split()) == reason
    for width in range(40, 81, 4):  # hidden columns, never the status or its reason
        narrow = build_table("KV", rows, kvmem_columns(rows), width, hint=HINT)
        assert "Status" not in narrow.hidden and narrow.notes == view.notes, width
    wide = render(
        build_table("KV-cache memory", rows, kvmem_columns(rows), 300, wide=True, hint=HINT), 300
    )
    assert reason.removesuffix(" (2 rows)") in wide  # whole in each cell


def test_kvmem_option_columns_only_when_used_and_before_status():
    rows = kvmem_rows()
    assert kvmem_columns(rows) == KVMEM
    rows[0].update(
        tp=2, kv_bytes_per_gpu=1, used_bytes=100, paged_bytes=128, paged_waste_pct=21.875
    )
    headers = [c.header for c in kvmem_columns(rows)]
    assert headers[-1] == "Status"
    assert headers[len(KVMEM) - 1 :] == [
        "tp",
        "per GPU",
        "all GPUs",
        "page",
        "used",
        "paged",
        "paged waste",
        "contiguous",
        "contig. waste",
        "measured paged",
        "Status",
    ]
    assert "kv dtype" not in headers and "window" not in headers
    rows[1].update(kv_dtype="int8", scale_bytes=4096)
    assert "kv dtype" in [c.header for c in kvmem_columns(rows)]
    view = build_table("KV", rows, kvmem_columns(rows), 300, hint=HINT)
    assert "21.88%" in render(view, 300)
    assert columns_for("kvmem", rows) == kvmem_columns(rows)


def test_kvmem_rows_of_a_sweep_over_scale_groups_and_dtypes_are_told_apart():
    """The cache's scale group and scale dtype, where a quantised one's are not the
    defaults, read in its kv dtype cell (KvFormat.describe), and in the title where every
    row shares them: rows that differ only in them looked alike."""
    rows = kvmem_rows()[:1]
    base = {**rows[0], "kv_dtype": "int8", "scale_bytes": 4096, "scale_dtype": "float16"}
    rows = [
        {**rows[0], "kv_dtype": "bfloat16", "scale_dtype": None, "kv_scale_group": None},
        {**base, "kv_scale_group": None},
        {**base, "kv_scale_group": 32},
        {**base, "kv_scale_group": 32, "scale_dtype": "float32"},
    ]
    column = next(c for c in kvmem_columns(rows) if c.header == "kv dtype")
    assert [column.text(r) for r in rows] == [
        "bfloat16",
        "int8",
        "int8 in groups of 32",
        "int8 in groups of 32, float32 scales",
    ]
    view = build_table("KV", rows[3:], kvmem_columns(rows[3:]), 300, hint=HINT)
    assert "kv cache int8 in groups of 32, float32 scales" in render(view, 300)


def test_a_narrow_table_keeps_the_setting_that_alone_tells_its_rows_apart():
    """A sweep over tp and weights at 80 columns: tp, less important than the numbers by
    rank, was hidden first, and rows of tp 1 and 2 read alike. Now it goes last; a
    setting another one already tells apart (kv heads beside the variant) goes at its
    rank."""
    columns = [
        Column("Variant", "variant", str, rank=0, kind="label", setting=True),
        Column("kv heads", "kv", str, rank=60, setting=True),
        Column("tp", "tp", str, rank=70, setting=True),
        Column("ms", "ms", str, rank=10),
        Column("bytes", "bytes", str, rank=40),
        Column("FLOPs", "flops", str, rank=50),
    ]
    rows = [
        {"variant": v, "kv": kv, "tp": tp, "ms": ms, "bytes": f"{b} MiB", "flops": f"{b} G"}
        for v, kv in (("MHA", "32"), ("MQA", "1"))
        for tp, b, ms in (("1", 123456, "2.000"), ("2", 654321, "1.000"))
    ]
    whole = build_table("T", rows, columns, 200).needed_width
    for width in range(10, whole):
        hidden = build_table("T", rows, columns, width).hidden
        if "tp" in hidden:  # only once every other column has gone
            assert set(hidden) >= {"kv heads", "ms", "bytes", "FLOPs"}, (width, hidden)
    assert build_table("T", rows, columns, whole - 1).hidden == ["kv heads"]


# --- decode -------------------------------------------------------------------------------

DECODE_TITLE = "Decode on Intel Xeon (cpu), peak copy bandwidth 45.7 GB/s"


def test_decode_table_fits_80_columns_with_the_step_times():
    rows = decode_rows()
    view = build_table(DECODE_TITLE, rows, decode_columns(rows), 80, hint=HINT)
    text = render(view)
    assert_fits(text, 80)
    assert view.shared == [
        "provider attnbench",
        "float32",
        "batch 1",
        "cpu",
        "d_model 4,096",
        "32 heads",
        "head_dim 128",
        "gen 4",
        "onednn-packed projections",
    ]
    assert flat(view.title) in flat(text)
    headers = header_line(text).split("┃")[1:-1]
    assert [h.strip() for h in headers] == [
        "Variant",
        "Mode",
        "context",
        "step ms",
        "±IQR",
        "tok/s",
        "speed-up",
        "% peak",
    ]
    for r in rows:
        assert fmt_ms(r["step_ms_median"]) in text
    assert fmt_x(rows[1]["speedup_vs_no_cache"]) in text
    assert "±2.8%" in text  # (1.04321 - 0.9876) / 2
    # one provider: no speed-up over it, and every status is ok: Status is the first to go
    assert "vs attnbench" not in [c.header for c in decode_columns(rows)]
    assert view.hidden[0] == "Status" and "p25" in view.hidden and "noisy" in view.hidden
    count = len(view.hidden)
    assert view.footer() == f"{count} columns hidden ({', '.join(view.hidden)}): --wide, or --csv"
    assert view.footer() in flat(text)


def test_decode_hidden_columns_in_rank_order():
    rows = decode_rows(PROVIDERS)
    columns = decode_columns(rows)
    view = build_table(DECODE_TITLE, rows, columns, 80, hint=HINT)
    ranks = {c.header: c.rank for c in columns}
    assert [ranks[h] for h in view.hidden] == sorted(ranks[h] for h in view.hidden)
    # the low-priority columns go before any default one
    assert set(view.hidden) >= {
        "prefill ms",
        "prefill TFLOPS",
        "% peak flops",
        "p25",
        "p75",
        "samples",
        "stop",
        "gen tok/s",
        "GB/s",
        "noisy",
    }


PROVIDERS = ("attnbench", "sdpa-flash", "naive")


def test_decode_providers_at_80_columns_in_rank_order():
    rows = decode_rows(PROVIDERS)
    view = build_table(DECODE_TITLE, rows, decode_columns(rows), 80, hint=HINT)
    text = render(view)
    assert_fits(text, 80)
    assert "provider attnbench" not in view.title  # it varies: a column
    headers = [h.strip() for h in header_line(text).split("┃")[1:-1]]
    assert headers == ["Variant", "provider", "Mode", "context", "step ms", "±IQR", "tok/s"]
    assert view.hidden[:4] == ["speed-up", "vs attnbench", "% peak", "Status"]
    for provider in PROVIDERS:
        assert f"│ {provider:<10} │" in text


def test_decode_providers_wide_shows_every_new_field():
    rows = decode_rows(PROVIDERS)
    view = build_table(DECODE_TITLE, rows, decode_columns(rows), 80, wide=True, hint=HINT)
    text = render(view)
    assert view.hidden == [] and "…" not in text
    headers = [h.strip() for h in header_line(text).split("┃")[1:-1]]
    assert headers == [
        "Variant",
        "provider",
        "Mode",
        "context",
        "step ms",
        "±IQR",
        "tok/s",
        "speed-up",
        "vs attnbench",
        "% peak",
        "Status",
        "kv heads",
        "prefill ms",
        "prefill TFLOPS",
        "% peak flops",
        "p25",
        "p75",
        "samples",
        "stop",
        "gen tok/s",
        "GB/s",
        "noisy",
    ]
    flash = next(r for r in rows if r["provider"] == "sdpa-flash" and r["mode"] == "cache")
    line = next(line for line in text.splitlines() if "sdpa-flash" in line and "│ cache" in line)
    for cell in (
        "1.25x",
        fmt_ms(flash["step_ms_median"]),
        fmt_ms(flash["prefill_ms_median"]),
        "0.012",
        "12.3",
        fmt_ms(flash["step_ms_p25"]),
        "123",
        "target_ci",
        "4321.1",
    ):
        assert f" {cell} " in line, cell
    naive = next(line for line in text.splitlines() if "naive" in line and "│ cache" in line)
    assert " 0.33x " in naive


def test_decode_unsupported_rows_read_by_their_status():
    rows = decode_rows(PROVIDERS[:2], unsupported=("sdpa-cudnn",))
    view = build_table(DECODE_TITLE, rows, decode_columns(rows), 80, hint=HINT)
    text = render(view)
    assert_fits(text, 80)
    headers = [h.strip() for h in header_line(text).split("┃")[1:-1]]
    assert headers[:6] == ["Variant", "provider", "Mode", "context", "step ms", "±IQR"]
    assert "Status" in headers  # a row without a time is read by its status
    cudnn = [line for line in text.splitlines() if "sdpa-cudnn" in line and line[0] == "│"]
    assert len(cudnn) == 12 and all(" - " in line and "unsupported" in line for line in cudnn)
    # the reason is a note under the table, once, naming the provider
    assert view.notes == [f"{UNSUPPORTED} (sdpa-cudnn, 12 rows)"]
    assert text.count("no cuDNN kernel") == 1 and f"{UNSUPPORTED} (sdpa-cudnn, 12 rows)" in text
    wide = render(build_table(DECODE_TITLE, rows, decode_columns(rows), 80, wide=True))
    assert wide.count("no cuDNN kernel") == 1 and "unsupported" in wide


def test_status_notes_list_each_reason_once():
    rows = [
        {"status": "ok", "provider": "a"},
        {"status": "oom", "provider": "a"},
        {"status": "wrong: max error 1 above 0.001", "provider": "b"},
        {"status": "wrong: max error 1 above 0.001", "provider": "c"},
        {"status": "skipped: needs 4.00 GiB, 1.00 GiB free", "provider": "a"},
    ]
    notes = build_table(DECODE_TITLE, rows, decode_columns(rows), 200).notes
    assert notes == [
        "wrong: max error 1 above 0.001 (b, c, 2 rows)",
        "skipped: needs 4.00 GiB, 1.00 GiB free (a, 1 row)",
    ]


def test_decode_columns_follow_the_rows():
    rows = decode_rows(PROVIDERS)
    headers = [c.header for c in decode_columns(rows)]
    assert "vs attnbench" in headers and "graph" not in headers and "gen" in headers
    rows[0]["baseline_provider"] = "naive"  # two baselines: no single name for the header
    assert VS_BASELINE in [c.header for c in decode_columns(rows)]
    for r in rows:
        r.update(cuda_graph=True, gen_len=0)
    columns = decode_columns(rows)
    assert "graph" in [c.header for c in columns] and "gen" not in [c.header for c in columns]
    view = build_table(DECODE_TITLE, rows, columns, 200)
    assert "CUDA graphs" in view.shared
    rows[0]["cuda_graph"] = False
    text = render(build_table(DECODE_TITLE, rows, decode_columns(rows), 400), 400)
    assert "│ eager " in text and "│ graph " in text
    assert columns_for("decode", rows) == decode_columns(rows)


# --- providers side by side ---------------------------------------------------------------


def test_providers_table_one_row_per_cached_configuration():
    rows = sampled_in_turn(decode_rows(PROVIDERS, unsupported=("sdpa-cudnn",)))
    side = providers_table(rows)
    assert side.title == (
        "Cached decode step, ms by provider (speed-up over attnbench) · "
        "not timed at any point: sdpa-cudnn"
    )
    assert len(side.rows) == 6  # 3 variants x 2 contexts, cache only
    view = build_table(side.title, side.rows, side.columns, 200)
    text = render(view, 200)
    assert_fits(text, 200)
    headers = [h.strip() for h in header_line(text).split("┃")[1:-1]]
    # the baseline first; kv heads left to the variant's name; sdpa-cudnn, timed nowhere,
    # only in the title
    assert headers == ["Variant", "context", "attnbench", "sdpa-flash", "naive", "fastest"]
    mha = next(line for line in text.splitlines() if "│ MHA " in line and "4,096" in line)
    base = next(
        r["step_ms_median"]
        for r in rows
        if r["variant"] == "MHA"
        and r["prompt_len"] == 4096
        and r["provider"] == "attnbench"
        and r["mode"] == "cache"
    )
    cells = [c.strip() for c in mha.split("│")[1:-1]]
    assert cells == [
        "MHA",
        "4,096",
        fmt_ms(base),
        f"{fmt_ms(base * 0.8)} (1.25x)",
        f"{fmt_ms(base * 3)} (0.33x)",
        "sdpa-flash",
    ]


def test_providers_table_narrow_drops_the_speedups_together_then_providers():
    rows = sampled_in_turn(decode_rows((*PROVIDERS, "sdpa-math", "hf")))  # hf: the fastest
    side = providers_table(rows)
    view = build_table(side.title, side.rows, side.columns, 80, hint="--wide")
    text = render(view)
    assert_fits(text, 80)
    assert view.compacted == [*PROVIDERS, "sdpa-math"]  # all of them, not some
    assert "x)" not in text
    assert view.hidden == ["hf"] and text.count("│ hf      │") == 6  # named as the fastest
    assert view.footer() == "1 column hidden (hf): --wide"
    wide = render(build_table(side.title, side.rows, side.columns, 80, wide=True))
    assert "(1.25x)" in wide and "(2.00x)" in wide and "(4.00x)" in wide


def test_providers_table_without_the_baseline_shows_times_alone():
    rows = [r for r in decode_rows(PROVIDERS) if r["provider"] != "attnbench"]
    for r in rows:
        r["speedup_vs_baseline"] = None  # nothing to compare with
    side = providers_table(rows)
    assert side.title == "Cached decode step, ms by provider"
    text = render(build_table(side.title, side.rows, side.columns, 200), 200)
    assert "x)" not in text and header_line(text).split("┃")[3].strip() == "sdpa-flash"


def test_providers_table_names_no_fastest_where_nothing_is_resolved():
    """A least median over too few rounds, or of steps not sampled in turn, is no
    answer: the row says "not resolved", and a note why, naming the least median."""
    rows = sampled_in_turn(decode_rows(PROVIDERS), rounds=5)
    side = providers_table(rows)
    assert {row["fastest"] for row in side.rows} == {"not resolved"}
    assert len(side.notes) == 1
    note = side.notes[0]
    assert note.startswith("fastest not resolved in any row: ")
    assert "sampled over only 5 rounds (11 needed)" in note
    assert note.endswith("; least median: sdpa-flash")
    apart = providers_table(decode_rows(PROVIDERS))  # each timed alone
    assert {row["fastest"] for row in apart.rows} == {"not resolved"}
    assert list(apart.notes) == [
        "fastest not resolved in any row: sdpa-flash was not sampled in turn with attnbench "
        "and naive; least median: sdpa-flash"
    ]
    resolved = providers_table(sampled_in_turn(decode_rows(PROVIDERS)))
    assert {row["fastest"] for row in resolved.rows} == {"sdpa-flash"} and not resolved.notes


def test_the_fastest_needs_its_lead_not_its_size_resolved():
    """A slower step whose rounds spread over two modes (memory layouts) leaves the size
    of the lead open, a wide interval, but not who leads: its whole interval under 1x,
    the fastest is named."""
    rows = sampled_in_turn(decode_rows(PROVIDERS))
    for r in rows:
        if r["provider"] == "naive" and r["samples_ms"]:
            base = r["step_ms_median"]
            r["samples_ms"] = [base * (0.5 if i % 2 else 4) for i in range(len(r["samples_ms"]))]
    side = providers_table(rows)
    assert {row["fastest"] for row in side.rows} == {"sdpa-flash"} and not side.notes
    tied = sampled_in_turn(decode_rows(PROVIDERS))
    for r in tied:  # naive's rounds now as fast as sdpa-flash's, half of them
        if r["provider"] == "naive" and r["samples_ms"]:
            fast = next(
                x["step_ms_median"]
                for x in tied
                if x["provider"] == "sdpa-flash"
                and x["prompt_len"] == r["prompt_len"]
                and x["variant"] == r["variant"]
                and x["mode"] == r["mode"]
            )
            r["samples_ms"] = [fast * (0.9 if i % 2 else 4) for i in range(len(r["samples_ms"]))]
    assert "not resolved" in {row["fastest"] for row in providers_table(tied).rows}


def test_providers_table_needs_two_providers():
    assert providers_table(decode_rows()).rows == []
    no_cache = [r for r in decode_rows(PROVIDERS) if r["mode"] == "no_cache"]
    assert providers_table(no_cache).rows == []


def test_provider_cells():
    assert ProviderCell(0.2345, None, "ok").full() == "0.234"  # the baseline's own
    assert ProviderCell(0.2345, 1.0, "ok").full() == "0.234 (1.00x)"
    assert ProviderCell(0.2, 1.2345, "ok").full() == "0.200 (1.23x)"
    assert ProviderCell(0.2, 1.2345, "ok").short() == "0.200"
    assert ProviderCell(None, None, "wrong: max error 1").full() == "wrong"
    assert ProviderCell(None, None, "oom").short() == "oom"
    assert fmt_x2(0.0042) == "0.0042x" and fmt_x2(127.314) == "127.31x" and fmt_x2(None) == "-"


# --- whole model and presets --------------------------------------------------------------


def test_whole_model_table():
    parts = [
        ("embeddings", 1_050_673_152, 2_101_346_304),
        ("attention", 12_079_595_520, None),
        ("total", 70_553_706_496, 141_107_412_992),
    ]
    rows = [
        dict(model="llama-3-70b", part=p, params=n, meta_params=n, weight_bytes=b)
        for p, n, b in parts
    ]
    view = build_table("Whole model", rows, WHOLE_MODEL, 80, hint=HINT)
    text = render(view)
    assert_fits(text, 80)
    assert view.shared == ["llama-3-70b"]
    assert "70,553,706,496" in text and "131.42 GiB" in text


PRESET_ROWS = [
    dict(
        name="llama-3-70b",
        num_layers=80,
        d_model=8192,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        variant="GQA-8",
        dtype="bfloat16",
        source="meta-llama/Meta-Llama-3-70B config.json",
    ),
    dict(
        name="deepseek-v2-lite",
        num_layers=27,
        d_model=2048,
        num_heads=16,
        num_kv_heads=16,
        head_dim=128,
        variant="MLA",
        dtype="bfloat16",
        source="deepseek-ai/DeepSeek-V2-Lite config.json (MLA, 64 routed + 2 shared experts)",
    ),
    dict(
        name="deepseek-v3",
        num_layers=61,
        d_model=7168,
        num_heads=128,
        num_kv_heads=128,
        head_dim=128,
        variant="MLA",
        dtype="bfloat16",
        source="deepseek-ai/DeepSeek-V3 config.json (MLA, 256 routed + 1 shared expert; "
        "without the multi-token-prediction layer)",
    ),
]


def test_models_table_drops_the_source_rather_than_folding_it_thin():
    view = build_table("Model presets", PRESET_ROWS, MODELS, 80, hint=HINT)
    text = render(view)
    assert_fits(text, 80)
    assert view.hidden[-1] == "Source"
    assert "deepseek-v2-lite" in text and "config.json" not in text
    wide = build_table("Model presets", PRESET_ROWS, MODELS, 140, hint=HINT)
    text = render(wide, 140)
    assert wide.hidden == [] and "Source" in header_line(text)
    body = [line for line in text.splitlines() if line.startswith("│")]
    assert len(body) <= 3 * len(PRESET_ROWS)  # each source on at most three lines
    assert "multi-token-prediction" in text.replace("│", "").replace("\n", "")


# --- the engine's rules -------------------------------------------------------------------


def test_all_none_columns_are_left_out():
    view = build_table("Attention parameters per layer", params_rows(), PARAMS, 200, hint=HINT)
    text = render(view, 200)
    assert "Model" not in header_line(text)
    assert "module" in header_line(text)


def test_equal_ranks_drop_the_later_column_first():
    cols = [Column(h, h, fmt_int, rank=5) for h in ("a", "b", "c")]
    rows = [{"a": 10**9, "b": 10**9, "c": 10**9}]
    view = build_table("t", rows, cols, table_width([13, 13]), hint=HINT)
    assert view.hidden == ["c"]
    view = build_table("t", rows, cols, table_width([13]), hint=HINT)
    assert view.hidden == ["b", "c"]


def test_a_group_switches_to_its_compact_form_together():
    cols = [
        Column("a", "a", lambda v: f"{v} long tail", compact=str, group="g"),
        Column("b", "b", lambda v: f"{v}+", compact=str, group="g"),
        Column("c", "c", lambda v: f"{v} other tail", compact=str),
    ]
    rows = [{"a": 1, "b": 2, "c": 3}]
    # b alone would fit in full (1 + 2 + 1 + 9 + 1 = 14) once a and c are compact
    view = build_table("t", rows, cols, table_width([1, 2, 1]), hint=HINT)
    assert view.compacted == ["a", "b", "c"] and view.hidden == []
    assert "2+" not in render(view)
    ungrouped = [Column(c.header, c.field, c.fmt, compact=c.compact) for c in cols]
    view = build_table("t", rows, ungrouped, table_width([1, 2, 1]), hint=HINT)
    assert view.compacted == ["a", "c"] and "2+" in render(view)


def test_a_lone_setting_column_stays():
    cols = [Column("batch", "batch", fmt_int, setting=True)]
    view = build_table("t", [{"batch": 1}, {"batch": 1}], cols, 80, hint=HINT)
    assert view.shared == [] and view.title == view.table.title == "t"
    assert "batch" in render(view)


def test_non_settings_never_move_to_the_title():
    cols = [Column("a", "a", fmt_int), Column("b", "b", fmt_int, setting=True)]
    view = build_table("t", [{"a": 1, "b": 2}, {"a": 1, "b": 2}], cols, 80, hint=HINT)
    assert view.shared == ["b 2"] and view.title == "t · b 2"
    assert view.table.title == "t ·\nb 2"  # broken to the table's width (5) between parts
    assert [c.header for c in view.table.columns] == ["a"]


def test_footer_wording():
    def view(hidden):
        return TableView(
            table=None,  # type: ignore[arg-type]
            title="",
            hidden=hidden,
            shared=[],
            needed_width=0,
            hint=HINT,
        )

    assert view([]).footer() is None
    assert view(["p25", "p75", "noisy"]).footer() == (
        "3 columns hidden (p25, p75, noisy): --wide, or --csv"
    )
    assert view(["per layer"]).footer() == "1 column hidden (per layer): --wide, or --csv"
    bare = TableView(table=None, title="", hidden=["p25"], shared=[], needed_width=0)  # type: ignore[arg-type]
    assert bare.footer() == "1 column hidden (p25)"


def test_markdown_table_uses_full_text_and_aligns_numbers():
    cols = [*PARAMS, Column("note", "note", fmt_plain, kind="text")]
    rows = params_rows()
    rows[0]["note"] = "a | b"
    md = markdown_table(rows, cols).splitlines()
    assert md[0].startswith("| Variant | d_model |") and "Model" not in md[0]
    assert md[1].startswith("|---|---:|") and md[1].endswith("|---:|---|")
    assert "67,108,864" in md[2] and "67.1 M" not in md[2]
    assert "a \\| b" in md[2]
    assert len(md) == 2 + len(rows)


def test_terminal_width(monkeypatch):
    console = Console(file=io.StringIO(), width=240)
    monkeypatch.setenv("COLUMNS", "100")
    assert terminal_width(console) == 100
    monkeypatch.setenv("COLUMNS", "wide")
    assert terminal_width(console) == 120
    monkeypatch.delenv("COLUMNS")
    assert terminal_width(console) == 120
    terminal = Console(file=io.StringIO(), width=91, force_terminal=True)
    assert terminal_width(terminal) == 91


def test_a_pipe_in_a_terminal_takes_the_width_of_the_terminal_errors_go_to(monkeypatch, tmp_path):
    """`attnbench ... | less` in a terminal of 80 columns: standard error is still that
    terminal, whose width the tables take (with `2>&1`, standard input's); COLUMNS, where
    set, wins; into a file, or in a log (no terminal at all), they are 120 wide."""
    console = Console(file=io.StringIO(), width=240)
    stderr = open(os.devnull, "w")  # noqa: SIM115 (closed below)
    terminals = {stderr.fileno(): os.terminal_size((80, 24))}

    def terminal_size(fd: int) -> os.terminal_size:
        if fd not in terminals:
            raise OSError("not a terminal")
        return terminals[fd]

    read, write = os.pipe()
    pipe = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(sys, "stdout", pipe)
    monkeypatch.setattr(os, "get_terminal_size", terminal_size)
    monkeypatch.delenv("COLUMNS", raising=False)
    assert terminal_width(console) == 80
    monkeypatch.setenv("COLUMNS", "100")
    assert terminal_width(console) == 100
    monkeypatch.delenv("COLUMNS")
    with open(tmp_path / "out.txt", "w") as file:  # `> out.txt`: the file's own width
        monkeypatch.setattr(sys, "stdout", file)
        assert terminal_width(console) == 120
    monkeypatch.setattr(sys, "stdout", pipe)
    terminals.clear()
    assert terminal_width(console) == 120
    # `2>&1 | less`: standard error is the pipe too; standard input is still the terminal
    stdin = open(os.devnull)  # noqa: SIM115 (closed below)
    monkeypatch.setattr(sys, "stdin", stdin)
    terminals[stdin.fileno()] = os.terminal_size((72, 24))
    assert terminal_width(console) == 72
    for stream in (stderr, pipe, stdin):
        stream.close()
    os.close(read)


@pytest.mark.parametrize("section", ["params", "fit"])
def test_section_columns(section):
    made = columns_for(section, [])
    assert [(c.header, c.field) for c in made] == [
        (c.header, c.field) for c in KINDS[section].columns
    ]
    with pytest.raises(KeyError):
        columns_for("nope", [])


def test_text_columns_never_push_the_table_past_the_page():
    """rich's own shrinking of wrapped columns can round a table one past the page; the
    fit gives text columns exactly their width, at every page width."""
    columns = [
        Column("Verdict", "v", str, rank=0, kind="status"),
        Column("Row", "r", str, rank=1, kind="text"),
        Column("Metric", "m", str, rank=2, kind="label"),
        Column("Baseline", "b", str, rank=6),
        Column("Current", "c", str, rank=4),
        Column("Change", "x", str, rank=3),
        Column("Reason", "why", str, rank=7, kind="text"),
    ]
    rows = [
        {
            "v": "unchanged",
            "r": f"MQA mode=no_cache prompt_len={n}",
            "m": "step_ms_median",
            "b": "0.4171 ms",
            "c": "0.4578 ms",
            "x": "1.098x",
            "why": "1.098x slower, within 10%" + " and more" * (n % 3),
        }
        for n in range(8)
    ]
    for width in range(50, 141):
        view = build_table("t", rows, columns, width, hint=HINT)
        console = Console(width=width, file=io.StringIO(), record=True)
        print_view(console, view)
        lines = console.export_text().splitlines()
        assert max(len(line) for line in lines if line[:1] in "┏┃│└") <= width, width


# --- statuses and their reasons ------------------------------------------------------------


STATUS_COLUMNS = [
    Column("Name", "name", str, rank=0, kind="label"),
    Column("Value", "value", str, rank=1),
    Column("More", "more", str, rank=2),
    Column("Status", "status", str, rank=9, kind="status", compact=fmt_status),
]


def status_rows(*statuses: str) -> list[dict]:
    return [
        {"name": f"row{i}", "value": f"1.23{i}", "more": "x" * 20 + str(i), "status": s}
        for i, s in enumerate(statuses)
    ]


def test_a_status_is_never_hidden_and_its_reason_becomes_a_note():
    rows = status_rows("ok", "skipped: needs 40.00 GiB, 22.86 GiB free")
    view = build_table("t", rows, STATUS_COLUMNS, 40)
    text = render(view, 40)
    assert "Status" not in view.hidden and "More" in view.hidden
    assert view.notes == ["skipped: needs 40.00 GiB, 22.86 GiB free"]
    lines = text.splitlines()
    assert lines[lines.index(next(ln for ln in lines if ln.startswith("└"))) + 1] == (
        "skipped: needs 40.00 GiB, 22.86 GiB free"
    )
    wide = build_table("t", rows, STATUS_COLUMNS, 200)
    assert wide.notes == [] and "skipped: needs 40.00 GiB" in render(wide, 200)  # in the cell


def test_statuses_one_word_stands_for_are_numbered():
    rows = status_rows(
        "skipped: needs 40.00 GiB, 1.00 GiB free",
        "skipped: needs 80.00 GiB, 1.00 GiB free",
        "skipped: needs 40.00 GiB, 1.00 GiB free",
        "oom",
    )
    view = build_table("t", rows, STATUS_COLUMNS, 40)
    text = render(view, 40)
    cells = [line.split("│")[-2].strip() for line in text.splitlines() if line.startswith("│")]
    assert cells == ["skipped [1]", "skipped [2]", "skipped [1]", "oom"]
    assert view.notes == [
        "[1] skipped: needs 40.00 GiB, 1.00 GiB free (2 rows)",
        "[2] skipped: needs 80.00 GiB, 1.00 GiB free",
    ]


def test_a_long_reason_wraps_with_a_hanging_indent_and_is_shortened_past_three_lines():
    assert fit_note("unsupported: " + "word " * 5, 40) == ["unsupported: word word word word word"]
    lines = fit_note("error: RuntimeError: " + "a long message " * 6, 40)
    assert len(lines) == 3 and lines[1].startswith("  ") and not lines[1].startswith("   ")
    assert lines[-1].endswith("message") or not lines[-1].endswith("…")
    cut = fit_note("error: RuntimeError: " + "a long message " * 20, 40)
    assert len(cut) == 3 and cut[-1].endswith("…") and all(len(line) <= 40 for line in cut)
    assert cut[1].startswith("  ") and cut[2].startswith("  ")


def test_a_status_column_of_ok_alone_may_go():
    view = build_table("t", status_rows("ok", "ok"), STATUS_COLUMNS, 30)
    assert "Status" in view.hidden


def test_a_text_column_to_keep_folds_instead_of_going():
    columns = [
        Column("Verdict", "v", str, rank=0, kind="status"),
        Column("Metric", "m", str, rank=1, kind="label"),
        Column("Change", "x", str, rank=3),
        Column("Reason", "why", str, rank=2, kind="text", keep=True),
    ]
    why = "1.50x slower; 99% bounds 1.44x to 1.56x slower, beyond the 1.10x threshold"
    rows = [{"v": "regressed", "m": "step_ms_median", "x": "1.500x", "why": why}]
    for width in range(48, 121, 8):
        view = build_table("t", rows, columns, width)
        assert "Reason" not in view.hidden and "Metric" not in view.hidden, width
        text = render(view, width)
        assert "threshold" in text and max(len(line) for line in text.splitlines()) <= width
    assert build_table("t", rows, columns, 50).hidden == ["Change"]  # before the reason folds


def test_decode_status_says_noisy_and_stays_at_80_columns():
    rows = decode_rows()
    rows[3]["noisy"] = True  # a row whose spread is wide, its status still 'ok'
    rows[5]["status"] = "noisy: under 11 samples, too few to judge the spread"
    view = build_table(DECODE_TITLE, rows, decode_columns(rows), 80, hint=HINT)
    text = render(view)
    assert_fits(text, 80)
    assert "Status" in header_line(text) and "Status" not in view.hidden
    statuses = [line.split("│")[-2].strip() for line in text.splitlines() if line[0] == "│"]
    assert statuses.count("noisy") == 2 and statuses.count("ok") == len(rows) - 2
    assert view.notes == ["noisy: under 11 samples, too few to judge the spread (attnbench, 1 row)"]


# --- a new section's columns, declared with it ---------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ToyPoint:
    model: str
    batch: int


@dataclass(kw_only=True)
class ToyRecord:
    model: str = key()
    batch: int = key()
    weight_bytes: int = exact()
    step_ms: float = info()
    tokens_per_s: float = info()


def run_toy(point: ToyPoint, context: Context | None = None) -> ToyRecord:
    step_ms = 0.2 + 0.05 * point.batch
    return ToyRecord(
        model=point.model,
        batch=point.batch,
        weight_bytes=point.batch * 2**30,
        step_ms=step_ms,
        tokens_per_s=point.batch / step_ms * 1e3,
    )


#: A new section's experiment, as a module of experiments/ would give it, with its
#: table's columns: no edit of render/ makes its tables.
TOY = SimpleNamespace(
    check=lambda point: None,
    run=run_toy,
    order=grid_order,
    link=no_links,
    COLUMNS=(
        ColumnSpec("Model", "model", "label", 0, setting=True, title="{}"),
        ColumnSpec("batch", "batch", "int", 1),
        ColumnSpec("weights", "weight_bytes", "bytes", 2),
        ColumnSpec("step ms", "step_ms", "aligned", 1),
        ColumnSpec("tok/s", "tokens_per_s", "rate", 3),
    ),
)


@pytest.fixture
def toy(monkeypatch):
    """The toy section, registered as a new section's line in KINDS registers it."""
    kind = SectionKind.of("toy", TOY, point=ToyPoint, record=ToyRecord, title="Toy steps")
    monkeypatch.setitem(KINDS, "toy", kind)
    return kind


def toy_rows() -> list[dict]:
    return [as_dict(run_toy(ToyPoint(model="toy-1b", batch=b))) for b in (1, 2, 40)]


def test_a_new_sections_table_reads_as_its_columns_declare(toy):
    assert toy.columns == TOY.COLUMNS
    rows = toy_rows()
    columns = columns_for("toy", rows)
    assert [(c.header, c.field) for c in columns] == [(c.header, c.field) for c in TOY.COLUMNS]
    view = build_table("Toy steps", rows, columns, 80, hint=HINT)
    assert view.shared == ["toy-1b"]  # the model every row shares, named as declared
    markdown = markdown_table(rows, columns).splitlines()
    assert markdown[0] == "| Model | batch | weights | step ms | tok/s |"
    # the step in one format down the column (aligned), the rate in whole numbers
    assert markdown[2:] == [
        "| toy-1b | 1 | 1.00 GiB | 0.250 | 4,000 |",
        "| toy-1b | 2 | 2.00 GiB | 0.300 | 6,667 |",
        "| toy-1b | 40 | 40.00 GiB | 2.200 | 18,182 |",
    ]


def test_the_report_holds_a_new_sections_table(toy):
    rows = toy_rows()
    doc = {
        "config": {"source": "toy.yaml", "file_text": "toy: {}"},
        "environment": {},
        "created": "2026-01-01T00:00:00+00:00",
        "attnbench_version": "0",
        "sections": {"toy": {"records": rows}},
    }
    report = render_report(doc, []).splitlines()
    at = report.index("## Toy steps")
    assert report[at + 2 : at + 7] == markdown_table(rows, columns_for("toy", rows)).splitlines()


def test_every_unit_has_its_column_and_no_other_is_declared():
    assert set(UNIT_COLUMNS) == set(UNITS)
    with pytest.raises(ValueError, match="unit must be one of"):
        ColumnSpec("step", "step_ms", "seconds")


@pytest.mark.parametrize(
    ("share", "text"),
    [(0.042, "±4.2%"), (9.99, "±999.0%"), (10.5, "over ±1,000%"), (260010.66, "over ±1,000%")],
)
def test_a_spread_past_ten_times_its_median_reads_as_over_it(share, text):
    assert spread_text(share) == text


def test_a_title_breaks_between_its_parts_and_never_leaves_a_separator_alone():
    """A part as wide as the page cannot take the ' ·' that joins it to the next: the next
    line opens with it, where rich would have put it on a line of its own."""
    assert wrap_title("metric · a", ["b"], 12) == "metric · a ·\nb"
    wide = "x" * 20
    lines = wrap_title(f"metric · {wide}", ["branch main"], 20).splitlines()
    assert lines == ["metric ·", wide, "· branch main"]
    assert all(len(line) <= 20 for line in lines)


def test_a_ratio_whose_interval_spans_1x_is_marked_and_its_legend_printed_once():
    """vs baseline and x contiguous read '?' where their 95% interval spans 1x, and only
    there; one note under the table says what the mark means, however many columns or
    rows carry it."""
    rows = decode_rows(PROVIDERS)
    for r in rows:
        if r["speedup_vs_baseline"] is None or r["provider"] == r["baseline_provider"]:
            continue  # a run gives the baseline's own row no interval
        ratio = r["speedup_vs_baseline"]
        # MQA's ratios resolved (their interval narrow about them), every other's spans 1x
        spans = r["variant"] != "MQA"
        r["x_of_baseline_ci_lo"] = 0.97 if spans else ratio * 0.99
        r["x_of_baseline_ci_hi"] = 1.03 if spans else ratio * 1.01
        r["x_of_contiguous_median"] = 1.004
        r["x_of_contiguous_ci_lo"], r["x_of_contiguous_ci_hi"] = 0.99, 1.02
    view = build_table(DECODE_TITLE, rows, decode_columns(rows), 200, wide=True, hint=HINT)
    text = render(view, 200)
    legend = [n for n in view.notes if n.startswith("?:")]
    assert len(legend) == 1 and "spans 1x" in legend[0]
    column = next(c for c in decode_columns(rows) if c.field == "speedup_vs_baseline")
    for r in rows:
        if r["speedup_vs_baseline"] is not None:
            cell = column.cell(r)
            spans = r["variant"] != "MQA" and r["provider"] != r["baseline_provider"]
            assert cell.endswith("?") == spans, (r["variant"], r["provider"], cell)
            assert cell in text
    assert "1.00x?" in text  # x contiguous, its interval 0.99-1.02
    clear = decode_rows(PROVIDERS)  # no intervals: nothing marked, no legend
    view = build_table(DECODE_TITLE, clear, decode_columns(clear), 200, wide=True, hint=HINT)
    assert not any(n.startswith("?:") for n in view.notes) and "?" not in render(view, 200)
