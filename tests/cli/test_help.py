"""What a newcomer reads at 80 columns: the command list whole, each command's help about
that command alone and in one form, the params tables in one number form, and listed
findings with a hanging indent."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from typer.main import get_command

import attnbench.cli.common as common
from attnbench.cli import COMMAND_MODULES, SHORT_HELP, SHORT_HELP_MAX, app
from attnbench.study.schema import FIELDS, fields_for
from tests.helpers import runner


def help_of(*command: str) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.stdout


def commands() -> list[tuple[str, ...]]:
    """Every command and subcommand, as the words that call it."""
    root = get_command(app)
    found = []
    for name, command in root.commands.items():
        found.append((name,))
        found += [(name, sub) for sub in getattr(command, "commands", {})]
    return found


# --- the command list ----------------------------------------------------------------------


def test_every_command_has_a_whole_one_line_description():
    listed = {" ".join(c) for c in commands()}
    assert listed == set(SHORT_HELP)
    for name, line in SHORT_HELP.items():
        assert len(line) <= SHORT_HELP_MAX, name
        assert not line.endswith((".", "...")), name


def test_the_command_list_is_in_the_order_its_modules_give():
    """Each command module (cli/*_cmd.py, found by cli/__init__.py) says where its commands
    come (ORDER, one of its own): the main job first, the groups last."""
    orders = [module.ORDER for module in COMMAND_MODULES]
    assert len(set(orders)) == len(orders)
    listing = help_of().split("Commands:\n")[1].splitlines()
    assert [line.split()[0] for line in listing] == [
        *("run", "plot", "report", "merge", "params", "kvmem", "decode-speed", "compare"),
        *("fit", "predict", "models", "env", "selfcheck", "ab", "baseline", "history"),
    ]


@pytest.mark.parametrize("group", [(), ("history",), ("baseline",)])
def test_the_command_lists_cut_nothing_at_80_columns(group):
    text = help_of(*group)
    listing = text.split("Commands:\n")[1]
    assert "..." not in listing
    for line in listing.splitlines():
        name, description = line.split(maxsplit=1)
        assert SHORT_HELP[" ".join([*group, name])] == description
        assert len(line) <= 80


# --- each command's own help ---------------------------------------------------------------


@pytest.mark.parametrize("command", commands(), ids=" ".join)
def test_every_help_names_values_in_one_form(command):
    """Options by a metavar (PATH, INT, TEXT...), arguments by their name: never typer's
    '<str>' or '<list[str]>', nor '...' twice."""
    text = help_of(*command)
    assert not re.search(r"<(str|int|float|list\[\w+\])>", text), text
    assert "...}..." not in text and "......" not in text


@pytest.mark.parametrize("command", commands(), ids=" ".join)
def test_no_help_breaks_a_name_at_its_hyphen(command):
    """At 80 columns a hyphenated name (sdpa-efficient, llama-3-8b) stays on one line: no
    line of the help ends inside a word at a hyphen."""
    lines = help_of(*command).splitlines()
    found = get_command(app)
    for word in command:
        found = found.commands[word]
    texts = [found.help or "", *(getattr(p, "help", None) or "" for p in found.params)]
    whole = " ".join(" ".join(texts).split())  # the help as written: every word whole
    broken = [
        f"{line.split()[-1]}{after.split()[0]}"
        for line, after in zip(lines, lines[1:], strict=False)
        if re.search(r"\w-$", line) and after.split()
    ]
    assert not [word for word in broken if word in whole], broken


SECTION_COMMANDS = {
    "params": "params",
    "kvmem": "kvmem",
    "decode": "decode-speed",
    "fit": "fit",
    "predict": "predict",
}


@pytest.mark.parametrize("section", SECTION_COMMANDS)
def test_a_flag_speaks_of_its_own_command(section):
    """No flag's help names another command's meaning ('fit: ...', 'for kvmem')."""
    others = [c for s, c in SECTION_COMMANDS.items() if s != section]
    for name in fields_for(section):
        text = FIELDS[name].help_text(section)
        for other in others:
            assert not re.search(rf"\b{re.escape(other)}\b", text), (name, text)


def test_decode_speed_help_reads_as_flags():
    text = " ".join(help_of("decode-speed").split())
    assert "(fit:" not in text and "default gpus" not in text and "for kvmem" not in text
    assert "both: [false, true]" not in text and "4 per CPU (at most" not in text
    assert "--cuda-graph / --no-cuda-graph Replay each step from a CUDA graph" in text
    assert re.search(r"--threads INT CPU threads .*at most \d+ here: 4 per CPU\)", text)
    assert "--batch INT,... Batch sizes, comma-separated (default 1;" in text
    assert (
        "--dtype TEXT,... float32, float16 or bfloat16 (default: the model's, else float32)" in text
    )


def test_fit_help_gives_its_own_meaning_of_batch_and_context():
    text = " ".join(help_of("fit").split())
    assert "--batch INT,... Batch sizes, comma-separated: the longest context that fits" in text
    assert "--seq-len INT,... Contexts, comma-separated: the largest batch that fits" in text
    assert "--tp INT,... Tensor-parallel ranks, comma-separated, timed by --tpot and" in text
    assert "(default: --gpus; at most 1,000,000)" in text


def test_history_add_help_is_like_the_others():
    text = help_of("history", "add")
    assert "Usage: attnbench history add [OPTIONS] {RESULTS.json}..." in text
    assert "  RESULTS.json  Results files to add, one or more." in text
    assert "  --db PATH " in text and "  --commit REV " in text


# --- params ------------------------------------------------------------------------------


def tables(text: str) -> list[list[list[str]]]:
    """Each table's body rows, as their cells."""
    found, rows = [], None
    for line in text.splitlines():
        if line.startswith("┡"):
            rows = []
        elif line.startswith("└") and rows is not None:
            found.append(rows)
            rows = None
        elif line.startswith("│") and rows is not None:
            rows.append([cell.strip() for cell in line.split("│")[1:-1]])
    return found


def test_params_reads_one_number_form_and_leaves_out_parts_a_model_lacks():
    result = runner.invoke(app, ["params", "--model", "llama-3-8b"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    layer, whole = tables(result.stdout)
    counts = layer[0][1:7]  # q, k, v, o, total, module
    assert counts == ["16.8 M", "4.19 M", "4.19 M", "16.8 M", "41.9 M", "41.9 M"]
    assert [row[0] for row in whole] == [
        "embeddings",
        "attention",
        "mlp",
        "norms",
        "output head",
        "total",
    ]
    for row in whole:
        assert all(re.fullmatch(r"[\d,]+", cell) for cell in row[1:3]), row
    header = next(line for line in result.stdout.splitlines() if "Part" in line)
    assert "counted" in header and "meta-device" not in result.stdout


# --- findings ----------------------------------------------------------------------------


def test_listed_items_wrap_with_a_hanging_indent_on_a_terminal(monkeypatch):
    out = io.StringIO()
    terminal = Console(file=out, width=40, soft_wrap=False, highlight=False)
    monkeypatch.setattr(common, "console", terminal)
    finding = "GQA-2 vs MHA: not resolved, the host's speed moved 2.5x during the run"
    common.print_items([finding, "short"])
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("  - GQA-2") and len(lines) == 4
    for line in lines[1:3]:
        assert line.startswith("    ") and not line.startswith("     "), line
    assert " ".join(line.strip() for line in lines[:3]) == f"- {finding}"
    assert lines[3] == "  - short" and all(len(line) <= 40 for line in lines)
    piped = io.StringIO()
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(common, "console", Console(file=piped, width=40, soft_wrap=True))
    common.print_items([finding])
    assert piped.getvalue() == f"  - {finding}\n"  # off a terminal: whole, for the reader
    # ... unless COLUMNS gives the page a width (the docs' examples, at 100)
    monkeypatch.setenv("COLUMNS", "40")
    common.print_items([finding])
    assert piped.getvalue().splitlines()[1:] == lines[:3]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["hisotry"], "error: No such command 'hisotry'. Did you mean 'history'? Commands: run,"),
        (["info"], "error: No such command 'info'. Commands: run, plot, report, merge,"),
        (
            ["compare"],
            "error: Missing argument 'BASELINE'. (see python -m attnbench compare --help)",
        ),
        (
            ["kvmem", "--bogus"],
            "error: No such option: --bogus (see python -m attnbench kvmem --help",
        ),
        (
            ["predict", "--prompt-len", "8"],
            "error: No such option: --prompt-len; python -m attnbench predict takes --seq-len",
        ),
    ],
)
def test_a_parser_error_points_to_the_commands_or_the_commands_help(args, error):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "attnbench", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.startswith(error) and len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.parametrize("command", ["compare", "ab", "selfcheck", "history show"])
def test_every_default_is_stated_in_the_helps_own_words(command):
    result = runner.invoke(app, [*command.split(), "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0
    assert "[default:" not in result.output and "(default " in result.output


def test_an_option_s_value_type_is_read_from_typer_or_from_click():
    """typer 0.29 says an option's Python type (bare_type); an earlier typer, as a GPU
    machine's image carries, keeps click's parameter type: both name INT and NUM alike."""
    from types import SimpleNamespace

    from attnbench.cli.group import _value_type

    assert _value_type(SimpleNamespace(bare_type=lambda: "float")) == "float"
    for click_name, python in (("integer", "int"), ("float", "float"), ("text", "str")):
        assert _value_type(SimpleNamespace(type=SimpleNamespace(name=click_name))) == python
    assert _value_type(SimpleNamespace()) == "str"
