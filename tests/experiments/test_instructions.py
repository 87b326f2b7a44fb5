"""Instructions per decode step, counted by callgrind: the reasons a point is not counted,
the Dispatcher's slots, and (slow) real counts from one valgrind process."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace

import pytest
import torch
from torch.utils.benchmark import Timer

from attnbench.experiments import instructions
from attnbench.experiments.decode import DecodePoint, timed
from attnbench.experiments.instructions import (
    MALLOC_TUNABLE,
    MAX_NUMBER,
    NEEDS_SETUP,
    NO_VALGRIND,
    NOT_CACHED,
    NOT_CPU,
    STMT,
    Dispatcher,
    count_instructions,
    refusal,
    setup_code,
    valgrind_missing,
    valgrind_version,
    warmed_workload,
)
from tests.experiments.options import decode_point

CPU = torch.device("cpu")


def tiny(num_kv_heads: int, **changes) -> DecodePoint:
    point = decode_point(
        d_model=64, num_heads=2, num_kv_heads=num_kv_heads, batch=1, dtype="float32", prompt_len=16
    )
    return replace(point, **changes)


MHA, MQA = tiny(2), tiny(1)


def sdpa_flags() -> tuple[bool, ...]:
    """The SDPA kernels enabled now (a pinned provider's context changes them)."""
    cuda = torch.backends.cuda
    return (cuda.math_sdp_enabled(), cuda.flash_sdp_enabled(), cuda.mem_efficient_sdp_enabled())


# --- reasons ------------------------------------------------------------------------------


def test_without_valgrind_every_point_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert valgrind_missing() == NO_VALGRIND
    assert valgrind_version() is None
    assert count_instructions([MHA, tiny(1, mode="no_cache")]) == [NO_VALGRIND] * 2


def test_uncached_and_cuda_points_are_refused():
    assert refusal(tiny(2, mode="no_cache"), CPU) == NOT_CACHED
    assert refusal(MHA, torch.device("cuda")) == NOT_CPU
    assert refusal(tiny(2, cuda_graph=True), CPU).startswith("unsupported: CUDA graphs")
    assert refusal(tiny(2, provider="sdpa-efficient"), CPU) == (
        "unsupported: no memory-efficient kernel on the CPU"
    )
    assert refusal(MHA, CPU) is None


def test_a_step_with_an_untimed_setup_is_refused():
    pytest.importorskip("transformers")
    assert refusal(tiny(2, provider="hf"), CPU) == f"unsupported: {NEEDS_SETUP}"


def test_refused_points_keep_their_place_among_the_counts(monkeypatch):
    collected = []

    def collect(points, number):
        collected.append((list(points), number))
        return [100 * (i + 1) for i in range(len(points))]

    monkeypatch.setattr(instructions, "valgrind_missing", lambda: None)
    monkeypatch.setattr(instructions, "_collect", collect)
    points = [MHA, tiny(2, mode="no_cache"), MQA]
    assert count_instructions(points, number=5) == [100, NOT_CACHED, 200]
    assert collected == [([MHA, MQA], 5)]
    assert count_instructions([tiny(1, mode="no_cache")]) == [NOT_CACHED]
    assert len(collected) == 1  # nothing to count: no valgrind process


@pytest.mark.parametrize("number", [0, MAX_NUMBER + 1, 100])
def test_a_number_the_slots_cannot_follow_is_an_error(number):
    with pytest.raises(ValueError, match="number must be within 1..10"):
        count_instructions([MHA], number=number)


def test_an_unknown_provider_is_an_error():
    with pytest.raises(ValueError, match="unknown provider"):
        count_instructions([tiny(2, provider="nope")])


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_the_valgrind_version_is_read_from_its_banner():
    assert valgrind_version().startswith("valgrind-3.")


def test_the_valgrind_process_gets_its_environment_and_this_one_gets_it_back(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mxfast=0")
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    before = dict(os.environ)
    with instructions._child_environment():
        assert os.environ["PYTHONHASHSEED"] == "0"
        assert os.environ["GLIBC_TUNABLES"] == f"glibc.malloc.mxfast=0:{MALLOC_TUNABLE}"
        assert os.environ["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert dict(os.environ) == before


# --- the Dispatcher -----------------------------------------------------------------------


def test_each_slot_runs_its_point_inside_the_point_contexts():
    """Slot 0 (the warm-up) runs point 0, slot i point i - 1; every step runs in inference
    mode with its provider's kernel pinned, and nothing stays entered afterwards."""
    points = [MHA, tiny(1, provider="sdpa-math"), MQA]
    before = sdpa_flags()
    seen = []

    def step(index):
        return lambda: seen.append((index, torch.is_inference_mode_enabled(), sdpa_flags()))

    number = 3
    dispatch = Dispatcher(points, [step(i) for i in range(len(points))], number)
    for _ in range(number * (1 + len(points))):
        dispatch()
    math_only = (True, False, False)
    expected_flags = [before, math_only, before]
    assert seen == [(i, True, expected_flags[i]) for i in [0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2]]
    assert dispatch.ran == [i for i, _, _ in seen]
    assert not torch.is_inference_mode_enabled()
    assert sdpa_flags() == before


def test_the_generated_setup_and_statement_dispatch_every_point():
    """What the valgrind process runs, run here: SETUP builds each point's warmed step and
    STMT, executed as torch's script executes it, runs the step of each slot's point."""
    points, number = [MHA, MQA, tiny(2, prompt_len=4)], 2
    namespace: dict = {}
    exec(setup_code(points, number), namespace)
    for _ in range(number + len(points) * number):
        exec(STMT, namespace)
    dispatch = namespace["_dispatch"]
    assert dispatch.points == points
    assert dispatch.ran == [0, 0, 0, 0, 1, 1, 2, 2]
    assert not torch.is_inference_mode_enabled()
    with torch.inference_mode():
        for point, step in zip(points, dispatch.steps, strict=True):
            torch.testing.assert_close(step(), warmed_workload(point).step())


def test_the_timer_check_in_this_process_leaves_nothing_entered():
    """collect_callgrind runs the setup and one execution here before valgrind."""
    before = sdpa_flags()
    setup = setup_code([tiny(2, provider="sdpa-math")], 4)
    Timer(stmt=STMT, setup=setup, num_threads=1).timeit(1)
    assert not torch.is_inference_mode_enabled()
    assert sdpa_flags() == before


# --- real counts --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(valgrind_missing() is not None, reason="needs valgrind")
def test_counts_of_one_valgrind_process_repeat_and_tell_mha_from_mqa():
    """About three minutes: two valgrind processes of two points each."""
    first = count_instructions([MHA, MQA])
    assert all(isinstance(count, int) and count > 0 for count in first), first
    assert first[0] != first[1]
    second = count_instructions([MHA, MQA])
    for a, b in zip(first, second, strict=True):
        assert abs(b / a - 1) <= 0.005, (first, second)


def test_a_study_counts_its_cached_points_once_before_timing_them(monkeypatch):
    """With `instructions` on, the runner's pre-pass counts every cached point in one call
    (one valgrind process) and each record carries its count; a point without a count is
    `unsupported` with the reason, and no_cache points are neither counted nor refused."""
    from attnbench.study.plan import plan_command
    from attnbench.study.runner import run_study

    calls = []

    def fake(points, device):
        calls.append(list(points))
        return [
            instructions.NO_VALGRIND if p.num_kv_heads == 1 else 1000 + p.prompt_len for p in points
        ]

    monkeypatch.setattr(instructions, "count_instructions", fake)
    monkeypatch.setattr(instructions, "valgrind_version", lambda: "valgrind-9.9.9")
    values = {
        "d_model": [32],
        "num_heads": [4],
        "num_kv_heads": [2, 1],
        "prompt_len": [4, 8],
        "mode": ["cache", "no_cache"],
        "repeats": 1,
        "prefill": False,
        "reference": "none",
        "instructions": True,
        "device": "cpu",
    }
    result = run_study(plan_command("decode", None, values), command="decode-speed")
    assert len(calls) == 1 and {p.mode for p in calls[0]} == {"cache"} and len(calls[0]) == 4
    for rec in result.records["decode"]:
        if rec.mode == "no_cache":
            assert timed(rec) and rec.instructions_per_step is None
        elif rec.num_kv_heads == 1:
            assert rec.status == instructions.NO_VALGRIND and rec.step_ms_median is None
        else:
            assert timed(rec) and rec.instructions_per_step == 1000 + rec.prompt_len
            assert rec.instructions_counter == "valgrind-9.9.9"


def test_no_valgrind_runs_for_its_version_when_no_point_was_counted(monkeypatch):
    """The counter's version is read (one more valgrind process) only for counts it made."""
    from attnbench.study.plan import plan_command
    from attnbench.study.runner import run_study

    asked = []

    def refused(points, device):
        return [instructions.NO_VALGRIND] * len(points)

    monkeypatch.setattr(instructions, "count_instructions", refused)
    monkeypatch.setattr(instructions, "valgrind_version", lambda: asked.append(1) or "valgrind-9")
    values = {
        "d_model": [32],
        "num_heads": [4],
        "num_kv_heads": [2],
        "prompt_len": [4],
        "mode": ["cache"],
        "repeats": 1,
        "prefill": False,
        "reference": "none",
        "instructions": True,
        "device": "cpu",
    }
    result = run_study(plan_command("decode", None, values), command="decode-speed")
    assert [r.status for r in result.records["decode"]] == [instructions.NO_VALGRIND]
    assert asked == []


def test_decode_speed_says_first_that_valgrind_counts_before_the_first_point(monkeypatch):
    """The count runs before any point, silent for a minute or more: decode-speed says so
    first, where a point is cached; not with --quiet."""
    from attnbench.cli import app
    from tests.helpers import runner

    monkeypatch.setattr(
        instructions, "count_instructions", lambda points, device: [1] * len(points)
    )
    monkeypatch.setattr(instructions, "valgrind_version", lambda: "valgrind-9.9.9")
    args = ["decode-speed", "--d-model", "32", "--heads", "4", "--prompt-len", "4"]
    args += ["--repeats", "1", "--no-prefill", "--reference", "none", "--instructions"]
    result = runner.invoke(app, [*args, "--mode", "cache"])
    assert result.exit_code == 0, result.output
    assert "note: counting instructions under valgrind first" in result.stderr
    quiet = runner.invoke(app, [*args, "--mode", "cache", "-q"])
    assert "valgrind first" not in quiet.stderr
    uncached = runner.invoke(app, [*args, "--mode", "no_cache"])
    assert "valgrind first" not in uncached.stderr
