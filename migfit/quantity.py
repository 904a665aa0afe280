"""Kubernetes resource.Quantity strings parsed exactly as the API server does, for gpu-memory."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Final

from migfit import errors

# Grammar and suffix table: apimachinery pkg/api/resource/quantity.go and suffix.go (WIRE.md §4).
# Digits are ASCII only ([0-9], never \d); the suffix is whatever follows the number and must be
# an exact, case-sensitive entry of _SUFFIXES or an exponent e<signed int> / E<signed int>.
_NUMBER: Final = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)", re.DOTALL)
_EXPONENT: Final = re.compile(r"[eE]([+-]?[0-9]+)")

# suffix -> (power of 10, power of 2). "E" alone is exa (10^18); "E6" is an exponent.
_SUFFIXES: Final[dict[str, tuple[int, int]]] = {
    "n": (-9, 0),
    "u": (-6, 0),
    "m": (-3, 0),
    "": (0, 0),
    "k": (3, 0),
    "M": (6, 0),
    "G": (9, 0),
    "T": (12, 0),
    "P": (15, 0),
    "E": (18, 0),
    "Ki": (0, 10),
    "Mi": (0, 20),
    "Gi": (0, 30),
    "Ti": (0, 40),
    "Pi": (0, 50),
    "Ei": (0, 60),
}

# Common mistakes -> the suffix the user most likely meant.
_HINTS: Final[dict[str, str]] = {
    "K": '"k" (10^3) or "Ki" (2^10)',
    "KB": '"k" (10^3) or "Ki" (2^10)',
    "kB": '"k" (10^3) or "Ki" (2^10)',
    "KiB": '"Ki"',
    "MB": '"M" (10^6) or "Mi" (2^20)',
    "MiB": '"Mi"',
    "GB": '"G" (10^9) or "Gi" (2^30)',
    "GiB": '"Gi"',
    "TB": '"T" (10^12) or "Ti" (2^40)',
    "TiB": '"Ti"',
    "PB": '"P" (10^15) or "Pi" (2^50)',
    "PiB": '"Pi"',
    "EB": '"E" (10^18) or "Ei" (2^60)',
    "EiB": '"Ei"',
}
for _suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
    for _variant in {_suffix.lower(), _suffix.upper(), _suffix[0].lower() + _suffix[1].upper()}:
        _HINTS.setdefault(_variant, f'"{_suffix}"')
    _HINTS.setdefault(_suffix.lower() + "b", f'"{_suffix}"')
del _suffix, _variant

ACCEPTED_FORMS: Final = (
    "use a number with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei (powers of 2), "
    "k, M, G, T, P, E (powers of 10), m (milli) or an exponent like 12e9; "
    "suffixes are case-sensitive"
)

#: Longest accepted text; far beyond any real quantity, it keeps int() and powers cheap.
MAX_LENGTH: Final = 100
#: Largest accepted |exponent| in e<n>/E<n>; 10^100 bytes is already absurd.
MAX_EXPONENT: Final = 100
#: Binary-SI values are capped at the int64 maximum, as Kubernetes does (WIRE.md §4.1).
MAX_INT64: Final = 2**63 - 1

_NANO: Final = 10**9
_MIB: Final = 2**20
_MAX_BINARY_NANOS: Final = MAX_INT64 * _NANO


def _quote(text: str) -> str:
    shown = text if len(text) <= 40 else text[:40] + "…"
    return json.dumps(shown, ensure_ascii=False)


def _error(text: str, why: str = "") -> errors.QuantityError:
    detail = f" ({why})" if why else ""
    return errors.QuantityError(
        f"{_quote(text)} is not a Kubernetes quantity{detail}: {ACCEPTED_FORMS}"
    )


def _as_text(value: str | int | float) -> str:
    # Unquoted JSON numbers (10, 0.5) are accepted like apimachinery's UnmarshalJSON does.
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise errors.QuantityError(
            f"{value!r} is not a Kubernetes quantity (a {type(value).__name__}): {ACCEPTED_FORMS}"
        )
    return repr(value)


def _scan(text: str) -> tuple[int, int]:
    """Return (sign, magnitude in nano units rounded up to 1n) for a quantity string."""
    if len(text) > MAX_LENGTH:
        raise _error(text, f"longer than {MAX_LENGTH} characters")
    match = _NUMBER.fullmatch(text)
    if match is None:  # pragma: no cover - the pattern matches every string
        raise _error(text)
    sign_text, whole, fraction, suffix = match.groups()
    if fraction is None:
        fraction = ""
    if not whole and not fraction:
        # apimachinery reads "Gi", "+", "." as 0; for a memory request that is meaningless.
        if not text:
            raise _error(text, "it is empty")
        if text != text.strip():
            raise _error(text, "remove the surrounding whitespace")
        raise _error(text, "it has no digits")
    scale = _SUFFIXES.get(suffix)
    if scale is None:
        exponent = _EXPONENT.fullmatch(suffix)
        if exponent is None:
            raise _error(text, _suffix_reason(suffix))
        power = int(exponent.group(1))
        if abs(power) > MAX_EXPONENT:
            raise _error(text, f"the exponent is beyond ±{MAX_EXPONENT}")
        power10, power2 = power, 0
    else:
        power10, power2 = scale
    mantissa = int(whole + fraction) if whole or fraction else 0
    if power2:
        mantissa <<= power2
    # value = mantissa * 10^(power10 - len(fraction)); in nano units add 9 to the power.
    shift = power10 - len(fraction) + 9
    # Non-zero values are rounded up (away from zero) to 1n, as Quantity does.
    nanos = mantissa * 10**shift if shift >= 0 else -(-mantissa // 10**-shift)
    if power2 and nanos > _MAX_BINARY_NANOS:
        nanos = _MAX_BINARY_NANOS
    return (-1 if sign_text == "-" else 1), nanos


def _suffix_reason(suffix: str) -> str:
    if suffix != suffix.strip() or any(ch.isspace() for ch in suffix):
        return "remove the whitespace"
    hint = _HINTS.get(suffix)
    if hint is not None:
        return f'unknown suffix "{suffix}"; did you mean {hint}?'
    if suffix[:1] in ("e", "E"):
        return f'"{suffix}" is not an exponent; write e<integer> such as e9 or e-3'
    return f'unknown suffix "{suffix}"'


def parse(text: str | int | float) -> Fraction:
    """Parse a Quantity to its exact value as Kubernetes holds it.

    Non-zero values are rounded up (away from zero) to 1n and binary-SI magnitudes are capped
    at 2^63-1, as apimachinery does. Negative quantities parse (their sign is kept). Raises
    QuantityError for anything that is not a quantity, for text without digits ("Gi", "."),
    for exponents beyond ±MAX_EXPONENT and for text longer than MAX_LENGTH.
    """
    text = _as_text(text)
    sign, nanos = _scan(text)
    return Fraction(sign * nanos, _NANO)


def parse_bytes(text: str | int | float) -> int:
    """Parse a Quantity to whole bytes, rounding a fractional amount up (away from zero).

    "100m" gives 1, like Quantity.Value(). The result may be zero or negative: callers that
    need a positive memory request must check it.
    """
    sign, nanos = _scan(_as_text(text))
    return sign * -(-nanos // _NANO)


def parse_mib(text: str | int | float) -> int:
    """Parse a Quantity to whole MiB (2^20 bytes), rounding up: "12Gi" -> 12288, "12G" -> 11445."""
    sign, nanos = _scan(_as_text(text))
    return sign * -(-nanos // (_NANO * _MIB))


_BINARY_UNITS: Final = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
    ("Ki", 2**10),
)
_DECIMAL_UNITS: Final = (
    ("E", 10**18),
    ("P", 10**15),
    ("T", 10**12),
    ("G", 10**9),
    ("M", 10**6),
    ("k", 10**3),
)


def _in_unit(magnitude: int, unit: int, suffix: str) -> str | None:
    """``magnitude`` in ``unit`` if it is at least one and a whole or half number of units."""
    if magnitude < unit:
        return None
    whole, rest = divmod(magnitude, unit)
    if rest == 0:
        return f"{whole}{suffix}"
    if 2 * rest == unit:
        return f"{whole}.5{suffix}"
    return None


def format_mib(mib: int) -> str:
    """A human-friendly Quantity for a whole number of MiB: 12288 -> "12Gi", 9728 -> "9.5Gi",
    9984 -> "9984Mi". Only binary suffixes; parse_mib() of the result gives ``mib`` back."""
    sign = "-" if mib < 0 else ""
    magnitude = abs(mib) * _MIB
    if magnitude == 0:
        return "0"
    for suffix, unit in _BINARY_UNITS:
        shown = _in_unit(magnitude, unit, suffix)
        if shown is not None:
            return sign + shown
    raise AssertionError("unreachable: a whole MiB is a whole number of Mi")  # pragma: no cover


def format_bytes(count: int) -> str:
    """The shortest human-friendly Quantity for a byte count (binary suffix on ties):
    12884901888 -> "12Gi", 12000000000 -> "12G", 1572864 -> "1.5Mi", 1536 -> "1536", 1000 -> "1k".
    parse_bytes() of the result gives ``count`` back."""
    sign = "-" if count < 0 else ""
    magnitude = abs(count)
    best = str(magnitude)
    for suffix, unit in _BINARY_UNITS + _DECIMAL_UNITS:
        shown = _in_unit(magnitude, unit, suffix)
        if shown is not None and len(shown) < len(best):
            best = shown
    return sign + best
