"""The argparse types of numeric flags: finite numbers only."""

from __future__ import annotations

import argparse

import pytest

from migfit import flagtypes


@pytest.mark.parametrize(("text", "value"), [("60", 60.0), ("0", 0.0), ("-1.5", -1.5),
                                             ("2.5e3", 2500.0), (" 7 ", 7.0)])
def test_number_reads_finite_numbers(text: str, value: float) -> None:
    assert flagtypes.number(text) == value


@pytest.mark.parametrize("text", ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e999",
                                  "ten", "", "1,5"])
def test_number_refuses_what_is_not_a_finite_number(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        flagtypes.number(text)
    assert str(info.value) == (f"{text!r} is not a finite number: write it in digits, such as "
                               f"60 or 0.25")


@pytest.mark.parametrize(("text", "message"), [
    ("0", "0: use a positive number of seconds"), ("-2", "-2: use a positive number of seconds"),
    ("nan", "nan: use a positive number of seconds"),
    ("inf", "inf: use a positive number of seconds"),
    ("soon", "'soon' is not a number of seconds")])
def test_positive_seconds(text: str, message: str) -> None:
    assert flagtypes.positive_seconds("0.5") == 0.5
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{message}$"):
        flagtypes.positive_seconds(text)


@pytest.mark.parametrize(("value", "text"), [(-1.0, "-1"), (0.0, "0"), (60.0, "60"),
                                             (0.25, "0.25"), (3e6, "3000000"), (-2.5, "-2.5")])
def test_shown_is_the_number_as_typed(value: float, text: str) -> None:
    assert flagtypes.shown(value) == text


@pytest.mark.parametrize(("text", "example"), [
    ("50%", "write the share as a fraction, such as 0.5 for 50%"),
    ("130%", "write the share as a fraction, such as 1.3 for 130%"),
    ("half", "write it in digits, such as 0.25"), ("nan%", "write it in digits, such as 0.25"),
    ("nan", "write it in digits, such as 0.25")])
def test_share_gives_an_example_a_share_takes(text: str, example: str) -> None:
    assert flagtypes.share("0.5") == 0.5
    with pytest.raises(argparse.ArgumentTypeError) as info:
        flagtypes.share(text)
    assert str(info.value) == f"{text!r} is not a finite number: {example}"
