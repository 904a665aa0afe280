"""Strict configuration files: YAML text in, a validated pydantic model out, errors that say where.

The catalog override, mig-parted configs and simulator cluster specs all follow
mig-parted's rule: a versioned schema that rejects unknown fields. One way to read them keeps
their error messages alike: ``FILE: models.0.profiles.2.starts: Input should be a valid list``.
Their bytes, and a cluster file's, become text here too (``text``): UTF-8, or an error that
says what the file is instead.
"""

from __future__ import annotations

import codecs
from typing import Any, TypeVar

import pydantic
import yaml

from migfit import errors

_M = TypeVar("_M", bound=pydantic.BaseModel)


# Byte-order marks, UTF-32's first: UTF-32 LE's begins with UTF-16 LE's.
_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
         (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))
# Without a mark: which byte of every four is NUL in text that is mostly ASCII (YAML, JSON,
# CSV), for UTF-32 LE and BE, then UTF-16 LE and BE.
_NUL_PATTERNS = (((False, True, True, True), "UTF-32"), ((True, True, True, False), "UTF-32"),
                 ((False, True, False, True), "UTF-16"), ((True, False, True, False), "UTF-16"))


def wide_encoding(data: bytes) -> str | None:
    """``"UTF-16"`` or ``"UTF-32"`` when ``data`` looks like text in it (a byte-order mark, or
    NUL bytes at every other, or three of every four, places of its start), else None.

    Windows PowerShell's ``>`` and ``Out-File`` write UTF-16 LE with a mark, so ``kubectl get
    nodes,pods -A -o yaml > cluster.yaml`` there makes a file no YAML reader takes as UTF-8.
    """
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name
    head = data[:256]
    head = head[:len(head) - len(head) % 4]
    if not head or b"\0" not in head:
        return None
    quarters = len(head) // 4
    nul = [head[k::4].count(0) / quarters for k in range(4)]
    for pattern, name in _NUL_PATTERNS:
        if all(share >= 0.7 if is_nul else share <= 0.3 for share, is_nul in zip(nul, pattern,
                                                                                strict=True)):
            return name
    return None


def text(data: bytes, *, where: str, fix: str = "save it as UTF-8") -> str:
    """``data`` as UTF-8 text (a byte-order mark dropped); a ConfigError naming ``where``, and
    ending in ``fix`` (what to do), when it is not: text that looks like UTF-16 or UTF-32 is
    told so, other bytes by line and column."""
    wide = wide_encoding(data)
    if wide is not None:
        how = (" (Windows PowerShell's > writes UTF-16: pipe to Out-File -Encoding utf8 "
               "instead)" if wide == "UTF-16" else "")
        raise errors.ConfigError(f"{where}: looks like {wide} text, not UTF-8: {fix}{how}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        # utf-8-sig counts from after the mark it drops.
        start = exc.start + (len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0)
        line = data.count(b"\n", 0, start) + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise errors.ConfigError(f"{where}, line {line}, column {column}: not UTF-8 (byte "
                                 f"0x{data[start]:02x}); {fix}") from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what a YAML parse error is, on one line (``at line 4, column 22: mapping
    values are not allowed here``); PyYAML's own text spans four lines with the source."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        return " ".join(str(exc).split())
    text = f"at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, at = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context:  # where the construct began, which may be the line to fix
        text += f" ({context}" + (f" at line {at.line + 1}, column {at.column + 1})"
                                   if at is not None else ")")
    return text


def load_yaml(text: str, *, where: str, first: bool = False) -> Any:
    """YAML (or JSON) text decoded; a ConfigError naming ``where`` when it does not parse.

    ``first``: only the first document (None for none), as go-yaml's Unmarshal reads it
    (sigs.k8s.io/yaml, which mig-parted uses): a trailing ``---`` or a second document is
    not read. Otherwise a second document is an error."""
    try:
        return next(iter(yaml.safe_load_all(text)), None) if first else yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise errors.ConfigError(f"{where}: not valid YAML {yaml_problem(exc)}") from None


def kind_of(value: Any, *, mapping: str = "mapping") -> str:
    """What a decoded YAML or JSON value is, for a message: ``null``, ``boolean``,
    ``number``, ``string``, ``list``, or ``mapping`` (YAML's word; JSON's is ``object``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return mapping if isinstance(value, dict) else type(value).__name__


def validate(model: type[_M], raw: Any, *, where: str, expected: str) -> _M:
    """``raw`` as ``model``; a ConfigError with the first problem's location and message,
    followed by ``expected``: what such a file is ("a catalog file is YAML with ...").

    pydantic names its model classes where a mapping was wanted ("Input should be a valid
    dictionary or instance of _CatalogSpec"): those say what the file holds instead."""
    if raw is None:
        raise errors.ConfigError(f"{where}: the file is empty; {expected}")
    if not isinstance(raw, dict):
        raise errors.ConfigError(f"{where}: holds a YAML {kind_of(raw)}, not a mapping; "
                                 f"{expected}")
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ()))
        msg = first["msg"]
        if first["type"] == "model_type":
            msg = f"a {kind_of(first.get('input'))}, where a mapping (key: value) belongs"
        raise errors.ConfigError(f"{where}: {loc + ': ' if loc else ''}{msg}; "
                                 f"{expected}") from None


def require_version(version: str, *, where: str, hint: str = "use v1") -> None:
    """Only ``v1`` exists: refuse others rather than guess what they would mean."""
    if version != "v1":
        raise errors.ConfigError(f"{where}: version {version!r} is not supported; {hint}")
