"""The commit, branch and date a run is filed under."""

from __future__ import annotations

import subprocess

import pytest

from attnbench.errors import FieldError, UsageError
from attnbench.history import stamps
from attnbench.history.stamps import check_name, current_commit, parse_date, stamp_of, stamps_of
from attnbench.history.store import Commit
from attnbench.study.documents import Document

HEAD = Commit("e" * 40, "main", "2026-12-01T09:00:00+01:00")


def document(sha: str | None = None, created: str | None = None) -> Document:
    raw = {"created": created} if created else {}
    return Document("r.json", "decode-speed", {}, {"git_commit": sha}, raw)


def test_a_run_is_filed_under_the_commit_its_file_names_dated_when_written():
    stamp = stamp_of(document("a" * 40, "2026-10-05T12:00:00+00:00"), HEAD)
    assert stamp == Commit("a" * 40, None, "2026-10-05T12:00:00+00:00")


def test_a_run_naming_no_commit_gets_heads_commit_branch_and_date():
    assert stamp_of(document(), HEAD) == HEAD
    assert stamp_of(document(HEAD.sha, "2026-10-05"), HEAD) == Commit(
        HEAD.sha, "main", "2026-10-05"
    )


def test_what_is_given_wins_over_the_file_and_head():
    stamp = stamp_of(document("a" * 40, "2026-10-05"), HEAD, "b" * 40, "topic", "2027-01-01")
    assert stamp == Commit("b" * 40, "topic", "2027-01-01")


def test_nothing_naming_a_commit_files_nothing():
    assert stamp_of(document(), None) is None
    assert stamp_of(Document("r.csv", "kvmem", {}, None, None), None) is None


def test_every_file_is_stamped_with_head_read_once(monkeypatch):
    calls = []
    monkeypatch.setattr(stamps, "current_commit", lambda: calls.append(1) or HEAD)
    found = stamps_of(["a.json", "b.json"], [document(), document("a" * 40)])
    assert found == [HEAD, Commit("a" * 40, None, None)] and calls == [1]


def test_outside_a_checkout_a_file_naming_no_commit_is_refused(monkeypatch):
    monkeypatch.setattr(stamps, "current_commit", lambda: None)
    with pytest.raises(FieldError) as caught:
        stamps_of(["a.json", "b.json"], [document("a" * 40), document()])
    assert (caught.value.field, caught.value.value) == ("commit", None)
    assert caught.value.reason == (
        "not in a git checkout: name the commit measured (b.json names none)"
    )


def git(repo, *args: str) -> str:
    identity = ["-c", "user.name=a", "-c", "user.email=a@example.com"]
    done = subprocess.run(["git", *identity, *args], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_head_is_read_from_the_checkout_here(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.chdir(tmp_path)
    assert current_commit() is None  # not a checkout
    git(tmp_path, "init", "-q", "-b", "feature/x")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2026-10-05T12:00:00+02:00")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "one")
    sha = git(tmp_path, "rev-parse", "HEAD")
    assert current_commit() == Commit(sha, "feature/x", "2026-10-05T10:00:00+00:00")
    git(tmp_path, "checkout", "-q", "--detach")
    assert current_commit() == Commit(sha, None, "2026-10-05T10:00:00+00:00")


def test_a_revision_given_is_filed_as_the_commit_it_names(tmp_path, monkeypatch):
    """--commit HEAD~1 files the run under that commit's sha, not under 'HEAD~1'; a
    name the checkout does not know is kept (a sha from elsewhere, a label), unless it
    is a revision, which names nothing without its checkout."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FieldError, match="HEAD~1: names no commit"):
        stamps.resolved("HEAD~1")  # not a checkout
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "one")
    first = git(tmp_path, "rev-parse", "HEAD")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "two")
    assert stamps.resolved("HEAD~1") == stamps.resolved(first[:8]) == first
    assert stamps.resolved("main") == git(tmp_path, "rev-parse", "HEAD")
    assert stamps.resolved("c1") == "c1" and stamps.resolved("f" * 40) == "f" * 40
    with pytest.raises(FieldError, match="HEAD~5"):
        stamps.resolved("HEAD~5")
    with pytest.raises(FieldError, match=r"\[\^: names no commit"):
        stamps.resolved("[^")  # plain rev-parse echoes it back, as if it were a sha


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2026-10-05", "2026-10-05"),
        ("20261005", "2026-10-05"),
        ("20261005T1200Z", "2026-10-05T12:00:00+00:00"),
        ("2026-10-05T12:00:00+02:00", "2026-10-05T10:00:00+00:00"),  # ordered as text: UTC
        ("2026-10-05T12:00:00", "2026-10-05T12:00:00"),
    ],
)
def test_a_date_is_read_in_the_extended_iso_form(text, iso):
    assert parse_date(text) == iso


def test_a_date_outside_the_years_utc_holds_is_refused_not_a_traceback():
    with pytest.raises(FieldError) as caught:
        parse_date("0001-01-01T00:00:00+01:00")
    assert caught.value.reason == "is outside the years 1 to 9999 in UTC"


@pytest.mark.parametrize(
    ("text", "shown"), [("notadate", "notadate"), (" 2026-10-05", "' 2026-10-05'")]
)
def test_a_bad_date_names_the_field_and_the_text_as_typed(text, shown):
    with pytest.raises(FieldError) as caught:
        parse_date(text)
    assert (caught.value.field, caught.value.value) == ("date", shown)
    assert caught.value.reason.startswith("expected an ISO 8601 date, e.g. 2026-10-05")


@pytest.mark.parametrize("text", [None, "main", "feature/x", "0123abc"])
def test_a_name_of_one_word_is_taken(text):
    assert check_name("branch", text) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty; name the commit"),
        ("  ", "empty; name the commit"),
        ("a b", "a commit is one word, without spaces or control characters"),
        ("a\nb", "a commit is one word, without spaces or control characters"),
    ],
)
def test_a_name_that_is_not_one_word_is_refused(text, reason):
    with pytest.raises(FieldError) as caught:
        check_name("commit", text)
    assert caught.value.field == "commit" and caught.value.reason == reason


@pytest.mark.parametrize(
    ("named", "problem"),
    [
        ("a b\nc", "'a b\\nc': a commit is one word, without spaces or control characters"),
        (5, "5: expected a commit as a string, got 5"),
    ],
)
def test_a_files_commit_is_checked_as_the_flag_is(monkeypatch, named, problem):
    monkeypatch.setattr(stamps, "current_commit", lambda: HEAD)
    with pytest.raises(UsageError) as caught:
        stamps_of(["a.json"], [document(named)])
    assert str(caught.value) == f"a.json: environment.git_commit {problem}"
    assert stamps_of(["a.json"], [document(named)], commit="c" * 40)[0].sha == "c" * 40


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("a" * 65, "65 hexadecimal digits: a sha has 4 to 64"),
        ("HEAD:README.md", "not a name of a commit: it holds ':'"),
        ("a..b", "it holds '..'"),
        ("v1@{x", "it holds '@{'"),
        ("@", "it is '@'"),
        ("v1.", "it ends with '.'"),
        ("/main", "it has an empty part"),
        ("a//b", "it has an empty part"),
        ("x/.hidden", "a part of it begins with '.'"),
        ("main.lock", "a part of it ends with '.lock'"),
        ("a*b", "it holds '*'"),
        ("a\\b", "it holds '\\\\'"),
    ],
)
def test_a_name_no_commit_has_is_refused(name, problem):
    assert problem in (stamps.commit_problem(name) or "")


@pytest.mark.parametrize("name", ["a" * 64, "a" * 40, "0123", "v1.0", "feature/x", "mian", "c1"])
def test_a_sha_a_branch_or_a_label_may_name_a_commit(name):
    assert stamps.commit_problem(name) is None


def test_a_commit_named_as_no_commit_is_refused_by_add_in_one_short_line(
    tmp_path, kvmem_run, monkeypatch
):
    """In a checkout, HEAD:README.md (a file's blob) names no commit, and was filed under
    that label; a 100,000-digit hexadecimal string was filed as a sha. Outside one too."""
    from tests.history.test_store import one_error, run_cli, write

    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.chdir(tmp_path)
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "README.md").write_text("x")
    git(tmp_path, "add", "README.md")
    git(tmp_path, "commit", "-q", "-m", "one")
    path = write(tmp_path / "kv.json", kvmem_run)
    long = "a" * 100_000
    refused = [
        ("HEAD:README.md", "--commit HEAD:README.md: not a name of a commit: it holds ':'"),
        (long, f"--commit '{'a' * 56}...: 100,000 hexadecimal digits: a sha has 4 to 64"),
    ]
    for commit, message in refused:
        result = run_cli("history", "add", path, "--db", "h.db", "--commit", commit)
        one_error(result, message)
        assert len(result.output) < 200 and not (tmp_path / "h.db").exists()
    named = {**kvmem_run, "environment": {**kvmem_run["environment"], "git_commit": "v1:x"}}
    one_error(
        run_cli("history", "add", write(tmp_path / "n.json", named), "--db", "h.db"),
        "n.json: environment.git_commit 'v1:x': not a name of a commit: it holds ':'",
    )
