"""attnbench ab: the paired test, the ABBA order, the sides' worktrees and venvs in a
scratch repository, the workers, and one run of two sides end to end."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnbench.ab import sides as sides_module
from attnbench.ab.runner import AbResult, PointResult, Visit, time_point, visit_order
from attnbench.ab.sides import (
    READY,
    SHARED_PTH,
    SOURCE_PTH,
    Side,
    default_cache_dir,
    directory_side,
    revision_side,
    shared_site_dirs,
)
from attnbench.ab.workers import Worker
from attnbench.cli import app
from attnbench.errors import FieldError, UsageError
from attnbench.gate.compare import Thresholds, Verdict
from attnbench.gate.paired import EVIDENCE, judge_paired, median_ratio_interval
from tests.experiments.options import decode_point
from tests.helpers import one_error, runner

ROOT = Path(__file__).resolve().parents[2]
TINY_STUDY = "decode:\n  d_model: 64\n  num_heads: 2\n  prompt_len: 16\n  mode: cache\n"


# --- the paired test ---------------------------------------------------------------------


def noisy(level: float, n: int, spread: float, seed: int) -> list[float]:
    """`n` times in ms around `level`, each off by up to +-`spread` (seeded)."""
    rng = np.random.default_rng(seed)
    return list(level * (1 + rng.uniform(-spread, spread, n)))


def jittered(times: list[float], factor: float, seed: int) -> list[float]:
    """`times` x `factor`, each off by up to +-1% more (seeded)."""
    return [t * factor * e for t, e in zip(times, noisy(1.0, len(times), 0.01, seed), strict=True)]


def test_a_planted_20_percent_slowdown_is_a_regression():
    base = noisy(1.0, 6, 0.03, seed=1)
    judged = judge_paired(base, jittered(base, 1.2, seed=2))
    assert judged.verdict is Verdict.REGRESSED
    assert judged.ratio == pytest.approx(1.2, rel=0.05)
    assert judged.evidence == EVIDENCE
    assert judged.interval[0] > 1.1
    assert judged.reason.startswith("1.2") and " slower; 99% bounds 1." in judged.reason
    assert judged.reason.endswith("x slower, beyond the 1.10x threshold")


def test_a_speedup_is_an_improvement():
    base = noisy(1.0, 6, 0.03, seed=3)
    judged = judge_paired(base, [t / 1.3 for t in base])
    assert judged.verdict is Verdict.IMPROVED
    assert judged.ratio == pytest.approx(1 / 1.3)


def test_identical_sides_are_unchanged():
    base = noisy(2.0, 6, 0.2, seed=4)
    judged = judge_paired(base, list(base))
    assert judged.verdict is Verdict.UNCHANGED
    assert judged.ratio == 1.0
    assert judged.interval == (1.0, 1.0)


def test_a_drift_both_sides_share_cancels_in_the_pairs():
    """The machine slows by up to 40% between pairs: head equal to base within each pair
    is unchanged, and 20% slower within each is a regression, whatever the drift."""
    drift = noisy(1.0, 6, 0.4, seed=5)
    assert judge_paired(drift, jittered(drift, 1.0, seed=6)).verdict is Verdict.UNCHANGED
    assert judge_paired(drift, jittered(drift, 1.2, seed=7)).verdict is Verdict.REGRESSED


def test_an_effect_with_a_wide_spread_is_inconclusive():
    base = [1.0] * 6
    head = [1.6, 0.9, 1.5, 0.95, 1.4, 1.0]  # median ratio 1.18, but pairs disagree
    judged = judge_paired(base, head)
    assert judged.verdict is Verdict.INCONCLUSIVE
    assert judged.ratio > 1.1
    assert judged.interval[0] <= 1.1
    assert ", not resolved: 99% bounds " in judged.reason
    assert judged.reason.endswith(" reach within the 1.10x threshold")


def test_a_change_under_the_floor_or_the_threshold_is_unchanged():
    tiny = judge_paired([0.001] * 4, [0.0015] * 4)  # 1.5x, but 0.5 us
    assert tiny.verdict is Verdict.UNCHANGED and "under 5 us" in tiny.reason
    small = judge_paired([1.0] * 4, [1.05] * 4)
    assert small.verdict is Verdict.UNCHANGED
    assert small.reason == "1.05x slower, within the 1.10x threshold"
    wider = judge_paired([1.0] * 4, [1.2] * 4, Thresholds(time=0.25))
    assert wider.verdict is Verdict.UNCHANGED


def test_fewer_than_five_pairs_give_no_verdict_beyond_inconclusive():
    """Two pairs (one round) bound the ratio by the smaller of them: a slow phase of the
    machine over both head visits would pass it."""
    judged = judge_paired([1.0, 1.0, 1.0, 1.0], [1.5, 1.5, 1.5, 1.5])
    assert judged.verdict is Verdict.INCONCLUSIVE and "4 pairs" in judged.reason
    assert (judged.interval, judged.evidence) == (None, None)
    assert judge_paired([1.0] * 5, [1.5] * 5).verdict is Verdict.REGRESSED


def test_a_head_time_that_is_not_positive_regresses():
    assert judge_paired([1.0, 1.0], [1.0, 0.0]).verdict is Verdict.REGRESSED
    assert judge_paired([1.0, float("nan")], [1.0, 1.0]).verdict is Verdict.INCONCLUSIVE


def test_the_bootstrap_is_seeded():
    logs = np.log([1.3, 0.9, 1.2, 1.25, 1.0, 1.4])
    assert median_ratio_interval(logs, Thresholds()) == median_ratio_interval(logs, Thresholds())
    base, head = noisy(1.0, 6, 0.1, seed=8), noisy(1.15, 6, 0.1, seed=9)
    assert judge_paired(base, head) == judge_paired(base, head)


# --- the ABBA order ----------------------------------------------------------------------


def test_the_visits_are_a_warm_up_then_rounds_in_abba_order():
    assert visit_order(2) == [
        (0, "head"),
        (0, "base"),
        (1, "base"),
        (1, "head"),
        (1, "head"),
        (1, "base"),
        (2, "base"),
        (2, "head"),
        (2, "head"),
        (2, "base"),
    ]


POINT = decode_point(
    d_model=64, num_heads=2, num_kv_heads=2, batch=1, dtype="float32", prompt_len=16
)


class FakeWorker:
    """A worker that answers from a list of step times (or statuses) and notes its visits."""

    def __init__(self, side: str, answers: list, log: list) -> None:
        self.side, self.answers, self.log = side, list(answers), log

    def visit(self, point: dict, options: dict) -> dict:
        self.log.append(self.side)
        answer = self.answers.pop(0)
        if isinstance(answer, str):
            return {"step_ms_median": None, "status": answer}
        return {"step_ms_median": answer, "status": "ok"}


def test_each_round_pairs_the_visits_made_next_to_each_other():
    order: list[str] = []
    times = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    base = FakeWorker("base", [9.0, *times], order)  # the warm-up first
    head = FakeWorker("head", [9.0, *(t * 1.05 for t in times)], order)
    result = time_point(POINT, {"variant": "MHA"}, {"base": base, "head": head}, 3, {})
    assert order == [side for _, side in visit_order(3)]
    assert result.pairs() == [(t, t * 1.05) for t in times]
    (finding,) = result.findings(Thresholds())
    assert finding.metric == "step_ms_median" and finding.evidence == EVIDENCE
    assert (finding.baseline, finding.current) == (3.5, 3.5 * 1.05)  # no warm-up
    assert finding.verdict is Verdict.UNCHANGED and finding.ratio == pytest.approx(1.05)


def test_a_point_head_gets_wrong_ends_after_the_warm_up_and_regresses():
    order: list[str] = []
    base = FakeWorker("base", [1.0], order)
    head = FakeWorker("head", ["wrong: max abs error 0.5"], order)
    result = time_point(POINT, {"variant": "MHA"}, {"base": base, "head": head}, 3, {})
    assert order == ["head", "base"]
    assert result.status("head").startswith("wrong") and result.status("base") == "ok"
    verdicts = {f.metric: f.verdict for f in result.findings(Thresholds())}
    assert verdicts == {"status": Verdict.REGRESSED}


def test_pairs_leave_out_a_round_cut_short():
    result = PointResult(
        POINT,
        {},
        [
            Visit(0, "head", 1.0, "ok"),
            Visit(0, "base", 1.0, "ok"),
            Visit(1, "base", 1.0, "ok"),
            Visit(1, "head", 1.0, "ok"),
            Visit(1, "head", 1.0, "ok"),
            Visit(1, "base", 1.0, "ok"),
            Visit(2, "base", 1.0, "ok"),
        ],
    )
    assert result.pairs() == [(1.0, 1.0), (1.0, 1.0)]


def test_head_failures_are_the_points_head_ran_out_of_memory_or_failed_on():
    def point(head: str, base: str = "ok") -> PointResult:
        return PointResult(POINT, {}, [Visit(0, "base", 1.0, base), Visit(0, "head", None, head)])

    statuses = ["ok", "oom", "error: ValueError: bad", "wrong: max abs error 1", "unsupported: x"]
    # only the points are read: the sides, plan and threads play no part
    result = AbResult(None, None, 1, None, 1, [point(s) for s in statuses])
    assert result.head_failures() == ["oom", "error: ValueError: bad"]
    assert AbResult(None, None, 1, None, 1, [point("ok", base="oom")]).head_failures() == []


# --- the sides ---------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def scratch_repo(tmp_path) -> Path:
    """A git repository with one commit holding a stand-in attnbench package."""
    repo = tmp_path / "repo"
    (repo / "attnbench").mkdir(parents=True)
    (repo / "attnbench" / "__init__.py").write_text('WHERE = "scratch"\n')
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    return repo


def test_a_revision_gets_a_worktree_and_a_venv_that_imports_it(scratch_repo, tmp_path):
    cache = tmp_path / "cache"
    side = revision_side("base", scratch_repo, "HEAD", cache, "base")
    sha = git(scratch_repo, "rev-parse", "HEAD")
    assert side.sha == sha and side.source == cache / sha / "src"
    assert (side.source / "attnbench" / "__init__.py").is_file()
    assert str(side.source) in git(scratch_repo, "worktree", "list")
    assert git(side.source, "rev-parse", "HEAD") == sha
    pths = {p.name: p.read_text() for p in (cache / sha / "venv").rglob("*.pth")}
    assert pths[SOURCE_PTH] == f"{side.source}\n"
    assert pths[SHARED_PTH].split() == shared_site_dirs()
    assert sorted(pths)[0] == SOURCE_PTH  # read first: the source comes first on sys.path
    assert json.loads((cache / sha / READY).read_text())["source"] == str(side.source)
    found = subprocess.run(
        [
            str(side.python),
            "-I",
            "-c",
            "import attnbench, numpy; print(attnbench.__file__, attnbench.WHERE)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert found == [str(side.source / "attnbench" / "__init__.py"), "scratch"]


def test_a_prepared_side_is_reused(scratch_repo, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = revision_side("base", scratch_repo, "HEAD", cache, "base")
    marker = cache / first.sha / READY
    made = marker.stat().st_mtime_ns
    ran = []
    real = sides_module.run_tool

    def noted(args: list[str], *rest, **options) -> str:
        ran.append(args[3])  # after git -C REPO
        return real(args, *rest, **options)

    monkeypatch.setattr(sides_module, "run_tool", noted)
    assert revision_side("base", scratch_repo, "HEAD", cache, "base") == first
    assert ran == ["rev-parse"]  # no checkout, no new venv
    assert marker.stat().st_mtime_ns == made


def test_a_side_whose_worktree_was_deleted_is_made_again(scratch_repo, tmp_path):
    cache = tmp_path / "cache"
    side = revision_side("base", scratch_repo, "HEAD", cache, "base")
    subprocess.run(["rm", "-rf", str(side.source)], check=True)  # git still lists it
    again = revision_side("base", scratch_repo, "HEAD", cache, "base")
    assert (again.source / "attnbench" / "__init__.py").is_file()


def test_a_directory_side_is_keyed_by_its_path(scratch_repo, tmp_path):
    cache = tmp_path / "cache"
    side = directory_side("head", scratch_repo, cache, "head_dir")
    assert side.sha is None and side.source == scratch_repo.resolve()
    assert side.python.parent.parent.parent.name.startswith("dir-")
    assert directory_side("head", scratch_repo, cache, "head_dir") == side
    with pytest.raises(FieldError, match="holds no attnbench package"):
        directory_side("head", tmp_path / "cache", cache, "head_dir")


def test_a_bad_revision_is_a_field_error(scratch_repo, tmp_path):
    for rev in ("no-such-branch", "-x", "HEAD~5"):
        with pytest.raises(FieldError, match="not a") as caught:
            revision_side("base", scratch_repo, rev, tmp_path / "cache", "base")
        assert caught.value.field == "base"


def test_the_cache_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "attnbench" / "ab"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "attnbench" / "ab"


def test_a_bad_base_exits_2_with_one_line(scratch_repo, tmp_path, monkeypatch):
    study = tmp_path / "tiny.yaml"
    study.write_text(TINY_STUDY)
    monkeypatch.chdir(scratch_repo)
    result = runner.invoke(
        app, ["ab", "--base", "nope", str(study), "--cache-dir", str(tmp_path / "cache")]
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: --base nope: not a commit of the repository {scratch_repo.resolve()}"
    ]
    both = runner.invoke(
        app, ["ab", "--base", "HEAD", "--head", "HEAD", "--head-dir", ".", str(study)]
    )
    assert both.exit_code == 2 and "give one or the other" in both.output
    over = runner.invoke(app, ["ab", "--base", "HEAD", str(study), "--json", str(study)])
    assert over.exit_code == 2
    assert f"--json {study}: is the STUDY.yaml file, an input of this command" in over.output
    assert study.read_text() == TINY_STUDY


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--cache-dir", "afile"], "--cache-dir afile: is a file, not a directory"),
        (["--cache-dir", "afile/x"], "--cache-dir afile/x: lies under afile, a file, not a"),
        (["--rounds", "10001"], "--rounds 10001: must be at most 10,000"),
        # each number flag echoed as typed, as every other command's
        (["--rounds", "1e3"], "--rounds 1e3: expected an integer"),
        (["--visit-time", "abc"], "--visit-time abc: expected a number"),
        (["--threads", "x"], "--threads x: expected an integer"),
    ],
)
def test_a_cache_dir_that_is_a_file_and_endless_rounds_are_refused_first(
    tmp_path, monkeypatch, flags, message
):
    """Before any side is checked out: a cache folder that cannot be one, and a number of
    rounds that would sample for years."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    study = tmp_path / "tiny.yaml"
    study.write_text(TINY_STUDY)
    line = one_error(runner.invoke(app, ["ab", "--base", "HEAD", str(study), *flags]))
    assert line.startswith(f"error: {message}")


def test_ab_refuses_a_study_without_decode_points(tmp_path):
    """A study of a predict section alone times no decode point: refused, not the
    default decode section timed in its place."""
    study = tmp_path / "predict.yaml"
    study.write_text("predict:\n  d_model: 64\n  num_heads: 2\n  seq_len: 128\n")
    result = runner.invoke(app, ["ab", "--base", "HEAD", str(study)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {study}: no decode section: ab times the decode steps a study runs "
        "(this one runs predict)\n"
    )


def test_ab_never_writes_over_a_users_logs(tmp_path):
    study = tmp_path / "tiny.yaml"
    study.write_text(TINY_STUDY)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "head.log").write_text("my notes\n")
    result = runner.invoke(app, ["ab", "--base", "HEAD", str(study), "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: --out {out}: holds head.log already, which the workers' logs would "
        "replace: give an empty or new directory, or --force\n"
    )
    assert (out / "head.log").read_text() == "my notes\n"
    (out / "head.log").unlink()
    os.symlink(study, out / "base.log")  # with --force, never the study it times
    result = runner.invoke(app, ["ab", "--base", "HEAD", str(study), "--out", str(out), "--force"])
    assert result.exit_code == 2
    assert f"--out {out / 'base.log'}: is the STUDY.yaml file" in result.stderr
    assert study.read_text() == TINY_STUDY


def test_a_worker_replaces_a_log_it_may_replace_never_writing_through_it(tmp_path):
    """With --force a log of an earlier run is replaced; a symlink there is replaced by
    the log, the file it pointed to left as it was."""
    kept = tmp_path / "kept.txt"
    kept.write_text("kept\n")
    log = tmp_path / "logs" / "base.log"
    log.parent.mkdir()
    os.symlink(kept, log)
    worker = Worker(Side("base", tmp_path, Path(sys.executable)), log)
    try:
        worker.start(1, "cpu")
    finally:
        worker.close()
    assert kept.read_text() == "kept\n" and not log.is_symlink()


@pytest.mark.integration
def test_a_worker_that_imports_another_attnbench_stops_with_one_line(tmp_path):
    """The running python imports this checkout's attnbench, not the side's source."""
    (tmp_path / "attnbench").mkdir()
    side = Side("base", tmp_path, Path(sys.executable))
    worker = Worker(side, tmp_path / "logs" / "base.log")
    try:
        with pytest.raises(UsageError) as caught:
            worker.start(1, "cpu")
            worker.greet()
    finally:
        worker.close()
    message = str(caught.value)
    assert "\n" not in message and "the base worker" in message and "exit code 1" in message
    assert f"not from {tmp_path}" in message


# --- end to end --------------------------------------------------------------------------


@pytest.fixture
def repo_root(monkeypatch) -> Path:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    monkeypatch.chdir(ROOT)
    return ROOT


@pytest.mark.integration
def test_ab_times_head_against_base_in_one_job(repo_root, tmp_path):
    study = tmp_path / "tiny.yaml"
    study.write_text(TINY_STUDY)
    out = tmp_path / "ab.json"
    cache = tmp_path / "cache"
    args = [
        "ab",
        "--base",
        "HEAD",
        "--head-dir",
        str(repo_root),
        str(study),
        "--rounds",
        "1",
        "--visit-time",
        "0.02",
        "--threads",
        "1",
        "--cache-dir",
        str(cache),
        "--out",
        str(tmp_path / "logs"),
        "--json",
        str(out),
        "--quiet",
    ]
    try:
        result = runner.invoke(app, args)
    finally:
        for src in cache.glob("*/src"):
            git(repo_root, "worktree", "remove", "--force", str(src))
    doc = json.loads(out.read_text())
    assert result.exit_code == doc["exit_code"] == 0, result.output  # 2 pairs: no failure
    assert "step_ms_median" in result.output
    (row,) = doc["rows"]
    assert row["metric"] == "step_ms_median"
    assert row["verdict"] in ("unchanged", "inconclusive") and row["ratio"] > 0
    assert row["config"]["d_model"] == 64 and row["config"]["gen_len"] == 0
    ab = doc["ab"]
    assert ab["base"]["sha"] == git(repo_root, "rev-parse", "HEAD")
    assert ab["head"]["source"] == str(repo_root)
    assert ab["head"]["attnbench"] == str(repo_root / "attnbench" / "__init__.py")
    assert ab["base"]["attnbench"].startswith(str(cache))
    assert (ab["rounds"], ab["order"], ab["threads"]) == (1, "ABBA", 1)
    (point,) = ab["points"]
    visits = [(v["round"], v["side"]) for v in point["visits"]]
    assert visits == visit_order(1)
    assert all(v["status"] == "ok" and v["step_ms_median"] > 0 for v in point["visits"])
    assert {p.name for p in (tmp_path / "logs").iterdir()} == {"base.log", "head.log"}


def test_a_noisy_visit_is_a_timed_visit():
    """A point whose step is noisy was timed: the visit says ok (ab judges the spread
    itself, round by round), while a point that did not run keeps its status."""
    from types import SimpleNamespace

    from attnbench.ab.worker import _status
    from attnbench.experiments import decode

    for status in (decode.OK, decode.NOISY, decode.FEW_SAMPLES, decode.BUSY):
        assert _status(SimpleNamespace(status=status)) == "ok"
    assert _status(SimpleNamespace(status="oom")) == "oom"
    assert _status(SimpleNamespace(status="wrong: max error 1")) == "wrong: max error 1"


def test_a_worker_rebuilds_a_point_in_this_revision_form_and_refuses_fields_it_lacks():
    from types import SimpleNamespace

    from attnbench.ab.worker import rebuilt
    from attnbench.experiments import decode
    from attnbench.experiments.context import Context

    sent = {k: v for k, v in dataclasses.asdict(POINT).items() if k != "options"}
    options = dataclasses.asdict(POINT.options)
    point, context = rebuilt(decode, {"point": sent, "options": options}, Context, "cpu")
    assert point == POINT and context == Context(device="cpu")
    # an earlier revision: options in the context, unset new fields left out
    earlier = SimpleNamespace(DecodePoint=lambda **f: f, DecodeOptions=None)
    earlier.DecodePoint.__dataclass_fields__ = {k: None for k in sent if k != "block_size"}
    point, context = rebuilt(earlier, {"point": sent, "options": options}, dict, "cpu")
    assert "block_size" not in point and context == {"device": "cpu", "options": options}
    with pytest.raises(ValueError, match="have no block_size"):
        rebuilt(earlier, {"point": {**sent, "block_size": 16}, "options": options}, dict, "cpu")
