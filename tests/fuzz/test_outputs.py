"""Property-based fuzzing of where a study writes and what it resumes: output directories
holding anything (the user's files, a share of a study), file names of any length and
character for outputs and inputs, a study's CSV and lock file damaged before --resume, and
--max-points as typed.

For every input: no traceback, an exit code the docs promise, and for bad input one
`error:` line (test_fuzz.invoke); and each its own rule: a refused command changes nothing,
a run writes over no file but the study's own, a share is never replaced, a name too long
is never echoed whole, and a resumed CSV keeps every column of every row.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import shutil
import socket
import threading
from pathlib import Path

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from attnbench.model.files import NAME_MAX
from attnbench.records import csv_fields
from attnbench.study.plan import MAX_POINTS
from attnbench.study.runner import (
    RESULTS_FILE,
    DirectoryStore,
    plan_study,
    run_experiment,
    run_study,
)
from attnbench.study.sections import KINDS
from attnbench.study.stores import LOCK_FILE
from tests.fuzz.test_flags import invoke

#: Two params points and one kvmem point (not measured): a study that runs in milliseconds.
STUDY = """\
defaults: {d_model: 64, num_heads: 4}
params: {num_kv_heads: [4, 1]}
kvmem: {batch: 1, seq_len: 16, measure: false}
"""
POINTS = 3
#: The files a study writes into its directory (any of them may be replaced).
STUDY_FILES = re.compile(rf"{RESULTS_FILE}|(params|kvmem)\.csv|report\.md|.*\.png|{LOCK_FILE}.*")
#: What a study leaves in a directory with anything else: a lock (or one moved aside), a
#: results.json being replaced, its shares.
OWN = re.compile(rf"{re.escape(LOCK_FILE)}(\..*)?|shards|\.{re.escape(RESULTS_FILE)}\..*")


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """The sweep file; `started/`, the study stopped after its first point; `done/`, the
    study finished; `sharded/`, the study in two shares, not merged."""
    base = tmp_path_factory.mktemp("outputs")
    config = base / "study.yaml"
    config.write_text(STUDY)
    stop = threading.Event()

    def first_only(task, context):
        stop.set()
        return run_experiment(task, context)

    run_study(plan_study(config), DirectoryStore(base / "started"), stop=stop, execute=first_only)
    invoke(["run", str(config), "--out", str(base / "done"), "-q"], "run", codes={0})
    for i in range(2):
        args = ["run", str(config), "--out", str(base / "sharded"), "--shard", f"{i}/2", "-q"]
        invoke(args, "run", codes={0})
    return base


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every file under `folder` (None for a directory) by its path there."""
    return {
        str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
    }


@contextlib.contextmanager
def fresh(tmp_path_factory, name: str):
    """A new empty folder, the current one inside."""
    folder = tmp_path_factory.mktemp(name)
    with contextlib.chdir(folder):
        yield folder


# --- output directories ------------------------------------------------------------------

file_names = st.one_of(
    st.sampled_from(
        [
            "results.json",
            "report.md",
            "params.csv",
            "kvmem.csv",
            "notes.txt",
            "kv_memory_heads.png",
            LOCK_FILE,
            f"{LOCK_FILE}.1.stale",
            "shards",
            ".results.json.x.tmp",
            "study.yaml",
            "Report.MD",
            ".hidden",
        ]
    ),
    st.text(
        st.characters(blacklist_categories=["Cs"], blacklist_characters="/\x00"),
        min_size=1,
        max_size=12,
    ).filter(lambda n: n not in (".", "..")),
)
contents = st.one_of(
    st.binary(max_size=24),
    st.sampled_from([b"", b"1 other-host\n", b'{"command": "run"}', b"variant,d_model\nMHA,64\n"]),
)
#: What each command writes a study's files from.
WRITERS = {
    "run": ["run", "study.yaml"],
    "merge": ["merge", "sharded"],
    "plot": ["plot", f"done/{RESULTS_FILE}"],
    "report": ["report", f"done/{RESULTS_FILE}"],
}


@given(
    st.lists(st.tuples(file_names, contents), max_size=4, unique_by=lambda entry: entry[0]),
    st.sampled_from(sorted(WRITERS)),
    st.booleans(),
)
def test_an_output_directory_holding_anything(tmp_path_factory, base, entries, command, force):
    with fresh(tmp_path_factory, "out") as here:
        for name in ("study.yaml", "done", "sharded"):
            os.symlink(base / name, here / name)
        out = here / "out"
        out.mkdir()
        for name, data in entries:
            (out / name).write_bytes(data)
        before = tree(out)
        args = [*WRITERS[command], "--out", "out", "-q", *["--force"] * force]
        result = invoke(args, command, codes={0, 2})
        after = tree(out)
    event(f"exit {result.exit_code}")
    foreign = [n for n, _ in entries if not OWN.fullmatch(n)]
    if result.exit_code == 2:
        assert after == before, result.stderr  # refused: nothing written, nothing removed
    if not entries:
        assert result.exit_code == 0, result.stderr
    if foreign and not force and RESULTS_FILE not in before:  # not a study (of a run) there
        assert result.exit_code == 2 and "holds files that are not a study's" in result.stderr
    for name, data in before.items():  # what is not the study's is never written over
        if not STUDY_FILES.fullmatch(name):
            assert after.get(name) == data, name


share_spellings = st.sampled_from(
    [
        "sharded/shards/{i}-of-2",
        "sharded/shards/{i}-of-2/",
        "./sharded/shards/../shards/{i}-of-2",
        "link-{i}",
    ]
)


@given(
    st.integers(0, 1),
    share_spellings,
    st.sampled_from(["merge --out", "merge --out --force", "merge the shares", "run --out"]),
)
def test_a_share_is_never_replaced(tmp_path_factory, base, index, spelling, how):
    shares = base / "sharded" / "shards"
    before = tree(shares)
    with fresh(tmp_path_factory, "share"):
        os.symlink(base / "sharded", "sharded")
        for i in range(2):
            os.symlink(shares / f"{i}-of-2", f"link-{i}")
        share = spelling.format(i=index)
        other = spelling.format(i=1 - index)
        args = {
            "merge --out": ["merge", "sharded", "--out", share],
            "merge --out --force": ["merge", "sharded", "--out", share, "--force"],
            "merge the shares": ["merge", share, other],
            "run --out": ["run", str(base / "study.yaml"), "--out", share],
        }[how]
        result = invoke(args, "merge", codes={2})
    assert "share" in result.stderr
    assert tree(shares) == before


# --- file names --------------------------------------------------------------------------

odd_names = st.one_of(
    st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=24),
    st.integers(NAME_MAX - 5, NAME_MAX + 60).map(lambda n: "n" * n),
    st.integers(100, 200).map(lambda n: "é" * n),  # 2 bytes a character: too long in bytes
    st.integers(NAME_MAX + 1, NAME_MAX + 40).map(lambda n: "dir/" + "x" * n + ".json"),
    st.sampled_from(
        [
            "-",
            "--",
            "-x",
            ".",
            "..",
            "/",
            "~",
            " ",
            "a\nb",
            "a\x00b",
            "[/]",
            ":x:",
            "\x1b[31m",
            "done",
            "sharded/shards",
        ]
    ),
)
#: Where a name goes, as NAME in a command line, with the exit codes it may give.
PLACES = [
    ("params --d-model 64 --heads 4 --csv NAME", {0, 2}),
    ("kvmem --d-model 64 --heads 4 --no-measure --json NAME", {0, 2}),
    ("params --config NAME", {0, 2}),
    ("params --hf-config NAME", {0, 2}),
    ("compare NAME {base}/done/results.json", {0, 1, 2, 3}),
    ("compare {base}/done/results.json NAME --output NAME.md", {0, 1, 2, 3}),
    ("merge NAME", {0, 1, 2}),
    ("merge {base}/sharded --out NAME", {0, 2}),
    ("plot NAME", {0, 2}),
    ("report {base}/done/results.json --out NAME", {0, 2}),
    ("run NAME --dry-run", {0, 2}),
    ("run {base}/study.yaml --out NAME", {0, 2}),
    ("baseline save NAME", {0, 2}),
]


@given(odd_names, st.sampled_from(PLACES))
@example("n" * (NAME_MAX + 1), PLACES[0])
@example("n" * (NAME_MAX + 1), PLACES[4])
@example("n" * (NAME_MAX + 1), PLACES[7])
def test_any_file_name_in_or_out(tmp_path_factory, base, name, place):
    line, codes = place
    args = [word.format(base=base).replace("NAME", name) for word in line.split()]
    with fresh(tmp_path_factory, "names"):
        result = invoke(args, line.split()[0], codes=codes)
    if result.exit_code == 2:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    if len(name.encode()) > NAME_MAX:  # shown cut, not whole
        assert name not in result.stdout + result.stderr


# --- a damaged study resumed -------------------------------------------------------------

FIELDS = csv_fields(KINDS["params"].record)


def spreadsheet(text: str, delimiter: str, bom: bool) -> bytes:
    saved = "".join(delimiter.join(row) + "\r\n" for row in csv.reader(text.splitlines()))
    return saved.encode("utf-8-sig" if bom else "utf-8")


damages = st.one_of(
    st.binary(max_size=64).map(lambda data: lambda text: data),
    st.tuples(st.sampled_from([",", ";", "\t", "|"]), st.booleans()).map(
        lambda how: lambda text: spreadsheet(text, *how)
    ),
    st.sampled_from(FIELDS).map(
        lambda name: lambda text: text.replace(name, name.upper(), 1).encode()
    ),
    st.integers(0, 200).map(lambda cut: lambda text: text.encode()[:cut]),
    st.binary(max_size=16).map(lambda tail: lambda text: text.encode() + tail),
    st.just(lambda text: None),  # the CSV gone
)
locks = st.one_of(
    st.none(),
    st.text(max_size=30),
    st.integers(0, 10**30).map(lambda pid: f"{pid} {socket.gethostname()}\n"),
    st.integers(1, 10**6).map(lambda pid: f"{pid} another-host\n"),
)


@given(damages, locks)
@example(lambda text: spreadsheet(text, ";", True), None)
@example(lambda text: text.encode(), f"{10**25} {socket.gethostname()}")
def test_resume_of_a_damaged_study(tmp_path_factory, base, damage, lock):
    with fresh(tmp_path_factory, "resume") as here:
        shutil.copytree(base / "started", "out")
        out = here / "out"
        damaged = damage((out / "params.csv").read_text())
        if damaged is None:
            (out / "params.csv").unlink()
        else:
            (out / "params.csv").write_bytes(damaged)
        if lock is not None:
            (out / LOCK_FILE).write_text(lock)
        before = tree(out)
        args = ["run", str(base / "study.yaml"), "--out", "out", "--resume", "-q"]
        result = invoke(args, "run", codes={0, 2})
        after = tree(out)
    event(f"exit {result.exit_code}")
    if result.exit_code == 2:  # refused: nothing lost (a stale lock may be gone)
        assert {k: v for k, v in after.items() if k != LOCK_FILE} == {
            k: v for k, v in before.items() if k != LOCK_FILE
        }
        return
    assert LOCK_FILE not in after
    doc = json.loads(after[RESULTS_FILE])
    assert sum(len(s["records"]) for s in doc["sections"].values()) == POINTS
    rows = list(csv.DictReader(after["params.csv"].decode().splitlines()))
    assert len(rows) == len(doc["sections"]["params"]["records"])
    assert all(row[name] != "" for row in rows for name in ("variant", "num_kv_heads"))


# --- --max-points ------------------------------------------------------------------------

limits = st.one_of(
    st.integers(-5, MAX_POINTS + 5).map(str),
    st.integers(0, 10**30).map(lambda n: f"{n:,}"),
    st.integers(1, 6000).map(lambda n: "9" * n),
    st.text(max_size=12),
    st.sampled_from(["", " ", "+3", "-0", "0x10", "1e5", "3.0", "٣", "1_000", "100,000"]),
)


@given(limits)
def test_max_points_as_typed(base, text):
    result = invoke(
        ["run", str(base / "study.yaml"), "--dry-run", "--max-points", text], "run", codes={0, 2}
    )
    if result.exit_code == 0:
        limit = int(text.strip().replace(",", ""))
        assert POINTS <= limit <= MAX_POINTS
        assert f"{POINTS} points" in result.stdout
    else:
        assert "error: --max-points" in result.stderr or "more than the limit" in result.stderr
