"""Status lines (`wrote PATH ...`) are one line each, so a log can be searched and a path
copied from it, whatever the width tables are fitted to."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attnbench.cli import app

runner = CliRunner()


def long_path(tmp_path, name: str):
    """A path far longer than any terminal is wide."""
    return tmp_path.joinpath(*["a-rather-long-folder-name"] * 16, name)


def params_json(tmp_path):
    path = tmp_path / "params.json"
    args = ["params", "--d-model", "128", "--heads", "8", "--kv-heads", "8,1", "--json", path]
    result = runner.invoke(app, [*map(str, args), "-q"])
    assert result.exit_code == 0, result.output
    return path


def test_a_long_path_is_written_where_it_says(tmp_path):
    src = params_json(tmp_path)
    dest = long_path(tmp_path, "saved.json")
    result = runner.invoke(app, ["baseline", "save", str(src), "--to", str(dest)])
    assert result.exit_code == 0, result.output
    assert json.loads(dest.read_text()) == json.loads(src.read_text())
    assert f"wrote {dest}" in "".join(result.stdout.splitlines())


@pytest.mark.parametrize("command", ["baseline save", "compare --output"])
def test_a_status_line_is_never_wrapped(tmp_path, command):
    src = params_json(tmp_path)
    dest = long_path(tmp_path, "out.json")
    if command == "baseline save":
        args = ["baseline", "save", str(src), "--to", str(dest)]
    else:
        args = ["compare", str(src), str(src), "--output", str(dest), "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"wrote {dest}")
