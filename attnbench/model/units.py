"""Byte units: sizes parsed exactly from text (binary KiB, MiB, GiB, TiB: powers of 1024;
decimal KB, MB, GB, TB: powers of 1000), and byte counts shown in binary units. Times:
durations with their unit (us, ms, s), parsed exactly."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from ..errors import FieldError
from .limits import MAX_MEMORY_BYTES

BINARY_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
#: Binary units from bytes up, as shown (past the ones a size is given in: a cache of a
#: billion sequences of a billion tokens shows in EiB, not as 15 digits of TiB).
BINARY_NAMES = ("B", *BINARY_UNITS, "PiB", "EiB")
DECIMAL_UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS = {"B": 1, **BINARY_UNITS, **DECIMAL_UNITS}
UNITS_HINT = "such as 80GiB, 80GB (= 80e9 bytes), 1.5TiB or 4096B"
#: A size: ASCII digits only (`\d` would take other scripts' digits, as int() does).
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


@dataclass(frozen=True)
class MemorySize:
    """A parsed size: exact bytes, and whether the text used a decimal unit (GB = 1e9)."""

    bytes: int
    text: str
    decimal: bool

    def describe(self) -> str:
        """'80GB = 80,000,000,000 bytes (decimal GB: 10^9 bytes; GiB is 2^30)' or ''."""
        if not self.decimal:
            return ""
        unit = _SIZE.match(self.text).group(2)  # type: ignore[union-attr]
        return (
            f"{self.text.strip()} = {self.bytes:,} bytes (decimal {unit}: "
            f"{DECIMAL_UNITS[unit]:,} bytes; the binary units are KiB, MiB, GiB, TiB)"
        )


def parse_memory(text: str, field: str, zero: bool = False) -> MemorySize:
    """'80GiB', '80GB' (= 80e9 bytes), '1.5TiB', '4096B': exact, rounded down to whole
    bytes ('79.1GiB', as a driver's total is often read, is 84,932,978,278 bytes); anything
    else is a FieldError for `field`, a number without a unit too ('80' is far more often
    80 GB with the unit forgotten than 80 bytes). A size of 0 is refused, unless `zero`
    allows it (a reserve), in any unit."""
    match = _SIZE.match(str(text))
    if match is None:
        raise FieldError(field, text, f"bad size; write a number and a unit, {UNITS_HINT}")
    number, unit = match.groups()
    if not unit:
        raise FieldError(field, text, f"no unit; write {number}GiB, {number}GB or {number}B")
    if unit not in _UNITS:
        raise FieldError(field, text, f"unknown unit {unit!r}; the units are {', '.join(_UNITS)}")
    value = math.floor(Fraction(number) * _UNITS[unit])
    if value == 0 and not zero:
        raise FieldError(field, text, "must be more than 0 bytes")
    if value > MAX_MEMORY_BYTES:
        raise FieldError(field, text, f"must be at most 1 EiB ({MAX_MEMORY_BYTES:,} bytes)")
    return MemorySize(int(value), str(text), unit in DECIMAL_UNITS)


def parse_share(text: str, field: str, of: int) -> int:
    """'10%' of `of` bytes (rounded down), or a size ('4GiB') below it; 0 is allowed, bare
    or in any unit ('0', '0GiB')."""
    stripped = str(text).strip()
    if stripped.endswith("%"):
        number = stripped[:-1].strip()
        if not _SIZE.match(number):
            raise FieldError(field, text, "bad percentage")
        pct = Fraction(number)
        if not 0 <= pct < 100:
            raise FieldError(field, text, "a percentage must be in [0, 100)")
        return int(of * pct / 100)
    if stripped == "0":
        return 0
    size = parse_memory(stripped, field, zero=True).bytes
    if size >= of:  # as 100% is: nothing would be left to use
        raise FieldError(field, text, f"is not below the {format_bytes(of)} it is kept from")
    return size


def binary_unit(largest: float) -> tuple[float, str]:
    """The binary unit that shows `largest` bytes as a number of at least 1: (divisor, name)."""
    for power, unit in enumerate(BINARY_NAMES):
        if largest < 1024 ** (power + 1) or unit == BINARY_NAMES[-1]:
            return float(1024**power), unit
    raise AssertionError("unreachable")


def format_bytes(n: int | float | None) -> str:
    """Binary units: 1536 -> '1.50 KiB', 512 -> '512 B'; None -> '-'."""
    if n is None:
        return "-"
    divisor, unit = binary_unit(abs(float(n)))
    return f"{int(n)} B" if unit == "B" else f"{n / divisor:,.2f} {unit}"


#: Seconds per unit of a duration.
TIME_UNITS = {"us": Fraction(1, 10**6), "ms": Fraction(1, 10**3), "s": Fraction(1)}
TIME_HINT = "expected a time with its unit: 50ms, 0.05s, 2s"
#: The durations a flag takes besides 0: a nanosecond to a million seconds (11 days),
#: beyond any step, target or floor a command works with.
MIN_DURATION_S, MAX_DURATION_S = 1e-9, 1e6
#: A duration: ASCII digits, an optional fraction and exponent, then its unit (a space
#: between allowed).
_DURATION = re.compile(
    r"^\s*((?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*(us|ms|s)\s*$"
)


def duration_seconds(text: str, field: str, zero: bool = False) -> Fraction:
    """'50ms', '0.05s', '2 s', '500us' as exact seconds, so that '50ms' and '0.05s' are one
    target to the last digit; FieldError for `field` on anything else. A number without
    its unit is refused, as a size is: '50' is 50 ms as often as 50 s. A time of 0 is
    refused as such, unless `zero` allows it (a floor, where 0 keeps everything)."""
    match = _DURATION.match(str(text))
    if match is None:
        negative = str(text).strip().startswith("-") and _DURATION.match(str(text).strip()[1:])
        raise FieldError(field, text, "must be a time above 0" if negative else TIME_HINT)
    number, unit = match.groups()
    approx = float(number) * TIME_UNITS[unit]  # inf for a huge exponent: no huge Fraction
    # 0 for a tiny one (1e-400s), which is no zero: its digits say so
    nonzero = any(digit in "123456789" for digit in re.split("[eE]", number)[0])
    if nonzero and not MIN_DURATION_S <= approx <= MAX_DURATION_S:
        raise FieldError(field, text, f"must be from {MIN_DURATION_S:g} s to {MAX_DURATION_S:g} s")
    seconds = Fraction(number) * TIME_UNITS[unit]
    if seconds == 0 and not zero:
        raise FieldError(field, text, "must be a time above 0")
    return seconds


def format_duration(seconds: float) -> str:
    """A duration in the largest unit that keeps it at 1 or more: 1.0 -> '1 s',
    0.002 -> '2 ms', 1e-6 -> '1 us' (as the time flags are written)."""
    for unit in ("s", "ms"):
        if seconds >= TIME_UNITS[unit]:
            return f"{seconds / TIME_UNITS[unit]:g} {unit}"
    return f"{seconds / TIME_UNITS['us']:g} us"


def parse_duration(text: str, field: str, zero: bool = False) -> float:
    """A duration with its unit in seconds: '50ms' -> 0.05 (see duration_seconds)."""
    return float(duration_seconds(text, field, zero))


def ratio_text(value: float, other: float | None = None) -> str:
    """'1.25x': two decimals, or up to four where two would read as `other` does though
    the two differ (a peak that moved 1.1009x, beyond a 1.10x threshold)."""
    for digits in (2, 3, 4):
        text = f"{value:.{digits}f}x"
        if other is None or value == other or text != f"{other:.{digits}f}x":
            break
    return text
