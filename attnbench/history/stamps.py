"""The commit a run is filed under: the one its file names, else HEAD of the checkout
here; its branch and date, each given or read from the file or from git."""

from __future__ import annotations

import datetime
import re
import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import BRIEF_WIDTH, FieldError, UsageError, brief, spelled, typed
from .store import Commit

if TYPE_CHECKING:
    from ..study.documents import Document


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def current_commit() -> Commit | None:
    """HEAD of the git checkout here: its sha, branch (None when detached) and commit
    date (ISO 8601, git's %cI, in UTC: see parse_date); None outside a checkout."""
    sha = _git("rev-parse", "HEAD")
    if sha is None:
        return None
    ref = _git("symbolic-ref", "-q", "HEAD")  # none when detached
    branch = ref.removeprefix("refs/heads/") if ref else None
    date = _git("-c", "format.pretty=%cI", "show", "-s")
    return Commit(sha, branch, parse_date(date) if date else None)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def stamp_of(
    document: Document,
    head: Commit | None,
    commit: str | None = None,
    branch: str | None = None,
    date: str | None = None,
) -> Commit | None:
    """The commit a run is filed under: `commit`, else the one its environment names
    (`git_commit`: the file may come from another checkout or an archive), else `head`'s;
    dated `date`, else when the file was written (`created`). A run of HEAD's commit also
    gets HEAD's branch, and HEAD's commit date when the file has none. None when
    nothing names a commit."""
    sha = commit or _text((document.environment or {}).get("git_commit"))
    if sha is None and head is not None:
        sha = head.sha
    if sha is None:
        return None
    known = head if head is not None and head.sha == sha else Commit(sha)
    created = _text((document.raw or {}).get("created"))  # checked as the file was read
    if created is not None:
        created = parse_date(created)
    return Commit(sha, branch or known.branch, date or created or known.date)


def stamps_of(
    paths: Sequence[str],
    documents: Sequence[Document],
    commit: str | None = None,
    branch: str | None = None,
    date: str | None = None,
) -> list[Commit]:
    """The commit each document (read from the file at the same place in `paths`) is
    filed under (stamp_of), HEAD's read once; FieldError when one names none and no
    checkout is here."""
    head = current_commit()
    if commit is not None:
        commit = resolved(commit)
    stamps = []
    for path, document in zip(paths, documents, strict=True):
        named = (document.environment or {}).get("git_commit")
        if (
            commit is None
            and named not in (None, "")
            and (problem := name_problem("commit", named) or commit_problem(named))
        ):
            raise UsageError(f"{path}: environment.git_commit {spelled(named)}: {problem}")
        stamp = stamp_of(document, head, commit, branch, date)
        if stamp is None:
            reason = f"not in a git checkout: name the commit measured ({path} names none)"
            raise FieldError("commit", None, reason)
        stamps.append(stamp)
    return stamps


#: What makes a name a git revision rather than a commit's own name: HEAD, ancestry
#: (HEAD~3, v1^2) and reflogs (@{1}).
_REVISION = re.compile(r"[~^]|@\{|^HEAD$")
#: The characters git takes in no branch or tag name (git check-ref-format): ASCII
#: control characters, space, ~ ^ : ? * [ and backslash.
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
#: Hexadecimal digits: a sha, of 4 to 64 of them.
_HEX = re.compile(r"[0-9a-fA-F]+")


def named_elsewhere(commit: str) -> bool:
    """Whether `commit` names nothing of the git checkout here, which there is (its HEAD
    resolves), and is no sha either: a label, or a branch's name mistyped, filed as it is
    (resolved)."""
    in_checkout = _git("rev-parse", "HEAD") is not None
    sha = _HEX.fullmatch(commit) is not None and 4 <= len(commit) <= 64
    return in_checkout and not sha and resolved(commit) == commit


def resolved(commit: str) -> str:
    """A commit given by name as the commit it names: a revision the checkout here resolves
    (HEAD~3, a branch, a tag, a short sha) as its full sha, else the text itself, a
    commit named from elsewhere (another checkout's sha, a label); FieldError for a
    revision that resolves to nothing here, rather than filing runs under 'HEAD~3', and
    for a name no commit has (commit_problem: 'HEAD:README.md' names a file's blob)."""
    found = None if commit.startswith("-") else _git("rev-parse", f"{commit}^{{commit}}")
    # a commit's sha, not what rev-parse echoes of an argument it cannot parse ('[^')
    sha = found if found and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", found) else None
    if sha:
        return sha
    if _REVISION.search(commit):
        reason = "names no commit of a git checkout here; give the commit's sha"
        raise FieldError("commit", _shown(commit), reason)
    if problem := commit_problem(commit):
        raise FieldError("commit", _shown(commit), problem)
    return commit


def commit_problem(name: str) -> str | None:
    """Why `name`, a commit named as it is (no revision of a checkout here), names none:
    a sha has 4 to 64 hexadecimal digits, and any other name is one git takes for a
    branch or tag (git check-ref-format, a name of one part allowed). None when it may
    name one."""
    if _long_sha(name):
        return f"{len(name):,} hexadecimal digits: a sha has 4 to 64"
    if problem := _ref_problem(name):
        return f"not a name of a commit: {problem}; give the commit's sha, a branch or a tag"
    return None


def _long_sha(name: str) -> bool:
    return len(name) > 64 and _HEX.fullmatch(name) is not None


def _ref_problem(name: str) -> str | None:
    """Why git takes `name` for no branch or tag (git check-ref-format's rules), or None."""
    if found := _REF_FORBIDDEN.search(name):
        return f"it holds {found.group()!r}"
    parts = name.split("/")
    rules = {
        "it holds '..'": ".." in name,
        "it holds '@{'": "@{" in name,
        "it is '@'": name == "@",
        "it ends with '.'": name.endswith("."),
        "it has an empty part (a '/' first, last or doubled)": "" in parts,
        "a part of it begins with '.'": any(part.startswith(".") for part in parts),
        "a part of it ends with '.lock'": any(part.endswith(".lock") for part in parts),
    }
    return next((why for why, broken in rules.items() if broken), None)


def _shown(text: str) -> str:
    """`text` in an error message: as typed (errors.typed), cut where it is long."""
    return typed(text) if len(text) <= BRIEF_WIDTH else brief(text)


def parse_date(text: str) -> str:
    """An ISO 8601 date, or date and time, in its extended form ('20261005' ->
    '2026-10-05'), a time with an offset in UTC ('2024-01-01T10:00:00+09:00' ->
    '2024-01-01T01:00:00+00:00'): the series are ordered by these dates as text."""
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise FieldError(
            "date",
            typed(text),
            "expected an ISO 8601 date, e.g. 2026-10-05 or 2026-10-05T12:00:00+00:00",
        ) from None
    try:
        if moment.tzinfo is not None:
            moment = moment.astimezone(datetime.timezone.utc)
    except OverflowError:  # 0001-01-01T00:00+01:00 is in the year 0 in UTC
        raise FieldError("date", typed(text), "is outside the years 1 to 9999 in UTC") from None
    return moment.isoformat()


def name_problem(field: str, text: object) -> str | None:
    """Why `text` names no commit or branch (`field`): one word, never empty; None when
    it does."""
    if not isinstance(text, str):
        return f"expected a {field} as a string, got {spelled(text)}"
    if text.isprintable() and text and " " not in text:
        return None
    if not text.strip():
        return f"empty; name the {field}"
    return f"a {field} is one word, without spaces or control characters"


def check_name(field: str, text: str | None) -> None:
    """A commit or a branch (`field`) given by its flag is named by one word."""
    if text is not None and (problem := name_problem(field, text)):
        raise FieldError(field, _shown(text), problem)
