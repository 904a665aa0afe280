"""Quantity parsing against apimachinery's grammar, suffix table and test cases (WIRE.md §4)."""

from __future__ import annotations

import json
from fractions import Fraction

import hypothesis.strategies as st
import pytest
from hypothesis import given

from migfit import errors, quantity

F = Fraction

# (text, exact value as Kubernetes holds it)
VALID: list[tuple[str, Fraction]] = [
    # WIRE.md §4 worked examples
    ("12Gi", F(12 * 2**30)),
    ("12G", F(12 * 10**9)),
    ("12e9", F(12 * 10**9)),
    ("12000Mi", F(12_582_912_000)),
    ("12884901888", F(12_884_901_888)),
    ("0.5Gi", F(536_870_912)),
    (".5Gi", F(536_870_912)),
    # every decimal suffix
    ("1n", F(1, 10**9)),
    ("1u", F(1, 10**6)),
    ("1m", F(1, 1000)),
    ("1", F(1)),
    ("1k", F(1000)),
    ("1M", F(10**6)),
    ("1G", F(10**9)),
    ("1T", F(10**12)),
    ("1P", F(10**15)),
    ("1E", F(10**18)),  # E alone is exa
    # every binary suffix
    ("1Ki", F(2**10)),
    ("1Mi", F(2**20)),
    ("1Gi", F(2**30)),
    ("1Ti", F(2**40)),
    ("1Pi", F(2**50)),
    ("1Ei", F(2**60)),
    # exponents
    ("1E6", F(10**6)),
    ("1e6", F(10**6)),
    ("1e3", F(1000)),
    ("1E-3", F(1, 1000)),
    ("1e-3", F(1, 1000)),
    ("1e+3", F(1000)),
    ("1E+3", F(1000)),
    ("1e0", F(1)),
    ("1.5e3", F(1500)),
    ("1e100", F(10**100)),
    # m is milli, M is mega
    ("100m", F(1, 10)),
    ("3m", F(3, 1000)),
    ("7M", F(7 * 10**6)),
    # number forms
    ("1.", F(1)),
    ("1.Gi", F(2**30)),
    (".5", F(1, 2)),
    ("0", F(0)),
    ("0Gi", F(0)),
    ("00012", F(12)),
    ("1.5", F(3, 2)),
    ("1.5Ti", F(3 * 2**39)),
    ("1.5Gi", F(1536 * 2**20)),
    ("0.1Ki", F(1024, 10)),
    # signs
    ("+1Gi", F(2**30)),
    ("-1Gi", F(-(2**30))),
    ("-1", F(-1)),
    ("+.5", F(1, 2)),
    ("-0", F(0)),
    # non-zero values round up (away from zero) to 1n
    ("1e-12", F(1, 10**9)),
    ("0.0000000001", F(1, 10**9)),
    ("1.0000000001", F(1_000_000_001, 10**9)),
    ("-1e-12", F(-1, 10**9)),
    ("0.5n", F(1, 10**9)),
    # binary-SI magnitudes are capped at int64 max (WIRE.md §4.1)
    ("8Ei", F(2**63 - 1)),
    ("9999999Ei", F(2**63 - 1)),
    ("-8Ei", F(-(2**63 - 1))),
    ("7Ei", F(7 * 2**60)),
    # decimal values are not capped
    ("10E", F(10**19)),
]

INVALID: list[str] = [
    "12GB",
    "12gi",
    "12GI",
    "12 Gi",
    " 12Gi",
    "12Gi ",
    "12Gi\n",
    " 1",
    "1 ",
    "\t1",
    "",
    "Gi",
    "Ki",
    "k",
    "m",
    "E",
    "e3",
    "+",
    "-",
    ".",
    "+.",
    "1.1.M",
    "1+1.0M",
    "0.1mi",
    ".5i",
    "1i",
    "-3.01e-",
    "1e",
    "1E+",
    "1e3.5",
    "1e1000000",
    "1e-1000000",
    "1K",
    "1Kb",
    "1KiB",
    "1Gib",
    "1gb",
    "1mb",
    "--1",
    "+-1",
    "1,5Gi",
    "1_000",
    "١٢",  # non-ASCII digits
    "１２Gi",  # full-width digits
    "0x10",
    "inf",
    "nan",
    "1" * 200,
]


@pytest.mark.parametrize(("text", "value"), VALID)
def test_parse_valid(text: str, value: Fraction) -> None:
    assert quantity.parse(text) == value


@pytest.mark.parametrize(("text", "value"), VALID)
def test_parse_bytes_rounds_up_away_from_zero(text: str, value: Fraction) -> None:
    magnitude = abs(value)
    whole = -(-magnitude.numerator // magnitude.denominator)
    assert quantity.parse_bytes(text) == (whole if value >= 0 else -whole)


@pytest.mark.parametrize("text", INVALID)
def test_parse_invalid_quotes_input_and_accepted_forms(text: str) -> None:
    with pytest.raises(errors.QuantityError) as caught:
        quantity.parse(text)
    message = str(caught.value)
    # the input is quoted (JSON-escaped, long inputs cut at 40 characters) at the start
    assert message.startswith(json.dumps(text[:40], ensure_ascii=False)[:-1])
    assert "is not a Kubernetes quantity" in message
    assert "Ki, Mi, Gi" in message and "case-sensitive" in message


@pytest.mark.parametrize("text", INVALID)
def test_parse_bytes_and_mib_reject_the_same(text: str) -> None:
    with pytest.raises(errors.QuantityError):
        quantity.parse_bytes(text)
    with pytest.raises(errors.QuantityError):
        quantity.parse_mib(text)


def test_error_message_for_12GB() -> None:
    with pytest.raises(errors.QuantityError) as caught:
        quantity.parse("12GB")
    assert str(caught.value).startswith('"12GB" is not a Kubernetes quantity')
    assert '"Gi"' in str(caught.value)


def test_error_hints_the_right_case() -> None:
    with pytest.raises(errors.QuantityError, match='did you mean "Gi"'):
        quantity.parse("12gi")
    with pytest.raises(errors.QuantityError, match='did you mean "k"'):
        quantity.parse("1K")


def test_error_names_whitespace_and_missing_digits() -> None:
    with pytest.raises(errors.QuantityError, match="whitespace"):
        quantity.parse("12 Gi")
    with pytest.raises(errors.QuantityError, match="whitespace"):
        quantity.parse(" 12Gi")
    with pytest.raises(errors.QuantityError, match="no digits"):
        quantity.parse("Gi")
    with pytest.raises(errors.QuantityError, match="empty"):
        quantity.parse("")


def test_absurd_exponent_is_refused_by_bound() -> None:
    with pytest.raises(errors.QuantityError, match="exponent"):
        quantity.parse("1e1000000")
    with pytest.raises(errors.QuantityError, match="exponent"):
        quantity.parse("1e" + "9" * 90)


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("12Gi", 12_884_901_888),
        ("12G", 12_000_000_000),
        ("100m", 1),
        ("1n", 1),
        ("0", 0),
        ("0.5", 1),
        ("1.5", 2),
        ("-1.5", -2),
        ("8Ei", 2**63 - 1),
    ],
)
def test_parse_bytes(text: str, count: int) -> None:
    assert quantity.parse_bytes(text) == count


@pytest.mark.parametrize(
    ("text", "mib"),
    [("12Gi", 12288), ("12G", 11445), ("12000Mi", 12000), ("1", 1), ("0", 0), ("1Mi", 1)],
)
def test_parse_mib(text: str, mib: int) -> None:
    assert quantity.parse_mib(text) == mib


@pytest.mark.parametrize(
    ("value", "count"), [(10, 10), (0, 0), (12884901888, 12884901888), (0.5, 1), (1e9, 10**9)]
)
def test_unquoted_json_numbers(value: int | float, count: int) -> None:
    assert quantity.parse_bytes(value) == count


@pytest.mark.parametrize("value", [True, None, float("inf"), float("nan"), b"12Gi", [1]])
def test_non_quantity_types_are_refused(value: object) -> None:
    with pytest.raises(errors.QuantityError):
        quantity.parse(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mib", "text"),
    [
        (12288, "12Gi"),
        (9728, "9.5Gi"),
        (9984, "9984Mi"),
        (11008, "11008Mi"),
        (16384, "16Gi"),
        (512, "512Mi"),
        (1536, "1.5Gi"),
        (1, "1Mi"),
        (0, "0"),
        (1024 * 1024, "1Ti"),
        (-2048, "-2Gi"),
    ],
)
def test_format_mib(mib: int, text: str) -> None:
    assert quantity.format_mib(mib) == text
    assert quantity.parse_mib(text) == mib


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (12_884_901_888, "12Gi"),
        (12_000_000_000, "12G"),
        (12_582_912_000, "12000Mi"),
        (536_870_912, "512Mi"),
        (1536, "1536"),
        (1_572_864, "1.5Mi"),
        (1000, "1k"),
        (1023, "1023"),
        (0, "0"),
        (-(2**30), "-1Gi"),
        (10**18, "1E"),
    ],
)
def test_format_bytes(count: int, text: str) -> None:
    assert quantity.format_bytes(count) == text
    assert quantity.parse_bytes(text) == count


@given(st.integers(min_value=0, max_value=2**33 - 1))  # 2^33 Gi = 2^63: capped
def test_gi_round_trips(n: int) -> None:
    assert quantity.parse_bytes(f"{n}Gi") == n * 2**30
    assert quantity.parse(f"{n}Gi") == n * 2**30


@given(st.integers(min_value=-(2**62), max_value=2**62))
def test_format_bytes_round_trips(count: int) -> None:
    assert quantity.parse_bytes(quantity.format_bytes(count)) == count


@given(st.integers(min_value=-(2**40), max_value=2**40))
def test_format_mib_round_trips(mib: int) -> None:
    assert quantity.parse_mib(quantity.format_mib(mib)) == mib


_ALPHABET = "0123456789.+-eEinumkKMGTPB \t\n"


@given(st.one_of(st.text(), st.text(alphabet=_ALPHABET, max_size=12)))
def test_any_text_gives_a_value_or_quantity_error(text: str) -> None:
    try:
        value = quantity.parse(text)
    except errors.QuantityError as error:
        assert "is not a Kubernetes quantity" in str(error)
    else:
        assert isinstance(value, Fraction)
        whole = quantity.parse_bytes(text)
        assert abs(whole) >= abs(value) > abs(whole) - 1  # rounded up, away from zero


@given(
    sign=st.sampled_from(["", "+", "-"]),
    whole=st.integers(min_value=0, max_value=10**12),
    fraction=st.text(alphabet="0123456789", max_size=6),
    suffix=st.sampled_from(sorted(quantity._SUFFIXES)),
)
def test_grammar_matches_reference_arithmetic(
    sign: str, whole: int, fraction: str, suffix: str
) -> None:
    text = f"{sign}{whole}.{fraction}{suffix}"
    power10, power2 = quantity._SUFFIXES[suffix]
    exact = (
        (whole + (F(int(fraction), 10 ** len(fraction)) if fraction else 0))
        * (F(10) ** power10)
        * 2**power2
    )
    nanos = -(-exact * 10**9 // 1)
    if power2:
        nanos = min(nanos, (2**63 - 1) * 10**9)
    expected = F(nanos, 10**9) * (-1 if sign == "-" else 1)
    assert quantity.parse(text) == expected
