"""Flags, generated from the sweep schema: each field of a section is an option of its
command, named after the field (`seq_len` -> `--seq-len`, with a few shorter names), with
the schema's help. Values are parsed here (comma-separated lists for axes) and checked by
the schema's own rules; errors name the flag and the value the user typed."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import typer

from ..errors import (
    CombinationError,
    FieldError,
    MissingFields,
    Problems,
    UsageError,
    show_value,
)
from ..model.capacity import parse_seq_lens
from ..study.schema import ALIASES, FIELDS, canonical_value, fields_for, parse_number

#: Fields whose flag is not the field's name.
FLAG_NAMES = {"num_heads": "--heads", "num_kv_heads": "--kv-heads", "num_layers": "--layers"}
EXPECTED_INT = {False: "expected an integer", True: "expected integers, comma-separated"}


#: Inputs given as arguments, not flags: named by what they are.
ARGUMENTS = {
    "baseline": "BASELINE",
    "current": "CURRENT",
    "results": "RESULTS",
    "study": "STUDY.yaml",
}


def flag_of(field: str) -> str:
    """The flag that sets `field`: 'seq_len' -> '--seq-len', 'num_heads' -> '--heads'
    (an argument's name for the inputs given as arguments)."""
    if field in ARGUMENTS:
        return ARGUMENTS[field]
    return FLAG_NAMES.get(field, "--" + field.replace("_", "-"))


def describe_error(error: UsageError) -> str:
    """The error's message, with the fields set by flags named by their flags."""
    from ..study.plan import TooManyPoints  # the planner loads torch

    if isinstance(error, Problems):
        return "\n".join(error.lines(describe_error))
    if isinstance(error, FieldError) and error.location is None:
        value = "" if error.value is None else f" {show_value(error.value)}"
        return f"{flag_of(error.field)}{value}: {error.reason}"
    if isinstance(error, MissingFields) and error.source is None:
        return error.render(flag_of)
    if isinstance(error, TooManyPoints):
        return error.render(flag_of)
    if isinstance(error, CombinationError) and error.source is None:
        desc = " ".join(_typed_flag(k, v) for k, v in error.values.items())
        return f"invalid combination {desc}: {error.reason}"
    return str(error)


def _typed_flag(field: str, value: Any) -> str:
    """A field's flag with its value as typed: '--heads 32'; a switch as '--prefill' or
    '--no-prefill'."""
    flag = flag_of(field)
    if isinstance(value, bool):
        return flag if value else f"--no-{flag[2:]}"
    return f"{flag} {show_value(value)}"


METAVARS = {int: "INT", float: "NUM"}


def _option(section: str, name: str, alias: str | None = None) -> inspect.Parameter:
    """The option of field `name` in `section`'s command, with the field's help for that
    section; with `alias`, a hidden option under the field's old name."""
    spec, flag = FIELDS[name], flag_of(alias or name)
    help = spec.help_text(section, flag_of)
    if spec.type is bool:
        option = typer.Option(None, f"{flag}/--no-{flag[2:]}", help=help)
        annotation: Any = bool | None
    else:
        metavar = METAVARS.get(spec.type, "TEXT") + (",..." if spec.axis else "")
        option = typer.Option(None, flag, help=help, metavar=metavar, hidden=alias is not None)
        annotation = str | None
    return inspect.Parameter(
        alias or name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation
    )


def parse_field(name: str, text: str) -> Any:
    """A flag's text as the field's value: a list for an axis ('32,8,1' -> [32, 8, 1]),
    else one value. FieldError naming the field when a value does not fit (below its
    minimum or above its maximum)."""
    from ..study.sweep import check_value  # the model configs' readers: yaml, transformers

    spec = FIELDS[name]
    if name == "seq_lens":
        lengths = parse_seq_lens(text)
        if lengths and check_value(name, max(lengths)):  # the first length that is too long
            first = next(n for n in lengths if check_value(name, n))
            raise FieldError(name, first, check_value(name, first))  # type: ignore[arg-type]
        return lengths
    items = [t.strip() for t in str(text).split(",")] if spec.axis else [str(text).strip()]
    values: list[Any] = []
    for item in items:
        value: Any = canonical_value(name, item)
        numeric = spec.type in (int, float) and isinstance(value, str)
        if numeric and value not in spec.words:
            value = parse_number(value, spec.type)
            if value is None:
                raise FieldError(name, text, _expected(name))
        reason = check_value(name, value)
        if reason:
            raise FieldError(name, value, reason)
        values.append(value)
    return values if spec.axis else values[0]


def _expected(name: str) -> str:
    """What a flag of a numeric field takes: 'expected integers, comma-separated, or mha
    or mqa'."""
    spec = FIELDS[name]
    if spec.type is float:
        return "expected a number"
    expected = EXPECTED_INT[spec.axis]
    return f"{expected}, or {' or '.join(spec.words)}" if spec.words else expected


def parse_flags(section: str, given: dict[str, Any]) -> dict[str, Any]:
    """The values of a section's flags (None where not given); every problem at once."""
    values: dict[str, Any] = {}
    problems: list[UsageError] = []
    for name, raw in given.items():
        if raw is None or FIELDS[name].type is bool:
            values[name] = raw
            continue
        try:
            values[name] = parse_field(name, raw)
        except FieldError as exc:
            problems.append(exc)
    if problems:
        raise Problems(problems)
    return values


def section_command(
    app: typer.Typer,
    name: str,
    section: str,
    fields: list[str] | None = None,
    before: list[inspect.Parameter] = (),  # type: ignore[assignment]
    after: list[inspect.Parameter] = (),  # type: ignore[assignment]
) -> Callable[[Callable], Callable]:
    """Register `fn(overrides, **other)` as command `name`, with one option per field of
    `section` (or `fields`) between the `before` and `after` options; `overrides` holds
    the parsed field values, None where a flag was not given."""
    names = fields or fields_for(section)
    aliases = {old: new for old, new in ALIASES.items() if new in names}

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            given = {n: kwargs.pop(n) for n in names}
            for old, new in aliases.items():
                value = kwargs.pop(old)
                if value is not None and given[new] is not None:
                    raise FieldError(old, value, f"is the old name of {flag_of(new)}; give one")
                given[new] = value if value is not None else given[new]
            return fn(parse_flags(section, given), **kwargs)

        hidden = [_option(section, new, old) for old, new in aliases.items()]
        params = [*before, *(_option(section, n) for n in names), *hidden, *after]
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        app.command(name)(handles_errors(command))
        return fn

    return decorate


def handles_errors(fn: Callable) -> Callable:
    """Turn a UsageError into one line per problem on stderr and its exit code (2 for bad
    input), never a traceback."""
    from .common import fail

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UsageError as exc:
            raise fail(describe_error(exc), exc.exit_code) from None

    return wrapper


def option(
    name: str,
    default: Any,
    *flags: str,
    help: str,
    annotation: Any = str | None,
    metavar: str | None = None,
) -> inspect.Parameter:
    """A keyword-only parameter for `section_command`'s before/after lists."""
    given = typer.Option(default, *flags, help=help, metavar=metavar)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=given, annotation=annotation
    )
