"""`attnbench fit`: the arithmetic on round numbers, the boundary (one more sequence does
not fit), memory sizes, and the command line's answers and exit codes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from attnbench.cli import app
from attnbench.errors import FieldError
from attnbench.experiments.fit import CapacityError, FitPlan, largest_batch, longest_context
from attnbench.model.architecture import ModelBody, ModelSpec
from attnbench.model.capacity import KvFormat, layer_windows
from attnbench.model.model_params import weight_bytes_per_rank
from attnbench.model.presets import PRESETS
from attnbench.model.units import parse_memory, parse_share
from attnbench.model.weights import WeightFormat
from tests.helpers import runner

GiB = 2**30

# A model with round numbers: 4 layers, d 1024, 8 heads of 128 (MHA), plain 2-matrix MLP of
# 1024, vocabulary 1024, untied head. Parameters: embeddings and head 2 * 1024^2, attention
# 4 * 4 * 1024^2, MLP 4 * 2 * 1024^2, norms (4 * 2 + 1) * 1024 = 27,272,192 -> 54,544,384
# bytes in float16. KV per token: 2 * 4 layers * 8 heads * 128 * 2 bytes = 16 KiB.
ROUND = ModelSpec(
    "round", 4, 1024, 8, 8, 128, "float16", "test", body=ModelBody(1024, 1024, gated_mlp=False)
)
WEIGHTS = 54_544_384


def plan(
    spec=ROUND,
    memory=GiB,
    reserve=0,
    gpus=1,
    tp=1,
    kv="float16",
    window=None,
    page=None,
    weights_dtype=None,
) -> FitPlan:
    return FitPlan(
        spec,
        memory,
        gpus,
        tp,
        WeightFormat(weights_dtype or spec.dtype),
        KvFormat(kv),
        layer_windows(spec.num_layers, spec.windows, window),
        page,
        reserve,
    )


def test_round_numbers_largest_batch():
    p = plan()
    assert p.weights_bytes == WEIGHTS
    rec = largest_batch(p, 1024)  # 16 MiB per sequence
    budget = GiB - WEIGHTS  # 1,019,197,440
    assert rec.kv_bytes_per_sequence_per_gpu == 16 * 2**20
    assert rec.batch == 60 == budget // (16 * 2**20)
    assert rec.free_bytes_per_gpu == budget - 60 * 16 * 2**20
    parts = (
        rec.weights_bytes_per_gpu
        + rec.kv_bytes_per_gpu
        + rec.reserve_bytes_per_gpu
        + rec.free_bytes_per_gpu
    )
    assert parts == GiB


def test_boundary_one_more_sequence_does_not_fit():
    # Memory for exactly 60 sequences: 61 would need one byte more than there is.
    exact = plan(memory=WEIGHTS + 60 * 16 * 2**20)
    assert largest_batch(exact, 1024).batch == 60
    assert largest_batch(exact, 1024).free_bytes_per_gpu == 0
    short = plan(memory=WEIGHTS + 60 * 16 * 2**20 - 1)
    assert largest_batch(short, 1024).batch == 59


def test_round_numbers_longest_context_and_its_boundary():
    p = plan()
    rec = longest_context(p, 4)  # 4 sequences x 16 KiB per token
    assert rec.seq_len == (GiB - WEIGHTS) // (4 * 16384) == 15551
    assert 4 * p.sequence_bytes(rec.seq_len + 1) > GiB - WEIGHTS


def test_reserve_replicas_and_tp():
    p = plan(reserve=parse_share("10%", "reserve", GiB), gpus=4, tp=2)
    assert p.reserve_bytes == 107_374_182  # floor(0.1 * 2^30)
    assert p.replicas == 2
    rec = largest_batch(p, 1024)
    per_seq = 16 * 2**20 // 2  # 4 of 8 KV heads per rank
    per_replica = (GiB - p.weights_bytes - p.reserve_bytes) // per_seq
    assert (rec.batch_per_replica, rec.batch) == (per_replica, 2 * per_replica)
    with pytest.raises(FieldError, match="not a multiple of tp 2") as error:
        plan(gpus=3, tp=2)
    assert (error.value.field, error.value.value) == ("gpus", 3)


def test_kv_dtype_halves_the_cache_plus_its_scales_in_the_cache():
    rec = largest_batch(plan(kv="float8_e4m3fn"), 1024)
    per_seq = 1024 * 16384 // 2  # float8's scale is per tensor: none in the cache
    assert rec.kv_bytes_per_sequence_per_gpu == per_seq
    assert rec.batch == (GiB - WEIGHTS) // per_seq
    rec = largest_batch(plan(kv="int8"), 1024)
    per_seq = 1024 * (16384 // 2 + 2 * 4 * 8 * 2)  # values, plus a float16 scale per head
    assert rec.kv_bytes_per_sequence_per_gpu == per_seq
    assert rec.batch == (GiB - WEIGHTS) // per_seq


def test_windows_cap_the_context():
    windowed = ModelSpec(
        "w",
        4,
        1024,
        8,
        8,
        128,
        "float16",
        "test",
        windows=(256,) * 4,
        body=ModelBody(1024, 1024, gated_mlp=False),
    )
    rec = longest_context(plan(windowed), 4)
    assert rec.context_unbounded and rec.seq_len is None
    assert rec.kv_bytes_per_gpu == 4 * 256 * 16384
    # Without the window the context is bounded as for ROUND.
    assert longest_context(plan(windowed, window=0), 4).seq_len == 15551
    # A batch too large for full windows: the longest context is below the window.
    rec = longest_context(plan(windowed, memory=WEIGHTS + 4 * 100 * 16384), 4)
    assert rec.seq_len == 100 and not rec.context_unbounded


def test_page_size_rounds_each_sequence():
    rec = largest_batch(plan(page=16, memory=WEIGHTS + 10 * 112 * 16384), 100)
    assert rec.kv_bytes_per_sequence_per_gpu == 112 * 16384  # 100 tokens -> 7 blocks of 16
    assert rec.batch == 10


def test_impossible_requests():
    with pytest.raises(CapacityError, match="weights alone do not fit"):
        largest_batch(plan(memory=WEIGHTS - 1), 1024)
    with pytest.raises(CapacityError, match="no room for a KV cache"):
        largest_batch(plan(memory=WEIGHTS + 10, reserve=10), 1024)
    with pytest.raises(CapacityError, match="not even one sequence of 1,024 tokens fits"):
        largest_batch(plan(memory=WEIGHTS + 16 * 2**20 - 1), 1024)


def test_weights_that_do_not_fit_name_the_smallest_tp_that_would_leave_room():
    # ROUND at tp 2 keeps half its attention and MLP, all of its norms and a half of the
    # embeddings and the head a rank: 27,272,192 parameters less 8,388,608 + 4,194,304 +
    # 1,048,576 = 13,640,704, 27,281,408 bytes. 8 heads: tp 3 is skipped. The room is
    # for the question's least: one sequence of its 1,024 tokens, half of its KV heads.
    half = 27_281_408
    room = half + replace(plan(), tp=2, gpus=2).sequence_bytes(1024)
    assert room == half + 8 * 1024 * 2 * 8 * 64 * 2 // 2
    tp2 = r"; tp 2 would leave room for a sequence of 1,024 tokens \(26\.02 MiB of w"
    with pytest.raises(CapacityError, match=tp2):
        largest_batch(plan(memory=room), 1024)
    with pytest.raises(CapacityError, match=r"; tp 4 would leave room"):
        largest_batch(plan(memory=room - 1), 1024)
    with pytest.raises(CapacityError, match=r"; tp 4 would leave room .*; gpus a multiple of 4\)"):
        largest_batch(plan(memory=room - 1, gpus=2), 1024)
    with pytest.raises(CapacityError, match=r"do not fit: [^;]*$"):  # not even at 8 heads
        largest_batch(plan(memory=2**20), 1024)


@pytest.mark.parametrize(
    "model, seq_len, weights",
    [
        ("llama-3-70b", 131072, "bfloat16"),
        ("llama-3-70b", 131072, "float8_e4m3fn"),
        ("llama-2-70b", 4096, "bfloat16"),
        ("mixtral-8x7b", 32768, "bfloat16"),
        ("deepseek-v3", 65536, "float8_e4m3fn"),
    ],
)
def test_the_tp_a_refusal_names_holds_a_sequence_of_the_context_asked(model, seq_len, weights):
    """The hint of a refusal is followed as given: at the tp it names, one sequence of
    the context asked fits (Llama-3-70B at 131,072 tokens was sent to tp 2, where not one
    fits), and at the tps below it none does."""
    spec = PRESETS[model]
    memory = 80 * 10**9

    def at(tp: int) -> FitPlan:
        return FitPlan(
            spec,
            memory,
            tp,
            tp,
            WeightFormat(weights),
            KvFormat("float8_e4m3fn"),
            layer_windows(spec.num_layers, spec.windows, None),
            None,
            memory // 10,
        )

    with pytest.raises(CapacityError) as refused:
        largest_batch(at(1), seq_len)
    named = int(str(refused.value).split("; tp ")[1].split()[0])
    assert largest_batch(at(named), seq_len).batch >= 1
    for tp in range(2, named, 2):
        try:
            at(tp)
        except FieldError:
            continue
        with pytest.raises(CapacityError):
            largest_batch(at(tp), seq_len)


def test_a_replicated_vocabulary_is_held_whole_by_each_rank():
    # ROUND at tp 2 (27,281,408 bytes, above), with the other half of its embeddings and
    # of its head, 1,024 x 1,024 each, on every rank: 2 * 524,288 * 2 bytes more.
    p = plan(tp=2, gpus=2)
    replicated = replace(p, weights=WeightFormat.of("float16", vocab="replicated"))
    assert replicated.weights_bytes == 27_281_408 + 2_097_152
    # the hint's larger tp keeps the layout: at tp 4 a rank holds 1/4 of the layers
    with pytest.raises(CapacityError, match=r"; tp 4 would leave room .*\(16\.02 MiB of w"):
        largest_batch(replace(replicated, memory_bytes=27_281_408 + 2_097_152), 1024)


def test_cli_names_a_replicated_vocabulary(tmp_path):
    out = tmp_path / "fit.json"
    args = ["fit", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--gpus", "8"]
    result = runner.invoke(app, [*args, "--seq-len", "8192", "--json", str(out)])
    split = json.loads(out.read_text())["records"][0]
    result = runner.invoke(
        app, [*args, "--seq-len", "8192", "--vocab-layout", "replicated", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    replicated = json.loads(out.read_text())["records"][0]
    head = 128256 * 8192 * 2
    assert (replicated["vocab"], split["vocab"]) == ("replicated", None)
    assert replicated["weights_bytes_per_gpu"] - split["weights_bytes_per_gpu"] == 2 * (
        head - head // 8
    )
    assert "1/8 of the layers, the whole vocabulary" in result.output


def test_cli_a_quantised_head_is_a_key_of_the_answer(tmp_path):
    out = tmp_path / "fit.json"
    args = ["fit", "--model", "llama-3-8b", "--gpu", "a100-80gb", "--seq-len", "8192"]
    found = {}
    for extra in ([], ["--quantize-head"]):
        result = runner.invoke(app, [*args, "--weights-dtype", "int4", *extra, "--json", str(out)])
        assert result.exit_code == 0, result.output
        found[bool(extra)] = json.loads(out.read_text())["records"][0]
    kept, quantised = found[False], found[True]
    assert (kept["weights"], quantised["weights"]) == (
        "int4 in groups of 128",
        "int4 in groups of 128, the head too",
    )
    head = 128256 * 4096  # 2 bytes a weight, or half a byte and 4 bytes a group of 128
    assert kept["weights_bytes_per_gpu"] - quantised["weights_bytes_per_gpu"] == (
        2 * head - (head // 2 + head // 128 * 4)
    )
    assert "int4 in groups of 128, the head too" in result.output


def test_the_tp_hint_skips_a_tp_the_kv_heads_cannot_take():
    # 12 query heads, 4 KV heads: tp 3 splits the queries but not the KV heads (nor does
    # it replicate them). Where tp 2 leaves no room, the next tp that can is 4.
    spec = ModelSpec(
        "twelve", 4, 768, 12, 4, 64, "float16", "test", body=ModelBody(1024, 768, gated_mlp=False)
    )
    at = {tp: weight_bytes_per_rank(spec, WeightFormat("float16"), tp) for tp in (2, 4)}
    with pytest.raises(CapacityError, match=r"; tp 4 would leave room"):
        largest_batch(plan(spec, memory=at[2] - 1), 64)


def test_mla_cache_is_replicated_per_gpu():
    spec = PRESETS["deepseek-v3"]
    p = plan(spec, memory=141 * GiB, gpus=8, tp=8, kv="bfloat16", weights_dtype="float8_e4m3fn")
    assert p.sequence_bytes(1000) == 1000 * 61 * 576 * 2


# --- memory sizes ----------------------------------------------------------------------------


def test_memory_sizes_parse_exactly():
    assert parse_memory("80GiB", "memory").bytes == 80 * 2**30
    size = parse_memory("80GB", "memory")
    assert size.bytes == 80 * 10**9 and size.decimal and "80,000,000,000 bytes" in size.describe()
    assert parse_memory("1.5TiB", "memory").bytes == 3 * 2**39
    assert parse_memory("4096B", "memory").bytes == 4096
    # a driver's total read in GiB: rounded down to whole bytes, 79.1 * 2**30 = ....4
    assert parse_memory("79.1GiB", "memory").bytes == 84_932_978_278
    assert parse_memory("0.1KiB", "memory").bytes == 102
    assert parse_share("4GiB", "reserve", 8 * GiB) == 4 * GiB
    for zero in ("0", "0B", "0GiB", "0.0 GB", "0%"):  # no reserve, in any unit
        assert parse_share(zero, "reserve", GiB) == 0
    assert parse_share("12.5%", "reserve", 1000) == 125
    assert parse_memory("1048576TiB", "memory").bytes == 2**60  # 1 EiB: the most
    for bad in ("0.5B", "80XB", "GiB", "-1GiB", "0GiB", "80", "4096", "1048577TiB"):
        with pytest.raises(FieldError) as error:
            parse_memory(bad, "memory")
        assert (error.value.field, error.value.value) == ("memory", bad)
    for bad in ("100%", "x%", "-0GiB"):
        with pytest.raises(FieldError) as error:
            parse_share(bad, "reserve", GiB)
        assert (error.value.field, error.value.value) == ("reserve", bad)


# --- the command line ------------------------------------------------------------------------


def test_cli_answers_with_table_and_bar(tmp_path):
    out = tmp_path / "fit.json"
    args = [
        "fit",
        "--model",
        "llama-3-70b",
        "--memory",
        "80GiB",
        "--gpus",
        "8",
        "--seq-len",
        "8192",
        "--json",
        str(out),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())["records"][0]
    per_seq = 8192 * 80 * 2 * 1 * 128 * 2  # one KV head per GPU under tp 8
    budget = 80 * GiB - record["weights_bytes_per_gpu"] - 8 * GiB  # reserve: 10% by default
    assert record["kv_bytes_per_sequence_per_gpu"] == per_seq
    assert record["batch"] == budget // per_seq
    assert f"Largest batch at 8,192 tokens: {record['batch']} sequences" in result.output
    assert "█" in result.output and "▓" in result.output


def test_cli_decimal_units_are_said():
    args = ["fit", "--model", "mistral-7b", "--memory", "24GB", "--batch", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "24GB = 24,000,000,000 bytes" in result.output
    assert "unbounded" in result.output  # every layer keeps at most 4,096 tokens


def test_cli_weights_do_not_fit_exit_1():
    result = runner.invoke(
        app, ["fit", "--model", "llama-3-70b", "--memory", "80GiB", "--seq-len", "8192"]
    )
    assert result.exit_code == 1
    assert "weights alone do not fit" in result.output and "131.42 GiB" in result.output
    assert (
        "; tp 2 would leave room for a sequence of 8,192 tokens (65.71 GiB of weights a GPU) "
        "or float8_e4m3fn weights at tp 1" in result.output
    )
    quantised = ["--weights-dtype", "int4", "--memory", "20GiB"]
    result = runner.invoke(app, ["fit", "--model", "llama-3-70b", "--seq-len", "8192", *quantised])
    assert "; tp 4 would leave room" in result.output and "float8" not in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--memory", "80GiB", "--seq-len", "1", "--batch", "1"],
            "--seq-len 1: give either --seq-len (for the largest batch) or --batch (for the "
            "longest context), exactly one",
        ),
        (["--memory", "80XB", "--seq-len", "1"], "--memory 80XB: unknown unit 'XB'"),
        (["--memory", "80", "--seq-len", "1"], "--memory 80: no unit; write 80GiB, 80GB or 80B"),
        (["--memory", "0GiB", "--seq-len", "1"], "--memory 0GiB: must be more than 0 bytes"),
        (
            ["--memory", "80GiB", "--seq-len", "1", "--tp", "3"],
            "--tp 3: does not divide the 32 query heads",
        ),
        (
            ["--memory", "80GiB", "--seq-len", "1", "--kv-dtype", "fp4"],
            "--kv-dtype fp4: unknown dtype 'fp4'",
        ),
        (
            ["--memory", "80GiB", "--seq-len", "1", "--reserve", "120%"],
            "--reserve 120%: a percentage must be in [0, 100)",
        ),
        (  # as 100% is: not a model that does not fit, but a reserve that leaves nothing
            ["--memory", "80GiB", "--seq-len", "1", "--reserve", "80GiB"],
            "--reserve 80GiB: is not below the 80.00 GiB it is kept from",
        ),
        (["--memory", "80GiB", "--seq-len", "0"], "--seq-len 0: must be >= 1"),
        (
            ["--memory", "80GiB", "--seq-len", "1", "--gpus", "3"],
            "--gpus 3: split one model over them (--tp, not given): does not divide the 32 "
            "query heads; on 3 GPUs --tp may be 1; give --tp",
        ),
    ],
)
def test_cli_bad_flags_exit_2(args, message):
    result = runner.invoke(app, ["fit", "--model", "llama-3-8b", *args])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert "Traceback" not in result.output


MISSING = [
    (
        ["--memory", "80GiB"],
        "--seq-len",
        "give either --seq-len (for the largest batch) or --batch (for the longest context), "
        "exactly one",
    ),
    (
        ["--seq-len", "8192"],
        "--memory",
        "give the memory of each GPU, e.g. 80GiB, or a GPU by its name, e.g. h100-sxm",
    ),
]


@pytest.mark.parametrize("args, flag, reason", MISSING)
def test_cli_missing_flags_exit_2(args, flag, reason):
    result = runner.invoke(app, ["fit", "--model", "llama-3-8b", *args])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip().endswith(f": {reason}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, flag, reason", MISSING)
def test_cli_missing_flags_are_named_by_their_flag(args, flag, reason):
    result = runner.invoke(app, ["fit", "--model", "llama-3-8b", *args])
    assert result.stderr == f"error: {flag}: {reason}\n"


# --- compare accepts fit results --------------------------------------------------------------


def fit_json(tmp_path, name: str, *args: str) -> Path:
    out = tmp_path / name
    result = runner.invoke(
        app, ["fit", "--model", "llama-3-8b", "--memory", "80GiB", *args, "--json", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("question", [["--seq-len", "8192"], ["--batch", "8"]])
def test_fit_json_is_accepted_by_compare(tmp_path, question):
    path = fit_json(tmp_path, "fit.json", *question)
    same = runner.invoke(app, ["compare", str(path), str(path), "--format", "json"])
    assert same.exit_code == 0, same.output
    report = json.loads(same.stdout)
    assert {r["section"] for r in report["rows"]} == {"fit"}
    assert report["summary"]["counts"] == {"unchanged": len(report["rows"])}
    exact = {r["metric"] for r in report["rows"]}
    assert {"batch", "kv_bytes_per_sequence_per_gpu", "free_bytes_per_gpu"} <= exact

    doc = json.loads(path.read_text())
    doc["records"][0]["batch"] += 1
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(doc))
    result = runner.invoke(app, ["compare", str(path), str(changed), "--format", "json"])
    assert result.exit_code == 1, result.output
    (row,) = [r for r in json.loads(result.stdout)["rows"] if r["verdict"] == "regressed"]
    assert (row["section"], row["metric"], row["current"] - row["baseline"]) == ("fit", "batch", 1)


def test_fit_from_other_memory_has_no_row_in_common(tmp_path):
    """memory_bytes_per_gpu is a key: another GPU size is another question, not a change."""
    a = fit_json(tmp_path, "a.json", "--seq-len", "8192")
    doc = json.loads(a.read_text())
    doc["records"][0]["memory_bytes_per_gpu"] = 24 * GiB
    b = tmp_path / "b.json"
    b.write_text(json.dumps(doc))
    result = runner.invoke(app, ["compare", str(a), str(b)])
    assert result.exit_code == 2 and "no row in common" in result.stderr


@pytest.mark.parametrize("question", [["--seq-len", "1024,8192"], ["--batch", "1,8"]])
def test_a_fit_sweep_is_accepted_by_compare(tmp_path, question):
    path = fit_json(tmp_path, "fit.json", *question)
    assert len(json.loads(path.read_text())["records"]) == 2
    result = runner.invoke(app, ["compare", str(path), str(path)])
    assert result.exit_code == 0, result.output


def test_a_size_written_as_a_number_in_a_sweep_file_is_refused_with_its_form(tmp_path):
    """YAML reads `memory: 80` as the integer 80: refused, naming the field, with the form
    a size takes."""
    study = tmp_path / "fit.yaml"
    study.write_text("fit:\n  models: [llama-2-7b]\n  memory: 80\n  seq_len: 4096\n")
    result = runner.invoke(app, ["run", str(study), "--dry-run"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith("error: fit.memory: 80 ")
    assert "expected a string, got 80: Memory of each GPU: 80GiB" in result.stderr


def test_the_bar_and_its_legend_fit_80_columns():
    result = runner.invoke(
        app,
        ["fit", "--model", "llama-3-70b", "--memory", "80GiB", "--gpus", "8", "--seq-len", "8192"],
    )
    assert result.exit_code == 0, result.output
    bar = [line for line in result.output.splitlines() if "▓" in line]
    assert len(bar) == 2 and bar[0].startswith("[") and bar[1].startswith("█ weights")
    assert max(len(line) for line in bar) <= 80
