"""Durations with their unit: parsed exactly, and refused in one line naming the field."""

from __future__ import annotations

from fractions import Fraction

import pytest

from attnbench.errors import FieldError
from attnbench.model.units import TIME_HINT, duration_seconds, format_duration, parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("50ms", 0.05),
        ("0.05s", 0.05),
        ("2s", 2.0),
        ("500us", 0.0005),
        ("2 s", 2.0),
        (" 1.5 ms ", 0.0015),
        (".5s", 0.5),
        ("10000s", 10000.0),
    ],
)
def test_durations_parse_to_seconds(text, seconds):
    assert parse_duration(text, "tpot") == pytest.approx(seconds, rel=1e-15)


def test_one_time_in_two_units_is_one_value_exactly():
    """'50ms' and '0.05s' are the same target to the last digit (0.05 * 1000 in floats is
    50.00000000000001): the parse is exact."""
    assert duration_seconds("50ms", "tpot") == duration_seconds("0.05s", "tpot") == Fraction(1, 20)
    assert float(duration_seconds("0.05s", "tpot") * 1000) == 50.0


@pytest.mark.parametrize("bad", ["50", "-50", "ms", "", "50 m", "50min", "1e3", "50MS", "5.ms"])
def test_a_time_without_its_unit_is_refused(bad):
    with pytest.raises(FieldError) as error:
        parse_duration(bad, "ttft")
    assert (error.value.field, error.value.value, error.value.reason) == ("ttft", bad, TIME_HINT)
    assert TIME_HINT == "expected a time with its unit: 50ms, 0.05s, 2s"


@pytest.mark.parametrize("tiny", ["1e-400s", "1e-324s", "5e-330ms"])
def test_a_time_too_small_for_a_float_is_below_the_range_not_zero(tiny):
    """1e-400 s is 0.0 as a float, yet no zero: refused as out of range (bad input),
    where it went on to a target no batch meets (fit's exit 1)."""
    with pytest.raises(FieldError) as error:
        parse_duration(tiny, "tpot")
    assert error.value.reason == "must be from 1e-09 s to 1e+06 s"


@pytest.mark.parametrize("bad", ["-50ms", " -0.5 s", "-1e3us"])
def test_a_negative_time_is_refused_as_one(bad):
    with pytest.raises(FieldError) as error:
        parse_duration(bad, "tpot")
    assert (error.value.value, error.value.reason) == (bad, "must be a time above 0")


def test_a_time_may_have_an_exponent_and_must_be_in_range():
    """'1e3ms' is a second, as numeric flags take exponents; a time beyond a nanosecond to
    a million seconds is refused as out of range (not as a time without its unit), before
    an exponent of a billion digits becomes a Fraction."""
    assert duration_seconds("1e3ms", "tpot") == 1 and parse_duration("5E-2s", "t") == 0.05
    for bad in ("1e-30s", "0.0001us", "1e9s", "1e99999999999s"):
        with pytest.raises(FieldError, match=r"must be from 1e-09 s to 1e\+06 s"):
            parse_duration(bad, "tpot")


def test_a_duration_is_shown_in_the_largest_unit_it_fills():
    assert [format_duration(s) for s in (2.0, 1.0, 0.002, 1e-6, 2.5e-5)] == [
        "2 s",
        "1 s",
        "2 ms",
        "1 us",
        "25 us",
    ]


@pytest.mark.parametrize("zero", ["0ms", "0s", "0.0us", " 0 ms"])
def test_a_time_of_zero_has_its_unit_and_is_refused_as_zero_unless_allowed(zero):
    with pytest.raises(FieldError) as error:
        parse_duration(zero, "tpot")
    assert (error.value.field, error.value.reason) == ("tpot", "must be a time above 0")
    assert parse_duration(zero, "min_time", zero=True) == 0.0
