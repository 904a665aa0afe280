"""The rows of the trace's CSV lists (pods, nodes), read so that a bad one is named: its file,
its line and the field, with what the field must hold."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Mapping
from pathlib import Path

from migfit import errors, strictfiles


class Row:
    """One row of a list, by column name, with typed reads that fail as a usage error naming
    the file, the line and the field."""

    __slots__ = ("_fields", "line", "path")

    def __init__(self, path: Path, line: int, fields: Mapping[str, str]) -> None:
        self.path = path
        self.line = line
        self._fields = fields

    def error(self, message: str) -> errors.ConfigError:
        return errors.ConfigError(f"{self.path}, line {self.line}: {message}")

    def has(self, name: str) -> bool:
        """Whether the list has the column ``name``."""
        return name in self._fields

    def text(self, name: str, default: str = "") -> str:
        """The field as it is (stripped); ``default`` when the list has no such column."""
        return self._fields.get(name, default).strip()

    def name(self, column: str, seen: dict[str, int], what: str) -> str:
        """The field ``column`` as the row's name: not empty, and on no line of ``seen``
        (name -> its line; this row's is added). ``what``: the thing named, "node"."""
        value = self.text(column)
        if not value:
            raise self.error(f"{column} is empty: give each {what} a name")
        if value in seen:
            raise self.error(f"{column} {value} is on line {seen[value]} too: give each "
                             f"{what} its own name")
        seen[value] = self.line
        return value

    def integer(self, name: str, *, low: int | None = None, high: int | None = None,
                what: str = "") -> int:
        """The field as a whole number, within [low, high] where given."""
        value = self.text(name)
        try:
            out = int(value)
        except ValueError:
            raise self.error(f"{name} {value!r} is not a whole number") from None
        if (low is not None and out < low) or (high is not None and out > high):
            bounds = (f"{low} to {high}" if low is not None and high is not None
                      else f"at least {low}" if low is not None else f"at most {high}")
            raise self.error(f"{name} {out}: use {bounds}{what}")
        return out

    def number(self, name: str, *, default: float = 0.0) -> float:
        """The field as a finite number; ``default`` when empty or not a column."""
        value = self.text(name)
        if not value:
            return default
        try:
            out = float(value)
        except ValueError:
            raise self.error(f"{name} {value!r} is not a number") from None
        if not math.isfinite(out):
            raise self.error(f"{name} {value!r}: use a finite number")
        return out


def rows(path: Path, *, what: str, columns: tuple[str, ...]) -> Iterator[Row]:
    """The rows of ``path``, a CSV list with a header naming at least ``columns``, each column
    once; a row with fewer or more fields than the header is refused, naming its line (and
    the first field a short row lacks). ``what`` names the list in messages ("the trace's pod
    list")."""
    shape = f"{what} ({','.join(columns)},...)"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise errors.ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    # A byte-order mark (spreadsheet exports) is dropped: it is not part of the first column.
    text = strictfiles.text(data, where=str(path), fix=f"save {what} as UTF-8")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            raise errors.ConfigError(f"{path}: not {shape}: no column "
                                     f"{', '.join(missing)} in its header line")
        twice = sorted({c for c in header if header.count(c) > 1})
        if twice:
            raise errors.ConfigError(
                f"{path}, line 1: the header names {', '.join(twice)} more than once; name "
                f"each column once")
        for fields in reader:
            extra = fields.get(None)
            if extra:
                raise errors.ConfigError(
                    f"{path}, line {reader.line_num}: {len(header) + len(extra)} fields "
                    f"where the header has {len(header)}")
            if None in fields.values():
                lacking = next(k for k, v in fields.items() if v is None)
                given = sum(1 for v in fields.values() if v is not None)
                raise errors.ConfigError(
                    f"{path}, line {reader.line_num}: {given} fields where the header "
                    f"has {len(header)}: no {lacking}")
            yield Row(path, reader.line_num, {k: v for k, v in fields.items()
                                              if isinstance(k, str) and v is not None})
    except csv.Error as exc:
        raise errors.ConfigError(f"{path}, line {reader.line_num}: not {shape}: {exc}"
                                 ) from None
