"""What `fit` prints first: the answers, a line each, then the notes on the GPUs' memory
once, then each answer's memory; a context past the model's positions noted."""

from __future__ import annotations

from attnbench.cli import app
from tests.helpers import runner


def fit(*args: str) -> list[str]:
    result = runner.invoke(app, ["fit", *args], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_the_answers_come_first_and_the_memory_note_once():
    args = ["--model", "llama-3.1-70b", "--seq-len", "131072", "--gpus", "8", "--gpu", "h100-sxm"]
    lines = fit(*args, "--kv-dtype", "bfloat16,float8_e4m3fn")
    assert lines[0].startswith("Largest batch at 131,072 tokens: ")
    assert lines[0].endswith(" sequences (bfloat16 KV cache)")
    assert lines[1].endswith(" sequences (float8_e4m3fn KV cache)")
    notes = [line for line in lines if line.startswith("note: h100-sxm: 80GB = ")]
    assert len(notes) == 1 and lines.index(notes[0]) == 2
    heads = [line for line in lines if line.startswith("llama-3.1-70b (")]
    assert [h.split(":")[0] for h in heads] == [
        "llama-3.1-70b (bfloat16 KV cache)",
        "llama-3.1-70b (float8_e4m3fn KV cache)",
    ]
    assert not [line for line in lines if "past its" in line]  # 131,072 positions: within


def test_a_context_past_the_models_positions_is_noted():
    lines = fit("--model", "llama-3-70b", "--seq-len", "131072", "--gpus", "8", "--gpu", "h100-sxm")
    assert lines[0].startswith("Largest batch at 131,072 tokens: ")
    # at 80 columns, wrapped under its text
    assert lines[-2:] == [
        "note: llama-3-70b: context 131,072 is past its 8,192 positions",
        "      (max_position_embeddings); computed all the same",
    ]


def test_under_a_latency_target_the_answer_comes_first():
    args = ["--model", "llama-3-8b", "--seq-len", "8192", "--gpu", "h100-sxm", "--tpot", "12ms"]
    lines = fit(*args)
    assert lines[0].startswith("Largest batch within the targets at 8,192 tokens: ")
    assert ", where memory alone allows " in lines[0]
    assert lines[1].startswith("Targets: time per output token <= 12 ms")


def test_answers_that_differ_in_a_format_option_alone_are_told_apart():
    """A sweep over int4's scale group, or a cache's, labelled its answers alike (the
    dtype's name alone, or nothing): each label names the format in words."""
    args = ["--model", "llama-2-7b", "--seq-len", "4096", "--gpu", "h100-sxm"]
    lines = fit(*args, "--weights-dtype", "int4", "--weights-group", "64,128")
    assert lines[0].endswith("(int4 in groups of 64 weights)")
    assert lines[1].endswith("(int4 in groups of 128 weights)")
    lines = fit(*args, "--kv-dtype", "int8", "--kv-scale-group", "32,64")
    assert lines[0].endswith("(int8 in groups of 32 KV cache)")
    assert lines[1].endswith("(int8 in groups of 64 KV cache)")


def test_fit_s_unknown_gpu_lists_this_as_predict_s_alone():
    """'this' (the peaks this machine measures) is predict's: fit's error does not offer
    it as one of fit's choices."""
    result = runner.invoke(app, ["fit", "--model", "llama-3-8b", "--gpu", "h100"])
    assert result.exit_code == 2
    line = " ".join(result.stderr.split())
    assert "mi250x; or, in predict, this (this machine's measured peaks)" in line
