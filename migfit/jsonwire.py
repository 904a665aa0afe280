"""JSON on the wire: orjson when it is installed, the standard library otherwise, same results.

``loads`` accepts exactly what ``json.loads`` accepts (orjson first; a body orjson refuses,
such as one with a lone surrogate escape or ``NaN``, is read again by the standard library,
which has the last word; one difference remains: orjson reads an integer beyond 64 bits as a
float, which no Kubernetes object carries), and ``dumps`` gives compact UTF-8 bytes
(anything orjson cannot encode, such as a lone surrogate, goes through the standard library
with ASCII escapes). orjson is several times faster on AdmissionReview-sized bodies.
"""

from __future__ import annotations

import json
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


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON in UTF-8."""
    if HAVE_ORJSON:
        try:
            return orjson.dumps(value)
        except TypeError:
            pass  # e.g. a lone surrogate: the standard library escapes it
    return json.dumps(value, separators=(",", ":")).encode()
