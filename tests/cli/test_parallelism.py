"""`predict --ep` and `fit --ep` (a mixture of experts' experts split whole over ranks)
and `predict --dp-attention` (each rank's own sequences' attention), from flags and sweep
files; what they cannot split is one line naming the field, exit 2."""

from __future__ import annotations

import csv
import json
import re

import pytest

from attnbench.cli import app
from tests.cli.test_predict_modes import one_error, predict
from tests.helpers import runner


def test_ep_is_a_column_and_a_key_of_its_records(tmp_path):
    out = tmp_path / "p.csv"
    args = ["--gpu", "h200", "--model", "deepseek-v3", "--tp", "8", "--ep", "1,8"]
    result = predict(*args, "--batch", "1,512", "--seq-len", "2048", "--csv", out)
    assert result.exit_code == 0, result.output
    assert re.search(r"┃\s*ep\s*┃", result.stdout), result.stdout
    rows = {(r["ep"], r["batch"]): float(r["tpot_ms"]) for r in csv.DictReader(out.open())}
    # one sequence waits for the rank with the most of its 8 experts; 512 share them all
    assert rows[("8", "1")] > 1.1 * rows[("", "1")]
    assert rows[("8", "512")] == pytest.approx(rows[("", "512")], rel=0.02)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "deepseek-v3", "--tp", "8", "--ep", "3"], "--ep 3: must divide --tp (8)"),
        (["--model", "llama-3-8b", "--tp", "8", "--ep", "8"], "--ep 8: needs a mixture of experts"),
        (["--d-model", "4096", "--heads", "32", "--tp", "2", "--ep", "2"], "--ep 2: needs a model"),
        (["--model", "deepseek-v3", "--ep", "0"], "--ep 0: must be >= 1"),
    ],
)
def test_what_ep_cannot_split_is_one_line(args, message):
    one_error(predict("--gpu", "h200", "--seq-len", "1024", *args), message)


def test_a_sweep_files_ep_is_located(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(
        "models: [deepseek-v3]\npredict:\n  gpu: h200\n  tp: 4\n  ep: [1, 8]\n  seq_len: 1024\n"
    )
    one_error(predict("--config", study), f"predict.ep: 8 ({study}): must divide tp (4)")


def fit(*args):
    result = runner.invoke(app, ["fit", *map(str, args)], env={"COLUMNS": "200"})
    assert "Traceback" not in result.output, result.output
    return result


def test_fit_under_a_latency_target_waits_for_the_busiest_rank(tmp_path):
    out = tmp_path / "f.csv"
    common = ["--model", "deepseek-v3", "--gpu", "h200", "--gpus", "8", "--seq-len", "4096"]
    weights = ["--weights-dtype", "float8_e4m3fn", "--tpot", "30ms", "--csv", out]
    result = fit(*common, *weights, "--ep", "1,8")
    assert result.exit_code == 0, result.output
    assert re.search(r"┃\s*ep\s*┃", result.stdout), result.stdout
    rows = {r["ep"]: r for r in csv.DictReader(out.open())}
    # the same memory either way (whole experts, as many on each rank), fewer sequences
    # within the target where a step waits for the busiest rank
    assert rows["8"]["memory_batch"] == rows[""]["memory_batch"]
    assert 0 < int(rows["8"]["batch"]) < int(rows[""]["batch"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "llama-3-8b", "--ep", "2"], "--ep 2: needs a mixture of experts"),
        (["--model", "deepseek-v3", "--gpus", "8", "--ep", "3"], "--ep 3: must divide --tp (8)"),
    ],
)
def test_what_fit_cannot_split_is_one_line(args, message):
    one_error(fit("--gpu", "h200", "--seq-len", "4096", *args), message)


def test_data_parallel_attention_pays_at_many_sequences_of_an_mla_model(tmp_path):
    """Each rank caches its own sequences' latents, not every sequence's: at 256 the
    step reads an eighth of the cache; at 1 it reads the whole attention's weights."""
    study, out = tmp_path / "study.yaml", tmp_path / "p.csv"
    study.write_text(
        "models: [deepseek-v3]\npredict:\n  gpu: h200\n  tp: 8\n  ep: 8\n"
        "  weights_dtype: float8_e4m3fn\n  dp_attention: [false, true]\n"
        "  batch: [1, 256]\n  seq_len: 4096\n"
    )
    result = predict("--config", study, "--csv", out)
    assert result.exit_code == 0, result.output
    assert re.search(r"┃\s*attention\s*┃", result.stdout), result.stdout
    rows = {(r["attention"], r["batch"]): float(r["tpot_ms"]) for r in csv.DictReader(out.open())}
    assert rows[("data-parallel", "256")] < rows[("", "256")]
    assert rows[("data-parallel", "1")] > rows[("", "1")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "deepseek-v3"], "--dp-attention: has no effect at --tp 1"),
        (["--d-model", "4096", "--heads", "32", "--tp", "2"], "--dp-attention: needs a model"),
    ],
)
def test_what_dp_attention_cannot_split_is_one_line(args, message):
    one_error(predict("--gpu", "h200", "--seq-len", "1024", "--dp-attention", *args), message)


def test_data_parallel_attention_counts_the_others_prefills_side_by_side(tmp_path):
    """The serving ITL adds ceil(63 / 8) prefills of 8 prompts, one a rank, between the
    steps of 64 requests in flight, where the attention split over the ranks adds 63 of
    one prompt."""
    out = tmp_path / "p.json"
    args = ["--gpu", "h200", "--model", "deepseek-v3", "--tp", "8", "--batch", "64"]
    args += ["--seq-len", "4096", "--output-len", "1024", "--dp-attention", "--json", out]
    result = predict(*args)
    assert result.exit_code == 0, result.output
    (record,) = json.loads(out.read_text())["records"]
    step = record["generation_tpot_ms"]
    added = record["serving_itl_ms"] - step
    # 8 passes of 8 prompts: more than 8 single prompts' prefills, fewer than 63 of them
    assert 8 * record["request_ttft_ms"] / 1023 < added < 63 * record["request_ttft_ms"] / 1023


def test_fit_with_data_parallel_attention_caches_each_ranks_own_sequences(tmp_path):
    """DeepSeek-V3's latent is whole on every rank under tensor parallelism; under
    data-parallel attention each of 8 GPUs caches its own sequences, beside the whole
    attention's weights: a replica holds 8 times the sequences a GPU's budget holds."""
    out = tmp_path / "f.csv"
    common = ["--model", "deepseek-v3", "--gpu", "h200", "--gpus", "8", "--seq-len", "8192"]
    common += ["--weights-dtype", "float8_e4m3fn"]
    assert fit(*common, "--csv", out).exit_code == 0
    split = next(csv.DictReader(out.open()))
    result = fit(*common, "--dp-attention", "--csv", out)
    assert result.exit_code == 0, result.output
    own = next(csv.DictReader(out.open()))
    assert own["attention"] == "data-parallel" and split["attention"] == ""
    # a sequence's latent is whole on a GPU either way: on every GPU, or on its own
    per_seq = int(own["kv_bytes_per_sequence_per_gpu"])
    assert per_seq == int(split["kv_bytes_per_sequence_per_gpu"])
    budget = int(own["kv_bytes_per_gpu"]) + int(own["free_bytes_per_gpu"])
    assert int(own["batch"]) == 8 * (budget // per_seq)
    assert int(own["weights_bytes_per_gpu"]) > int(split["weights_bytes_per_gpu"])
    parts = ("weights", "kv", "reserve", "free")
    assert sum(int(own[f"{p}_bytes_per_gpu"]) for p in parts) == 141_000_000_000
    assert int(own["batch"]) > 5 * int(split["batch"])


@pytest.mark.parametrize("gpus", [[], ["--gpus", "8", "--tp", "1"]])
def test_fit_data_parallel_attention_at_one_rank_is_one_line(gpus):
    message = "--dp-attention: has no effect at --tp 1"
    args = ["--gpu", "h200", "--model", "deepseek-v3", "--seq-len", "4096", *gpus]
    one_error(fit(*args, "--dp-attention"), message)


def test_fit_replicated_vocabulary_at_one_rank_beside_more_gpus_is_one_line():
    """As --dp-attention: eight replicas of one rank each hold the whole vocabulary."""
    args = ["--memory", "80GB", "--model", "llama-3-8b", "--gpus", "8", "--tp", "1"]
    message = "--vocab-layout replicated: has no effect at --tp 1"
    one_error(fit(*args, "--vocab-layout", "replicated", "--seq-len", "1000"), message)


def test_tp_past_one_node_is_refused_before_a_sweep_runs(tmp_path):
    """The collectives are one node's (8 GPUs): predict --tp 16 is one line naming --tp,
    and a sweep holding it is refused before its first point runs, nothing written."""
    message = "--tp 16: spans more than the 8 GPUs of one h100-sxm node"
    one_error(predict("--gpu", "h100-sxm", "--model", "llama-3-70b", "--tp", "16"), message)
    study, out = tmp_path / "s.yaml", tmp_path / "out"
    study.write_text("models: [llama-3-70b]\npredict:\n  gpu: h100-sxm\n  tp: [8, 16]\n")
    result = runner.invoke(app, ["run", str(study), "--out", str(out), "-q"])
    one_error(result, "predict.tp: 16")
    assert not out.exists()


def test_fit_names_gpus_when_they_stand_for_a_tp_past_one_node():
    """fit --gpus 16 without --tp splits one model over the 16: refused naming --gpus, what
    the user gave; --tp 8 beside it plans two replicas of eight."""
    args = ["fit", "--model", "llama-3-70b", "--gpu", "h200", "--seq-len", "4096", "--tpot", "50ms"]
    refused = runner.invoke(app, [*args, "--gpus", "16"])
    one_error(refused, "--gpus 16: split one model over them (--tp, not given): spans more than")
    assert runner.invoke(app, [*args, "--gpus", "16", "--tp", "8"]).exit_code == 0


def test_fit_proposes_no_tp_it_could_not_time():
    """bfloat16 DeepSeek-V3 does not fit eight H200s: planning memory alone, tp 16 would
    leave room; under a time target, whose steps one node's 8 GPUs time, float8 would,
    and tp 16 is named as past the node."""
    args = ["fit", "--model", "deepseek-v3", "--weights-dtype", "bfloat16", "--gpu", "h200"]
    args += ["--tp", "8", "--seq-len", "4096"]
    memory = runner.invoke(app, args).stderr
    assert "tp 16 would leave room" in memory and "float8_e4m3fn weights at tp 8" in memory
    timed = runner.invoke(app, [*args, "--tpot", "50ms"]).stderr
    assert "tp 16 would leave room for a KV cache" not in timed
    assert timed.rstrip().endswith(
        "float8_e4m3fn weights at tp 8; tp 16 would leave room, but a timed step spans at most "
        "8 GPUs"
    )


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["predict"], "--tp 3: does not divide the 64 query heads; tp may be 1, 2, 4 or 8"),
        (["fit", "--seq-len", "4096", "--tpot", "50ms"], "--tp 3: does not divide the 64 query"),
    ],
)
def test_a_tp_that_splits_no_heads_lists_only_those_a_node_times(command, message):
    """Llama-3-70B's 64 query heads split over 16, 32 and 64 ranks too, but one H200
    node's collectives join 8 at most: the refusal of tp 3 lists 1 to 8 where steps are
    timed, and every split where only memory is planned."""
    args = [*command, "--model", "llama-3-70b", "--gpu", "h200", "--tp", "3"]
    result = runner.invoke(app, args)
    one_error(result, message)
    assert "16" not in result.stderr
    memory = runner.invoke(
        app, ["fit", "--model", "llama-3-70b", "--gpu", "h200", "--gpus", "3", "--seq-len", "1"]
    )
    # the tps that split the heads and divide the 3 GPUs (into replicas): where only
    # memory is planned, no node limits them; here, only 1 divides 3
    assert "on 3 GPUs --tp may be 1; give --tp" in memory.stderr
    six = runner.invoke(
        app, ["fit", "--model", "llama-3-70b", "--gpu", "h200", "--gpus", "6", "--seq-len", "1"]
    )
    assert "on 6 GPUs --tp may be 1 or 2; give --tp" in six.stderr
