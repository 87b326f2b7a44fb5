"""Start-up: `attnbench --help` and every command's help load neither torch nor
matplotlib (seconds of start-up on a small machine); the commands that measure nothing
load neither matplotlib nor torch's compiler. Each check runs in a fresh interpreter,
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
    """The HEAVY modules, and torch's compiler, in sys.modules after `code` ran in a new
    interpreter (a command's SystemExit is its normal end)."""
    script = (
        "import json, sys\n"
        f"try:\n    {code}\nexcept SystemExit:\n    pass\n"
        "names = ('torch', 'matplotlib', 'torch._dynamo')\n"
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
    compiler is a second of start-up; torch itself is loaded by the study's runner). One
    interpreter runs them all in turn, each writing its JSON."""
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


def test_the_schema_names_every_provider_in_order():
    assert tuple(PROVIDERS) == PROVIDER_NAMES
