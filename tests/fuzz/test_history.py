"""Property-based fuzzing of the history's inputs: --db paths (missing, another program's
SQLite file, noise, a directory, an empty file, names too long or odd), --where filters
(markup-like text, repeated keys), the --date, --commit and --branch of `history add`, and
the --out of `history plot`.

Besides `invoke`'s checks (no traceback, exit 0 or 2, one `error:` line per problem): a
command that only reads never creates its database, a file that is not a history is left
as it was, and a key given twice in --where matches either value.
"""

from __future__ import annotations

import datetime
import json
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnbench.history.series import typed
from attnbench.history.store import APPLICATION_ID
from tests.fuzz.test_flags import invoke

#: The files a --db may name, made once (see `world`); "missing" and "long" name none.
PLACES = ["history", "missing", "foreign", "noise", "empty", "folder", "long"]
#: Text a user might type that rich, emoji codes or mathtext could read as markup.
MARKUP = ["[/]", "[bold]", "[red]x[/red]", ":x:", ":smile:", "$\\frac$", "$x$", "\\", "=", ","]
READS = {
    "show": ["history", "show", "--metric", "kv_bytes"],
    "plot": ["history", "plot", "--metric", "kv_bytes", "--out", "OUT"],
    "changes": ["history", "changes"],
    "compare": ["compare", "KV", "--history"],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """A results file, a history holding it, and a file of each kind that holds none."""
    root = tmp_path_factory.mktemp("fuzz-history")
    kv = root / "kv.json"
    made = invoke(
        [
            "kvmem",
            "--d-model",
            "64",
            "--heads",
            "4",
            "--kv-heads",
            "4,1",
            "--no-measure",
            "--json",
            str(kv),
            "-q",
        ],
        "kvmem",
        {0},
    )
    assert made.exit_code == 0
    history = root / "history.sqlite"
    # an earlier run of the same points, and this one: compare gates it against the other
    earlier = root / "kv-earlier.json"
    doc = json.loads(kv.read_text())
    earlier.write_text(json.dumps({**doc, "created": "2020-01-01T00:00:00+00:00"}))
    for path, sha in ((earlier, "b" * 40), (kv, "a" * 40)):
        invoke(["history", "add", str(path), "--db", str(history), "--commit", sha], "add", {0})
    foreign = root / "foreign.sqlite"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE notes (text TEXT)")
    con.commit()
    con.close()
    (root / "noise.bin").write_bytes(bytes(range(256)) * 8)
    (root / "empty.sqlite").touch()
    (root / "folder").mkdir()
    return {
        "root": root,
        "kv": kv,
        "history": history,
        "foreign": foreign,
        "noise": root / "noise.bin",
        "empty": root / "empty.sqlite",
        "folder": root / "folder",
        "missing": root / "missing.sqlite",
        "long": root / ("y" * 300 + ".sqlite"),
    }


def _contents(world: dict[str, Path]) -> dict[str, bytes]:
    return {name: world[name].read_bytes() for name in ("foreign", "noise", "empty")}


def _args(command: str, world: dict[str, Path], db: str, out: str = "t.svg") -> list[str]:
    values = {"KV": str(world["kv"]), "OUT": str(world["root"] / "pictures" / out)}
    return [
        *(values.get(a, a) for a in READS[command]),
        *([] if command == "compare" else ["--db"]),
        db,
    ]


names = st.one_of(
    st.text(st.characters(blacklist_characters="/"), min_size=0, max_size=20),
    st.integers(250, 300).map(lambda n: "z" * n),
    st.sampled_from([".", "..", " ", "a\nb", "x\x00y", *MARKUP]),
)


@given(st.one_of(st.sampled_from(PLACES), names), st.sampled_from(list(READS)))
def test_a_reader_never_creates_or_changes_a_database(world, place, command):
    """Only the history is read; any other place (a file of each kind, or a name in an
    empty folder) is one error naming the flag, and is left as it was."""
    folder = world["root"] / "names"
    folder.mkdir(exist_ok=True)
    before = _contents(world)
    db = str(world[place]) if place in PLACES else f"{folder}/{place}"
    result = invoke(_args(command, world, db), command, {0, 1, 2, 3})
    assert (result.exit_code != 2) == (place == "history"), result.output
    if place != "history":
        flag = "--history" if command == "compare" else "--db"
        assert result.stderr.startswith(f"error: {flag} "), result.stderr
    assert not world["missing"].exists() and list(folder.iterdir()) == []
    assert _contents(world) == before


NOT_HISTORIES = ("foreign", "noise", "folder", "empty")


@given(st.one_of(names, st.sampled_from(NOT_HISTORIES)))
def test_add_makes_a_history_or_refuses_and_leaves_the_file_alone(tmp_path_factory, world, name):
    """Another program's file is refused as it was; a new name or an empty file becomes
    a history."""
    before = _contents(world)
    given_file = name in NOT_HISTORIES
    db = str(world[name]) if given_file else f"{tmp_path_factory.mktemp('add')}/{name}"
    result = invoke(["history", "add", str(world["kv"]), "--db", db, "-q"], "add", {0, 2})
    if result.exit_code == 0:
        con = sqlite3.connect(db)
        assert con.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        con.close()
    if name == "empty":
        assert result.exit_code == 0, result.output
        world["empty"].write_bytes(b"")  # as it was, for the other examples
    elif given_file:
        assert result.exit_code == 2 and result.stderr.startswith("error: --db "), result.output
    assert _contents(world) == before


wheres = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["variant", "num_kv_heads", *MARKUP]),
            st.sampled_from(["MHA", "MQA", "4", "1", *MARKUP]),
        ).map("=".join),
        st.text(max_size=8),
        st.sampled_from(MARKUP),
    ),
    max_size=4,
).map(",".join)


@given(wheres, st.sampled_from(["show", "changes"]))
def test_any_where_is_a_table_or_one_error_naming_it(world, where, command):
    args = _args(command, world, str(world["history"]))
    result = invoke([*args, f"--where={where}"], command, {0, 2})
    if result.exit_code == 2:
        assert result.stderr.startswith("error: --where "), result.stderr


@given(st.lists(st.sampled_from(["MHA", "MQA", "GQA-2", "[/]"]), min_size=1, max_size=4))
def test_a_key_given_twice_matches_either_value(world, variants):
    where = ",".join(f"variant={v}" for v in variants)
    result = invoke(
        [*_args("show", world, str(world["history"])), "--where", where], "show", {0, 2}
    )
    assert (result.exit_code == 0) == bool({"MHA", "MQA"} & set(variants)), result.output
    for variant in {"MHA", "MQA"}:
        assert (f"variant={variant}" in result.stdout) == (variant in variants), result.stdout


def _iso(text: str) -> bool:
    for kind in (datetime.date, datetime.datetime):
        try:
            kind.fromisoformat(text)
        except ValueError:
            continue
        return True
    return False


stamps = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            " ",
            "2026-10-05",
            "20261005T1200Z",
            "2026-13-01",
            "notadate",
            "2026-10-05T12:00:00+01:00",
            "main",
            "HEAD~1",
            "HEAD~99999",
            "a~b",
            "HEAD:README.md",
            "v1.lock",
            "a b",
            "\t",
            *MARKUP,
        ]
    ),
)


def _git_resolves(revision: str) -> bool:
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "-q", f"{revision}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0 and not revision.startswith("-")


def _git_takes_as_a_name(name: str) -> bool:
    """Whether git takes `name` for a branch or tag (git check-ref-format): given whole,
    but under refs/heads/ where it begins with '-', which git would read as an option."""
    given = f"refs/heads/{name}" if name.startswith("-") else name
    done = subprocess.run(
        ["git", "check-ref-format", "--allow-onelevel", given], capture_output=True, check=False
    )
    return done.returncode == 0


@given(st.sampled_from(["--date", "--commit", "--branch"]), stamps)
def test_add_takes_a_date_commit_or_branch_or_names_it(world, flag, value):
    """The history already holds this file: a valid add changes nothing."""
    args = ["history", "add", str(world["kv"]), "--db", str(world["history"])]
    result = invoke([*args, f"{flag}={value}"], "add", {0, 2})
    if flag == "--date":
        valid = _iso(value)
    else:
        valid = bool(value) and value.isprintable() and " " not in value
        if flag == "--commit" and valid:  # a commit of this checkout, or a name git takes
            revision = re.search(r"[~^]|@\{|^HEAD$", value)
            valid = _git_resolves(value) or (not revision and _git_takes_as_a_name(value))
    assert (result.exit_code == 0) == valid, result.output
    if not valid:
        assert result.stderr.startswith(f"error: {flag} "), result.stderr


@given(
    st.one_of(
        st.text(st.characters(blacklist_characters="/"), max_size=12),
        st.sampled_from(["a", " ", "[/]", "$x$", ":x:", "z" * 300]),
    ),
    st.sampled_from(["", ".png", ".svg", ".pdf", ".PDF", ".txt", ".jpg", "."]),
    st.sampled_from(["missing"] * 5 + ["history"]),
)
def test_plot_writes_the_picture_named_or_one_error(tmp_path_factory, world, stem, suffix, db):
    """Most examples stop at the missing database (after --out is checked), so that few
    pictures are drawn."""
    out = f"{tmp_path_factory.mktemp('plot')}/sub/{stem}{suffix}"
    result = invoke(
        ["history", "plot", "--db", str(world[db]), "--metric", "kv_bytes", "--out", out],
        "plot",
        {0, 2},
    )
    picture = Path(out).suffix.lower() in (".png", ".svg", ".pdf")
    if result.exit_code == 0:
        assert result.stdout == f"wrote {typed(out)}\n" and Path(out).is_file(), result.stdout
        assert picture
    elif not picture:
        assert result.stderr.startswith("error: --out "), result.stderr


def test_the_history_fixture_holds_two_runs_of_the_same_points(world):
    """The properties above lean on it: two kvmem runs, each of MHA and MQA (compare gates
    the later against the earlier)."""
    con = sqlite3.connect(world["history"])
    try:
        keys = [json.loads(k) for (k,) in con.execute("SELECT keys FROM records")]
    finally:
        con.close()
    assert sorted(k["variant"] for k in keys) == ["MHA", "MHA", "MQA", "MQA"]
