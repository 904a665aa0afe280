"""JSON on the wire: orjson when it is installed, the standard library otherwise, same results.

``loads`` accepts exactly what ``json.loads`` accepts (orjson first; a body orjson refuses,
such as one with a lone surrogate escape or ``NaN``, is read again by the standard library,
which has the last word; one difference remains: orjson reads an integer beyond 64 bits as a
float, which no Kubernetes object carries), and ``dumps`` gives compact UTF-8 bytes
(anything orjson cannot encode, such as a lone surrogate, goes through the standard library
with ASCII escapes). orjson is several times faster on AdmissionReview-sized bodies.

``loads_standard`` is the standard library's reading held to RFC 8259, as orjson and Go's
encoding/json hold it: ``NaN``, ``Infinity`` and ``-Infinity`` (which ``json.loads`` reads)
and numbers beyond a 64-bit float (which it reads as ``inf``, or as an integer no float holds)
are refused, so that nothing read can make an answer that a Go client cannot read.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

try:
    import orjson
except ImportError:  # pragma: no cover - exercised by a test that hides orjson
    HAVE_ORJSON: Final = False
else:
    HAVE_ORJSON: Final = True  # type: ignore[misc]

#: The library that reads and writes first: ``orjson`` or ``json``.
LIBRARY: Final = "orjson" if HAVE_ORJSON else "json"


def loads(data: bytes | str) -> Any:
    """Parse one JSON document; ValueError (or RecursionError) when it is not one."""
    if HAVE_ORJSON:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # the standard library decides what is JSON
    return json.loads(data)


#: How deep arrays and objects may nest and always be read (orjson reads 1,024 levels, the
#: standard library, which has the last word, somewhat fewer than Python's recursion limit);
#: a Pod or a Node nests a dozen or so.
MAX_DEPTH: Final = 500


def not_json(exc: BaseException) -> str:
    """Why a body that ``loads`` or ``loads_standard`` refused with ``exc`` is not JSON, in
    wire terms: never Python's own words ("maximum recursion depth exceeded while decoding",
    "'utf-8' codec can't decode byte 0xff in position 28")."""
    if isinstance(exc, RecursionError):
        return f"arrays and objects nested too deep; nest at most {MAX_DEPTH} levels"
    if isinstance(exc, UnicodeDecodeError):
        return f"not valid UTF-8 at byte offset {exc.start:,}; send UTF-8"
    return str(exc)  # json's own "Expecting value: line 1 column 7 (char 6)", or ours


def containers(data: bytes) -> int:
    """An upper bound on the arrays and objects in ``data``: its ``[`` and ``{`` (those in
    strings too), counted without parsing."""
    return data.count(b"[") + data.count(b"{")


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON in UTF-8."""
    if HAVE_ORJSON:
        try:
            return orjson.dumps(value)
        except TypeError:
            pass  # e.g. a lone surrogate: the standard library escapes it
    return json.dumps(value, separators=(",", ":")).encode()


def _shown(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:20]}… ({len(text)} characters)"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value (RFC 8259 has no NaN or Infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {_shown(text)} is beyond a 64-bit float")
    return value


def _finite_int(text: str) -> int:
    # 309 digits and more may pass the largest double (1.8e308); float() says whether they do,
    # before int() meets the standard library's cap on digits (4,300).
    if len(text) > 308 and math.isinf(float(text)):
        raise ValueError(f"the number {_shown(text)} is beyond a 64-bit float")
    return int(text)


def loads_standard(data: bytes | str) -> Any:
    """Parse one JSON document with the standard library, held to RFC 8259: ValueError (or
    RecursionError) when it is not one, and ValueError for ``NaN``, ``Infinity``,
    ``-Infinity`` and any number beyond a 64-bit float (orjson refuses them all too)."""
    return json.loads(data, parse_constant=_no_constant, parse_float=_finite_float,
                      parse_int=_finite_int)
