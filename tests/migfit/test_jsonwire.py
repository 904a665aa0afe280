"""migfit.jsonwire: orjson's speed with the standard library's answers, and the standard
library alone when orjson is not installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from migfit import jsonwire

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text", [
    '{"a": [1, 2.5, "x", null, true]}',
    '"lone \\ud800 surrogate"',
    "NaN",
    '{"a": 1, "a": 2}',
])
def test_loads_reads_what_the_standard_library_reads(text: str) -> None:
    got, want = jsonwire.loads(text.encode()), json.loads(text)
    assert repr(got) == repr(want)


def test_integers_beyond_64_bits_keep_their_value_roughly() -> None:
    # orjson reads them as floats (the one difference from the standard library).
    assert jsonwire.loads(b"123456789012345678901234567890") == pytest.approx(1.2345678901e29)
    assert jsonwire.loads(b"18446744073709551615") == 2**64 - 1


@pytest.mark.parametrize("text", ["{", "", "\xff", "[1,]"])
def test_loads_refuses_what_the_standard_library_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        jsonwire.loads(text.encode("utf-8", "surrogateescape"))


@pytest.mark.parametrize("value", [{"a": [1, "é", None]}, "lone \ud800", 2**70])
def test_dumps_round_trips(value: object) -> None:
    assert json.loads(jsonwire.dumps(value)) == value


def test_without_orjson_the_standard_library_serves() -> None:
    code = ("import sys; sys.modules['orjson'] = None\n"
            "from migfit import jsonwire\n"
            "assert jsonwire.LIBRARY == 'json', jsonwire.LIBRARY\n"
            "assert jsonwire.loads(b'{\"a\": [1]}') == {'a': [1]}\n"
            "print(jsonwire.dumps({'a': 'b'}).decode())\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == '{"a":"b"}'
