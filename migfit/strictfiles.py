"""Strict configuration files: YAML text in, a validated pydantic model out, errors that say where.

The catalog override, mig-parted configs and simulator cluster specs all follow
mig-parted's rule: a versioned schema that rejects unknown fields. One way to read them keeps
their error messages alike: ``FILE: models.0.profiles.2.starts: Input should be a valid list``.
"""

from __future__ import annotations

from typing import Any, TypeVar

import pydantic
import yaml

from migfit import errors

_M = TypeVar("_M", bound=pydantic.BaseModel)


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


def validate(model: type[_M], raw: Any, *, where: str) -> _M:
    """``raw`` as ``model``; a ConfigError with the first problem's location and message."""
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ()))
        raise errors.ConfigError(f"{where}: {loc + ': ' if loc else ''}{first['msg']}") from None


def require_version(version: str, *, where: str, hint: str = "use v1") -> None:
    """Only ``v1`` exists: refuse others rather than guess what they would mean."""
    if version != "v1":
        raise errors.ConfigError(f"{where}: version {version!r} is not supported; {hint}")
