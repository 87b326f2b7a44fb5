"""The report's findings of the serving workloads: paged overhead and prefill memory."""

from __future__ import annotations

import pytest

from attnbench.render.report import paged_findings, prefill_memory_findings


def paged_row(block_size: int, ratio: float) -> dict:
    return {
        "variant": "GQA-4",
        "provider": "attnbench",
        "batch": 8,
        "prompt_len": 2048,
        "block_size": block_size,
        "x_of_contiguous_median": ratio,
        "x_of_contiguous_ci_lo": ratio - 0.05,
        "x_of_contiguous_ci_hi": ratio + 0.05,
        "kv_waste_pct": 100 * (block_size - 1) / (2049 + block_size - 1),
    }


def test_the_paged_overhead_is_stated_with_its_interval_by_block_size():
    rows = [paged_row(64, 1.2), paged_row(16, 1.5), {"variant": "GQA-4", "provider": "x"}]
    (line,) = paged_findings(rows)
    assert line.startswith("Paged KV cache, GQA-4 attnbench at batch 8 and context 2,048:")
    assert line.index("1.50x (1.45-1.55x) in blocks of 16") < line.index("1.20x (1.15-1.25x)")


def memory_rows(provider: str, peak) -> list[dict]:
    return [
        {
            "variant": "MHA",
            "provider": provider,
            "batch": 1,
            "dtype": "float32",
            "mode": "cache",
            "prompt_len": s,
            "prefill_peak_bytes": peak(s),
            "prefill_analytic_bytes": peak(s) // 2,
        }
        for s in (1024, 2048, 4096)
    ]


def test_prefill_memory_grows_as_the_square_for_math_and_linearly_for_flash():
    rows = memory_rows("sdpa-math", lambda s: 64 * s * s) + memory_rows(
        "sdpa-flash", lambda s: 1000 * s
    )
    (line,) = prefill_memory_findings(rows, {"gpu_memory_bytes": 64 * 8192 * 8192})
    assert "sdpa-math as S^2.00" in line and "sdpa-flash as S^1.00" in line
    assert "at 4,096, 2.00x what it declares;" in line
    # 64 * S^2 reaches the GPU's memory at S = 8192
    assert "past 4.00 GiB at S of about 8,192" in line and "the GPU's memory" in line


@pytest.mark.parametrize("peaks", [{1024: 5}, {1024: 5, 2048: 5}])
def test_no_growth_to_extrapolate_gives_no_finding(peaks):
    rows = [
        {**memory_rows("sdpa-flash", lambda s: 1)[0], "prompt_len": s, "prefill_peak_bytes": b}
        for s, b in peaks.items()
    ]
    assert prefill_memory_findings(rows, {}) == []


def test_the_largest_caches_give_each_model_its_settings_in_one_parenthesis():
    """Models of different layers and dtypes: each one's own in its parenthesis, and
    semicolons between the models, so that they read as a list; a sliding window that
    caps a cache is said where it does, and a context past the model's positions."""
    from attnbench.render.report import _largest_caches

    def row(model, variant, layers, dtype, gib, window=None, windowed=0, positions=None):
        return {
            "max_positions": positions,
            "model": model,
            "variant": variant,
            "num_layers": layers,
            "dtype": dtype,
            "seq_len": 32768,
            "batch": 1,
            "kv_bytes": gib * 2**30,
            "sliding_window": window,
            "windowed_layers": windowed,
            "status": "ok",
        }

    rows = [
        row("llama-2-7b", "MHA", 32, "float16", 16, positions=4096),
        row("mistral-7b", "GQA-8", 32, "bfloat16", 0.5, 4096, 32),
        row("gemma-2-9b", "GQA-8", 42, "bfloat16", 7, 4096, 21),
    ]
    (line,) = _largest_caches(rows)
    assert line == (
        "At 32,768 tokens of context (batch 1), the KV cache takes 16.00 GiB for llama-2-7b "
        "(MHA, 32 layers, float16, past its 4,096 positions); 512.00 MiB for mistral-7b "
        "(GQA-8, 32 layers, bfloat16, a 4,096-token sliding window) and 7.00 GiB for "
        "gemma-2-9b (GQA-8, 42 layers, "
        "bfloat16, a 4,096-token sliding window in 21 of its 42 layers)."
    )


def test_the_report_names_its_study_as_the_user_knows_it(tmp_path, monkeypatch):
    """The document keeps the sweep file's absolute path; the report names the packaged
    default study as such, and a file under the working directory by its relative path."""
    from attnbench.render.report import _study_source
    from attnbench.study.plan import DEFAULT_CONFIG

    monkeypatch.chdir(tmp_path)
    assert _study_source(str(DEFAULT_CONFIG)) == (
        "the default study (`attnbench/configs/default.yaml`)"
    )
    assert _study_source(str(tmp_path / "sweeps" / "gqa.yaml")) == "`sweeps/gqa.yaml`"
    assert _study_source("/elsewhere/gqa.yaml") == "`/elsewhere/gqa.yaml`"
