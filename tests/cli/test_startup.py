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


def test_a_planning_command_loads_neither_matplotlib_nor_torchs_compiler(tmp_path):
    """kvmem without measuring computes only: no plots, no compiled kernels (torch itself
    is loaded by the study's runner)."""
    args = ["kvmem", "--model", "llama-3-8b", "--seq-len", "8192", "--no-measure", "--quiet"]
    loaded = loaded_after(run_cli(*args, "--json", str(tmp_path / "k.json")))
    assert "matplotlib" not in loaded and "torch._dynamo" not in loaded
    assert (tmp_path / "k.json").exists()


def test_the_schema_names_every_provider_in_order():
    assert tuple(PROVIDERS) == PROVIDER_NAMES
