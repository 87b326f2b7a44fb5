"""The command group every command registers on (`app`), its root options, and the help
and errors of every command in one form."""

from __future__ import annotations

import errno
import os
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from ..study.schema import with_default
from .options import VersionOpt

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


class OnceEach(TyperCommand):
    """A command that refuses an option given twice (`--d-model 64 --d-model 128`), where
    the parser would keep the last value and drop the first without a word, and one given
    empty (`--to ''`, a variable the shell found unset), which would read as left out. A
    flag (`-q`) may repeat, and an option that collects its values (multiple) is not one."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        values, _, order = self.make_parser(ctx).parse_args(args=list(args))
        given = Counter(
            p for p in order if isinstance(p, TyperOption) and not (p.is_flag or p.multiple)
        )
        for option, times in given.items():
            name = max(option.opts, key=len)
            if times > 1:
                raise click.UsageError(f"{name} given {times} times; give it once", ctx)
            if isinstance(values.get(option.name), str) and not values[option.name].strip():
                raise click.UsageError(f"{name} {values[option.name]!r}: empty; give a value", ctx)
        for argument in self.params:
            given_values = values.get(argument.name)
            listed = given_values if isinstance(given_values, (list, tuple)) else [given_values]
            if isinstance(argument, TyperArgument) and any(
                isinstance(v, str) and not v.strip() for v in listed
            ):
                metavar = argument.metavar or (argument.name or "").upper()
                raise click.UsageError(f"{metavar} '': empty; give a path", ctx)
        return super().parse_args(ctx, args)


def plain_help(command: Any) -> None:
    """Every option and argument of `command` and its subcommands named alike: an option's
    value by its metavar, else by what its name says (NAMED_METAVARS) or its type (TEXT,
    INT, NUM, as the generated flags have it), never typer's '<str>'; an argument by its
    metavar, else its name in capitals."""
    for param in command.params:
        if isinstance(param, TyperArgument):
            param.__class__ = PlainArgument
            param.metavar = param.metavar or (param.name or "").upper()
        elif isinstance(param, TyperOption) and not param.is_flag:
            if param.metavar is None:
                named = NAMED_METAVARS.get(param.name or "")
                param.metavar = named or METAVARS.get(_value_type(param), "TEXT")
            _default_in_help(param)
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)


def _value_type(option: TyperOption) -> str:
    """The Python type an option's value is read as ('int', 'float', 'str'): typer 0.29
    says it (bare_type); earlier typers keep click's parameter type, named 'integer',
    'float' or 'text'."""
    bare = getattr(option, "bare_type", None)
    if callable(bare):
        return bare()
    kind = getattr(getattr(option, "type", None), "name", "")
    return {"integer": "int", "float": "float"}.get(kind, "str")


def once_each(command: Any) -> None:
    """Every command under `command` refusing an option given twice (OnceEach)."""
    if type(command) is TyperCommand:
        command.__class__ = OnceEach
    for sub in getattr(command, "commands", {}).values():
        once_each(sub)


def _default_in_help(option: TyperOption) -> None:
    """An option's default in its help's own words, '(default 5).', as every generated
    flag states it (schema.with_default), instead of the parser's '[default: 5]' after it."""
    if option.show_default and option.default is not None:
        option.help = with_default(option.help or "", option.default)
    option.show_default = False


class OneLineErrors(TyperGroup):
    """The command group, with the parser's own errors (an unknown option, a missing
    value, an option given twice: `once_each`) printed as one `error:` line and exit code
    2, like every other bad input, instead of a usage block; a Ctrl-C no command answers
    as one line too (`_interrupt_said`); and every command's help in one form
    (`plain_help`)."""

    def main(
        self,
        args: Any = None,
        prog_name: Any = None,
        complete_var: Any = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        plain_help(self)
        once_each(self)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
            sys.stdout.flush()  # what is still buffered: a reader gone, a full disk
        except OSError as exc:
            sys.exit(_output_failed(exc))
        except (typer.Abort, KeyboardInterrupt):
            print("error: interrupted", file=sys.stderr)
            sys.exit(130)
        except Exception as exc:
            message = getattr(exc, "format_message", None)
            code = getattr(exc, "exit_code", None)
            if message is None or not isinstance(code, int):
                raise
            text = message()
            if "\n" not in text:  # help, printed as is
                pointer = _pointer(exc)
                if pointer.startswith("; "):  # the command's own flag, not the parser's guesses
                    text = getattr(exc, "message", text)
                text = f"error: {text}{pointer}"
            print(text, file=sys.stderr)
            sys.exit(code)
        sys.exit(code if isinstance(code, int) else 0)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _interrupt_said():  # the parser loads its libraries: a Ctrl-C may come then
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _interrupt_said():
            try:
                return super().invoke(ctx)
            except OSError as exc:  # before the parser's own answer to a pipe's reader gone
                raise typer.Exit(_output_failed(exc)) from None


#: The exit status when the reader of the output has gone (`| head`): a shell's for a
#: process SIGPIPE stopped (128 + 13), neither success nor compare's "regression" (1).
EXIT_READER_GONE = 141
#: Errors of a write that no room or device took: the output could not be written.
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}


def standard_output_failed(exc: OSError) -> bool:
    """Whether `exc` is standard output's own failure, not that of a file the command
    writes: a broken pipe that names no file (its reader gone)."""
    return isinstance(exc, BrokenPipeError) and exc.filename is None


def _output_failed(exc: OSError) -> int:
    """The exit status for an error writing the command's standard output (the files it
    writes report their own): 141 where its reader has gone, the rest dropped; 2, said on
    one line, where the device took no more. Any other error is not the output's: raised."""
    if not isinstance(exc, BrokenPipeError) and exc.errno not in WRITE_ERRNOS:
        raise exc
    _drop_the_rest()
    if isinstance(exc, BrokenPipeError):
        return EXIT_READER_GONE
    print(f"error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
    return 2


def _drop_the_rest() -> None:
    """Standard output to the null device, what is still buffered included, so that the
    interpreter's last flush fails no more (Python's advice for SIGPIPE)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # no file number: nothing to flush there
        pass


@contextmanager
def _interrupt_said() -> Iterator[None]:
    """A Ctrl-C that no command answered itself (one before a study's first point, or
    while a plot is drawn, or while the flags are parsed) said on one line: the parser
    would turn it into a silent exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        raise typer.Exit(130) from None


#: Flags of one command that another command names otherwise: the tokens cached (a
#: prompt's, or a context's).
SAME_QUANTITY = {"--prompt-len": "--seq-len", "--seq-len": "--prompt-len"}


def _pointer(exc: Exception) -> str:
    """Where a parser error of a command line points the user: the commands there for an
    unknown one (the parser suggests a near miss itself), the command's own flag for a
    quantity another command names otherwise, else that command's --help."""
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return ""
    names = list(getattr(ctx.command, "commands", {}))
    if names and str(getattr(exc, "message", "")).startswith("No such command"):
        return f" Commands: {', '.join(names)}."
    other = SAME_QUANTITY.get(getattr(exc, "option_name", None) or "")
    flags = {flag for param in ctx.command.params for flag in getattr(param, "opts", ())}
    if other in flags:
        return f"; {ctx.command_path} takes {other} for it (see --help)"
    return f" (see {ctx.command_path} --help)"


app = typer.Typer(
    cls=OneLineErrors,
    name="attnbench",
    help="Benchmark and analyse MHA, MQA and GQA attention and their KV cache.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def root(version: VersionOpt = False) -> None:
    """Benchmark and analyse MHA, MQA and GQA attention and their KV cache."""
    from .common import fit_console_to_page

    fit_console_to_page()
