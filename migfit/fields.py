"""Loose readers for fields of API objects (plain JSON dicts): a wrong type reads as empty.

Quantities are parsed by ``migfit.quantity``; the text forms are memoised in small bounded
caches of pure functions (the same few strings, "1", "500m", "16Gi", arrive with every event).
"""

from __future__ import annotations

import datetime
import functools
import math
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from migfit import errors, quantity

# Shared read-only empty mapping: most objects carry no migfit annotation.
EMPTY: Mapping[str, str] = MappingProxyType({})


@functools.lru_cache(maxsize=4096)
def _count_text(value: str) -> int:
    try:
        return max(0, math.ceil(quantity.parse(value)))
    except errors.QuantityError:
        return 0


def count(value: Any) -> int:
    """An extended-resource count; quantities like "1" or "2k" allowed, rounded up."""
    if isinstance(value, str):
        return _count_text(value)
    try:
        return max(0, math.ceil(quantity.parse(value)))
    except errors.QuantityError:
        return 0


@functools.lru_cache(maxsize=4096)
def _milli_text(value: str) -> int:
    return math.ceil(quantity.parse(value) * 1000)


@functools.lru_cache(maxsize=4096)
def _bytes_text(value: str) -> int:
    return quantity.parse_bytes(value)


def milli(value: Any) -> int:
    """CPU in millicores; raises QuantityError."""
    if isinstance(value, str):
        return _milli_text(value)
    return math.ceil(quantity.parse(value) * 1000)


def bytes_(value: Any) -> int:
    """Memory in bytes; raises QuantityError."""
    if isinstance(value, str):
        return _bytes_text(value)
    return quantity.parse_bytes(value)


def int_label(value: str | None) -> int | None:
    """A label holding a non-negative integer (ASCII digits only), else None."""
    if value and value.isascii() and value.isdigit():
        return int(value)
    return None


def intern_map(value: Mapping[str, str]) -> Mapping[str, str]:
    """``value`` with interned keys (the same few annotation keys on every pod); EMPTY if empty."""
    if not value:
        return EMPTY
    return {sys.intern(k): v for k, v in value.items()}


def timestamp(value: Any) -> float | None:
    """An RFC 3339 timestamp as POSIX seconds, None when absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in as_dict(value).items()}
