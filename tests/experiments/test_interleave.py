"""The points of one context sampled in turn (experiments.interleave): their groups, the
round-robin sampling, the comparisons taken per round, and what a failing point or an
interrupted group leaves."""

from __future__ import annotations

import dataclasses
import json
import math
import time

import pytest
import torch

from attnbench.errors import UsageError
from attnbench.experiments import decode, interleave
from attnbench.experiments.decode import (
    BUSY,
    OK,
    DecodePoint,
    decode_bytes,
    failed,
    held_cpu,
    run_order,
)
from attnbench.measure import timing
from attnbench.measure.stats import Measurement, bootstrap_interval, median, next_run_interval
from attnbench.modules.workload import DecodeInputs
from attnbench.study.runner import DirectoryStore, plan_command, run_study
from attnbench.study.sections import KINDS
from tests.experiments.options import decode_options, decode_point

CPU = torch.device("cpu")
#: One context, MHA and MQA, both modes, six rounds.
GROUP = {
    "d_model": [32],
    "num_heads": [4],
    "num_kv_heads": [4, 1],
    "batch": [1],
    "prompt_len": [4],
    "warmup": 0,
    "repeats": 6,
    "device": "cpu",
    "prefill": False,
    "reference": "none",  # nothing timed beside each step: a test that wants it says so
}


def point(**fields) -> DecodePoint:
    base = {
        "d_model": 32,
        "num_heads": 4,
        "num_kv_heads": 4,
        "batch": 1,
        "prompt_len": 4,
        "dtype": "float32",
    }
    return decode_point(**{**base, **fields})


def records_of(**values) -> list:
    return run_study(plan_command("decode", None, {**GROUP, **values})).records["decode"]


def by_key(records) -> dict:
    return {(r.num_kv_heads, r.provider, r.mode): r for r in records}


def counted(monkeypatch, owner, name: str, keep: str = "first") -> list:
    """`owner.name` wrapped to keep, call by call, its first argument or its result."""
    real = getattr(owner, name)
    kept: list = []

    def wrapper(first, *args):
        result = real(first, *args)
        kept.append(result if keep == "result" else first)
        return result

    monkeypatch.setattr(owner, name, wrapper)
    return kept


def per_round(of, over) -> list[float]:
    return [a / b for a, b in zip(of.samples_ms, over.samples_ms, strict=True)]


def test_the_points_of_a_context_are_sampled_in_the_same_rounds():
    records = records_of(prompt_len=[4, 8], reference="kernels")
    assert [r.sampling for r in records] == ["interleaved"] * 8
    assert [r.sampling_group for r in records] == [0] * 4 + [1] * 4  # one group per context
    assert {r.prompt_len for r in records[:4]} == {4}
    assert all(len(r.samples_ms) == 6 for r in records)
    # each step's kernels too, in the same rounds (the other tests time no reference)
    assert all(len(r.x_of_reference_samples) == 6 for r in records)
    assert all(0 < r.cpu_share <= 1 for r in records)  # one thread on the CPU


def test_a_group_sampled_while_another_process_held_the_cpu_is_noisy(monkeypatch):
    """The share of the sampling's wall time the process ran for is recorded; under 80%
    (here: the CPU clock stands still, as if another process held the CPU throughout), a
    steady point's status says noisy, and why."""
    share = timing.CpuShare(torch.device("cpu"))
    time.sleep(0.05)  # waiting, as for another process: the CPU clock hardly moves
    assert share.share() < 0.5
    monkeypatch.setattr(timing.time, "process_time", lambda: 0.0)
    for r in records_of():
        assert (r.cpu_share, r.noisy) == (0.0, True) and decode.timed(r)
    steady = failed(point(), OK)  # a steady step's record, sampled on a busy host
    held_cpu(steady, 0.5)
    assert (steady.cpu_share, steady.status, steady.noisy) == (0.5, BUSY, True)
    held_cpu(quiet := failed(point(), OK), 0.9)
    assert (quiet.status, quiet.noisy) == (OK, None)
    for status in (decode.WIDE, decode.FEW_SAMPLES):  # noisy all the same: the cause said
        held_cpu(spread := failed(point(), status), 0.5)
        assert (spread.status, spread.noisy) == (BUSY, True)
        held_cpu(alone := failed(point(), status), 0.9)
        assert alone.status == status


def test_comparisons_are_the_per_round_ratios_with_a_bootstrap_interval():
    rows = by_key(records_of())
    mha, mqa = rows[4, "attnbench", "cache"], rows[1, "attnbench", "cache"]
    ratios = per_round(mha, mqa)
    assert mha.x_of_narrowest_samples == pytest.approx(ratios)
    assert mha.x_of_narrowest_median == pytest.approx(median(ratios))
    assert mha.narrowest_variant == "MQA"
    lo, hi = bootstrap_interval(ratios)
    assert (mha.x_of_narrowest_ci_lo, mha.x_of_narrowest_ci_hi) == pytest.approx((lo, hi))
    assert lo <= mha.x_of_narrowest_median <= hi
    assert mqa.x_of_narrowest_median is None  # the narrowest itself
    for kv in (4, 1):
        cached, uncached = rows[kv, "attnbench", "cache"], rows[kv, "attnbench", "no_cache"]
        ratios = per_round(cached, uncached)
        assert cached.x_of_no_cache_median == pytest.approx(median(ratios))
        assert cached.speedup_vs_no_cache == pytest.approx(1 / cached.x_of_no_cache_median)
        assert uncached.x_of_no_cache_median is None


def test_providers_are_compared_with_the_baseline_round_by_round():
    rows = by_key(records_of(num_kv_heads=[2], provider=["attnbench", "sdpa-math"]))
    base, other = rows[2, "attnbench", "cache"], rows[2, "sdpa-math", "cache"]
    ratios = per_round(other, base)
    assert other.x_of_baseline_median == pytest.approx(median(ratios))
    assert other.speedup_vs_baseline == pytest.approx(1 / median(ratios))
    assert base.speedup_vs_baseline == 1.0 and base.x_of_baseline_median is None


def test_comparisons_pair_each_point_with_its_reference():
    points = [
        point(num_kv_heads=kv, provider=p, mode=m)
        for kv in (4, 2)
        for p in ("attnbench", "naive")
        for m in ("no_cache", "cache")
    ]
    found = decode.link(points, decode_options())
    pairs = {(c.name, points[c.of], points[c.over]) for c in found}
    wide_cache = point(num_kv_heads=4, mode="cache")
    assert ("x_of_narrowest", wide_cache, point(num_kv_heads=2, mode="cache")) in pairs
    assert ("x_of_no_cache", wide_cache, point(num_kv_heads=4, mode="no_cache")) in pairs
    naive = point(num_kv_heads=4, provider="naive", mode="no_cache")
    assert ("x_of_baseline", naive, point(num_kv_heads=4, mode="no_cache")) in pairs
    # the narrowest of naive's own variants; nothing is compared with itself
    assert (
        "x_of_narrowest",
        dataclasses.replace(wide_cache, provider="naive"),
        point(num_kv_heads=2, provider="naive", mode="cache"),
    ) in pairs
    assert all(c.of != c.over for c in found)
    assert len(pairs) == 2 + 4 + 4  # narrowest per provider, cache/no cache, naive vs base


def test_groups_hold_one_context_within_the_free_memory():
    points = run_order(
        [
            point(num_kv_heads=kv, prompt_len=n, mode=m)
            for kv in (4, 1)
            for n in (4, 8)
            for m in ("cache", "no_cache")
        ],
        decode_options(),
    )
    ample = interleave.sampling_groups(points, decode_options(), CPU, lambda device: 1 << 40)
    assert ample == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert all(len({points[i].prompt_len for i in g}) == 1 for g in ample)
    two = sum(decode_bytes(points[i]) for i in (0, 1))
    tight = interleave.sampling_groups(points, decode_options(), CPU, lambda device: two)
    assert tight[0] == [0, 1] and len(tight) > len(ample)
    for group in tight:
        assert len(group) == 1 or sum(decode_bytes(points[i]) for i in group) <= two
        assert len({points[i].prompt_len for i in group}) == 1
    none = interleave.sampling_groups(points, decode_options(), CPU, lambda device: 1)
    assert none == [[i] for i in range(8)]  # nothing fits: each alone (and skipped)


def test_a_point_that_fits_no_group_is_sampled_alone(monkeypatch):
    monkeypatch.setattr(interleave, "free_memory_bytes", lambda device: 1 << 40)
    sizes = {}

    def groups(points, options, device):
        sizes["free"] = decode_bytes(points[0])  # room for one point at a time
        return interleave.sampling_groups(points, options, device, lambda d: sizes["free"])

    kind = dataclasses.replace(KINDS["decode"], groups=groups)
    monkeypatch.setitem(KINDS, "decode", kind)
    records = records_of(mode=["cache"])
    assert [r.sampling for r in records] == ["alone", "alone"]
    assert [r.sampling_group for r in records] == [0, 1]
    assert all(r.x_of_narrowest_median is None for r in records)


def test_a_point_out_of_memory_leaves_the_rest_of_its_group(monkeypatch):
    real = interleave.prepare

    def prepare(point, context, *args):
        if point.num_kv_heads == 1 and point.cached:
            raise torch.OutOfMemoryError("out of memory")
        return real(point, context, *args)

    monkeypatch.setattr(interleave, "prepare", prepare)
    rows = by_key(records_of())
    assert rows[1, "attnbench", "cache"].status == "oom"
    assert all(decode.timed(rows[k]) for k in rows if k != (1, "attnbench", "cache"))
    mha = rows[4, "attnbench", "cache"]
    assert mha.x_of_narrowest_median is None  # its reference did not run
    assert mha.x_of_no_cache_median is not None


def test_no_cache_points_stay_within_their_longest_context():
    points = [point(prompt_len=n, mode=m) for n in (4, 64, 256) for m in ("cache", "no_cache")]
    kept = run_order(points, decode_options({"no_cache_max_prompt_len": 64}))
    assert [(p.prompt_len, p.mode) for p in kept] == [
        (4, "no_cache"),
        (4, "cache"),
        (64, "no_cache"),
        (64, "cache"),
        (256, "cache"),
    ]
    assert len(run_order(points, decode_options())) == 6


def test_a_group_left_part_way_runs_again_whole(tmp_path, monkeypatch):
    out = tmp_path / "study"
    plan = plan_command("decode", None, {**GROUP, "prompt_len": [4, 8]})
    run_study(plan, DirectoryStore(out))
    doc = json.loads((out / "results.json").read_text())
    kept = doc["sections"]["decode"]["records"]
    first = kept[0]
    del kept[5:]  # the second context's group, one of its four points recorded
    (out / "results.json").write_text(json.dumps(doc))
    ran = []
    kind = KINDS["decode"]

    def spy(points, context, number, link):
        ran.append((number, len(points)))
        return kind.run_group(points, context, number, link)

    monkeypatch.setitem(KINDS, "decode", dataclasses.replace(kind, run_group=spy))
    result = run_study(plan, DirectoryStore(out), resume=True)
    assert ran == [(1, 4)] and result.skipped == 4 and result.ran == 4
    records = json.loads((out / "results.json").read_text())["sections"]["decode"]["records"]
    assert len(records) == 8 and records[0] == first
    assert [r["sampling_group"] for r in records] == [0] * 4 + [1] * 4
    assert len({r["step_repeats"] for r in records[4:]}) == 1


def test_a_group_no_point_of_which_runs_is_recorded_as_such():
    """sdpa-cudnn has no kernel on the CPU: every point of its groups is unsupported, and
    nothing is timed."""
    records = records_of(provider=["sdpa-cudnn"], repeats=None, max_time=0.1)  # adaptive
    assert [r.status.split(":")[0] for r in records] == ["unsupported"] * 4
    assert all(r.sampling is None and r.step_ms_median is None for r in records)


def test_the_one_point_of_a_group_that_runs_is_sampled_alone():
    records = records_of(num_kv_heads=[2], mode=["cache"], provider=["attnbench", "sdpa-cudnn"])
    rows = {r.provider: r for r in records}
    assert rows["attnbench"].sampling == "alone" and rows["sdpa-cudnn"].sampling is None
    assert rows["attnbench"].x_of_baseline_median is None


def test_resume_refuses_records_of_another_version(tmp_path):
    out = tmp_path / "study"
    plan = plan_command("decode", None, GROUP)
    run_study(plan, DirectoryStore(out))
    doc = json.loads((out / "results.json").read_text())
    doc["sections"]["decode"]["records"][0]["speedup_vs_no_cache_old"] = 1.0
    (out / "results.json").write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="the decode records come from another version"):
        run_study(plan, DirectoryStore(out), resume=True)


def test_a_group_is_sampled_over_fresh_memory_layouts_its_intervals_over_them(monkeypatch):
    """20 rounds: 4 layouts of 5, each point built (and checked) anew for each; the
    records say so, and each comparison's interval is the one over the layouts."""
    built = counted(monkeypatch, interleave, "prepare")
    rows = by_key(records_of(repeats=20))
    assert len(built) == 4 * 4 and all(r.layouts == 4 for r in rows.values())
    mha, mqa = rows[4, "attnbench", "cache"], rows[1, "attnbench", "cache"]
    ratios = per_round(mha, mqa)
    lo, hi = next_run_interval(ratios, 4)
    assert (mha.x_of_narrowest_ci_lo, mha.x_of_narrowest_ci_hi) == pytest.approx((lo, hi))
    assert mha.step_ci_pct == pytest.approx(100 * Measurement(mha.samples_ms, layouts=4).ci_rel)


def test_a_step_whose_layouts_fall_into_two_modes_names_both():
    steps = Measurement([0.466] * 10 + [0.887] * 10 + [0.467] * 5, layouts=5)
    status = decode.step_status(steps)
    assert (
        status == "noisy: two modes over its memory layouts, 0.466 ms (3 layouts) and 0.887 ms (2)"
    )
    assert decode.timed({"status": status})
    assert decode.step_status(Measurement([0.466] * 20 + [0.887] * 5, layouts=5)) == OK


def test_a_group_s_steps_rotate_over_copies_that_outgrow_the_cpu_s_cache(monkeypatch):
    """With a last-level cache of 64 KiB and a group whose copies hold 28 KiB (MHA's and
    MQA's weights and caches of 5 tokens), three copies of each point's buffers are built
    once, each call of a step and of its kernels runs on the next copy, and the records
    say how many; each copy's weights and cache are its own."""
    made = counted(monkeypatch, DecodeInputs, "copied", keep="result")
    built = counted(monkeypatch, interleave, "prepare")
    monkeypatch.setattr(interleave, "cache_bytes", lambda device: 64 << 10)
    rows = records_of(mode="cache", reference="kernels", repeats=20)
    # float32 weights (q and o 32 x 32; k and v 32 x 8 per KV head) and caches of 5 tokens
    mha = (2 * 32 * 32 + 2 * 32 * 32) * 4 + 2 * 4 * 5 * 8 * 4
    mqa = (2 * 32 * 32 + 2 * 32 * 8) * 4 + 2 * 1 * 5 * 8 * 4
    held = mha + mqa
    copies = math.ceil(interleave.ROTATE_OVER * (64 << 10) / held)
    assert 1 < copies <= interleave.MAX_COPIES and all(r.copies == copies for r in rows)
    # the copies are the group's layouts: allocated once, its 20 rounds split into 4 runs
    assert [r.layouts for r in rows] == [4, 4] and len(made) == 2 * (copies - 1)
    assert len(built) == 2  # each point built for the first layout only (decode.prepare)
    first, second = made[:2]
    assert first.layer.q_proj.weight.data_ptr() != second.layer.q_proj.weight.data_ptr()
    assert torch.equal(first.layer.q_proj.weight, second.layer.q_proj.weight)
    assert first.cache.k.data_ptr() != second.cache.k.data_ptr()
    assert all(decode.timed(r) for r in rows)
    off = records_of(mode="cache", cold_cache=False)
    assert [r.copies for r in off] == [1, 1]


@pytest.mark.parametrize(
    ("cache", "free", "cold", "device", "copies"),
    [
        (1 << 20, 1 << 40, True, "cpu", 8),  # 128 KiB a round: 8 copies read 1 MiB
        (1 << 20, 1 << 40, False, "cpu", 1),  # cold_cache off
        (None, 1 << 40, True, "cpu", 1),  # the cache's size unknown
        (64 << 10, 1 << 40, True, "cpu", 1),  # one copy reads more than the cache
        (1 << 30, 1 << 40, True, "cpu", 1),  # over MAX_COPIES: too little to leave it
        (1 << 20, 1, True, "cpu", 1),  # the copies would fill over half the free memory
        (1 << 20, 1 << 40, True, "meta", 1),  # a GPU flushes its L2 instead
    ],
)
def test_the_copies_a_group_rotates_over(cache, free, cold, device, copies):
    options = decode_options({"cold_cache": cold})
    held = type("Inputs", (), {"copied_bytes": lambda self: 64 << 10})()
    ready = [
        decode.Ready(point(options=options), failed(point(), OK), None, [], inputs=held)  # type: ignore[arg-type]
        for _ in range(2)
    ]
    found = interleave.copies_for(ready, torch.device(device), lambda d: free, lambda d: cache)
    assert found == copies
