"""Property-based fuzzing of the performance model's inputs: the results files `predict
--calibrate` fits and `--check` checks, calibration files, fit's latency targets, and the
serving flags of a decode section.

Whatever hypothesis draws: no traceback, exit 0 or 2 (fit: 1 when nothing fits), one
`error:` line per problem (test_flags.invoke); the input file is never changed; what a
command wrote is JSON with finite numbers only, and a calibration it wrote reads back;
a decode section that plans is one with points to run.
"""

from __future__ import annotations

import json
import math

from hypothesis import event, given
from hypothesis import strategies as st

from attnbench.model.calibration import load_calibration
from tests.cli.test_predict_modes import results
from tests.fuzz.test_flags import invoke, json_values, numbers, texts
from tests.model.test_calibration_inputs import ENVIRONMENT

#: The fields of a timed decode record a sample reads, and of its run's environment.
RECORD_FIELDS = [
    "batch",
    "d_model",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "prompt_len",
    "dtype",
    "mode",
    "tp",
    "step_ms_median",
    "bytes_per_step",
    "flops_per_step",
    "kv_bytes_per_gpu",
    "prefill_ms_median",
    "prefill_flops",
    "batch_spec",
    "block_size",
]
ENVIRONMENT_FIELDS = ["peak_gbps", "peak_tflops", "peak_gbps_probes", "peak_tflops_probes"]
#: Values that are valid alone, or nearly so: the edges a whole-file check must catch.
edges = st.one_of(
    st.sampled_from([0, 0.0, 1, 2, 3, 7, 2**63 - 1, 2**63, 1e-300, 1e300, "float32", None]),
    st.integers(-1, 10**6),
    st.floats(0, 1e4),
    numbers,
    json_values,
)
#: A calibration's number: mostly in range.
shares = st.one_of(st.floats(1e-9, 1.5), st.sampled_from([1e-300, 1.5, 1.5000001, 0, -0.0]), edges)
durations = st.one_of(
    st.sampled_from(["0ms", "0s", "1us", "1ms", "50ms", "1e308s", "9" * 40 + "s", "1", ""]),
    st.tuples(st.integers(0, 10**6), st.sampled_from(["us", "ms", "s", " ms"])).map(
        lambda pair: f"{pair[0]}{pair[1]}"
    ),
    texts,
)


def strict_json(path) -> object:
    """The file as JSON, refusing NaN and infinities (which json.loads takes)."""
    return json.loads(path.read_text(), parse_constant=_refuse)


def _refuse(name: str) -> object:
    raise AssertionError(f"{name} written to JSON")


def checked_outputs(result, *paths) -> None:
    """Every output the command says it wrote is finite JSON."""
    for path in paths:
        if path is not None and f"wrote {path}" in result.output:
            strict_json(path)


@given(
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from(RECORD_FIELDS), edges), max_size=2),
    st.lists(st.tuples(st.sampled_from(ENVIRONMENT_FIELDS), edges), max_size=1),
    st.sampled_from(["--check", "--calibrate"]),
    st.one_of(st.none(), durations),
)
def test_a_run_is_checked_or_calibrated_or_refused_in_one_line(
    tmp_path_factory, changes, environment, mode, min_time
):
    tmp = tmp_path_factory.mktemp("run")
    path = results(tmp)
    doc = json.loads(path.read_text())
    for index, field, value in changes:
        doc["records"][index][field] = value
    doc["environment"] = {**ENVIRONMENT, **dict(environment)}
    path.write_text(json.dumps(doc))
    before = path.read_bytes()
    to, out = tmp / "cal.json", tmp / "check.json"
    args = ["predict", mode, str(path), "--json", str(out), "-q"]
    args += ["--to", str(to)] if mode == "--calibrate" else []
    args += ["--min-time", min_time] if min_time is not None else []
    result = invoke(args, "predict")
    event(f"{mode} exit {result.exit_code}")
    assert path.read_bytes() == before
    if result.exit_code == 0:
        report = strict_json(out)
        assert report["rows"] and all(math.isfinite(r["rel_error"]) for r in report["rows"])
        if mode == "--calibrate":
            strict_json(to)
            load_calibration(to)
    else:
        assert not to.exists() and not out.exists(), result.output


calibration_docs = st.fixed_dictionaries(
    {
        "efficiency_bw": shares,
        "efficiency_flops": shares,
        "overhead_s": st.one_of(st.floats(0, 1e-3), shares),
    },
    optional={
        "efficiency_kv": shares,
        "source": st.one_of(texts, edges),
        "gpu": st.sampled_from(["this", "h100-sxm", "a100-80gb", "h999", 3]),
        "peak_gbps": edges,
        "peak_tflops": st.one_of(edges, st.dictionaries(st.just("float32"), edges, max_size=1)),
        "environment": edges,
    },
)


@given(calibration_docs, st.sampled_from(["predict", "check", "fit"]))
def test_any_calibration_file_is_used_or_refused_in_one_line(tmp_path_factory, doc, use):
    tmp = tmp_path_factory.mktemp("calibration")
    cal, out = tmp / "cal.json", tmp / "out.json"
    cal.write_text(json.dumps(doc))
    before = cal.read_bytes()
    if use == "check":
        args = ["predict", "--check", str(results(tmp)), "--calibration", str(cal)]
    elif use == "predict":
        args = ["predict", "--model", "llama-2-7b", "--seq-len", "64", "--gpu", "h100-sxm"]
        args += ["--calibration", str(cal)]
    else:
        args = ["fit", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--seq-len", "4096"]
        args += ["--tpot", "50ms", "--calibration", str(cal)]
    result = invoke([*args, "--json", str(out), "-q"], "fit" if use == "fit" else "predict")
    event(f"{use} exit {result.exit_code}")
    assert cal.read_bytes() == before
    if out.exists():
        strict_json(out)
    checked_outputs(result, out)


@given(
    st.one_of(st.none(), durations),
    st.one_of(st.none(), durations),
    st.sampled_from(["h100-sxm", "l4", "this", "mi300x"]),
    st.sampled_from([["--seq-len", "4096"], ["--seq-len", "16777216"], ["--batch", "8"]]),
)
def test_fit_targets_are_met_or_refused_in_one_line(tmp_path_factory, tpot, ttft, gpu, question):
    out = tmp_path_factory.mktemp("fit") / "fit.json"
    args = ["fit", "--model", "llama-3-8b", "--gpu", gpu, *question, "--json", str(out), "-q"]
    args += ["--tpot", tpot] if tpot is not None else []
    args += ["--ttft", ttft] if ttft is not None else []
    event(f"exit {invoke(args, 'fit').exit_code}")
    if out.exists():
        strict_json(out)


SERVING = {
    "batch_spec": st.one_of(
        st.sampled_from(["2q1s16", "8q1s16..96", "q24s64_4q1s8", "1000000q1s16", "q4s2", ""]),
        texts,
    ),
    "block_size": st.one_of(st.sampled_from(["contiguous", 16, 1, 0, [16, "contiguous"]]), numbers),
    "mode": st.sampled_from(["cache", "no_cache", ["cache", "no_cache"], "both"]),
    "prefill": st.sampled_from([True, False, "yes", 0]),
    "prefill_memory": st.sampled_from([True, False, None]),
    "prompt_len": st.one_of(st.sampled_from([1, 16, 2**20]), numbers),
    "gen_len": st.sampled_from([0, 4]),
    "no_cache_max_prompt_len": st.sampled_from([1, 8, 4096]),
}


@given(st.fixed_dictionaries({}, optional=SERVING))
def test_serving_values_plan_points_to_run_or_are_refused_in_one_line(tmp_path_factory, values):
    """A decode section of any serving values: a dry run lists at least one point, or the
    study is refused saying why; never a run of nothing."""
    study = tmp_path_factory.mktemp("serving") / "study.yaml"
    section = {"d_model": 64, "num_heads": 2, **{k: v for k, v in values.items() if v is not None}}
    study.write_text(json.dumps({"decode": section}))  # JSON is YAML
    result = invoke(["run", str(study), "--dry-run", "--device", "cpu"], "run", codes={0, 2})
    event(f"exit {result.exit_code}")
    if result.exit_code == 0:
        assert " 0 points" not in result.output and "nothing was run" in result.output
