"""Only the command line names flags: no string or docstring of attnbench outside
attnbench/cli/ spells one (`--tp`). The library names fields (`tp`); the CLI, which
alone knows the flags, renders them."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "attnbench"
#: A flag: two dashes and a letter, not inside a word or a longer run of dashes (so the
#: Markdown rule "---:" and "a--b" are not flags).
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def flags_in_strings(source: str) -> list[tuple[int, str]]:
    """(line, flag) for each flag in a string literal or docstring of `source`; comments
    and code are not looked at."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.STRING or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            for m in FLAG.finditer(token.string):
                line = token.start[0] + token.string.count("\n", 0, m.start())
                found.append((line, m.group()))
    return found


def library_files() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] != "cli"]


def test_the_scan_finds_flags_in_strings_only():
    source = '''"""Docstring naming
--seq-len on its second line."""
x = f"give --tp {n}"  # a comment naming --batch is not a string
rule = "|---:|---|"
word = "pre--post"
field = "seq_len"
'''
    assert flags_in_strings(source) == [(2, "--seq-len"), (3, "--tp")]


def test_the_library_outside_the_cli_names_no_flag():
    files = library_files()
    assert PACKAGE / "study" / "runner.py" in files
    assert not any("cli" in p.relative_to(PACKAGE).parts for p in files)
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {flag}"
        for path in files
        for line, flag in flags_in_strings(path.read_text(encoding="utf-8"))
    ]
    assert found == []
