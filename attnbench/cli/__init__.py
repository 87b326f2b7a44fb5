"""The `attnbench` command line: parses flags, calls the library, renders results."""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup


class OneLineErrors(TyperGroup):
    """The command group, with the parser's own errors (an unknown option, a missing
    value) printed as one `error:` line and exit code 2, like every other bad input,
    instead of a usage block."""

    def main(self, args: Any = None, prog_name: Any = None, complete_var: Any = None,
             standalone_mode: bool = True, **extra: Any) -> Any:  # fmt: skip
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
from . import params_cmd, kvmem_cmd, decode_cmd, compare_cmd, fit_cmd, info_cmd  # noqa: E402,F401,I001
from . import ab_cmd  # noqa: E402,F401,I001
from . import history_cmd  # noqa: E402,F401,I001


def main() -> None:
    app()
