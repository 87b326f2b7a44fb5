"""The `attnbench` command line: parses flags, calls the library, renders results."""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

#: Each command's line in the list of `attnbench --help` (and of its group's): whole, on
#: one line of an 80-column terminal (at most SHORT_HELP_MAX characters beside the
#: longest name), where the first sentence of its help would be cut with "...".
SHORT_HELP = {
    "run": "Run a sweep file's sections; write results, plots, report",
    "plot": "Re-draw a study's plots from its results.json",
    "report": "Re-write a study's report.md from its results.json",
    "merge": "Put the shares of a sharded study back together",
    "params": "Parameter counts per variant: one layer, and the whole model",
    "kvmem": "KV-cache bytes per token, per layer and per model, measured",
    "decode-speed": "Prefill and decode-step latency, with and without the cache",
    "compare": "Gate results against a baseline: exit 1 on a regression",
    "fit": "The largest batch or longest context that fits in memory",
    "predict": "Prefill and decode times on a named GPU, from a roofline",
    "models": "List the model presets: attention shapes and sources",
    "env": "Print the environment recorded with every result",
    "selfcheck": "Check backends, cached decode and KV-cache sizes on a device",
    "ab": "Gate two revisions by timing them in turn, in one job",
    "baseline": "Keep the results `attnbench compare` gates against",
    "baseline save": "Validate a results file and save it as a baseline",
    "baseline exact": "Write a study's exact metrics as a baseline (what CI gates)",
    "history": "Store runs; show trends and changes over commits",
    "history add": "Store results files with their commit",
    "history show": "A metric over commits, as tables",
    "history plot": "Draw a metric over commits, its change points marked",
    "history changes": "The commits where a metric changed",
}
#: The longest line SHORT_HELP may hold: 80 columns, less the indent, the longest command
#: name ('decode-speed') and the gap after it.
SHORT_HELP_MAX = 80 - 2 - len("decode-speed") - 2
#: An option's value in the help when no metavar names it: by the option's name, else by
#: its type.
NAMED_METAVARS = {
    "out": "DIR",
    "output": "PATH",
    "threshold": "PERCENT",
    "fmt": "FORMAT",
    "device": "DEVICE",
}
METAVARS = {"int": "INT", "float": "NUM", "str": "TEXT"}


class PlainArgument(TyperArgument):
    """An argument shown by its name alone ('RESULTS.json', not 'RESULTS.json <str>'),
    as the options show theirs."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def plain_help(command: Any) -> None:
    """Every option and argument of `command` and its subcommands named alike: an option's
    value by its metavar, else by what its name says (NAMED_METAVARS) or its type (TEXT,
    INT, NUM, as the generated flags have it), never typer's '<str>'; an argument by its
    metavar, else its name in capitals."""
    for param in command.params:
        if isinstance(param, TyperArgument):
            param.__class__ = PlainArgument
            param.metavar = param.metavar or (param.name or "").upper()
        elif isinstance(param, TyperOption) and not param.is_flag and param.metavar is None:
            named = NAMED_METAVARS.get(param.name or "")
            param.metavar = named or METAVARS.get(param.bare_type(), "TEXT")
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)


class OneLineErrors(TyperGroup):
    """The command group, with the parser's own errors (an unknown option, a missing
    value) printed as one `error:` line and exit code 2, like every other bad input,
    instead of a usage block; and every command's help in one form (`plain_help`)."""

    def main(
        self,
        args: Any = None,
        prog_name: Any = None,
        complete_var: Any = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        plain_help(self)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except (typer.Abort, KeyboardInterrupt):
            print("error: interrupted", file=sys.stderr)
            sys.exit(130)
        except Exception as exc:
            message = getattr(exc, "format_message", None)
            code = getattr(exc, "exit_code", None)
            if message is None or not isinstance(code, int):
                raise
            text = message()
            print(text if "\n" in text else f"error: {text}", file=sys.stderr)  # help: as is
            sys.exit(code)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=OneLineErrors,
    name="attnbench",
    help="Benchmark and analyse MHA, MQA and GQA attention and their KV cache.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        print(f"attnbench {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Benchmark and analyse MHA, MQA and GQA attention and their KV cache."""
    from .common import fit_console_to_page

    fit_console_to_page()


# Each module registers its commands on `app`; `--help` lists them in this order.
from . import run_cmd  # noqa: E402,F401,I001  (first: the main job)
from . import params_cmd, kvmem_cmd, decode_cmd, compare_cmd, fit_cmd, predict_cmd, info_cmd  # noqa: E402,F401,I001
from . import ab_cmd  # noqa: E402,F401,I001
from . import history_cmd  # noqa: E402,F401,I001


def _short_helps() -> None:
    """Give every command its SHORT_HELP line (KeyError for a command without one)."""
    for info in app.registered_commands:
        info.short_help = SHORT_HELP[info.name]
    for group in app.registered_groups:
        group.short_help = SHORT_HELP[group.name]
        for info in group.typer_instance.registered_commands:
            info.short_help = SHORT_HELP[f"{group.name} {info.name}"]


_short_helps()


def main() -> None:
    app()
