"""Sharing a study among ranks: every point to exactly one, balanced by the estimate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attnbench.cli import app
from attnbench.errors import FieldError
from attnbench.study.plan import Task, plan_study
from attnbench.study.shards import Shard, ShareLoads, assign, parse_shard, share_loads, share_of
from tests.experiments.options import decode_point
from tests.helpers import runner

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "shard"), [("0/1", Shard(0, 1)), (" 3/8 ", Shard(3, 8))])
def test_a_shard_is_i_of_n(text, shard):
    assert parse_shard(text) == shard
    assert str(shard) == text.strip()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("2", "expected i/N"),
        ("a/2", "expected i/N"),
        ("-1/2", "expected i/N"),
        ("١/٢", "expected i/N"),  # Arabic-Indic digits, as every integer flag refuses
        ("2/2", "i must be below N (0 to 1)"),
        ("0/0", "N must be between 1 and"),
    ],
)
def test_a_bad_shard_names_the_value(text, reason):
    with pytest.raises(FieldError, match=re.escape(reason)) as caught:
        parse_shard(text)
    assert caught.value.field == "shard" and caught.value.value == text


def tasks(costs: list[float]) -> list[Task]:
    return [Task("decode", i, cost) for i, cost in enumerate(costs)]


def alone(task: Task) -> int:
    return task.index


def test_every_task_goes_to_exactly_one_share_in_study_order():
    work = tasks([5, 1, 1, 3, 2, 2, 8, 1])
    shares = assign(work, lambda t: t.point, 3, alone)
    assert sorted(t.index for share in shares for t in share) == list(range(8))
    for share in shares:
        assert [t.index for t in share] == sorted(t.index for t in share)
    assert shares == assign(work, lambda t: t.point, 3, alone)  # the same inputs, the same shares
    assert [share_of(work, lambda t: t.point, Shard(i, 3), alone) for i in range(3)] == shares


def test_longest_first_onto_the_least_loaded():
    # 8 goes first to rank 0, 5 to rank 1, 3 to rank 2, then 2 and 2 to ranks 2 and 1...
    shares = assign(tasks([5, 1, 1, 3, 2, 2, 8, 1]), lambda t: t.point, 3, alone)
    loads = [sum(t.point for t in share) for share in shares]
    assert loads == [8, 8, 7]
    assert assign(tasks([4.0]), lambda t: t.point, 3, alone) == [[Task("decode", 0, 4.0)], [], []]


def decode_tasks(contexts: list[int]) -> list[Task]:
    points = [
        decode_point(
            d_model=32,
            num_heads=4,
            num_kv_heads=kv,
            batch=1,
            dtype="float32",
            prompt_len=n,
            mode=mode,
        )
        for n in contexts
        for kv in (4, 1)
        for mode in ("cache", "no_cache")
    ]
    return [Task("decode", i, p) for i, p in enumerate(points)]


def test_the_decode_points_of_one_context_share_a_worker():
    """They are sampled in turn and compared with each other: split, they would not be."""
    work = decode_tasks([4, 8, 16, 32])
    shares = assign(work, lambda t: 1.0, 2)
    assert [len(share) for share in shares] == [8, 8]
    for share in shares:
        assert len({t.point.prompt_len for t in share}) == 2  # two whole contexts each


def test_a_few_large_groups_are_shared_point_by_point():
    """Two contexts on eight workers: kept whole, six workers would idle."""
    shares = assign(decode_tasks([4, 8]), lambda t: 1.0, 8)
    assert [len(share) for share in shares] == [1] * 8


def test_the_providers_study_balances_over_8_ranks_within_10_percent():
    plan = plan_study(ROOT / "configs" / "providers.yaml", device="cpu")
    shared = share_loads(plan, 8)
    assert shared.shares == assign(plan.tasks, plan.estimate, 8)
    assert shared.loads == [plan.estimate_total(share) for share in shared.shares]
    assert shared.total == plan.estimate_total(plan.tasks)
    assert shared.balance is not None and shared.balance <= 1.10


class CostPlan:
    """What share_loads reads of a plan: its tasks and their estimates (a task's point
    is its cost; a share's total adds `overhead`, as a plan adds the peak probe)."""

    def __init__(self, costs: list[float], overhead: float = 0.0) -> None:
        self.tasks = [Task("params", i, cost) for i, cost in enumerate(costs)]
        self.overhead = overhead

    def estimate(self, task: Task) -> float:
        return task.point

    def estimate_total(self, share: list[Task]) -> float:
        return self.overhead + sum(t.point for t in share)


def test_the_loads_of_the_shares_their_slowest_and_balance():
    plan = CostPlan([5, 1, 1, 3, 2, 2, 8, 1], overhead=1.0)
    shared = share_loads(plan, 3)  # type: ignore[arg-type]
    assert [[t.index for t in share] for share in shared.shares] == [[6], [0, 5, 7], [1, 2, 3, 4]]
    assert shared.loads == [9.0, 9.0, 8.0]
    assert shared.total == 24.0
    assert shared.slowest == 9.0
    assert shared.balance == pytest.approx(9.0 / (26.0 / 3))


def test_ranks_with_nothing_to_run_have_no_balance():
    assert ShareLoads([[], []], [0.0, 0.0], 0.0).balance is None
    shared = share_loads(CostPlan([0.0, 0.0]), 4)  # type: ignore[arg-type]
    assert shared.loads == [0.0] * 4 and shared.slowest == 0.0 and shared.balance is None
    assert ShareLoads([[], []], [2.0, 2.0], 4.0).balance == 1.0


def test_dry_run_prints_each_ranks_share():
    result = runner.invoke(
        app,
        [
            "run",
            str(ROOT / "configs" / "providers.yaml"),
            "--dry-run",
            "--nproc",
            "4",
            "--device",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == [f"rank {i}" for i in range(4)]
    assert sum(int(line.split()[2]) for line in lines[:4]) == 63
    assert "63 points on 4 ranks" in lines[4] and "nothing was run" in lines[4]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dry-run", "--nproc", "0"], "error: --nproc 0: expected an integer from 1 to"),
        (["--nproc", "2"], "error: --nproc 2: goes with --dry-run"),
    ],
)
def test_bad_nproc_exits_2_with_one_line(args, message):
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(message)


# --- running shares and merging them -------------------------------------------------------

STUDY = """
defaults: {d_model: 64, num_heads: 4}
sweep: {num_kv_heads: [4, 2, 1]}
params: {}
kvmem: {seq_len: [128, 256], measure: false}
decode: {prompt_len: [8, 16], repeats: 2, warmup: 0, device: cpu, mode: [cache, no_cache],
         provider: [attnbench, naive], prefill: false, reference: none}
"""


def exact_rows(doc: dict) -> dict[str, list[dict]]:
    """Each section's records, keys and exact metrics only (what two runs must share)."""
    from attnbench.records import Kind, field_kinds
    from attnbench.study.sections import KINDS

    rows = {}
    for name, section in doc["sections"].items():
        kinds = field_kinds(KINDS[name].record)
        keep = [f for f, k in kinds.items() if k in (Kind.KEY, Kind.EXACT)]
        rows[name] = [{f: r[f] for f in keep} for r in section["records"]]
    return rows


def run_cli(*args: str):
    result = runner.invoke(app, [*args, "-q"])
    return result


def no_plots(patch: pytest.MonkeyPatch) -> None:
    """`run` and `merge` write no plots (rendering them is most of a tiny study's time):
    for the tests of what the shares hold, not of plotting a merged study."""
    patch.setattr("attnbench.render.plots.render_plots", lambda doc, out: [])


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> dict:
    """STUDY's results.json, run in one process, no shards: what every merge must equal."""
    folder = tmp_path_factory.mktemp("whole")
    study = folder / "study.yaml"
    study.write_text(STUDY)
    with pytest.MonkeyPatch.context() as patch:
        no_plots(patch)
        assert run_cli("run", str(study), "--out", str(folder / "out")).exit_code == 0
    return json.loads((folder / "out" / "results.json").read_text())


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    """The directory of STUDY run as two shares, then merged (with its plots)."""
    folder = tmp_path_factory.mktemp("sharded")
    study = folder / "study.yaml"
    study.write_text(STUDY)
    out = folder / "out"
    for i in range(2):
        result = run_cli("run", str(study), "--out", str(out), "--shard", f"{i}/2")
        assert result.exit_code == 0, result.output
    merged = run_cli("merge", str(out))
    assert merged.exit_code == 0, merged.output
    return out


def test_two_shares_merged_equal_the_unsharded_study_row_for_row(whole, sharded):
    for i in range(2):
        assert (sharded / "shards" / f"{i}-of-2" / "results.json").is_file()
    one = whole
    two = json.loads((sharded / "results.json").read_text())
    assert exact_rows(two) == exact_rows(one)
    assert [e["shard"] for e in two["environments"]] == ["0/2", "1/2"]
    decode = two["sections"]["decode"]["records"]
    assert all(r["speedup_vs_baseline"] for r in decode)  # linked across the shares
    for name in ("params", "kvmem", "decode"):
        assert (sharded / f"{name}.csv").read_text().count("\n") == len(
            one["sections"][name]["records"]
        ) + 1
    assert (sharded / "report.md").is_file() and any(sharded.glob("*.png"))


def test_merging_an_incomplete_study_exits_1_and_names_what_is_missing(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    assert run_cli("run", str(study), "--out", str(tmp_path), "--shard", "1/3").exit_code == 0
    result = run_cli("merge", str(tmp_path))
    assert result.exit_code == 1
    assert "point(s) are in no share yet" in result.stderr


def test_shares_of_different_studies_are_refused_naming_the_difference(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    assert run_cli("run", str(study), "--out", str(tmp_path / "a"), "--shard", "0/2").exit_code == 0
    study.write_text(STUDY.replace("prompt_len: [8, 16]", "prompt_len: [8, 32]"))
    assert run_cli("run", str(study), "--out", str(tmp_path / "b"), "--shard", "1/2").exit_code == 0
    result = run_cli("merge", str(tmp_path / "a"), str(tmp_path / "b"))
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "another study (decode.prompt_len: [8, 32] there, [8, 16] in " in line


PARAMS_STUDY = "defaults: {d_model: 64, num_heads: 4}\nparams: {num_kv_heads: [4, 2, 1]}\n"


def test_a_share_is_never_written_over_by_a_whole_study(tmp_path):
    """Not by a merge (even with --force, or by default into the first of the shares
    given), not by a run: every later merge of the study would fail."""
    study = tmp_path / "study.yaml"
    study.write_text(PARAMS_STUDY)
    out = tmp_path / "sharded"
    for i in range(2):
        assert run_cli("run", str(study), "--out", str(out), "--shard", f"{i}/2").exit_code == 0
    shares = [out / "shards" / f"{i}-of-2" for i in range(2)]
    before = {p: p.read_bytes() for share in shares for p in share.iterdir()}
    refusals = [
        (
            ["merge", str(out), "--out", str(shares[0])],
            f"error: --out {shares[0]}: is the "
            "directory of share 0/2 of a study, which only that share writes",
        ),
        (
            ["merge", str(out), "--out", str(shares[1]), "--force"],
            f"error: --out {shares[1]}: is the directory of share 1/2",
        ),
        (
            ["merge", *map(str, shares)],
            f"error: --out: not given, and the first directory, "
            f"{shares[0]}, is share 0/2 of a study",
        ),
        (
            ["run", str(study), "--out", str(shares[1])],
            f"error: --out {shares[1]}: is the directory of share 1/2",
        ),
        (
            ["run", str(study), "--out", str(out / "shards" / "3-of-4")],
            f"error: --out {out / 'shards' / '3-of-4'}: is the directory of share 3/4",
        ),
    ]
    for args, message in refusals:
        result = run_cli(*args)
        assert result.exit_code == 2, (args, result.output)
        (line,) = result.stderr.splitlines()
        assert line.startswith(message), line
    assert {p: p.read_bytes() for share in shares for p in share.iterdir()} == before
    assert not (out / "shards" / "3-of-4").exists()
    assert run_cli("merge", str(out)).exit_code == 0
    assert run_cli("merge", *map(str, shares), "--out", str(tmp_path / "merged")).exit_code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard", "0/2"], "error: --shard 0/2: give the study's directory"),
        (["--shard", "2/2", "--out", "x"], "error: --shard 2/2: i must be below N"),
    ],
)
def test_bad_shards_exit_2_with_one_line(args, message):
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(message)


@pytest.mark.integration
def test_torchrun_ranks_share_the_study_and_rank_0_merges_it(tmp_path, whole):
    """Two real ranks under torchrun (gloo on the CPU): the merged study equals one
    process's run of it, row for row, with each rank's environment."""
    import subprocess
    import sys

    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    out = tmp_path / "ranks"
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
    ]
    done = subprocess.run(
        [*torchrun, "-m", "attnbench", "run", str(study), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["0-of-2", "1-of-2"]
    merged = json.loads((out / "results.json").read_text())
    assert exact_rows(merged) == exact_rows(whole)
    assert [e["shard"] for e in merged["environments"]] == ["0/2", "1/2"]
    assert all(e["peak_gbps"] > 0 for e in merged["environments"])  # each rank measured its own
    assert done.stdout.count("Findings:") == 1  # rank 0 alone reports


class Crash(BaseException):
    """A rank dying mid-study (the process is gone; what it wrote stays)."""


def test_a_share_that_died_mid_study_resumes_and_the_merge_loses_nothing(
    tmp_path, whole, monkeypatch
):
    """A worker dies after 5 points of its share; `--resume --shard` finishes that share
    without redoing them, and the merge equals one process's run, row for row."""
    from attnbench.study.runner import DirectoryStore, run_experiment, run_study
    from attnbench.study.shards import shard_dir, shard_plan

    no_plots(monkeypatch)
    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    out = tmp_path / "sharded"
    share = Shard(0, 2)
    ran: list[Task] = []

    def dies_after_5(task, context):
        if len(ran) == 5:
            raise Crash
        ran.append(task)
        return run_experiment(task, context)

    plan = shard_plan(plan_study(study), share)
    with pytest.raises(Crash):
        run_study(plan, DirectoryStore(shard_dir(out, share)), execute=dies_after_5)
    kept = json.loads((shard_dir(out, share) / "results.json").read_text())
    assert sum(len(s["records"]) for s in kept["sections"].values()) == 5
    resumed = run_cli("run", str(study), "--out", str(out), "--shard", "0/2", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert run_cli("run", str(study), "--out", str(out), "--shard", "1/2").exit_code == 0
    assert run_cli("merge", str(out)).exit_code == 0
    merged = json.loads((out / "results.json").read_text())
    assert exact_rows(merged) == exact_rows(whole)


def test_a_study_resumed_with_another_number_of_shares_loses_and_repeats_nothing(
    tmp_path, whole, monkeypatch
):
    """Two shares start; share 0 dies after 5 points and share 1 never runs. The study is
    finished by 3 shares: they take only the points no share recorded (none twice), and
    the merge of all of them equals one process's run, row for row."""
    from attnbench.study.runner import DirectoryStore, run_experiment, run_study
    from attnbench.study.shards import shard_dir, shard_plan

    no_plots(monkeypatch)
    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    out = tmp_path / "sharded"
    ran: list[Task] = []

    def dies_after_5(task, context):
        if len(ran) == 5:
            raise Crash
        ran.append(task)
        return run_experiment(task, context)

    first = shard_plan(plan_study(study), Shard(0, 2))
    with pytest.raises(Crash):
        run_study(first, DirectoryStore(shard_dir(out, Shard(0, 2))), execute=dies_after_5)
    for i in range(3):
        resumed = run_cli("run", str(study), "--out", str(out), "--shard", f"{i}/3", "--resume")
        assert resumed.exit_code == 0, resumed.output
    taken = [
        json.loads((shard_dir(out, Shard(i, 3)) / "results.json").read_text())["shard"]
        for i in range(3)
    ]
    earlier = {(t.section, first.shard["indices"][t.section][t.index]) for t in ran}
    later = [
        (name, i) for share in taken for name, found in share["indices"].items() for i in found
    ]
    assert len(later) == len(set(later)) and not earlier & set(later)
    assert len(earlier) + len(later) == len(plan_study(study).tasks)
    merged = run_cli("merge", str(out))
    assert merged.exit_code == 0, merged.output
    doc = json.loads((out / "results.json").read_text())
    assert exact_rows(doc) == exact_rows(whole)
    assert [e["shard"] for e in doc["environments"]] == ["0/2", "0/3", "1/3", "2/3"]


def test_resuming_a_share_that_never_started_runs_it(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    result = run_cli("run", str(study), "--out", str(tmp_path), "--shard", "1/2", "--resume")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "shards" / "1-of-2" / "results.json").is_file()


def test_compare_holds_each_merged_row_to_the_environment_of_its_share(tmp_path, sharded):
    """A merged study's rows carry their share's environment: when one share ran on
    another CPU, its timings are incomparable and the other share's are still gated."""
    from attnbench.gate.compare import Verdict, compare_documents
    from attnbench.study.documents import load_document

    out = sharded
    doc = json.loads((out / "results.json").read_text())
    doc["environments"][1]["cpu_model"] = "another CPU"
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(doc))
    base, cur = load_document(out / "results.json"), load_document(moved)
    findings = compare_documents(base, cur).findings
    timed = [f for f in findings if f.section == "decode" and f.metric == "step_ms_median"]
    which = doc["sections"]["decode"]["environment_of"]
    expected = sorted(Verdict.INCOMPARABLE if i == 1 else Verdict.UNCHANGED for i in which)
    assert sorted(f.verdict for f in timed) == expected
    assert 0 < which.count(1) < len(which)  # both shares hold timed rows
