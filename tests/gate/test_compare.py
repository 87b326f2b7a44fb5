"""The regression gate: verdict rules, exit codes, input checks, formats, and a simulation of
its false-regression and detection rates. Documents are synthetic and seeded."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import warnings
from collections.abc import Sequence

import numpy as np
import pytest

from attnbench import records
from attnbench.cli import app
from attnbench.experiments.decode import DecodeRecord
from attnbench.experiments.fit import FitRecord
from attnbench.experiments.kvmem import KvmemRecord
from attnbench.experiments.params import ParamsRecord
from attnbench.gate import simulation
from attnbench.gate.compare import (
    MEASURED_RANGE,
    Mismatch,
    Thresholds,
    Verdict,
    compare_documents,
    environment_differences,
    judge_count,
    judge_exact,
    judge_memory,
    judge_timing,
    span,
    times,
)
from attnbench.gate.paired import judge_paired
from attnbench.gate.simulation import (
    NO_PAIRS,
    Noise,
    Resampling,
    Row,
    draw_row,
    draw_timing,
    real_rows,
    real_series,
    simulate,
    simulate_counts,
    simulate_document,
    simulate_rows,
    simulate_sampled,
    totals,
)
from attnbench.measure.stats import Measurement, Summary, median
from attnbench.records import Kind, field_kinds, flattened, gated_timing
from attnbench.study.documents import load_document
from attnbench.study.output import write_csv
from attnbench.study.schema import FIELDS
from attnbench.study.sections import RECORD_TYPES
from tests.helpers import runner

ENV = {
    "attnbench_version": "0.1.0",
    "python_version": "3.11.7",
    "torch_version": "2.5.1",
    "platform": "Linux",
    "cpu_model": "AMD EPYC 7763",
    "num_threads": 8,
    "device": "cuda:0",
    "device_name": "NVIDIA H100 80GB HBM3",
    "cuda_version": "12.4",
    "cudnn_version": 90100,
    "gpu_memory_bytes": 85_000_000_000,
    "git_commit": "a" * 40,
    "peak_gbps": 2900.0,
}
VARIANTS = (("MHA", 32), ("GQA-8", 8), ("MQA", 1))


def params_records() -> list[dict]:
    q = o = 4096 * 4096
    rows = []
    for variant, kv in VARIANTS:
        k = v = 4096 * 128 * kv
        rows.append(
            dict(
                variant=variant,
                d_model=4096,
                num_heads=32,
                num_kv_heads=kv,
                head_dim=128,
                bias=False,
                q_params=q,
                k_params=k,
                v_params=v,
                o_params=o,
                total_params=q + k + v + o,
                module_params=q + k + v + o,
                ratio_vs_mha=(q + k + v + o) / (4 * q),
            )
        )
    return rows


def kvmem_records() -> list[dict]:
    rows = []
    for variant, kv in VARIANTS:
        per_token = 2 * 32 * kv * 128 * 2
        rows.append(
            dict(
                model="llama-2-7b",
                variant=variant,
                num_layers=32,
                num_heads=32,
                num_kv_heads=kv,
                head_dim=128,
                batch=1,
                seq_len=4096,
                dtype="float16",
                bytes_per_token=per_token,
                kv_bytes_per_layer=per_token * 4096 // 32,
                kv_bytes=per_token * 4096,
                measured_bytes=per_token * 4096,
                ratio_vs_mha=kv / 32,
                status="ok",
            )
        )
    return rows


def _timing(metric: str, t: Measurement | None) -> dict:
    """A gated timing's fields as a record carries them (all None, and no samples, when not
    measured)."""
    if t is not None:
        return flattened(DecodeRecord, metric, t)
    stats = gated_timing(DecodeRecord)[metric]
    return {metric: None, **{f: [] if role == "samples" else None for role, f in stats.items()}}


def stated(
    median: float,
    p25: float | None = None,
    p75: float | None = None,
    samples: Sequence[float] = (),
) -> Measurement:
    """A timing as a record states it: its median, and its quartiles and raw samples when
    it has them."""
    return Measurement(list(samples), recorded=Summary(median, p25, p75))


def decode_records(seed: int = 0, slowdown: float = 1.0, steps: int = 30) -> list[dict]:
    """Decode rows whose step (`steps` samples), prefill (cache rows) and generation
    samples carry realistic noise (seeded)."""
    rng = np.random.default_rng(seed)
    rows = []
    for variant, kv in VARIANTS:
        for mode in ("cache", "no_cache"):
            step_ms = 0.05 * (1 + kv / 8)
            t = draw_timing(rng, Noise(median_ms=step_ms, samples=steps), slowdown)
            gen = draw_timing(rng, Noise(median_ms=30 * step_ms, samples=10), slowdown)
            pre = draw_timing(rng, Noise(median_ms=0.8), slowdown) if mode == "cache" else None
            rows.append(
                dict(
                    variant=variant,
                    provider="attnbench",
                    device="cuda:0",
                    dtype="float16",
                    batch=1,
                    d_model=4096,
                    num_heads=32,
                    num_kv_heads=kv,
                    head_dim=128,
                    prompt_len=512,
                    gen_len=30,
                    mode=mode,
                    cuda_graph=False,
                    **_timing("step_ms_median", t),
                    step_repeats=len(t.samples_ms),
                    step_stop="target_ci",
                    step_ci_pct=1.0,
                    tokens_per_s=1000 / t.median_ms,
                    speedup_vs_no_cache=None,
                    baseline_provider="attnbench",
                    speedup_vs_baseline=1.0,
                    bytes_per_step=kv * 1_048_576,
                    achieved_gbps=kv / t.median_ms,
                    peak_gbps=2900.0,
                    pct_of_peak_bw=1.0,
                    flops_per_step=kv * 2_000_000,
                    **_timing("prefill_ms_median", pre),
                    prefill_flops=None if pre is None else 1_000_000_000,
                    achieved_tflops=None if pre is None else 0.1,
                    peak_tflops=989.0,
                    pct_of_peak_flops=None if pre is None else 0.01,
                    **_timing("gen_ms_median", gen),
                    gen_tokens_per_s=30_000 / gen.median_ms,
                    noisy=False,
                    status="ok",
                    model=None,
                    projection_path="torch",
                )
            )
    return rows


def document(command: str, records: list[dict], env: dict | None = None) -> dict:
    return {
        "schema_version": 1,
        "command": command,
        "attnbench_version": "0.1.0",
        "created": "2026-01-01T00:00:00+00:00",
        "environment": env or dict(ENV),
        "config": {},
        "records": records,
    }


def write(tmp_path, name: str, doc) -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def cli(*args: str):
    """The CLI on a wide terminal: every column of a table, every line unwrapped."""
    return runner.invoke(app, list(args), env={"COLUMNS": "250"})


def compare(tmp_path, base: dict, cur: dict, *flags: str):
    return cli(
        "compare", write(tmp_path, "base.json", base), write(tmp_path, "cur.json", cur), *flags
    )


def verdicts(tmp_path, base: dict, cur: dict, metric: str, **kw) -> list[Verdict]:
    result = compare_documents(
        load_document(write(tmp_path, "b.json", base)),
        load_document(write(tmp_path, "c.json", cur)),
        **kw,
    )
    return [f.verdict for f in result.findings if f.metric == metric]


# --- rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "record, field, kind",
    [
        (ParamsRecord, "variant", Kind.KEY),
        (ParamsRecord, "bias", Kind.KEY),
        (ParamsRecord, "total_params", Kind.EXACT),
        (ParamsRecord, "ratio_vs_mha", Kind.INFO),
        (KvmemRecord, "model", Kind.KEY),
        (KvmemRecord, "kv_dtype", Kind.KEY),
        (KvmemRecord, "sliding_window", Kind.KEY),
        (KvmemRecord, "page_size", Kind.KEY),
        (KvmemRecord, "tp", Kind.KEY),
        (KvmemRecord, "kv_scale_group", Kind.KEY),
        (KvmemRecord, "kv_bytes_per_layer", Kind.EXACT),
        (KvmemRecord, "bytes_per_token", Kind.EXACT),
        (KvmemRecord, "paged_bytes", Kind.EXACT),
        (KvmemRecord, "kv_bytes_all_gpus", Kind.EXACT),
        (KvmemRecord, "kv_heads_per_gpu", Kind.EXACT),
        (KvmemRecord, "windowed_layers", Kind.EXACT),
        (KvmemRecord, "measured_bytes", Kind.MEMORY),
        (KvmemRecord, "measured_paged_bytes", Kind.MEMORY),
        (KvmemRecord, "ratio_vs_mha", Kind.INFO),
        (KvmemRecord, "status", Kind.INFO),
        (KvmemRecord, "paged_waste_pct", Kind.INFO),
        (DecodeRecord, "flops_per_step", Kind.EXACT),
        (DecodeRecord, "bytes_per_step", Kind.EXACT),
        (DecodeRecord, "step_ms_median", Kind.TIMING),
        (DecodeRecord, "prefill_ms_median", Kind.TIMING),
        (DecodeRecord, "gen_ms_median", Kind.TIMING),
        (DecodeRecord, "step_ms_p25", Kind.TIMING),
        (DecodeRecord, "samples_ms", Kind.TIMING),
        (DecodeRecord, "prefill_samples_ms", Kind.TIMING),
        (DecodeRecord, "gen_samples_ms", Kind.TIMING),
        (DecodeRecord, "provider", Kind.KEY),
        (DecodeRecord, "tokens_per_s", Kind.INFO),
        (DecodeRecord, "achieved_tflops", Kind.INFO),
        (DecodeRecord, "peak_gbps", Kind.INFO),
        (DecodeRecord, "status", Kind.INFO),
        (DecodeRecord, "x_of_reference_median", Kind.RATIO),
        (DecodeRecord, "x_of_reference_samples", Kind.RATIO),
        (DecodeRecord, "instructions_per_step", Kind.COUNT),
        (FitRecord, "model", Kind.KEY),
        (FitRecord, "windowed_layers", Kind.EXACT),
        (FitRecord, "batch", Kind.EXACT),
        (FitRecord, "context_unbounded", Kind.INFO),
    ],
)
def test_records_declare_the_kind_of_each_field(record, field, kind):
    assert field_kinds(record)[field] is kind


def test_every_gated_timing_carries_its_own_statistics():
    """p25, p75 and the raw samples are statistics of the step, the prefill, the
    generation and the all-reduce time, each judged with its own and never on their own."""
    assert gated_timing(DecodeRecord) == {
        "step_ms_median": {"p25": "step_ms_p25", "p75": "step_ms_p75", "samples": "samples_ms"},
        "prefill_ms_median": {
            "p25": "prefill_ms_p25",
            "p75": "prefill_ms_p75",
            "samples": "prefill_samples_ms",
        },
        "gen_ms_median": {"p25": "gen_ms_p25", "p75": "gen_ms_p75", "samples": "gen_samples_ms"},
        "allreduce_ms_median": {
            "p25": "allreduce_ms_p25",
            "p75": "allreduce_ms_p75",
            "samples": "allreduce_samples_ms",
        },
        **{
            f"x_of_{c}_median": {
                "p25": f"x_of_{c}_p25",
                "p75": f"x_of_{c}_p75",
                "samples": f"x_of_{c}_samples",
            }
            for c in ("reference", "narrowest", "no_cache", "baseline", "contiguous")
        },
    }
    rec = decode_records()[0]
    for metric, prefix, samples in (
        ("step_ms_median", "step_ms", "samples_ms"),
        ("prefill_ms_median", "prefill_ms", "prefill_samples_ms"),
        ("gen_ms_median", "gen_ms", "gen_samples_ms"),
    ):
        measured = Measurement.of_record(rec, metric, gated_timing(DecodeRecord)[metric])
        assert measured == stated(
            rec[metric], rec[f"{prefix}_p25"], rec[f"{prefix}_p75"], rec[samples]
        )
        assert flattened(DecodeRecord, metric, measured) == {
            f: rec[f] for f in (metric, f"{prefix}_p25", f"{prefix}_p75", samples)
        }
    assert Measurement.of_record(rec, "gen_ms_median", {}) == stated(rec["gen_ms_median"])


def test_a_statistic_declares_its_role():
    """`role=` names a statistic's role whatever the field is called, and a statistic
    must declare one: no role is read from a field's name."""

    @dataclasses.dataclass
    class Timed:
        t: float | None = records.timing()
        low: float | None = records.timing(of="t", role="p25")
        high: float | None = records.timing(of="t", role="p75")
        draws: list[float] = records.timing([], of="t", csv=False, role="samples")
        r: float | None = records.ratio()
        r_p75: float | None = records.ratio(of="r", role="p75")

    assert gated_timing(Timed) == {
        "t": {"p25": "low", "p75": "high", "samples": "draws"},
        "r": {"p75": "r_p75"},
    }
    measured = Measurement.of_samples([1.0, 2.0, 3.0, 4.0, 5.0])
    assert flattened(Timed, "t", measured) == {
        "t": 3.0,
        "low": 2.0,
        "high": 4.0,
        "draws": [1.0, 2.0, 3.0, 4.0, 5.0],
    }
    assert flattened(Timed, "r", measured) == {"r": 3.0, "r_p75": 4.0}
    with pytest.raises(ValueError, match="role is one of p25, p75, samples, not 'p90'"):
        records.timing(of="t", role="p90")
    for undeclared in (lambda: records.timing(of="t"), lambda: records.ratio(of="t_p25")):
        with pytest.raises(ValueError, match="role is one of p25, p75, samples, not None"):
            undeclared()


TIMINGS = {"step_ms_median", "prefill_ms_median", "gen_ms_median"}


def test_statistics_of_a_timing_get_no_verdict_of_their_own(tmp_path):
    base = document("decode-speed", decode_records())
    slow = document("decode-speed", slowed(decode_records(), 1.5))
    result = compare_documents(
        load_document(write(tmp_path, "b.json", base)),
        load_document(write(tmp_path, "c.json", slow)),
    )
    assert {f.metric for f in result.findings if f.kind is Kind.TIMING} == TIMINGS
    assert {f.metric for f in result.findings} == TIMINGS | {
        "bytes_per_step",
        "flops_per_step",
        "prefill_flops",
    }


@pytest.mark.parametrize("name, record_type", sorted(RECORD_TYPES.items()))
def test_every_field_of_every_record_declares_a_kind(name, record_type):
    """Nothing guesses a kind from a field's name: a field without a declared kind would
    be neither matched nor gated."""
    fields = dataclasses.fields(record_type)
    assert fields, name
    undeclared = [f.name for f in fields if not isinstance(f.metadata.get("kind"), Kind)]
    assert undeclared == [], (name, undeclared)
    assert list(field_kinds(record_type)) == [f.name for f in fields]
    assert any(k is Kind.KEY for k in field_kinds(record_type).values()), name


def test_timing_needs_evidence_and_the_absolute_floor():
    th = Thresholds()
    tiny = judge_timing(stated(0.002, 0.002, 0.002), stated(0.004, 0.004, 0.004), th)
    assert tiny.verdict is Verdict.UNCHANGED  # 2x, but only 2 us
    bare = judge_timing(stated(1.0), stated(1.5), th)
    assert bare.verdict is Verdict.INCONCLUSIVE and "no samples" in bare.reason
    overlap = judge_timing(stated(1.0, 0.99, 1.01), stated(1.5, 0.9, 1.55), th)
    assert overlap.verdict is Verdict.INCONCLUSIVE
    apart = judge_timing(stated(1.0, 0.99, 1.01), stated(1.5, 1.48, 1.52), th)
    assert apart.verdict is Verdict.REGRESSED and apart.evidence == "p25..p75"


def test_noise_shifts_are_never_regressions():
    rng = np.random.default_rng(7)
    for _ in range(50):
        base, cur = draw_timing(rng, Noise()), draw_timing(rng, Noise(), slowdown=1.05)
        assert judge_timing(base, cur, Thresholds()).verdict in (
            Verdict.UNCHANGED,
            Verdict.INCONCLUSIVE,
        )


def test_the_bootstrap_is_drawn_only_for_an_effect_the_threshold_leaves_open(monkeypatch):
    """Unchanged under the floor or within the threshold needs no evidence, and draws no
    bootstrap; an effect beyond the threshold draws it."""
    from attnbench.gate import compare

    drawn = []
    real = compare.bootstrap_ratio_interval
    monkeypatch.setattr(compare, "bootstrap_ratio_interval", lambda *a: drawn.append(a) or real(*a))
    rng, noise = np.random.default_rng(3), Noise(median_ms=1.0)
    base = draw_timing(rng, noise)
    same = judge_timing(base, draw_timing(rng, noise), Thresholds())
    assert same.verdict is Verdict.UNCHANGED and "within the 1.10x threshold" in same.reason
    assert (same.interval, same.evidence, drawn) == (None, None, [])
    slower = judge_timing(base, draw_timing(rng, noise, slowdown=1.5), Thresholds())
    assert slower.verdict is Verdict.REGRESSED and slower.evidence == "bootstrap"
    assert len(drawn) == 1


def test_the_bootstrap_is_seeded():
    rng = np.random.default_rng(3)
    base, cur = draw_timing(rng, Noise()), draw_timing(rng, Noise(), slowdown=1.2)
    assert judge_timing(base, cur, Thresholds()) == judge_timing(base, cur, Thresholds())


def test_measured_memory_has_a_floor_and_a_relative_threshold(tmp_path):
    def with_measured(delta: int) -> dict:
        recs = kvmem_records()
        recs[0]["measured_bytes"] += delta
        return document("kvmem", recs)

    base = document("kvmem", kvmem_records())
    assert verdicts(tmp_path, base, with_measured(2 << 20), "measured_bytes")[0] is (
        Verdict.UNCHANGED
    )  # +2 MiB of 2 GiB is under 1%
    assert verdicts(tmp_path, base, with_measured(64 << 20), "measured_bytes")[0] is (
        Verdict.REGRESSED
    )
    assert verdicts(tmp_path, base, with_measured(-(64 << 20)), "measured_bytes")[0] is (
        Verdict.IMPROVED
    )
    assert compare(tmp_path, base, with_measured(-(64 << 20))).exit_code == 0
    assert (
        compare(tmp_path, base, with_measured(-(64 << 20)), "--fail-on-improvement").exit_code == 1
    )


def test_a_failed_point_is_missing_not_skipped(tmp_path):
    cur = kvmem_records()
    cur[2].update(measured_bytes=None, status="skipped: needs 2 GiB, 1 GiB free")
    base = kvmem_records()
    base[1]["measured_bytes"] = cur[1]["measured_bytes"] = None  # null on both sides: skipped
    result = compare_documents(
        load_document(write(tmp_path, "b.json", document("kvmem", base))),
        load_document(write(tmp_path, "c.json", document("kvmem", cur))),
    )
    measured = [f for f in result.findings if f.metric == "measured_bytes"]
    assert [f.verdict for f in measured] == [Verdict.UNCHANGED, Verdict.MISSING]
    assert "status: skipped" in measured[1].reason
    assert result.exit_code() == 0


# --- statuses ------------------------------------------------------------------------------


def with_status(records: list[dict], i: int, status: str) -> list[dict]:
    """Row `i` as a point that ran no timing: `status`, every timing empty."""
    out = copy.deepcopy(records)
    for prefix, samples in (
        ("step_ms", "samples_ms"),
        ("prefill_ms", "prefill_samples_ms"),
        ("gen_ms", "gen_samples_ms"),
    ):
        out[i].update(
            {f"{prefix}_median": None, f"{prefix}_p25": None, f"{prefix}_p75": None, samples: []}
        )
    out[i]["status"] = status
    return out


def status_findings(tmp_path, base: list[dict], cur: list[dict], env: dict | None = None, **kw):
    result = compare_documents(
        load_document(write(tmp_path, "b.json", document("decode-speed", base))),
        load_document(write(tmp_path, "c.json", document("decode-speed", cur, env))),
        **kw,
    )
    return result, [f for f in result.findings if f.metric == "status"]


WRONG = "wrong: max abs error 0.5 above 0.001"
UNSUPPORTED = "unsupported: no kernel for this shape"


def test_a_point_whose_output_turns_wrong_fails_in_any_environment(tmp_path):
    """A wrong output is a regression like a changed exact metric: whatever the machine.
    Its timings are gone, and show as missing beside it."""
    cur = with_status(decode_records(), 0, WRONG)
    result, (status,) = status_findings(tmp_path, decode_records(), cur)
    assert status.verdict is Verdict.REGRESSED and status.gating
    assert "'ok' -> 'wrong: max abs error" in status.reason and "wrong now" in status.reason
    assert result.exit_code() == 1
    row0 = [f for f in result.findings if f.config == status.config and f.kind is Kind.TIMING]
    assert {f.verdict for f in row0} == {Verdict.MISSING}
    other = {**ENV, "torch_version": "2.6.0"}
    result, (status,) = status_findings(tmp_path, decode_records(), cur, other)
    assert status.verdict is Verdict.REGRESSED and result.exit_code() == 1
    result, (status,) = status_findings(tmp_path, cur, decode_records())  # fixed
    assert status.verdict is Verdict.IMPROVED and result.exit_code() == 0
    unsupported = with_status(decode_records(), 0, UNSUPPORTED)
    _, (status,) = status_findings(tmp_path, unsupported, cur)
    assert status.verdict is Verdict.REGRESSED


def test_a_point_that_no_longer_runs_fails_where_environments_match(tmp_path):
    cur = with_status(decode_records(), 1, UNSUPPORTED)
    result, (status,) = status_findings(tmp_path, decode_records(), cur)
    assert status.verdict is Verdict.REGRESSED and "no longer runs" in status.reason
    assert result.exit_code() == 1
    other = {**ENV, "torch_version": "2.6.0"}  # what a kernel takes depends on the torch
    result, (status,) = status_findings(tmp_path, decode_records(), cur, other)
    assert status.verdict is Verdict.INCOMPARABLE and result.exit_code() == 3
    result, (status,) = status_findings(
        tmp_path, decode_records(), cur, other, allow_env_mismatch=True
    )
    assert status.verdict is Verdict.REGRESSED and not status.gating
    assert status.reason.endswith("; not gated") and result.exit_code() == 0
    result, (status,) = status_findings(tmp_path, cur, decode_records())
    assert status.verdict is Verdict.IMPROVED and result.exit_code() == 0


def test_a_status_unchanged_in_kind_gets_no_verdict(tmp_path):
    """Wrong in both, or unsupported in both (for whatever reason): nothing to gate; the
    exact metrics are still compared. A file with such rows passes against itself."""
    recs = with_status(with_status(decode_records(), 0, WRONG), 1, UNSUPPORTED)
    cur = with_status(with_status(decode_records(), 0, "wrong: nan"), 1, "unsupported: other")
    result, statuses = status_findings(tmp_path, recs, cur)
    assert statuses == [] and result.exit_code() == 0
    assert {f.verdict for f in result.findings if f.kind is Kind.EXACT} == {Verdict.UNCHANGED}
    path = write(tmp_path, "a.json", document("decode-speed", recs))
    assert cli("compare", path, path).exit_code == 0
    markdown = compare(
        tmp_path,
        document("decode-speed", decode_records()),
        document("decode-speed", recs),
        "--format",
        "markdown",
    )
    assert markdown.exit_code == 1 and "| regressed | decode | MHA mode=cache | status |" in (
        markdown.stdout
    )


# --- exit codes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command, records",
    [("params", params_records()), ("kvmem", kvmem_records()), ("decode-speed", decode_records())],
)
def test_a_file_against_itself_passes(tmp_path, command, records):
    path = write(tmp_path, "a.json", document(command, records))
    result = cli("compare", path, path)
    assert result.exit_code == 0, result.output
    assert "PASS (exit 0)" in result.stdout


def test_one_more_parameter_fails(tmp_path):
    cur = params_records()
    cur[1]["total_params"] += 1
    result = compare(tmp_path, document("params", params_records()), document("params", cur))
    assert result.exit_code == 1
    assert "FAIL (exit 1): 1 regressed" in result.stdout


def test_fewer_bytes_is_a_regression_too(tmp_path):
    cur = kvmem_records()
    cur[0]["kv_bytes"] -= 2
    assert (
        compare(tmp_path, document("kvmem", kvmem_records()), document("kvmem", cur)).exit_code == 1
    )


def slowed(records: list[dict], factor: float) -> list[dict]:
    """Every timing of every row `factor` x slower, sample by sample."""
    out = copy.deepcopy(records)
    for rec in out:
        for prefix, samples in (
            ("step_ms", "samples_ms"),
            ("prefill_ms", "prefill_samples_ms"),
            ("gen_ms", "gen_samples_ms"),
        ):
            for key in (f"{prefix}_median", f"{prefix}_p25", f"{prefix}_p75"):
                if rec[key] is not None:
                    rec[key] *= factor
            rec[samples] = [s * factor for s in rec[samples]]
    return out


def test_a_uniform_slowdown_fails_and_swapped_files_improve(tmp_path):
    base = document("decode-speed", decode_records())
    slow = document("decode-speed", slowed(decode_records(), 1.5))
    assert verdicts(tmp_path, base, slow, "step_ms_median") == [Verdict.REGRESSED] * 6
    assert verdicts(tmp_path, base, slow, "gen_ms_median") == [Verdict.REGRESSED] * 6
    assert verdicts(tmp_path, base, slow, "prefill_ms_median") == [Verdict.REGRESSED] * 3
    assert compare(tmp_path, base, slow).exit_code == 1
    assert verdicts(tmp_path, slow, base, "step_ms_median") == [Verdict.IMPROVED] * 6
    assert compare(tmp_path, slow, base).exit_code == 0
    assert compare(tmp_path, slow, base, "--fail-on-improvement").exit_code == 1


def test_a_timing_without_samples_or_percentiles_is_at_most_inconclusive(tmp_path):
    bare = decode_records()
    for rec in bare:
        rec.update(prefill_ms_p25=None, prefill_ms_p75=None, prefill_samples_ms=[])
    slow = slowed(bare, 1.5)
    base, cur = document("decode-speed", bare), document("decode-speed", slow)
    assert verdicts(tmp_path, base, cur, "prefill_ms_median") == [Verdict.INCONCLUSIVE] * 3


def test_a_rerun_with_a_small_shift_passes(tmp_path):
    base = document("decode-speed", decode_records(seed=1))
    cur = document("decode-speed", decode_records(seed=2, slowdown=1.05))
    assert Verdict.REGRESSED not in verdicts(tmp_path, base, cur, "step_ms_median")
    assert compare(tmp_path, base, cur).exit_code == 0


def test_timings_from_another_environment_are_incomparable(tmp_path):
    base = document("decode-speed", decode_records())
    other = {**ENV, "torch_version": "2.6.0"}
    same = document("decode-speed", decode_records(), other)
    slow = document("decode-speed", slowed(decode_records(), 1.5), other)
    result = compare(tmp_path, base, same)
    assert result.exit_code == 3
    assert "environments differ" in result.stderr and "Traceback" not in result.output
    assert compare(tmp_path, base, same, "--allow-env-mismatch").exit_code == 0
    assert compare(tmp_path, base, slow, "--allow-env-mismatch").exit_code == 0  # shown, ungated
    exact = document("decode-speed", decode_records(), other)
    exact["records"][0]["bytes_per_step"] += 1  # exact metrics gate in every environment
    assert compare(tmp_path, base, exact).exit_code == 1
    assert compare(tmp_path, base, exact, "--allow-env-mismatch").exit_code == 1


def test_cpu_runs_also_need_the_same_cpu_model():
    cpu = {**ENV, "device": "cpu", "device_name": "AMD EPYC 7763"}
    gating = {
        d.field: d.gating
        for d in environment_differences(
            cpu, {**cpu, "cpu_model": "Intel Xeon", "git_commit": "b" * 40}
        )
    }
    assert gating == {"cpu_model": True, "git_commit": False}
    gpu = {d.field: d.gating for d in environment_differences(ENV, {**ENV, "cpu_model": "x"})}
    assert gpu == {"cpu_model": False}


def test_a_peak_that_moved_is_the_machines_load_not_another_machine(tmp_path):
    """Two runs on one machine whose copy probes moved 1.25x (30 -> 24 GB/s) are still
    one machine: their timings gate, against a threshold widened to the move, which the
    report states. A 1.2x change is then noise (exit 0, not 3), a 1.5x one regresses."""
    base = document("decode-speed", decode_records(), {**ENV, "peak_gbps": 30.0})
    moved = {**ENV, "peak_gbps": 24.0}
    drifted = document("decode-speed", slowed(decode_records(), 1.2), moved)
    diffs = environment_differences(base["environment"], drifted["environment"])
    assert [(d.field, d.gating, round(d.drift, 3)) for d in diffs] == [("peak_gbps", False, 0.25)]
    result = compare(tmp_path, base, drifted)
    assert result.exit_code == 0 and "Environments differ" not in result.stdout
    assert (
        "Measured peaks moved (peak_gbps 30 -> 24; 1.25x): the machine's load, not another "
        "machine; timings are held to a 1.25x threshold, not 1.10x." in result.stdout
    )
    assert set(verdicts(tmp_path, base, drifted, "step_ms_median")) == {Verdict.UNCHANGED}
    slower = document("decode-speed", slowed(decode_records(), 1.5), moved)
    assert compare(tmp_path, base, slower).exit_code == 1
    close = document("decode-speed", slowed(decode_records(), 1.2), {**ENV, "peak_gbps": 28.6})
    assert compare(tmp_path, base, close).exit_code == 1  # a 4.9% move: the 1.10x threshold


def with_ratios(records: list[dict], factor: float = 1.0, reference: str = "kernels") -> list[dict]:
    """The rows with an in-run ratio (seeded samples around 1.5) `factor` x larger, and
    an instruction count `factor` x larger."""
    out = copy.deepcopy(records)
    rng = np.random.default_rng(7)
    for rec in out:
        t = draw_timing(rng, Noise(median_ms=1.5, samples=30), factor)
        rec.update(_timing("x_of_reference_median", t))
        rec.update(
            reference=reference,
            instructions_per_step=round(2_000_000 * factor),
            instructions_counter="valgrind-3.19.0",
        )
    return out


def test_in_run_ratios_and_counts_gate_where_the_machine_state_moved(tmp_path):
    """Peaks 1.25x apart widen the timings' threshold (the machine's load) but not the
    ratios', each of whose samples shared the machine's state with its reference, nor the
    counts'."""
    base = document("decode-speed", with_ratios(decode_records()), {**ENV, "peak_gbps": 30.0})
    moved = {**ENV, "peak_gbps": 24.0}
    same = document("decode-speed", with_ratios(slowed(decode_records(), 1.2)), moved)
    assert set(verdicts(tmp_path, base, same, "step_ms_median")) == {Verdict.UNCHANGED}
    assert set(verdicts(tmp_path, base, same, "x_of_reference_median")) == {Verdict.UNCHANGED}
    assert set(verdicts(tmp_path, base, same, "instructions_per_step")) == {Verdict.UNCHANGED}
    assert compare(tmp_path, base, same).exit_code == 0
    worse = document("decode-speed", with_ratios(decode_records(), 1.3), moved)
    assert set(verdicts(tmp_path, base, worse, "x_of_reference_median")) == {Verdict.REGRESSED}
    assert set(verdicts(tmp_path, base, worse, "instructions_per_step")) == {Verdict.REGRESSED}
    result = compare(tmp_path, base, worse)
    assert result.exit_code == 1 and "1.300x" in result.stdout


def test_in_run_ratios_need_the_same_device_versions_and_reference(tmp_path):
    base = document("decode-speed", with_ratios(decode_records()))
    other = document("decode-speed", with_ratios(decode_records()), {**ENV, "torch_version": "9"})
    assert set(verdicts(tmp_path, base, other, "x_of_reference_median")) == {Verdict.INCOMPARABLE}
    assert set(verdicts(tmp_path, base, other, "instructions_per_step")) == {Verdict.INCOMPARABLE}
    vs_math = document("decode-speed", with_ratios(decode_records(), 1.3, "sdpa-math"))
    result = compare_documents(
        load_document(write(tmp_path, "b.json", base)),
        load_document(write(tmp_path, "c.json", vs_math)),
    )
    ratios = [f for f in result.findings if f.metric == "x_of_reference_median"]
    assert {f.verdict for f in ratios} == {Verdict.INCOMPARABLE}
    assert "references differ (reference)" in ratios[0].reason


def with_comparison(records: list[dict], factor: float = 1.0, narrowest: str = "MQA") -> list:
    """The rows with a comparison to the narrowest-KV variant (seeded per-round samples
    around 3), `factor` x larger."""
    out = copy.deepcopy(records)
    rng = np.random.default_rng(11)
    for rec in out:
        t = draw_timing(rng, Noise(median_ms=3.0, samples=30), factor)
        rec.update(_timing("x_of_narrowest_median", t))
        rec["narrowest_variant"] = narrowest
    return out


def test_a_comparison_gates_as_a_ratio_against_the_variant_it_names(tmp_path):
    """A comparison of points sampled in turn gates like an in-run ratio: across a moved
    peak, and a 1.3x change regresses; taken against another variant, it is not compared."""
    base = document("decode-speed", with_comparison(decode_records()), {**ENV, "peak_gbps": 30.0})
    moved = {**ENV, "peak_gbps": 24.0}
    same = document("decode-speed", with_comparison(decode_records()), moved)
    assert set(verdicts(tmp_path, base, same, "x_of_narrowest_median")) == {Verdict.UNCHANGED}
    worse = document("decode-speed", with_comparison(decode_records(), 1.3), moved)
    assert set(verdicts(tmp_path, base, worse, "x_of_narrowest_median")) == {Verdict.REGRESSED}
    other = document("decode-speed", with_comparison(decode_records(), 1.3, "GQA-2"))
    result = compare_documents(
        load_document(write(tmp_path, "b.json", base)),
        load_document(write(tmp_path, "c.json", other)),
    )
    found = [f for f in result.findings if f.metric == "x_of_narrowest_median"]
    assert {f.verdict for f in found} == {Verdict.INCOMPARABLE}
    assert "references differ (narrowest_variant)" in found[0].reason


def test_a_ratio_to_another_reference_neither_gates_nor_blames_the_environment(tmp_path):
    """A sweep that added a narrower variant: its comparisons are shown as incomparable,
    and the gate passes on the rest (exit 3 says the environments differ: they do not)."""
    base = document("decode-speed", with_comparison(decode_records()))
    other = document("decode-speed", with_comparison(decode_records(), 1.3, "GQA-2"))
    result = compare_documents(
        load_document(write(tmp_path, "b.json", base)),
        load_document(write(tmp_path, "c.json", other)),
    )
    found = [f for f in result.findings if f.metric == "x_of_narrowest_median"]
    assert found and not any(f.gating for f in found)
    assert result.exit_code() == 0
    moved = document(
        "decode-speed", with_comparison(decode_records()), {**ENV, "torch_version": "9"}
    )
    result = compare_documents(
        load_document(write(tmp_path, "b.json", base)),
        load_document(write(tmp_path, "m.json", moved)),
    )
    assert result.exit_code() == 3


@pytest.mark.parametrize(
    ("factor", "verdict"),
    [(1.0095, Verdict.UNCHANGED), (1.0105, Verdict.REGRESSED), (0.989, Verdict.IMPROVED)],
)
def test_an_instruction_count_moves_by_more_than_its_threshold(tmp_path, factor, verdict):
    base = document("decode-speed", with_ratios(decode_records()))
    cur = document("decode-speed", with_ratios(decode_records()))
    for rec in cur["records"]:
        rec["instructions_per_step"] = round(rec["instructions_per_step"] * factor)
    assert set(verdicts(tmp_path, base, cur, "instructions_per_step")) == {verdict}


def test_counts_by_another_valgrind_are_not_compared(tmp_path):
    base = document("decode-speed", with_ratios(decode_records()))
    cur = document("decode-speed", with_ratios(decode_records(), 1.3))
    for rec in cur["records"]:
        rec["instructions_counter"] = "valgrind-3.22.0"
    result = compare_documents(
        load_document(write(tmp_path, "b.json", base)),
        load_document(write(tmp_path, "c.json", cur)),
    )
    counts = [f for f in result.findings if f.metric == "instructions_per_step"]
    assert {f.verdict for f in counts} == {Verdict.INCOMPARABLE}
    assert "counters differ (instructions_counter)" in counts[0].reason


def test_the_count_threshold_is_a_flag(tmp_path):
    """+0.6% is within the default 1% and regresses at --count-threshold 0.5%."""
    base = document("decode-speed", with_ratios(decode_records()))
    cur = document("decode-speed", with_ratios(decode_records()))
    for rec in cur["records"]:
        rec["instructions_per_step"] = round(rec["instructions_per_step"] * 1.006)
    assert compare(tmp_path, base, cur).exit_code == 0
    strict = compare(tmp_path, base, cur, "--count-threshold", "0.5%", "--format", "json")
    assert strict.exit_code == 1
    assert "+12,000 (+0.60%) is above +0.5%" in strict.stdout
    bad = compare(tmp_path, base, cur, "--count-threshold", "half")
    assert bad.exit_code == 2 and "--count-threshold" in bad.output


def test_a_matmul_peak_that_moved_widens_the_timing_threshold():
    """peak_tflops is {dtype: TFLOPS}: the largest move of a dtype both runs measured is
    the drift (either way alike); one only a run measured is none. It never stops timings
    from gating: the machine is the same."""
    base = {**ENV, "peak_tflops": {"float16": 700.0, "float32": 50.0}}

    def moved(peaks: dict) -> Mismatch:
        return Mismatch.of(environment_differences(base, {**base, "peak_tflops": peaks}))

    for peaks, drift in [
        ({"float16": 500.0, "float32": 50.0}, 0.4),
        ({"float16": 980.0, "float32": 50.0}, 0.4),
        ({"float16": 700.0, "bfloat16": 1.0}, 0.0),
    ]:
        mismatch = moved(peaks)
        assert mismatch.fields == [] and mismatch.drift == pytest.approx(drift)
    rule = moved({"float16": 500.0, "float32": 50.0}).rule
    assert rule(Kind.TIMING, Thresholds()).time == pytest.approx(0.4)
    assert rule(Kind.RATIO, Thresholds()).time == 0.10


def probed(gbps: Sequence[float], tflops: Sequence[float] = (700.0, 700.0), **env) -> dict:
    """ENV with the probes a run takes before and after its timed points (study.runner):
    the copy peak's `gbps` and the float16 matmul peak's `tflops`, the first of each also
    the peak the run names."""
    return {
        **ENV,
        "peak_gbps": gbps[0],
        "peak_gbps_probes": list(gbps),
        "peak_tflops": {"float16": tflops[0]},
        "peak_tflops_probes": {"float16": list(tflops)},
        **env,
    }


def timing_verdicts(tmp_path, base: dict, cur: dict, **kw) -> set[Verdict]:
    return {v for metric in TIMINGS for v in verdicts(tmp_path, base, cur, metric, **kw)}


def test_a_timing_of_runs_that_both_moved_says_both_once_in_its_reason(tmp_path):
    """Both runs' probes moved during them: each timing's reason names the largest move,
    counts the others, and says that both runs' timings hold for neither moment."""
    base = document("decode-speed", decode_records(seed=1), probed([14.5, 9.0]))
    cur = document("decode-speed", decode_records(seed=2), probed([14.02, 6.9], [700.0, 400.0]))
    report = json.loads(compare(tmp_path, base, cur, "--format", "json").stdout)
    steps = [r for r in report["rows"] if r["metric"] in TIMINGS]
    assert steps and {r["verdict"] for r in steps} == {"inconclusive"}
    reason = steps[0]["reason"]
    assert "not resolved: the current run's copy peak moved 2.03x" in reason
    assert "(and 2 more moves): both runs' timings hold for neither moment" in reason


def test_a_run_whose_probes_moved_during_it_calls_no_timing_unchanged(tmp_path):
    """The audit's case: peaks 1.03x apart between the runs, the current run's copy probes
    2.03x apart during it (its own summary: its timings hold for neither moment). Its
    timings, the same code's, are inconclusive, not unchanged, and the line says why;
    exact metrics, in-run ratios and counts gate as ever; a slowdown beyond the move
    still regresses (the threshold widens to it, as to a move between the runs)."""
    base = document("decode-speed", with_ratios(decode_records(seed=1)), probed([14.5, 14.3]))
    moved = probed([14.02, 6.9])
    same = document("decode-speed", with_ratios(decode_records(seed=2)), moved)
    assert timing_verdicts(tmp_path, base, same) == {Verdict.INCONCLUSIVE}
    for metric in ("bytes_per_step", "flops_per_step", "x_of_reference_median"):
        assert set(verdicts(tmp_path, base, same, metric)) == {Verdict.UNCHANGED}, metric
    assert set(verdicts(tmp_path, base, same, "instructions_per_step")) == {Verdict.UNCHANGED}
    result = compare(tmp_path, base, same)
    assert result.exit_code == 0, result.output
    line = " ".join(result.stdout.split())  # the table's reasons fold; the line does not
    assert (
        "Measured peaks moved (peak_gbps 14.5 -> 14.02; 1.03x between the runs; the current "
        "run's copy peak moved 2.03x during the run (14.02, then 6.9 GB/s)): the machine's "
        "load, not another machine; timings are held to a 2.03x threshold, not 1.10x, and "
        "none is unchanged: the current run's timings hold for neither moment." in line
    ), line
    assert "unchanged; geometric-mean" in line  # the exact metrics, ratios and counts
    report = json.loads(compare(tmp_path, base, same, "--format", "json").stdout)
    steps = [r for r in report["rows"] if r["metric"] in TIMINGS]
    assert steps and {r["verdict"] for r in steps} == {"inconclusive"}
    assert all(
        "not resolved: the current run's copy peak moved 2.03x" in r["reason"] for r in steps
    )
    (during,) = report["summary"]["peak_drift_during_runs"]
    assert (during["run"], during["field"], during["probes"]) == (
        "current",
        "peak_gbps_probes",
        [14.02, 6.9],
    )
    assert during["drift"] == pytest.approx(14.02 / 6.9 - 1)
    wrong = copy.deepcopy(same)
    wrong["records"][0]["bytes_per_step"] += 1  # an exact metric gates whatever moved
    assert compare(tmp_path, base, wrong).exit_code == 1
    slower = document("decode-speed", slowed(decode_records(seed=2), 1.5), moved)
    assert timing_verdicts(tmp_path, base, slower) == {Verdict.INCONCLUSIVE}
    assert compare(tmp_path, base, slower).exit_code == 0  # within the 2.03x move
    far = document("decode-speed", slowed(decode_records(seed=2), 3.0), moved)
    assert Verdict.REGRESSED in timing_verdicts(tmp_path, base, far)
    assert compare(tmp_path, base, far).exit_code == 1


def test_either_runs_move_during_it_counts_the_matmul_peaks_too(tmp_path):
    """A baseline whose matmul probes moved 1.5x during it: the same verdicts, named for
    the baseline run and its float16 peak; both runs moving are both named. A threshold
    wider than the move leaves the timings unchanged."""
    base = document("decode-speed", decode_records(seed=1), probed([30.0, 29.5], [700, 466.67]))
    cur = document("decode-speed", decode_records(seed=2), probed([30.0, 29.0]))
    assert timing_verdicts(tmp_path, base, cur) == {Verdict.INCONCLUSIVE}
    line = " ".join(compare(tmp_path, base, cur).stdout.split())
    assert (
        "Measured peaks moved (the baseline run's float16 matmul peak moved 1.50x during the "
        "run (700, then 466.7 TFLOPS)): the machine's load, not another machine; timings are "
        "held to a 1.50x threshold, not 1.10x, and none is unchanged: the baseline run's "
        "timings hold for neither moment." in line
    ), line
    both = document("decode-speed", decode_records(seed=2), probed([30.0, 15.0]))
    line = " ".join(compare(tmp_path, base, both).stdout.split())
    assert "the current run's copy peak moved 2.00x during the run (30, then 15 GB/s); " in line
    assert "the baseline run's float16 matmul peak moved 1.50x" in line
    assert "both runs' timings hold for neither moment" in line
    wide = Thresholds(time=0.6)
    assert timing_verdicts(tmp_path, base, cur, thresholds=wide) == {Verdict.UNCHANGED}
    assert compare(tmp_path, base, cur, "--time-threshold", "60%").stdout.count("moved") == 0


def test_a_run_whose_probes_held_compares_as_one_that_probed_once(tmp_path):
    """Probes 1.05x apart during a run, within the 1.10x threshold: the verdicts and the
    report are those of the same runs without their probes (files older than them)."""
    base, cur = probed([30.0, 29.5]), probed([28.0, 26.7])
    reports = []
    for strip in (False, True):
        envs = [
            {k: v for k, v in env.items() if not (strip and k.endswith("_probes"))}
            for env in (base, cur)
        ]
        b = document("decode-speed", decode_records(seed=1), envs[0])
        c = document("decode-speed", decode_records(seed=2), envs[1])
        assert timing_verdicts(tmp_path, b, c) == {Verdict.UNCHANGED}
        result = compare(tmp_path, b, c)
        assert result.exit_code == 0 and "during the run" not in result.stdout
        report = json.loads(compare(tmp_path, b, c, "--format", "json").stdout)
        assert report["summary"]["peak_drift_during_runs"] == []
        reports.append((result.stdout, report["rows"], report["summary"]))
    assert reports[0] == reports[1]
    assert "Measured peaks moved (peak_gbps 30 -> 28; 1.07x)" in reports[0][0]


def test_a_file_without_probes_beside_one_that_moved_is_judged_by_the_one_that_did(tmp_path):
    """An older baseline (no probes) against a current run whose probes moved: the
    current run's move counts, the baseline has none to count; two older files compare
    as before."""
    old = {k: v for k, v in probed([30.0]).items() if not k.endswith("_probes")}
    base = document("decode-speed", decode_records(seed=1), old)
    cur = document("decode-speed", decode_records(seed=2), probed([30.0, 20.0]))
    assert timing_verdicts(tmp_path, base, cur) == {Verdict.INCONCLUSIVE}
    assert "the current run's copy peak moved 1.50x" in " ".join(
        compare(tmp_path, base, cur).stdout.split()
    )
    again = document("decode-speed", decode_records(seed=2), old)
    assert timing_verdicts(tmp_path, base, again) == {Verdict.UNCHANGED}


def test_a_move_beyond_the_threshold_never_reads_as_the_threshold():
    """A copy peak that moved 1.1009x is beyond a 1.10x threshold: said as 1.101x."""
    from attnbench.gate.compare import run_drifts
    from attnbench.model.units import ratio_text

    moved = run_drifts(probed([13.43, 12.2]), "current")[0]  # the largest first
    assert "moved 1.101x during the run" in moved.text(1.10)
    assert "moved 1.10x during the run" in moved.text()
    assert ratio_text(1.25, 1.10) == "1.25x" and ratio_text(1.1, 1.1) == "1.10x"
    assert ratio_text(1.10001, 1.1) == "1.1000x"  # four decimals at most


def test_a_runs_move_is_measured_by_the_projects_one_rule():
    """run_drifts reads the probes as measure.timing.drift does (the run's own summary and
    its calibration): the largest over the smallest; a peak probed once, or with no
    readable probe, has no move. A baseline that is the current run's own environment
    (compare --history) moved once, as the current run."""
    from attnbench.gate.compare import run_drifts
    from attnbench.measure.timing import drift

    env = probed([14.02, 13.0, 6.9], [700.0, 690.0])
    found = run_drifts(env, "current")
    assert [(d.field, d.dtype) for d in found] == [
        ("peak_gbps_probes", None),
        ("peak_tflops_probes", "float16"),
    ]
    assert found[0].drift == pytest.approx(drift([14.02, 13.0, 6.9]) - 1)
    assert found[1].drift == pytest.approx(drift([700.0, 690.0]) - 1)
    for probes in ([14.0], [], None, "14, 7", [14.0, None], [0.0, 14.0]):
        assert run_drifts({**ENV, "peak_gbps_probes": probes}, "current") == []
    assert run_drifts(None, "current") == []
    mismatch = Mismatch.between(env, env)
    assert {d.run for d in mismatch.during} == {"current"} and len(mismatch.during) == 2
    assert {d.run for d in Mismatch.between(env, dict(env)).during} == {"baseline", "current"}
    rule = mismatch.rule
    assert rule(Kind.TIMING, Thresholds()).time == pytest.approx(14.02 / 6.9 - 1)
    assert rule(Kind.RATIO, Thresholds()).time == 0.10


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        ("{not json", "not valid JSON"),
        (json.dumps({**document("params", []), "schema_version": 2}), "schema_version 2"),
        (json.dumps(document("kvmem", kvmem_records())), "different commands"),
        (
            json.dumps(document("params", [{**params_records()[0], "total_params": "many"}])),
            "total_params: expected a number",
        ),
        ("a,b\n1,2\n", "not an attnbench CSV"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, content, message):
    base = write(tmp_path, "base.json", document("params", params_records()))
    suffix = ".csv" if content and content.startswith("a,b") else ".json"
    cur = str(tmp_path / f"cur{suffix}")
    if content is not None:
        write(tmp_path, f"cur{suffix}", content)
    result = cli("compare", base, cur)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_files_without_a_common_row_are_mismatched(tmp_path):
    cur = [{**r, "d_model": 2048} for r in params_records()]
    result = compare(tmp_path, document("params", params_records()), document("params", cur))
    assert result.exit_code == 2 and "no row in common" in result.stderr


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--time-threshold", "ten"], "--time-threshold"),
        (["--mem-threshold", "-1%"], "--mem"),
        (["--format", "xml"], "--format"),
        (["--time-threshold", "١٠%"], "--time-threshold"),
        (["--count-threshold", "1_0"], "--count-threshold"),
        (["--time-threshold", "1e400%"], "--time-threshold 1e400%: must be a finite percentage"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(tmp_path, flags, message):
    doc = document("params", params_records())
    result = compare(tmp_path, doc, doc, *flags)
    assert result.exit_code == 2 and message in result.stderr


def test_a_bare_threshold_is_a_percentage(tmp_path):
    base = document("decode-speed", decode_records())
    slow = document("decode-speed", slowed(decode_records(), 1.5))
    assert compare(tmp_path, base, slow, "--time-threshold", "60").exit_code == 0
    assert compare(tmp_path, base, slow, "--time-threshold", "20%").exit_code == 1


# --- layouts -------------------------------------------------------------------------------


def test_csv_inputs_gate_on_percentiles(tmp_path):
    base, slow = tmp_path / "base.csv", tmp_path / "slow.csv"
    write_csv(base, decode_records(), DecodeRecord)  # as the commands write it: no samples
    write_csv(slow, slowed(decode_records(), 1.5), DecodeRecord)
    assert "samples_ms" not in base.read_text().splitlines()[0].split(",")
    same = cli("compare", str(base), str(base))
    assert same.exit_code == 0 and "no environment recorded" in same.stdout
    result = compare_documents(load_document(base), load_document(slow))
    steps = [f for f in result.findings if f.metric == "step_ms_median"]
    assert {(f.verdict, f.evidence) for f in steps} == {(Verdict.REGRESSED, "p25..p75")}
    json_base = write(tmp_path, "base.json", document("decode-speed", decode_records()))
    assert cli("compare", json_base, str(slow)).exit_code == 1


def test_a_run_document_is_compared_section_by_section(tmp_path):
    run = document("run", [])
    del run["records"]
    run["sections"] = {
        "params": {"config": {}, "records": params_records()},
        "decode": {"config": {}, "records": decode_records()},
    }
    single = document("decode-speed", slowed(decode_records(), 1.5))
    result = compare(tmp_path, run, single, "--format", "json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1
    assert {row["section"] for row in report["rows"]} == {"decode"}
    assert any("section params is only in" in note for note in report["notes"])
    assert compare(tmp_path, run, run).exit_code == 0


def test_a_config_field_added_later_is_left_out_of_the_match(tmp_path):
    cur = [{**r, "kv_dtype": "float16"} for r in kvmem_records()]
    result = compare(
        tmp_path, document("kvmem", kvmem_records()), document("kvmem", cur), "--format", "json"
    )
    report = json.loads(result.stdout)
    assert result.exit_code == 0 and report["summary"]["counts"] == {"unchanged": 12}
    assert report["notes"] == [
        "kvmem: config field kv_dtype is only in one file; rows are matched without it"
    ]


def test_rows_only_one_file_has_are_new_or_missing(tmp_path):
    cur = params_records()[:2] + [{**params_records()[2], "bias": True}]
    result = compare(
        tmp_path, document("params", params_records()), document("params", cur), "--format", "json"
    )
    rows = json.loads(result.stdout)["rows"]
    assert result.exit_code == 0
    assert sorted(r["verdict"] for r in rows if r["metric"] is None) == ["missing", "new"]


# --- formats -------------------------------------------------------------------------------


def test_markdown_summary_and_details(tmp_path):
    cur = params_records()
    cur[1]["total_params"] += 1
    result = compare(
        tmp_path,
        document("params", params_records()),
        document("params", cur),
        "--format",
        "markdown",
        "--only-changed",
    )
    lines = result.stdout.splitlines()
    assert result.exit_code == 1
    assert lines[0] == (
        "**attnbench compare: FAIL (exit 1): 1 regressed, 17 unchanged; no timings compared**"
    )
    assert "| Verdict | Section | Row | Metric |" in result.stdout
    assert [line for line in lines if line.startswith("| regressed")] == [
        "| regressed | params | GQA-8 | total_params | 41,943,040 | 41,943,041 "
        "| +1 | - | exact metric changed by +1 |"
    ]
    assert "| unchanged" not in result.stdout


def test_nothing_changed_leaves_the_summary_and_the_count(tmp_path):
    doc = document("kvmem", kvmem_records())
    result = compare(tmp_path, doc, doc, "--format", "markdown")
    assert result.stdout == (
        "**attnbench compare: PASS (exit 0): 12 unchanged; no timings compared**\n\n"
        "12 unchanged findings not shown: `--all` shows them.\n"
    )


def screen80(tmp_path, base: dict, cur: dict, *flags: str, width: int = 80):
    """compare on an 80-column terminal (or `width` columns)."""
    args = ["compare", write(tmp_path, "base.json", base), write(tmp_path, "cur.json", cur)]
    return runner.invoke(app, [*args, *flags], env={"COLUMNS": str(width)})


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("│")]


def test_the_table_lists_what_changed_and_counts_the_unchanged(tmp_path):
    """By default only the findings that changed or did not pass are rows; the unchanged
    ones are a count, and --all lists them."""
    cur = params_records()
    cur[1]["total_params"] += 1
    base, head = document("params", params_records()), document("params", cur)
    result = screen80(tmp_path, base, head)
    assert result.exit_code == 1
    assert "unchanged" not in "".join(table_rows(result.stdout))
    assert "regressed" in table_rows(result.stdout)[0]
    lines = result.stdout.splitlines()
    assert "17 unchanged findings not shown: --all shows them." in lines
    every = screen80(tmp_path, base, head, "--all")
    assert every.exit_code == 1 and "not shown" not in every.stdout
    verdicts = [row.split("│")[1].strip() for row in table_rows(every.stdout)]
    assert verdicts.count("unchanged") == 17 and verdicts.count("regressed") == 1
    json_rows = json.loads(
        cli(
            "compare",
            *[write(tmp_path, n, d) for n, d in (("b.json", base), ("c.json", head))],
            "--format",
            "json",
        ).stdout
    )["rows"]
    assert len(json_rows) == 18  # json lists every finding


def test_the_reason_is_never_hidden_at_80_columns(tmp_path):
    base = document("decode-speed", decode_records())
    slow = document("decode-speed", slowed(decode_records(), 1.5))
    result = screen80(tmp_path, base, slow)
    assert result.exit_code == 1
    header = next(line for line in result.stdout.splitlines() if line.startswith("┃"))
    assert "Reason" in header and "Verdict" in header
    assert "Reason" not in result.stdout.split("┘")[-1]  # not among the hidden columns
    flat = " ".join(result.stdout.split())
    assert "1.50x slower; 99% bounds" in flat.replace("│ ", "").replace(" │", "")
    for line in result.stdout.splitlines():
        assert len(line) <= 80 or line[:1] not in "┏┃┡│└", line
    narrow = screen80(tmp_path, base, slow, width=60).stdout
    assert "Reason" in next(line for line in narrow.splitlines() if line.startswith("┃"))
    assert "threshold" in narrow


def test_timing_reasons_read_ratios_in_words():
    """A ratio below 1 is faster, never 'slower': the effect, the bounds (the faster end
    first) and the threshold, in one form for every verdict."""
    th = Thresholds()
    rng = np.random.default_rng(3)
    base = tuple(1.0 + 0.01 * rng.standard_normal(40))

    def judged(factor: float, spread: float = 0.01):
        cur = tuple(factor * (1.0 + spread * rng.standard_normal(40)))
        return judge_timing(
            stated(median(base), samples=base),
            stated(median(cur), samples=cur),
            th,
        )

    faster = judged(1 / 1.02)
    assert faster.verdict is Verdict.UNCHANGED
    assert faster.reason == "1.02x faster, within the 1.10x threshold"
    regressed = judged(1.5)
    assert regressed.verdict is Verdict.REGRESSED
    assert regressed.reason.startswith("1.5") and " slower; 99% bounds 1." in regressed.reason
    assert regressed.reason.endswith("x slower, beyond the 1.10x threshold")
    improved = judged(1 / 1.5)
    assert improved.verdict is Verdict.IMPROVED
    assert improved.reason.endswith("x faster, beyond the 1.10x threshold")
    unsure = judged(1.2, spread=0.6)
    assert unsure.verdict is Verdict.INCONCLUSIVE
    assert " slower, not resolved: 99% bounds " in unsure.reason
    assert unsure.reason.endswith(" reach within the 1.10x threshold")
    for j in (faster, regressed, improved, unsure):
        assert "confidence bound" not in j.reason and "(not >" not in j.reason
        assert not re.search(r"\b0\.\d+x (slower|faster)", j.reason), j.reason
    assert times(1.25) == "1.25x slower" and times(0.8) == "1.25x faster"
    assert times(1.004) == "1.004x slower" and times(1.0) == "the same"
    assert span(1.12, 1.35) == "1.12x to 1.35x slower"
    assert span(0.8, 0.95) == "1.05x to 1.25x faster"
    assert span(0.95, 1.09) == "1.05x faster to 1.09x slower"


def test_markdown_reports_the_timing_geomean_and_environment(tmp_path):
    base = document("decode-speed", decode_records())
    slow = document("decode-speed", slowed(decode_records(), 1.5), {**ENV, "num_threads": 4})
    result = compare(tmp_path, base, slow, "--format", "markdown", "--allow-env-mismatch")
    summary = "PASS (exit 0): 15 regressed (15 not gated), 15 unchanged"
    assert result.stdout.startswith(f"**attnbench compare: {summary};")
    assert "geometric-mean timing ratio 1.500x over 15 timings" in result.stdout
    assert "Environments differ (num_threads 8 -> 4): timings do not gate." in result.stdout


def test_exact_counts_alone_say_nothing_of_the_machines(tmp_path):
    """Exact counts gate across machines: how the two differ would change no verdict, so
    the report (which the docs show, run on whichever machine builds them) leaves it out."""
    base = document("params", params_records())
    other = document("params", params_records(), {**ENV, "num_threads": 4})
    for fmt in ("table", "markdown"):
        result = compare(tmp_path, base, other, "--format", fmt)
        assert result.exit_code == 0, result.output
        assert "Environments differ" not in result.stdout
    timed = document("decode-speed", decode_records(), {**ENV, "num_threads": 4})
    result = compare(tmp_path, document("decode-speed", decode_records()), timed)
    assert "Environments differ (num_threads 8 -> 4)" in result.stdout


def test_json_report(tmp_path):
    base = document("decode-speed", decode_records())
    out = tmp_path / "report" / "gate.json"
    result = compare(
        tmp_path,
        base,
        document("decode-speed", slowed(decode_records(), 1.5)),
        "--format",
        "json",
        "--output",
        str(out),
    )
    assert result.exit_code == 1 and f"wrote {out}" in result.stdout
    report = json.loads(out.read_text())
    assert report["exit_code"] == 1 and report["environment_differences"] == []
    assert report["summary"]["counts"]["regressed"] == 15  # 6 steps, 6 generations, 3 prefills
    first = next(row for row in report["rows"] if row["metric"] == "step_ms_median")
    assert first["verdict"] == "regressed" and first["metric"] == "step_ms_median"
    assert first["current"] == pytest.approx(1.5 * first["baseline"])
    assert first["ratio"] == pytest.approx(1.5)
    lo, hi = first["interval"]
    assert 1.1 < lo < 1.5 < hi and first["evidence"] == "bootstrap"
    assert first["config"]["variant"] in ("MHA", "GQA-8", "MQA") and first["gating"] is True


@pytest.mark.parametrize("which", ["baseline", "current"])
def test_the_report_never_overwrites_a_compared_file(tmp_path, monkeypatch, which):
    base = write(tmp_path, "a.json", document("params", params_records()))
    cur = write(tmp_path, "b.json", document("params", params_records()))
    target = tmp_path / ("a.json" if which == "baseline" else "b.json")
    before = target.read_bytes()
    (tmp_path / "link.json").symlink_to(target)
    monkeypatch.chdir(tmp_path)
    for spelling in (str(target), target.name, f"./{target.name}", "link.json"):  # one file
        result = cli("compare", base, cur, "--output", spelling, "--format", "json")
        assert result.exit_code == 2, (spelling, result.output)
        assert "--output" in result.stderr and "an input of this command" in result.stderr
        assert "Traceback" not in result.output
        assert target.read_bytes() == before
    elsewhere = tmp_path / "report.json"
    assert cli("compare", base, cur, "--output", str(elsewhere)).exit_code == 0
    assert elsewhere.exists() and target.read_bytes() == before


# --- baselines -----------------------------------------------------------------------------


def test_baseline_save_writes_a_validated_copy(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = document("decode-speed", decode_records())
    src = write(tmp_path, "nightly.json", doc)
    result = cli("baseline", "save", src)
    saved = tmp_path / "results" / "baselines" / "nightly.json"
    assert result.exit_code == 0, result.output
    assert "wrote results/baselines/nightly.json: decode: 6 records, 6 with raw samples" in (
        result.stdout
    )
    assert json.loads(saved.read_text()) == doc
    again = cli("baseline", "save", src, "--to", str(saved))
    # the message may be wrapped at the console's width (see tests/cli/test_common.py)
    assert again.exit_code == 0 and "replaced the previous baseline" in " ".join(
        again.stdout.split()
    )
    assert cli("compare", str(saved), src).exit_code == 0


def test_a_study_s_baseline_is_named_after_its_sweep_file(tmp_path, monkeypatch):
    """Every study writes results.json: without --to, each is saved under its sweep
    file's name, where all of them were results/baselines/results.json, each replacing
    the last; a study run again replaces its own."""
    monkeypatch.chdir(tmp_path)

    def study(config: str, folder: str) -> str:
        run = document("run", [])
        del run["records"]
        run["config"] = {"source": config, "resolved_sha256": config}
        run["sections"] = {"params": {"config": {}, "records": params_records()}}
        (tmp_path / folder).mkdir()
        return write(tmp_path, f"{folder}/results.json", run)

    first = cli("baseline", "save", study("attnbench/configs/default.yaml", "a"))
    other = cli("baseline", "save", study("sweeps/gqa-70b.yml", "b"))
    again = cli("baseline", "save", study("sweeps/gqa-70b.yml", "c"))
    saved = tmp_path / "results" / "baselines"
    assert "wrote results/baselines/default.json: params" in first.stdout
    assert "wrote results/baselines/gqa-70b.json: params" in other.stdout
    assert "replaced the previous baseline" in " ".join(again.stdout.split())
    assert sorted(p.name for p in saved.iterdir()) == ["default.json", "gqa-70b.json"]
    assert json.loads((saved / "default.json").read_text())["config"]["source"].endswith(
        "default.yaml"
    )


def test_baseline_save_counts_the_sets_written_beside_the_records(tmp_path):
    """params --model writes its model's parts beside its records: saved, and counted,
    as a study's are, where the summary looked a section up for them and raised."""
    out = tmp_path / "pm.json"
    assert cli("params", "--model", "llama-3-8b", "--json", str(out), "-q").exit_code == 0
    result = cli("baseline", "save", str(out), "--to", str(tmp_path / "bl.json"))
    assert result.exit_code == 0, result.output
    assert "params: 1 record; model_parts: 8 records" in " ".join(result.stdout.split())


def test_a_failed_report_leaves_the_file_there_as_it_was(tmp_path, monkeypatch):
    """--output is written through a file beside it: a write that fails (a full disk)
    leaves the old report whole, and no temporary file."""
    base = write(tmp_path, "a.json", document("params", params_records()))
    cur = write(tmp_path, "b.json", document("params", params_records()))
    report = tmp_path / "out.md"
    report.write_text("OLD\n")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("attnbench.cli.compare_cmd.report_text", full)
    result = cli("compare", base, cur, "--format", "markdown", "--output", str(report))
    assert result.exit_code == 2 and "cannot write: No space left on device" in result.stderr
    assert report.read_text() == "OLD\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json", "out.md"]


def test_baseline_save_refuses_csv_and_bad_json(tmp_path):
    csv_path = tmp_path / "r.csv"
    write_csv(csv_path, params_records(), ParamsRecord)
    assert cli("baseline", "save", str(csv_path)).exit_code == 2
    assert cli("baseline", "save", write(tmp_path, "bad.json", "[]")).exit_code == 2


# --- simulation ----------------------------------------------------------------------------


@pytest.mark.integration
def test_simulated_false_regressions_and_detection():
    """500 A/A pairs with lognormal noise and one-sided outliers: at most 1% flagged; a
    planted 20% slowdown is caught in at least 95% of pairs."""
    result = simulate(pairs=500, slowdown=1.2, seed=0)
    assert result.false_rate <= 0.01
    assert result.detection_rate >= 0.95


def samples_document(tmp_path):
    """Two providers' decode rows with 60 seeded step samples each (3% jitter, 3% hiccups:
    the default Noise), and one row that is wrong."""
    rows = decode_records(seed=5, steps=60) + [
        {**r, "provider": "naive"} for r in decode_records(seed=6, slowdown=3.0, steps=60)
    ]
    rows = with_status(rows, 11, WRONG)
    return load_document(write(tmp_path, "samples.json", document("decode-speed", rows)))


@pytest.mark.integration
def test_real_samples_catch_a_planted_slowdown_and_stay_quiet(tmp_path):
    """Resampled from the rows' own samples, a 20% slowdown is caught in >= 95% of pairs and
    A/A pairs are flagged in <= 1%, per provider too; the wrong row is left out."""
    doc = samples_document(tmp_path)
    steps = real_series(doc, metrics=["step_ms_median"])
    assert len(steps) == 11 and {s.provider for s in steps} == {"attnbench", "naive"}
    results = simulate_document(doc, Resampling(pairs=25, slowdown=1.2, metrics=["step_ms_median"]))
    for (metric, *_), (resampled, halves) in [
        *totals(results).items(),
        *totals(results, by="provider").items(),
    ]:
        assert metric == "step_ms_median"
        assert resampled.false_rate <= 0.01 and resampled.detection_rate >= 0.95
        assert halves.pairs in (5, 6, 11)
    naive = simulate_document(
        doc, Resampling(pairs=25, provider="naive", metrics=["step_ms_median"])
    )
    assert [r.series.provider for r in naive] == ["naive"] * 5
    assert naive == [r for r in results if r.series.provider == "naive"]  # seeds per row


@pytest.mark.integration
def test_real_samples_do_not_detect_what_was_not_planted(tmp_path):
    """The detection rate is the gate's: with no slowdown planted nothing is caught, and a
    5% one (under the 10% threshold) is not either."""
    doc = samples_document(tmp_path)
    for slowdown in (1.0, 1.05):
        results = simulate_document(
            doc, Resampling(pairs=10, slowdown=slowdown, metrics=["step_ms_median"])
        )
        resampled, halves = totals(results)[("step_ms_median",)]
        assert resampled.detection_rate == 0.0 and halves.detections == 0


@pytest.mark.integration
def test_rows_are_judged_as_compare_judges_them(tmp_path):
    """A row regresses when any of its gated timings does: its A/A pairs stay quiet and a
    planted slowdown is caught, per provider too; nothing is caught when nothing was
    planted; the wrong row is left out."""
    doc = samples_document(tmp_path)
    rows = real_rows(doc)
    assert len(rows) == 11
    assert {tuple(r.samples) for r in rows} >= {
        ("step_ms_median", "prefill_ms_median", "gen_ms_median")
    }
    results = simulate_rows(doc, Resampling(pairs=12, slowdown=1.2))
    assert [r.row for r in results] == rows
    for provider in ("attnbench", "naive"):
        these = [r.resampled for r in results if r.row.provider == provider]
        assert sum(t.false_regressions for t in these) <= 0.01 * sum(t.pairs for t in these)
        assert sum(t.detections for t in these) >= 0.95 * sum(t.pairs for t in these)
    naive = simulate_rows(doc, Resampling(pairs=12, provider="naive"))
    assert naive == [r for r in results if r.row.provider == "naive"]  # seeds per row
    quiet = simulate_rows(doc, Resampling(pairs=5, slowdown=1.0))
    assert all(r.resampled.detections == 0 for r in quiet)


@pytest.mark.integration
def test_a_row_regresses_when_any_timing_does(tmp_path):
    """Steps too noisy to gate (half of them 1.6x) leave a slowdown inconclusive on the
    step alone; the row is still caught, by its prefill and generation."""
    rows = decode_records(seed=9, steps=60)
    for r in rows:
        noisy = [s * (1.6 if i % 2 else 1.0) for i, s in enumerate(r["samples_ms"])]
        r.update(_timing("step_ms_median", Measurement.of_samples(noisy)))
    doc = load_document(write(tmp_path, "noisy.json", document("decode-speed", rows)))
    steps, _ = totals(simulate_document(doc, Resampling(pairs=20, metrics=["step_ms_median"])))[
        ("step_ms_median",)
    ]
    assert steps.detection_rate < 0.5
    caught = sum((r.resampled for r in simulate_rows(doc, Resampling(pairs=20))), NO_PAIRS)
    assert caught.detection_rate >= 0.95 and caught.false_rate <= 0.01


def test_a_row_draws_its_step_and_in_run_ratio_from_the_same_rounds():
    """The i-th ratio sample is the i-th step's over its reference: a run of the row
    resamples rounds, so each drawn ratio sample still belongs to its drawn step sample."""
    steps = tuple(float(i) for i in range(1, 41))
    ratios = tuple(10.0 * x for x in steps)
    row = Row("hf", "r", {"step_ms_median": steps, "x_of_reference_median": ratios})
    drawn = draw_row(row, np.random.default_rng(3), 1.5)
    assert drawn["x_of_reference_median"].samples_ms == [
        10.0 * x for x in drawn["step_ms_median"].samples_ms
    ]
    assert drawn["step_ms_median"].samples_ms != [1.5 * x for x in steps]  # resampled


@pytest.mark.integration
def test_an_in_run_ratio_is_judged_without_the_time_floor(tmp_path):
    """A ratio has no unit: a 20% rise of a ratio of 0.004 is caught, where the same numbers
    as milliseconds would sit under the 5 us floor."""
    rows = decode_records(seed=7, steps=60)
    for r in rows:
        r["reference"] = "kernels"
        ratio = Measurement.of_samples([0.004 * s / r["step_ms_median"] for s in r["samples_ms"]])
        r.update(_timing("x_of_reference_median", ratio))
    doc = load_document(write(tmp_path, "ratios.json", document("decode-speed", rows)))
    ratio = simulate_document(doc, Resampling(pairs=20, metrics=["x_of_reference_median"]))
    resampled, _ = totals(ratio)[("x_of_reference_median",)]
    assert resampled.detection_rate >= 0.95 and resampled.false_rate <= 0.01


def test_only_inputs_are_key_fields():
    """Rows are matched on key fields, so a computed field declared as one would turn a
    changed number into a `missing` and a `new` row, which do not fail."""
    derived_from_inputs = {
        "model",
        "variant",
        "device",  # the model's name; the heads; the device the run used
        "question",  # fit: which of seq_len and batch was given
        "given",  # fit: the value of that one (seq_len or batch)
        "memory_bytes_per_gpu",  # fit: --memory in bytes
        "tpot_target_ms",  # fit: --tpot in ms
        "ttft_target_ms",  # fit: --ttft in ms
        "part",  # model_parts: the name of a part of the model
        "kind",  # layer_kinds: the name of a kind of layer of the model
        "weights",  # predict: weights_dtype and weights_group in words
        "kv",  # fit: kv_dtype, kv_scale_group and scale_dtype in words
        "vocab",  # fit, predict: vocab_layout where it is replicated
        "attention",  # predict: dp_attention where it is data-parallel
    }
    inputs = set(FIELDS) | derived_from_inputs
    for name, record in RECORD_TYPES.items():
        keys = {f for f, kind in field_kinds(record).items() if kind is Kind.KEY}
        assert keys <= inputs, (name, keys - inputs)


def test_raw_samples_let_a_noisy_but_clear_slowdown_gate_and_percentiles_alone_do_not():
    """Fixed-context samples are independent draws: with enough of them the bootstrap sees
    a 20% slowdown through a 30% IQR. Percentiles alone need 3 x IQR/median of effect."""
    rng = np.random.default_rng(7)
    base = rng.lognormal(0.0, 0.22, 400)  # IQR/median about 30%
    slower = 1.2 * rng.lognormal(0.0, 0.22, 400)

    def stats(x, with_samples: bool) -> Measurement:
        measured = Measurement.of_samples(x.tolist())
        if with_samples:
            return measured
        return stated(measured.median_ms, measured.p25_ms, measured.p75_ms)

    th = Thresholds()
    sampled = judge_timing(stats(base, True), stats(slower, True), th)
    assert sampled.verdict is Verdict.REGRESSED and sampled.evidence == "bootstrap"
    summarised = judge_timing(stats(base, False), stats(slower, False), th)
    assert summarised.verdict is Verdict.INCONCLUSIVE and "within the noise" in summarised.reason
    same = judge_timing(stats(base, True), stats(rng.lognormal(0.0, 0.22, 400), True), th)
    assert same.verdict in (Verdict.UNCHANGED, Verdict.INCONCLUSIVE)


def recorded_runs(shifts: list[float], peaks: list[float]) -> list:
    """Runs of the same code whose machine ran `shifts[i]` x slower in run i (the step and
    its kernels alike), with the copy peaks each measured: seeded noise per sample."""
    from attnbench.study.documents import parse_document

    rng = np.random.default_rng(3)
    docs = []
    for i, (shift, peak) in enumerate(zip(shifts, peaks, strict=True)):
        records = copy.deepcopy(decode_records(seed=i))
        for rec in records:
            state = shift * rng.lognormal(0, 0.03, 30)  # the machine, shared by both sides
            step, kernels = state * rec["step_ms_median"], state * rec["step_ms_median"] / 1.5
            ratios = step * rng.lognormal(0, 0.01, 30) / kernels
            rec.update(_timing("step_ms_median", Measurement.of_samples(step)))
            ratio = Measurement.of_samples(ratios)
            rec.update(
                _timing("x_of_reference_median", ratio),
                reference="kernels",
            )
        docs.append(
            parse_document(
                document("decode-speed", records, {**ENV, "peak_gbps": peak}), f"run {i}"
            )
        )
    return docs


@pytest.mark.integration
def test_recorded_runs_gate_ratios_across_machine_states_that_move_timings():
    """Runs up to 30% apart in machine state, all on one machine: every pair is gated.
    Where the peaks showed the state, the timings' threshold widens with it and cuts the
    false alarms that a threshold of 1.10x raises; where the peak did not show a 20%
    slower state they raise false alarms. The ratios, whose two sides shared each state,
    never alarm falsely and catch a 20% slowdown."""
    docs = recorded_runs([1.0, 1.3, 1.0, 1.3, 1.2], [30.0, 23.0, 30.0, 23.0, 29.0])
    timing = simulate_sampled(docs, "step_ms_median", trials=400)
    ratio = simulate_sampled(docs, "x_of_reference_median", trials=400)
    assert timing.not_gated == ratio.not_gated == 0
    shown = recorded_runs([1.0, 1.3, 1.0, 1.3], [30.0, 23.0, 30.0, 23.0])
    unshown = recorded_runs([1.0, 1.3, 1.0, 1.3], [30.0] * 4)
    assert simulate_sampled(shown, "step_ms_median", trials=400).false_rate <= 0.05
    assert simulate_sampled(unshown, "step_ms_median", trials=400).false_rate >= 0.3
    assert timing.false_alarms > 0
    assert ratio.false_rate <= 0.01 and ratio.caught_rate(1.2) >= 0.95


@pytest.mark.integration
def test_recorded_instruction_counts_flag_one_percent_more():
    runs = [{"a": 1_000_000 + d, "b": 2_000_000 - d} for d in (0, 900, -1500, 3000)]
    result = simulate_counts(runs, trials=300)
    assert result.false_alarms == 0
    assert result.caught_rate(1.1) == result.caught_rate(1.2) == 1.0


def test_a_noisy_point_ran_so_its_status_kind_is_ok():
    from attnbench.gate.compare import judge_status, status_word

    assert status_word({"status": "noisy: under 11 samples, too few to judge the spread"}) == "ok"
    assert judge_status({"status": "ok"}, {"status": "noisy"}) is None
    judged = judge_status({"status": "unsupported: no kernel"}, {"status": "noisy"})
    assert judged is not None and judged[0].verdict.name == "IMPROVED"


# --- extreme values --------------------------------------------------------------------------

NOT_FINITE = re.compile(r"\b(inf|infinity|nan)\b", re.IGNORECASE)


@pytest.mark.parametrize(
    "field, value, where",
    [
        ("step_ms_median", 1e308, "step_ms_median: 1e+308"),
        ("step_ms_median", 5e-324, "step_ms_median: 5e-324"),
        ("samples_ms", [0.05] * 29 + [2.2e-308], "samples_ms[29]: 2.2e-308"),
        ("gen_ms_p75", 1e10, "gen_ms_p75: 10000000000.0"),
        ("x_of_reference_samples", [1e-12], "x_of_reference_samples[0]: 1e-12"),
    ],
)
def test_a_timing_no_run_measures_is_refused_naming_file_record_and_field(
    tmp_path, field, value, where
):
    cur = decode_records()
    if field == "samples_ms":  # about its median, which lies among them
        value = [cur[2]["step_ms_median"]] * 29 + value[-1:]
    cur[2][field] = value
    if field == "step_ms_median":  # its quartiles and samples with it: the reader checks
        cur[2].update(step_ms_p25=value, step_ms_p75=value, samples_ms=[value])  # them first
    for base, head, name in (
        (decode_records(), cur, "cur.json"),
        (cur, decode_records(), "base.json"),
    ):
        result = compare(tmp_path, document("decode-speed", base), document("decode-speed", head))
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error: {tmp_path / name}: decode record 2: {where} is out of")


def test_the_widest_timings_measured_compare_to_finite_ratios(tmp_path):
    low, high = MEASURED_RANGE
    base, cur = decode_records(), decode_records()
    for rec, value in ((base[0], low), (cur[0], high), (base[1], high), (cur[1], low)):
        rec.update(
            step_ms_median=value, step_ms_p25=value, step_ms_p75=value, samples_ms=[value] * 30
        )
    docs = document("decode-speed", base), document("decode-speed", cur)
    for fmt in ("table", "markdown", "json"):
        result = compare(tmp_path, *docs, "--all", "--format", fmt)
        assert result.exit_code == 1, result.output
        assert not NOT_FINITE.search(result.output), result.output
    result = compare_documents(
        load_document(tmp_path / "base.json"), load_document(tmp_path / "cur.json")
    )
    ratios = {
        f.config["variant"] + f.config["mode"]: f.ratio
        for f in result.findings
        if f.metric == "step_ms_median"
    }
    assert ratios["MHAcache"] == pytest.approx(high / low)
    assert ratios["MHAno_cache"] == pytest.approx(low / high)


def test_samples_of_zero_leave_the_bootstrap_and_the_percentiles_of_zero_give_no_bounds():
    fine = stated(1.0, 0.99, 1.01, (1.0,) * 6)
    zeros = stated(1.5, 1.48, 1.52, (0.0, 0.0, 0.0, 1.5, 1.5, 1.5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a resampled median of 0 would divide by it
        slower, faster = (
            judge_timing(fine, zeros, Thresholds()),
            judge_timing(zeros, fine, Thresholds()),
        )
        assert (slower.evidence, slower.verdict) == ("p25..p75", Verdict.REGRESSED)
        assert (faster.evidence, faster.verdict) == ("p25..p75", Verdict.IMPROVED)
        # a ratio of 0 reads as no speed-up: p25 of 0 gives no bounds either
        no_bounds = stated(4.0, 0.0, 1.52, zeros.samples_ms)
        assert judge_timing(fine, no_bounds, Thresholds()).interval is None
        assert judge_timing(no_bounds, fine, Thresholds()).interval is None


def test_a_ratio_that_overflows_is_no_ratio(tmp_path):
    assert judge_exact(5e-324, 1e308).ratio is None
    assert judge_exact(0, 3).ratio is None and judge_exact(2, 3).ratio == 1.5
    count = judge_count(5e-324, 1e308, Thresholds())
    assert count.verdict is Verdict.REGRESSED and count.ratio is None
    assert not NOT_FINITE.search(count.reason)
    assert judge_memory(5e-324, 1e308, Thresholds()).ratio is None
    base, cur = kvmem_records(), kvmem_records()
    base[0]["measured_bytes"], cur[0]["measured_bytes"] = 5e-324, 1e308
    result = compare(tmp_path, document("kvmem", base), document("kvmem", cur), "--format", "json")
    assert result.exit_code == 1 and not NOT_FINITE.search(result.output), result.output


@pytest.mark.parametrize("extreme", [1e308, 5e-324, 1e-10, math.inf, math.nan])
def test_a_paired_time_no_run_measures_is_judged_without_a_ratio(extreme):
    times = [1.0] * 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        head = judge_paired(times, [*times[:-1], extreme])
        base = judge_paired([extreme, *times[1:]], times)
    assert head.verdict is Verdict.REGRESSED and "a head time is" in head.reason
    assert base.verdict is Verdict.INCONCLUSIVE and "a base time is" in base.reason
    assert head.ratio is None and base.ratio is None


def test_comparisons_of_extreme_samples_are_not_stated():
    from attnbench.render.comparisons import paired, sampling_findings, spread, variant_findings

    together = {"sampling": "interleaved", "step_ms_p25": 5e-324, "step_ms_p75": 1.0}
    assert paired({**together, "samples_ms": [1e308]}, {**together, "samples_ms": [5e-324]}) is None
    assert paired({**together, "samples_ms": [2.0]}, {**together, "samples_ms": [1.0]})
    assert spread(together) is None
    row = {
        "prompt_len": 64,
        "provider": "attnbench",
        "narrowest_variant": "MQA",
        "variant": "MHA",
        "x_of_narrowest_median": 1e-300,
        "x_of_narrowest_ci_lo": 0.0,
        "x_of_narrowest_ci_hi": 1e-300,
        "step_repeats": 30,
    }
    assert variant_findings([row]) == [] and sampling_findings([row], 0.02) == []


def test_a_record_over_memory_layouts_is_judged_with_their_spread():
    """Eight layouts 5% apart, rounds within each 0.2% apart: as 80 independent draws
    the samples would bound a 1.13x move above the threshold; drawn layouts first (the
    record says it spans 8), the bound holds what the next run's layouts may do."""
    rng = np.random.default_rng(0)

    def run(factor: float) -> list[float]:
        shifts = rng.normal(1.0, 0.05, 8)
        return [factor * s * v for s in shifts for v in rng.normal(1.0, 0.002, 10)]

    base, cur = run(1.0), run(1.15)
    pooled = judge_timing(Measurement(base), Measurement(cur), Thresholds())
    layouts = judge_timing(Measurement(base, layouts=8), Measurement(cur, layouts=8), Thresholds())
    assert (pooled.verdict, layouts.verdict) == (Verdict.REGRESSED, Verdict.INCONCLUSIVE)
    record = {"t_median": median(base), "t_samples": base, "layouts": 8}
    assert Measurement.of_record(record, "t_median", {"samples": "t_samples"}).layouts == 8
    drawn = simulation.resampled(np.asarray(base), np.random.default_rng(1), 1.2, 8)
    assert drawn.layouts == 8 and len(drawn.samples_ms) == 80
    assert set(np.round(np.asarray(drawn.samples_ms) / 1.2, 12)) <= set(np.round(base, 12))


def test_a_timing_sampled_while_another_process_held_the_cpu_convicts_nothing(tmp_path):
    """A 1.5x slowdown regresses; the same, where one side's process ran for under 80% of
    its sampling time (its status says noisy), is inconclusive and says why."""
    base = decode_records()
    slow = slowed(decode_records(), 1.5)

    def timed(share: float) -> list:
        held = [{**r, "cpu_share": share} for r in slow]
        result = compare_documents(
            load_document(write(tmp_path, "b.json", document("decode-speed", base))),
            load_document(write(tmp_path, "c.json", document("decode-speed", held))),
        )
        return [f for f in result.findings if f.kind is Kind.TIMING]

    assert {f.verdict for f in timed(0.95)} == {Verdict.REGRESSED}
    held = timed(0.5)
    assert {f.verdict for f in held} == {Verdict.INCONCLUSIVE}
    assert all(f.reason.endswith("another process held the CPU (50%)") for f in held)


def test_a_signed_field_that_changes_sign_is_listed_first_as_regressed(tmp_path):
    """Free memory a GPU had, and now lacks (a negative free_bytes_per_gpu: the model no
    longer fits), is the largest change of all, whichever way it went."""
    base = tmp_path / "base.json"
    args = ["fit", "--model", "llama-3-8b", "--memory", "80GiB", "--seq-len", "1024"]
    assert runner.invoke(app, [*args, "--json", str(base), "-q"]).exit_code == 0
    doc = json.loads(base.read_text())
    doc["records"][0].update(free_bytes_per_gpu=-1000, batch=0)
    for first, second in ((base, "cur.json"), ("cur.json", base)):
        (tmp_path / "cur.json").write_text(json.dumps(doc))
        result = runner.invoke(app, ["compare", str(tmp_path / first), str(tmp_path / second)])
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert "regressed" in result.output and "free_bytes_per_gpu" in result.output


def test_wide_shows_every_column_of_the_table_on_a_narrow_terminal(tmp_path):
    """At 80 columns the values go first, and the hint names --wide, which keeps them."""
    base = write(tmp_path, "a.json", document("decode-speed", decode_records()))
    cur = write(tmp_path, "b.json", document("decode-speed", slowed(decode_records(), 1.5)))
    narrow = runner.invoke(app, ["compare", base, cur], env={"COLUMNS": "80"})
    line = " ".join(narrow.stdout.split())
    assert "Baseline ┃" not in line and "Baseline, Interval): --wide, or --format" in line
    wide = runner.invoke(app, ["compare", base, cur, "--wide"], env={"COLUMNS": "80"})
    assert wide.exit_code == 1 and "Baseline ┃" in wide.stdout and "hidden" not in wide.stdout


def test_fail_on_missing_fails_a_current_run_that_lost_rows(tmp_path):
    """A current run cut short passes as `missing` by default (its rows were not worse);
    --fail-on-missing fails it, and the JSON report says the gate asked for that."""
    base = document("decode-speed", decode_records())
    cut = document("decode-speed", decode_records()[:-2])
    assert compare(tmp_path, base, cut).exit_code == 0
    strict = compare(tmp_path, base, cut, "--fail-on-missing", "--format", "json")
    assert strict.exit_code == 1
    report = json.loads(strict.stdout)
    assert report["fail_on_missing"] is True and report["summary"]["failures"] > 0
    assert compare(tmp_path, base, base, "--fail-on-missing").exit_code == 0
