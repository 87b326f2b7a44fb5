"""Start-up: `attnbench --help` and every command's help load neither torch, matplotlib
nor numpy (seconds of start-up on a small machine); the commands that measure nothing
load neither matplotlib nor torch's compiler, and those that only compute from formulas
load none of them. Each check runs in a fresh interpreter,
whose sys.modules says what was loaded."""

from __future__ import annotations

import json
import subprocess
import sys

from attnbench.modules.provider_names import PROVIDER_NAMES
from attnbench.modules.providers import PROVIDERS

#: Modules the help must not load.
HEAVY = ("torch", "matplotlib")


def loaded_after(code: str) -> list[str]:
    """The HEAVY modules, numpy and torch's compiler, in sys.modules after `code` ran in a new
    interpreter (a command's SystemExit is its normal end)."""
    script = (
        "import json, sys\n"
        f"try:\n    {code}\nexcept SystemExit:\n    pass\n"
        "names = ('torch', 'matplotlib', 'numpy', 'torch._dynamo')\n"
        "print(json.dumps([n for n in names if n in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_cli(*args: str) -> str:
    return f"from attnbench.cli import app; app({list(args)!r}, prog_name='attnbench')"


def test_the_help_loads_neither_torch_nor_matplotlib():
    assert loaded_after(run_cli("--help")) == []


def test_every_commands_help_loads_neither_torch_nor_matplotlib():
    """One interpreter asks every command (and subcommand) for its help in turn."""
    code = (
        "from typer.main import get_command; from typer.testing import CliRunner\n"
        "    from attnbench.cli import app\n"
        "    root = get_command(app)\n"
        "    for name, cmd in root.commands.items():\n"
        "        for words in [[name], *([name, s] for s in getattr(cmd, 'commands', {}))]:\n"
        "            assert CliRunner().invoke(app, [*words, '--help']).exit_code == 0, words"
    )
    assert loaded_after(code) == []


def test_the_planning_commands_load_neither_matplotlib_nor_torchs_compiler(tmp_path):
    """kvmem without measuring, params of a whole model (a skeleton on the meta device),
    fit and predict on a named GPU compute only: no plots, no compiled kernels (torch's
    compiler is a second of start-up; torch itself only params loads, to count on its
    modules). One interpreter runs them all in turn, each writing its JSON."""
    runs = {
        "kvmem": ["--model", "llama-3-8b", "--seq-len", "8192", "--no-measure"],
        "params": ["--model", "llama-3-8b"],
        "fit": ["--model", "llama-3-8b", "--seq-len", "8192", "--gpu", "h100-sxm"],
        "predict": ["--model", "llama-3-8b", "--seq-len", "8192", "--gpu", "h100-sxm"],
    }
    lines = []
    for name, args in runs.items():
        words = [name, *args, "--quiet", "--json", str(tmp_path / f"{name}.json")]
        lines.append(f"try:\n        {run_cli(*words)}\n    except SystemExit:\n        pass")
    loaded = loaded_after("\n    ".join(lines))
    assert "matplotlib" not in loaded and "torch._dynamo" not in loaded
    assert all((tmp_path / f"{name}.json").exists() for name in runs)


def test_the_commands_that_only_compute_load_no_torch(tmp_path):
    """kvmem without measuring, fit and predict on a named GPU compute their points from
    formulas: planning them, running them, recording their environment, printing their
    tables and writing their CSV and JSON load no torch (a second of start-up on a small
    machine). params is not among them: it counts every layer on a module built on the
    meta device. One interpreter runs each in turn, printing its tables, then writing."""
    runs = {
        "kvmem": ["--model", "llama-3-8b", "--seq-len", "8192", "--no-measure"],
        "fit": ["--model", "llama-3-8b", "--seq-len", "8192", "--gpu", "h100-sxm"],
        "predict": ["--model", "llama-3-8b", "--seq-len", "8192", "--gpu", "h100-sxm"],
    }
    lines = []
    ends = "except SystemExit as end:\n        assert not end.code, end.code"
    for name, args in runs.items():
        files = ["--csv", str(tmp_path / f"{name}.csv"), "--json", str(tmp_path / f"{name}.json")]
        for words in ([name, *args], [name, *args, *files, "--quiet"]):
            lines.append(f"try:\n        {run_cli(*words)}\n    {ends}")
    assert loaded_after("\n    ".join(lines)) == []
    assert all((tmp_path / f"{name}.json").exists() for name in runs)


def test_the_schema_names_every_provider_in_order():
    assert tuple(PROVIDERS) == PROVIDER_NAMES


def test_an_ascii_terminal_gets_question_marks_not_a_traceback():
    """Under the C locale without UTF-8 mode, standard output is ASCII: a title's '·'
    printed as '?' (it stopped the command with UnicodeEncodeError after its work)."""
    import os

    env = {**os.environ, "PYTHONIOENCODING": "ascii", "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-m", "attnbench", "params", "--d-model", "64", "--heads", "4"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Attention parameters per layer ? d_model 64" in done.stdout


def test_ctrl_c_while_torch_loads_comes_once_it_has_loaded(monkeypatch):
    """torch's C code takes an error while it imports numpy as numpy missing: a Ctrl-C
    then would leave numpy half-loaded and the command going on. It is sent again."""
    import threading
    import types

    import pytest

    from attnbench.__main__ import interrupt_outside_torch_import

    started = []

    class Timer:
        def __init__(self, delay, function, args):
            started.append((delay, function, args))
            self.daemon = False

        def start(self):
            started.append("started")

    monkeypatch.setattr(threading, "Timer", Timer)
    loading = types.ModuleType("torch")
    loading.__spec__ = types.SimpleNamespace(_initializing=True)
    monkeypatch.setitem(sys.modules, "torch", loading)
    interrupt_outside_torch_import(2, None)  # deferred, not raised
    assert started[-1] == "started" and started[0][2][1] == 2
    loading.__spec__._initializing = False
    with pytest.raises(KeyboardInterrupt):
        interrupt_outside_torch_import(2, None)


def test_a_ctrl_c_no_command_answers_is_said_on_one_line(monkeypatch):
    """The parser turns a KeyboardInterrupt into a silent exit 130."""
    from attnbench.cli import app, params_cmd
    from tests.helpers import runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(params_cmd, "run_section", interrupted)
    result = runner.invoke(app, ["params", "--d-model", "64", "--heads", "4"])
    assert result.exit_code == 130
    assert result.stderr == "error: interrupted\n"
