"""Flags named and parsed: each field of a section is a flag of its command, named after
the field (`seq_len` -> `--seq-len`, with a few shorter names; cli/options.py declares
them). Values are parsed here (comma-separated lists for axes) and checked by the
schema's own rules; errors name the flag and the value the user typed."""

from __future__ import annotations

from typing import Any

from ..errors import (
    CombinationError,
    FieldError,
    MissingFields,
    Problems,
    UsageError,
    show_value,
)
from ..model.capacity import parse_seq_lens
from ..study.schema import FIELDS, canonical_value, parse_number, spelled_twice

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
    from ..study.plan import TooManyPoints  # the planner: 18 ms that `--help` does without

    if isinstance(error, Problems):
        return "\n".join(error.lines(describe_error))
    if isinstance(error, FieldError) and error.location is None:
        if error.value is None:
            given = flag_of(error.field)
        else:  # a switch as typed: --bias, --no-prefill
            given = _typed_flag(error.field, error.value)
        return f"{given}: {error.reason_with(flag_of)}"
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


def parse_field(name: str, text: str) -> Any:
    """A flag's text as the field's value: a list for an axis ('32,8,1' -> [32, 8, 1]),
    else one value. FieldError naming the field when a value does not fit (below its
    minimum or above its maximum)."""
    from ..study.sweep import check_value  # the model configs' readers: yaml, transformers

    spec = FIELDS[name]
    items = [t.strip() for t in str(text).split(",")] if spec.axis else [str(text).strip()]
    if len(items) > 1 and "" in items:  # '8,,4', 'float16,': named as typed, not as ''
        raise FieldError(name, text, "an empty item in the list; give a value between commas")
    if name == "seq_lens":
        lengths = parse_seq_lens(text)
        if lengths and check_value(name, max(lengths)):  # the first length that is too long
            first = next(n for n in lengths if check_value(name, n))
            raise FieldError(name, first, check_value(name, first))  # type: ignore[arg-type]
        return lengths
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
    if twice := spelled_twice(items, values):  # 'none,0', 'bf16,bfloat16': named as typed
        raise FieldError(name, text, twice)
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
