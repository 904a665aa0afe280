"""Bytes of a configuration or cluster file as text: UTF-8, or an error saying what they are."""

from __future__ import annotations

import pytest

from migfit import errors, strictfiles

YAML = "apiVersion: v1\nkind: List\nitems: []\n"
NON_ASCII = "# Größe: 显存\napiVersion: v1\nitems: []\n"


@pytest.mark.parametrize("text", [YAML, NON_ASCII])
@pytest.mark.parametrize(("encoding", "name"), [
    ("utf-16", "UTF-16"), ("utf-16-le", "UTF-16"), ("utf-16-be", "UTF-16"),
    ("utf-32", "UTF-32"), ("utf-32-le", "UTF-32"), ("utf-32-be", "UTF-32"),
    ("utf-8", None), ("utf-8-sig", None)])
def test_wide_encoding(text: str, encoding: str, name: str | None) -> None:
    assert strictfiles.wide_encoding(text.encode(encoding)) == name


@pytest.mark.parametrize("data", [b"", b"a", b"\x00", b"ab\x00c" * 3, b"\xff\xfe"[:1]])
def test_short_or_odd_bytes_are_not_called_wide(data: bytes) -> None:
    assert strictfiles.wide_encoding(data) is None


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig"])
def test_text_reads_utf8_and_drops_its_byte_order_mark(encoding: str) -> None:
    assert strictfiles.text(NON_ASCII.encode(encoding), where="f.yaml") == NON_ASCII


def test_text_names_utf16_and_what_writes_it() -> None:
    with pytest.raises(errors.ConfigError) as info:
        strictfiles.text(YAML.encode("utf-16"), where="c.yaml", fix="export it again")
    assert str(info.value) == (
        "c.yaml: looks like UTF-16 text, not UTF-8: export it again (Windows PowerShell's > "
        "writes UTF-16: pipe to Out-File -Encoding utf8 instead)")


@pytest.mark.parametrize("mark", [b"", b"\xef\xbb\xbf"])
def test_text_places_other_bytes_by_line_and_column(mark: bytes) -> None:
    with pytest.raises(errors.ConfigError) as info:
        strictfiles.text(mark + "a: 1\nb: café\n".encode("latin-1"), where="c.yaml")
    assert str(info.value) == ("c.yaml, line 2, column 7: not UTF-8 (byte 0xe9); save it as "
                               "UTF-8")
