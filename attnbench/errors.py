"""Errors a user can fix: the CLI prints them on one line and exits with code 2.

The library never names a command-line flag. An error about one input value is a
`FieldError` carrying the field's name (`tp`, `config`); the layer that knows where the
value came from (a flag, or a key of a sweep file) turns the field into what the user
typed: the flag and its value, or `kvmem.tp: 3 (study.yaml)`.
"""

from __future__ import annotations

import datetime
import difflib
import json
from collections.abc import Callable, Iterable
from typing import Any


class UsageError(Exception):
    """Bad input (a flag, a config field, a file); the message names the field and value."""

    exit_code = 2


class FieldError(UsageError):
    """One input field has a bad value: `reason` says why, without naming where it came
    from; `located` (set by the layer that knows) prefixes what the user wrote. A reason
    that names other fields writes each of `mentions` as '{name}', which the message
    spells by its field name and the command line by its flag (`reason_with`)."""

    def __init__(self, field: str, value: Any, reason: str, mentions: tuple[str, ...] = ()) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        self.mentions = mentions
        self.location: str | None = None
        super().__init__(self._message())

    def reason_with(self, name_of: Callable[[str], str] = str) -> str:
        """The reason, each field it mentions spelled by `name_of`."""
        text = self.reason
        for name in self.mentions:
            text = text.replace(f"{{{name}}}", name_of(name))
        return text

    def _message(self) -> str:
        where = self.location or f"{self.field}: {_show(self.value)}"
        return f"{where}: {self.reason_with()}"

    def located(self, location: str) -> FieldError:
        """This error, reported at `location` (what the user typed, e.g. a flag and value)."""
        self.location = location
        self.args = (self._message(),)
        return self


class CombinationError(UsageError):
    """Values that are fine alone but not together (num_kv_heads 3 with num_heads 32).
    `source` names the sweep file they came from, None for values from flags."""

    def __init__(self, values: dict[str, Any], reason: str, source: str | None = None) -> None:
        self.values = values
        self.reason = reason
        self.source = source
        if source is None:
            desc = " ".join(f"{k} {_show(v)}" for k, v in values.items())
            super().__init__(f"invalid combination {desc}: {reason}")
        else:
            desc = " ".join(f"{k}={_show(v)}" for k, v in values.items())
            super().__init__(f"{source}: invalid combination {desc}: {reason}")


class MissingFields(UsageError):
    """Nothing to run: the user must give every field of one of `choices` (groups of
    field names). `source` names the sweep file, None when flags alone were given."""

    def __init__(self, what: str, choices: list[list[str]], source: str | None = None) -> None:
        self.what = what
        self.choices = choices
        self.source = source
        super().__init__(self.render(lambda name: name))

    def render(self, name) -> str:
        """The message with each field named by `name(field)`."""
        options = " or ".join(" and ".join(map(name, group)) for group in self.choices)
        where = f"{self.source}: " if self.source else ""
        return f"{where}nothing to run for {self.what}: give {options}"


class Problems(UsageError):
    """Every problem of a study at once, one line each (the first `limit` of them); the
    sections with nothing to run for want of the same fields, in one line."""

    def __init__(self, errors: list[UsageError], limit: int = 20) -> None:
        self.errors = _merged_missing(errors)
        self.limit = limit
        super().__init__("\n".join(self.lines()))

    def lines(self, describe: Callable[[UsageError], str] = str) -> list[str]:
        """The first `limit` problems as `describe` words them, and how many more."""
        lines = [describe(e) for e in self.errors[: self.limit]]
        if len(self.errors) > self.limit:
            lines.append(f"... and {len(self.errors) - self.limit} more problems")
        return lines


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(_show, value))
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))  # a flag's 0 is parsed as 0.0: shown as typed
    return typed(value) if isinstance(value, str) else str(value)  # '' and ' x' quoted


def show_value(value: Any) -> str:
    """A value as the user would have typed it: 3, float16, 32,8,1."""
    return _show(value)


#: The most characters a value takes in a one-line message (brief, spelled).
BRIEF_WIDTH = 60


def brief(value: Any, width: int = BRIEF_WIDTH) -> str:
    """repr(value) for a one-line message, cut to `width` characters."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to convert to text
        text = "a number of thousands of digits"
    return _cut(text, width)


def _cut(text: str, width: int) -> str:
    """`text`, or its first `width` - 3 characters and '...' when it is longer."""
    return text if len(text) <= width else text[: width - 3] + "..."


def one_line(text: str, width: int = BRIEF_WIDTH) -> str:
    """`text` as typed when it is short and on one line, else quoted and cut (brief)."""
    return text if len(text) <= width and text.isprintable() else brief(text, width)


def typed(text: str) -> str:
    """`text` as the user typed it, whole, for an error message: quoted (repr) when it
    would not read as typed (empty, spaces at either end, a line break or another
    unprintable character), so that the message stays on one line and shows it exactly."""
    return text if text and text.strip() == text and text.isprintable() else repr(text)


def spelled(value: Any, show: Callable[[Any], str] = brief) -> str:
    """`value` for a message as JSON and YAML spell it: null, true and false, not Python's
    None, True and False, also inside a list or an object (["a", null]); a date YAML read
    from an unquoted 2001-12-14 as it was written; any other value as `show` gives it."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (list, dict)):
        try:
            text = json.dumps(value, ensure_ascii=False, default=_as_written)
        except (TypeError, ValueError):  # an int too long to write, a key of another kind
            return show(value)
        return _cut(text, BRIEF_WIDTH)
    return show(value)


def _as_written(value: Any) -> str:
    """A value JSON has no form for, as YAML's text gave it (a date), else as Python's."""
    return value.isoformat() if isinstance(value, (datetime.date, datetime.time)) else repr(value)


def closest(name: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest of `choices`, or '' when nothing is close: the
    choices `name` begins, in any case, when there are any ('h100': h100-sxm, h100-pcie
    and h100-nvl), else the nearest spelling."""
    choices = list(choices)
    word = str(name).strip().lower()
    starting = [c for c in choices if word and c.lower().startswith(word)]
    if len(starting) > 1:
        return f" (did you mean {', '.join(map(repr, starting[:-1]))} or {starting[-1]!r}?)"
    match = starting or difflib.get_close_matches(str(name), choices, n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


class ModelMismatchError(RuntimeError):
    """The analytic model and an instantiated module disagree: a bug in attnbench, not bad
    input. Exit code 1."""

    exit_code = 1


def _merged_missing(errors: list[UsageError]) -> list[UsageError]:
    """`errors` with the MissingFields of the same fields and file as one, in the first's
    place ('nothing to run for params, kvmem and decode: give ...')."""
    whats: dict[tuple, list[str]] = {}
    for error in errors:
        if isinstance(error, MissingFields):
            whats.setdefault((repr(error.choices), error.source), []).append(error.what)
    merged: list[UsageError] = []
    for error in errors:
        if not isinstance(error, MissingFields):
            merged.append(error)
        elif names := whats.pop((repr(error.choices), error.source), None):
            what = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
            merged.append(MissingFields(what, error.choices, error.source))
    return merged
