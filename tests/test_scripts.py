"""The measuring and docs scripts under scripts/ run rarely (minutes each, on a quiet
machine), so nothing else would notice one that no longer imports after a library change:
each is imported here, its entry point and usage found, none of it run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def _load(name: str, monkeypatch):
    """The script scripts/<name>.py, imported as a module."""
    monkeypatch.syspath_prepend(str(SCRIPTS))  # the scripts import their shared helpers
    spec = importlib.util.spec_from_file_location(f"script_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", sorted(SCRIPTS.glob("*.py")), ids=lambda p: p.name)
def test_a_script_imports_and_says_how_to_run_it(path: Path, monkeypatch):
    module = _load(path.stem, monkeypatch)
    assert module.__doc__, f"{path.name} has no docstring"
    if path.name != "planting.py":  # a helper the others import
        assert callable(getattr(module, "main", None)), f"{path.name} has no main()"


def test_the_gate_simulation_reads_one_results_file_or_several(tmp_path, monkeypatch, capsys):
    """On two rows of a kept run: one file gives the row table, then each timing on its
    own; several give one line each, with the threads the run used."""
    kept = json.loads((SCRIPTS.parent / "results/bench/gate-samples-cpu.json").read_text())
    kept["records"] = [r for r in kept["records"] if r["status"] == "ok"][:2]
    path = tmp_path / "two.json"
    path.write_text(json.dumps(kept))
    script = _load("gate_simulation", monkeypatch)
    monkeypatch.setattr(sys, "argv", ["gate_simulation.py", "--results", str(path), "--pairs", "2"])
    script.main()
    out = capsys.readouterr().out
    assert "| **all** | 2 |" in out and "Each timing on its own:" in out
    argv = ["gate_simulation.py", "--results", str(path), str(path), "--pairs", "2"]
    monkeypatch.setattr(sys, "argv", argv)
    script.main()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| two")]
    assert len(lines) == 2 and all(line.startswith("| two.json | 2 | 2 |") for line in lines)


def test_the_architectures_table_counts_both_sides_alike(monkeypatch):
    """A sliding window on every layer, a multimodal config with hybrid windows, and MLA:
    attnbench's parameters and KV-cache bytes equal transformers' for each."""
    pytest.importorskip("transformers")
    script = _load("architectures", monkeypatch)
    names = ("mistral-7b-v0.1", "gemma-3-27b", "deepseek-v2-lite")
    rows = script.compare_all([script.CORPUS / f"{name}.json" for name in names])
    assert [r.params_transformers for r in rows] == [7_241_732_096, 27_009_346_304, 15_706_484_224]
    assert [r.kind for r in rows] == [
        "dense, sliding 4,096 (all layers)",
        "dense, hybrid sliding 1,024 (52 of 62 layers)",
        "MoE, MLA",
    ]
    assert all(r.params_match and r.cache_match and not r.mismatches() for r in rows)
    assert [r.path for r in rows] == ["formulas"] * 3
    assert all(r.state_attnbench == r.state_transformers == 0 for r in rows)
    # Mistral keeps its 4,096-token window whatever the context; MLA caches a latent of
    # 512 + 64 values per token and layer
    assert rows[0].kv_transformers == {4096: 2**29, 32768: 2**29}
    assert rows[2].kv_transformers[4096] == 27 * 4096 * 576 * 2
    lines = script.render(rows)
    assert sum(line.startswith("| [") for line in lines) == 3


def test_the_validation_page_is_what_the_model_predicts_now_and_says_why_it_misses(
    monkeypatch,
):
    """docs/validation.md's tables (the published set's and the later sources') and the
    docs' sentences that state their figures (CLAIMS) are regenerated from their files and
    the model: a change to either that leaves a page stale fails here. And the page
    promises a reason wherever a prediction misses by more than CLOSE: a row that a change
    of the model moves outside it must bring one (the rows predicted once for both)."""
    validation = _load("validation", monkeypatch)
    found = {path: validation.rows(path) for path in validation.BLOCKS}
    now = validation.pages(found)
    assert {path: path.read_text() for path in now} == now
    for rows in found.values():
        misses = [r.entry for r in rows if abs(r.error) > validation.CLOSE]
        assert misses  # the check is not empty
        assert [e["id"] for e in misses if not e.get("why")] == []
    ids = [r.entry["id"] for rows in found.values() for r in rows]
    assert len(ids) == len(set(ids))  # one figure, one id, across both files


def test_a_claim_s_figures_are_kept_to_now_wherever_its_sentence_wraps(monkeypatch):
    """A claim matches its sentence across any line breaks and rewrites only its figures;
    one that matches no sentence, or names no figure, is an error, never passed over."""
    validation = _load("validation", monkeypatch)
    named = {"set.median": "13.1%", "set.within": "1,853"}
    text = "Intro.\nThe median |error| is 9.9% (1,000\n  within 25%), the rest.\n"
    template = "median |error| is {set.median} ({set.within} within 25%)"
    assert validation.claimed(text, template, named) == (
        "Intro.\nThe median |error| is 13.1% (1,853\n  within 25%), the rest.\n"
    )
    with pytest.raises(ValueError, match="0 sentences match"):
        validation.claimed(text.replace("median", "mean"), template, named)
    with pytest.raises(ValueError, match="2 sentences match"):
        validation.claimed(text + text, template, named)
    with pytest.raises(ValueError, match="no figure 'set.share'"):
        validation.claimed(text, "is {set.share}", named)


def test_a_set_s_figures_count_its_rows_as_the_docs_state_them(monkeypatch):
    """figures() names each set's, subset's and source's figures: rows, median |error|,
    rows within CLOSE, their share, the fast ones and those outside CLOSE."""
    validation = _load("validation", monkeypatch)
    rows = [
        validation.Row({"source": src, "metric": "tpot_ms", "value": 10}, predicted)
        for src, predicted in (("a", 5.0), ("a", 9.0), ("b", 11.0), ("b", 14.0))
    ]
    stats = validation._stats(rows)  # errors -50%, -10%, +10%, +40%
    assert stats["rows"] == "4" and stats["sources"] == "2"
    assert stats["median"] == "25.0%" and stats["within"] == "2" and stats["share"] == "50%"
    assert stats["fast"] == "2" and stats["outside"] == "2" and stats["outside_slow"] == "1"
    assert stats["range"] == "-50% to +40%"
    by_source = validation._by_source(rows)
    assert list(by_source) == ["a", "b"] and validation._stats(by_source["b"])["fast"] == "0"


def test_a_group_scaled_after_the_fact_takes_the_factor_that_brings_most_rows_close(
    monkeypatch,
):
    """scaled() multiplies each group's predicted times (a rate's inverse) by the one
    factor that brings the most of its rows within CLOSE, the smallest median error among
    those: for times of 0.5, 0.6 and 2.0 the measured, two can be brought within 25%,
    the third not with them, and 1 / 0.6 does so with the smallest median; another
    group's row takes its own factor."""
    validation = _load("validation", monkeypatch)
    group = [
        validation.Row({"gpu": "a", "source": "s", "metric": "tpot_ms", "value": 10}, 5.0),
        validation.Row(
            {"gpu": "a", "source": "s", "metric": "decode_tokens_per_s", "value": 100}, 1 / 0.006
        ),
        validation.Row({"gpu": "a", "source": "s", "metric": "tpot_ms", "value": 10}, 20.0),
    ]
    other = [validation.Row({"gpu": "b", "source": "s", "metric": "tpot_ms", "value": 10}, 30.0)]
    assert validation._best_factor([1 + r.error for r in group]) == pytest.approx(1 / 0.6)
    errors = [r.error for r in validation.scaled(group + other, "gpu")]
    assert errors == pytest.approx([0.5 / 0.6 - 1, 0, 2 / 0.6 - 1, 0], abs=1e-6)
    assert validation._stats(validation.scaled(group + other, "gpu"))["within"] == "3"


def test_a_range_ratio_draws_each_request_s_lengths_and_the_row_takes_their_mean(monkeypatch):
    """InferenceX's benchmark draws a length uniformly from the integers in
    [int(ratio * length), length]: 819 to 1,024 at 0.8, predicted at their mean (floored)
    and shown as the range; without a ratio the stated length stands."""
    validation = _load("validation", monkeypatch)
    entry = {"id": "x", "prompt": 1024, "output": 8192}
    assert validation._length(entry, "prompt") == 1024
    assert validation._drawn(entry, "prompt") == "1024"
    ranged = entry | {"range_ratio": 0.8}
    assert validation._length(ranged, "prompt") == (819 + 1024) // 2 == 921
    assert validation._length(ranged, "output") == (6553 + 8192) // 2 == 7372
    assert validation._drawn(ranged, "output") == "6553-8192"
    assert validation._drawn(ranged | {"range_ratio": 1}, "output") == "8192"
    assert validation._drawn({"output": None}, "output") == "-"
    with pytest.raises(ValueError, match="range_ratio 1.2"):
        validation._length(entry | {"range_ratio": 1.2}, "prompt")


def test_a_validation_row_s_error_is_in_time_whatever_the_metric(monkeypatch):
    validation = _load("validation", monkeypatch)
    rate = validation.Row({"metric": "decode_tokens_per_s_per_sequence", "value": 100}, 125.0)
    time = validation.Row({"metric": "ttft_ms", "value": 10}, 8.0)
    # 125 tok/s predicted against 100 measured: the prediction's time is 0.8 of it
    assert rate.error == pytest.approx(-0.2) and time.error == pytest.approx(-0.2)


def test_a_batch_s_latency_and_decode_rate_are_its_generation_and_its_step(monkeypatch):
    """latency_ms is the batch's prefill and every further step; decode_tokens_per_s the
    batch's tokens per second of one step, its prefill left out."""
    validation = _load("validation", monkeypatch)
    entry = {"model": "llama-3-8b", "gpu": "h100-sxm", "weights": "bfloat16", "tp": 1}
    entry |= {"batch": 8, "prompt": 32, "output": 128, "id": "x"}
    found = validation.generation(
        validation.get_preset("llama-3-8b"),
        validation.device_spec("h100-sxm"),
        8,
        32,
        128,
        "bfloat16",
        None,
        1,
        validation.WeightFormat.of("bfloat16", None, "split", False),
    )
    latency = validation.predict_entry(entry | {"metric": "latency_ms"})
    rate = validation.predict_entry(entry | {"metric": "decode_tokens_per_s"})
    assert latency == pytest.approx((found.ttft_s + 127 * found.tpot_s) * 1e3)
    assert rate == pytest.approx(8 / found.tpot_s)
    assert validation.Row(entry | {"metric": "decode_tokens_per_s", "value": rate}, rate).error == 0


def test_aa_runs_checks_each_stated_interval_against_the_next_run(monkeypatch):
    """A step's interval is its median -+ step_ci_pct, a comparison's its ci_lo..ci_hi;
    each is held against the next run: does it hold its value, do the two overlap."""
    aa_runs = _load("aa_runs", monkeypatch)

    def run(x: tuple[float, float, float], step: float, pct: float) -> dict:
        row = {"step_ms_median": step, "step_ci_pct": pct}
        stems = ("x_of_narrowest_median", "x_of_narrowest_ci_lo", "x_of_narrowest_ci_hi")
        row.update(zip(stems, x, strict=True))
        return {"sections": {"decode": {"records": [row]}}}

    runs = [run((2.0, 1.9, 2.1), 1.0, 5.0), run((2.05, 2.0, 2.1), 1.04, 5.0)]
    runs.append(run((2.5, 2.4, 2.6), 1.2, 1.0))
    found = aa_runs.coverage(runs)
    assert found == {
        "step_ms": [(True, True), (False, False)],
        "x_of_narrowest": [(True, True), (False, False)],
    }


def test_a_timed_examples_header_names_the_hosts_cpus_and_load_not_torchs_threads(monkeypatch):
    """A timed example may run on fewer threads than torch's default (the default study's
    decode runs on one, as its report records): the header names the host, its CPUs and
    how busy it was, never a thread count the run may not have used."""
    script = _load("docs_examples", monkeypatch)
    env = ["device: cpu", "device_name: Some CPU", "num_threads: 7", "torch_version: 9.9"]
    monkeypatch.setattr(script, "run_command", lambda command, cwd: env)
    monkeypatch.setattr(script.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(script.os, "getloadavg", lambda: (3.14, 2.0, 1.0), raising=False)
    header = script.machine()
    assert header.startswith("Some CPU, 2 CPUs, load 3.1, torch 9.9, ")
    assert "thread" not in header


def test_aa_runs_weighs_the_spread_between_runs_against_the_layouts(monkeypatch):
    """Runs whose values move as their layouts do read about 1x; runs that agree within
    themselves but not with each other read far above it."""
    aa_runs = _load("aa_runs", monkeypatch)

    def run(shift: float, layouts: list[float]) -> dict:
        samples = [shift * m * (1 + 0.001 * i) for m in layouts for i in range(5)]
        row = {"samples_ms": samples, "layouts": len(layouts)}
        return {"sections": {"decode": {"records": [row]}}}

    spread = [0.9, 1.1, 0.95, 1.05]
    alike = [run(1.0, spread), run(1.0, spread[::-1]), run(1.0, spread[1:] + spread[:1])]
    apart = [run(shift, [1.0, 1.001, 0.999, 1.0]) for shift in (0.8, 1.0, 1.25)]
    assert aa_runs.spread_ratios(alike)[0] < 1
    assert aa_runs.spread_ratios(apart)[0] > 50


def test_host_drift_keeps_whole_windows_and_reports_their_spread(monkeypatch):
    host_drift = _load("host_drift", monkeypatch)
    # two steps sampled in turn for 12.5 s: the first doubles after 5 s, the second holds
    rounds = [[t / 2, 1.0 if t < 10 else 2.0, 0.5] for t in range(26)]
    assert host_drift.window_medians(rounds, lambda r: r[1], 5) == [1.0, 2.0]  # 10-12.5 s: cut
    assert len(host_drift.window_medians(rounds, lambda r: r[1], 1)) == 12
    doc = {
        "rounds": rounds,
        "points": ["MHA at 4,096", "MQA at 4,096"],
        "kv_heads": [8, 1],
        "blocks": [1, 3],
        "load": 0.5,
        "environment": {"cpu_model": "a CPU", "torch_version": "2"},
    }
    lines = host_drift.report(doc)
    assert "| MHA at 4,096: over the narrowest | 5 s | 2 | 2 to 4 | 2.000 |" in lines
    assert "| MQA at 4,096: step | 5 s | 2 | 0.5 to 0.5 | 1.000 |" in lines


@pytest.mark.parametrize(
    "name,flags",
    [
        ("aa_runs", ["--runs", "3"]),
        ("aa_runs", ["--busy"]),
        ("host_drift", ["--seconds", "5"]),
        ("host_drift", ["--out", "x.json"]),
    ],
)
def test_a_flag_that_measures_is_refused_beside_report(name, flags, monkeypatch, capsys):
    script = _load(name, monkeypatch)
    argv = [f"{name}.py", "--report", "results/bench/aa-runs-cpu.json", *flags]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_:
        script.main()
    assert exit_.value.code == 2
    assert f"{flags[0]} has no effect with --report" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "argv", "refused"),
    [
        ("aa_runs", ["--report", "x.json", "--busy"], "--busy"),
        ("aa_runs", ["--runs", "3", "--report", "x.json"], "--runs"),
        ("host_drift", ["--report", "x.json", "--seconds", "9"], "--seconds"),
    ],
)
def test_reporting_a_saved_file_refuses_the_flags_that_would_run(
    name, argv, refused, monkeypatch, capsys
):
    script = _load(name, monkeypatch)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *argv])
    with pytest.raises(SystemExit) as exit_:
        script.main()
    assert exit_.value.code == 2
    assert f"error: {refused} has no effect with --report" in capsys.readouterr().err


def test_the_gpu_page_is_what_the_last_gpu_run_measured(monkeypatch, capsys):
    """docs/gpu.md's tables are written from results/gpu/: a run committed without them,
    or tables edited by hand, fail here."""
    gpu_tables = _load("gpu_tables", monkeypatch)
    assert gpu_tables.main(["--check"]) == 0, capsys.readouterr().out


def _tiny_decoder(model_step, weights: str = "bfloat16"):
    """A two-layer, narrow Qwen2.5 (q/k/v biases, GQA-4) on the CPU."""
    from dataclasses import replace

    from attnbench.model.presets import get_preset

    spec = get_preset("qwen2.5-7b")
    small = replace(
        spec,
        num_layers=2,
        d_model=256,
        num_heads=8,
        num_kv_heads=2,
        head_dim=32,
        body=replace(spec.body, vocab_size=500, intermediate_size=512),
    )
    return model_step.Decoder(small, 1, 32, torch.device("cpu"), weights)


def test_the_model_step_s_cached_decode_is_its_full_pass(monkeypatch):
    """The decoder timed on the GPU computes what it claims: a prefill then one cached
    step gives the last token the logits of one pass over the whole prompt."""
    model_step = _load("model_step", monkeypatch)
    decoder = _tiny_decoder(model_step)
    tokens = torch.randint(0, 500, (1, 9))
    whole = decoder.forward(tokens, 0).float()
    decoder.forward(tokens[:, :8], 0)
    stepped = decoder.forward(tokens[:, 8:], 8).float()
    assert torch.allclose(stepped, whole, rtol=0.02, atol=0.02)
    assert not torch.allclose(decoder.forward(tokens[:, 7:8], 8).float(), whole, atol=0.02)


def test_the_model_step_s_float8_decoder_is_its_bfloat16_one_within_its_rounding(monkeypatch):
    """The float8 decoder (Float8Linear in every layer, q/k/v's bias included) gives the
    logits the same weights give in bfloat16, within float8's rounding; a prefill that
    does not start at position 0 is refused (it attends its own tokens only)."""
    model_step = _load("model_step", monkeypatch)
    torch.manual_seed(0)
    plain = _tiny_decoder(model_step)
    torch.manual_seed(0)
    quantised = _tiny_decoder(model_step, "float8_e4m3fn")
    tokens = torch.randint(0, 500, (1, 9))
    exact, found = plain.forward(tokens, 0).float(), quantised.forward(tokens, 0).float()
    assert 0 < ((found - exact).norm() / exact.norm()).item() < 0.15
    with pytest.raises(ValueError, match="a prefill starts at position 0"):
        plain.forward(tokens[:, :4], 2)


def test_the_model_step_s_float8_matmul_is_the_bfloat16_one_within_its_rounding(monkeypatch):
    model_step = _load("model_step", monkeypatch)
    weight = torch.randn(64, 128, dtype=torch.bfloat16) / 128**0.5
    bias = torch.randn(64, dtype=torch.bfloat16)
    x = torch.randn(3, 5, 128, dtype=torch.bfloat16)
    exact = torch.nn.functional.linear(x, weight, bias).float()
    found = model_step.Float8Linear(weight, bias)(x).float()
    assert found.shape == exact.shape
    assert ((found - exact).norm() / exact.norm()).item() < 0.06


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("llama-3-8b", None),
        ("qwen2.5-7b", None),
        ("mistral-7b", "sliding-window layers"),
        ("falcon-7b", "a layer other than Llama's"),
        ("mixtral-8x7b", "not a dense decoder"),
        ("deepseek-v3", "not a dense decoder"),
    ],
)
def test_the_model_step_builds_llama_s_layers_only(name, why, monkeypatch):
    from attnbench.model.presets import get_preset

    model_step = _load("model_step", monkeypatch)
    found = model_step.supported(get_preset(name))
    assert (found is None) if why is None else found.startswith(why)


@pytest.mark.parametrize("weights", ["bfloat16", "float8_e4m3fn"])
@pytest.mark.parametrize(("phase", "field"), [("decode", "tpot_ms"), ("prefill", "ttft_ms")])
def test_the_model_step_predicts_what_predict_prints(phase, field, weights, monkeypatch):
    from attnbench.experiments import predict
    from attnbench.model.presets import get_preset

    from .helpers import predict_point

    model_step = _load("model_step", monkeypatch)
    point = predict_point(
        "llama-3-8b", gpu="h200", batch=16, seq_len=512, dtype="bfloat16", weights_dtype=weights
    )
    printed = getattr(predict.run(point), field)
    spec = get_preset("llama-3-8b")
    found, kernels = model_step.predicted(spec, "h200", phase, 16, 512, weights)
    assert found == pytest.approx(printed, rel=1e-12)
    # the decode step's kernels as the model counts them: 32 layers of 10, 4 a step, and
    # with float8 a quantising kernel before each of a layer's 4 matmuls
    assert kernels == 32 * 10 + 4 + (32 * 4 if weights == "float8_e4m3fn" else 0)


def test_the_device_microbenchmarks_count_stream_s_bytes(monkeypatch):
    """Copy moves two arrays and the triad three, a = b + 0.4 c; a rate's quartiles come
    from the times' opposite quartiles."""
    device_params = _load("device_params", monkeypatch)
    a, b, c = torch.zeros(8), torch.arange(8.0), torch.ones(8)
    kernels = device_params.stream_kernels(a, b, c)
    assert {name: moved for name, (_, moved) in kernels.items()} == {"copy": 2, "triad": 3}
    kernels["triad"][0]()
    assert torch.equal(a, b + 0.4)
    kernels["copy"][0]()
    assert torch.equal(a, b)
    rate = device_params.summary(device_params.Measurement.of_samples([1.0, 2.0, 4.0]), 1e-3)
    assert rate["median"] == pytest.approx(0.5) and rate["p25"] < rate["median"] < rate["p75"]


def test_the_allreduce_bus_bandwidth_is_nccl_tests(monkeypatch):
    """An all-reduce over n ranks moves 2 (n - 1) / n of its data over each rank's links."""
    allreduce_bench = _load("allreduce_bench", monkeypatch)
    assert [allreduce_bench.bus_factor(n) for n in (2, 4, 8)] == [1.0, 1.5, 1.75]


def test_the_device_microbenchmarks_run_end_to_end_on_the_cpu(monkeypatch):
    """Each measurement of device_params.py, at tiny sizes: a row per size, shape, dtype
    and width, every rate positive (float8 is timed on CUDA only)."""
    device_params = _load("device_params", monkeypatch)
    cpu, timer = torch.device("cpu"), device_params.Timer(torch.device("cpu"))
    streams = device_params.bandwidth(timer, cpu, [1 << 16], 2)
    assert [r["kernel"] for r in streams] == ["copy", "triad"]
    matmuls = device_params.matmul(timer, cpu, ((16, 32, 48),), 2)
    assert [r["dtype"] for r in matmuls] == ["bfloat16", "float16", "float32"]
    reads = device_params.weight_stream(timer, cpu, ((64, 128),), (1, 4), 2)
    cost = device_params.kernel_cost(timer, cpu, 64, (32, 64), 2)
    assert [r["n"] for r in cost["rows"]] == [32, 64]
    assert cost["rows"][0]["bytes"] == (32 * 64 + 64 + 32) * 2
    launch = device_params.launch(timer, cpu, 3, 2)
    assert launch["kernels"] == [3, 30] and "graph_gap_us" not in launch
    rates = [r["gbps"]["median"] for r in streams + reads] + [launch["eager_us"]]
    assert all(rate > 0 for rate in rates + [r["tflops"]["median"] for r in matmuls])


def test_the_model_step_times_each_point_beside_its_prediction(monkeypatch):
    model_step = _load("model_step", monkeypatch)
    spec = _tiny_decoder(model_step).spec
    points = (("decode", 2, 8), ("prefill", 1, 8))
    rows = model_step.run([spec], "h200", torch.device("cpu"), 2, points)
    assert [(r["phase"], r["batch"], r["context"]) for r in rows] == [
        ("prefill", 1, 8),
        ("decode", 2, 8),
    ]
    for row in rows:
        assert row["measured_ms"] > 0 and row["graph"] is False
        assert row["decode_step_kernels"] == "not counted on the CPU"
        assert row["predicted_step_kernels"] == 2 * 10 + 4
        assert row["error"] == pytest.approx(row["predicted_ms"] / row["measured_ms"] - 1)
