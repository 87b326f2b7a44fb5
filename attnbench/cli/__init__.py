"""The `attnbench` command line: parses flags, calls the library, renders results."""

from __future__ import annotations

import typer

app = typer.Typer(
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


def main() -> None:
    app()
