"""Reading an admission's Pod: its annotations and containers, checked for the shapes the API sends.

The decision reads only these (and the Supply): ``memo_key`` turns exactly them into a hashable
key, so that an identical request against the same supply can reuse a ready answer. Client
input is never trusted to be well formed: anything else is ``Malformed`` (a 400 the user can
act on), and no value is quoted back longer than ``requests.QUOTE_LIMIT`` characters. Pure:
no I/O, no HTTP.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any, Final

from migfit import decoding, errors, keys, requests

#: Deepest affinity structure a memo key is made for (deeper ones are decided afresh).
_FREEZE_DEPTH: Final = 16
#: Every GPU resource name starts so (``decoding.is_gpu_resource`` decides the rest).
_GPU_VENDOR: Final = "nvidia.com/"


class Denied(errors.UsageError):
    """A request migfit cannot honour; ``status`` is the AdmissionResponse status code."""

    status = 403


class Malformed(errors.UsageError):
    """An AdmissionRequest or Pod that is not shaped as Kubernetes sends them."""

    status = 400


@dataclasses.dataclass(frozen=True, slots=True)
class Container:
    """One entry of ``spec.containers``: its position, its name and its raw ``resources``."""

    index: int
    name: str
    resources: Any  # the raw ``resources`` value (may be absent or not an object)


def annotations_of(pod: Mapping[str, Any]) -> dict[str, str]:
    """The Pod's ``metadata.annotations`` ({} when absent), or Malformed."""
    meta = pod.get("metadata")
    if meta is None:
        meta = {}
    if not isinstance(meta, Mapping):
        raise Malformed("the Pod's metadata is not an object")
    raw = meta.get("annotations")
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise Malformed("the Pod's metadata.annotations is not a map of strings")
    return dict(raw)


def containers_of(pod: Mapping[str, Any]) -> tuple[list[Container], list[str]]:
    """The Pod's containers in order and its init containers' names, or Malformed."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise Malformed("the Pod has no spec")
    out: list[Container] = []
    raw_containers = spec.get("containers")
    if not isinstance(raw_containers, list):
        raise Malformed("the Pod's spec.containers is not a list")
    for i, c in enumerate(raw_containers):
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
            raise Malformed(f"spec.containers[{i}] has no name")
        out.append(Container(index=i, name=c["name"], resources=c.get("resources")))
    init = spec.get("initContainers")
    init_names = [c["name"] for c in init if isinstance(c, Mapping)
                  and isinstance(c.get("name"), str)] if isinstance(init, list) else []
    return out, init_names


# ---------------------------------------------------------------- the memo key


def _is_ours(key: str) -> bool:
    return key.startswith(keys.ANNOTATION_PREFIX) or key == requests.DEFAULT_CONTAINER


def _freeze(value: Any, depth: int = 0) -> Hashable:
    """A hashable image of a JSON value that tells apart every value the decision can tell
    apart (types included: ``1`` and ``"1"`` differ)."""
    if depth > _FREEZE_DEPTH:
        raise _Unkeyable
    if isinstance(value, Mapping):
        return ("{", tuple((k, _freeze(v, depth + 1)) for k, v in value.items()))
    if isinstance(value, list):
        return ("[", tuple(_freeze(v, depth + 1) for v in value))
    if value is None or isinstance(value, str | int | float):
        return (type(value).__name__, value)
    raise _Unkeyable


class _Unkeyable(Exception):
    pass


def _resources_shape(resources: Any) -> Hashable:
    """What ``patching`` reads of a container's resources: whether it and its limits/requests
    are objects, and their GPU entries. CPU, memory and the rest never change the answer."""
    if not isinstance(resources, dict):
        return None if not isinstance(resources, Mapping) else _unkeyable()
    shape: list[Hashable] = []
    for field in ("limits", "requests"):
        section = resources.get(field)
        if not isinstance(section, dict):
            shape.append(None if not isinstance(section, Mapping) else _unkeyable())
            continue
        shape.append(tuple((name, _freeze(v)) for name, v in section.items()
                           if name.startswith(_GPU_VENDOR) and decoding.is_gpu_resource(name)))
    return tuple(shape)


def _unkeyable() -> Hashable:
    raise _Unkeyable


def memo_key(pod: Any) -> Hashable | None:
    """Everything of ``pod`` the decision reads, as a hashable key; None when the pod is not
    shaped as the API sends it (such pods are decided afresh and get their error).

    That is: migfit's annotations and the default-container one (in their order), each
    container's name and GPU resources (in order), the init containers' names,
    ``spec.affinity`` and ``spec.schedulerName``. Two pods with equal keys get equal
    verdicts from the same supply and policy. Written for decoded JSON (dicts and lists, read
    once each): it runs on every admission, the decision only on a miss.
    """
    try:
        if not isinstance(pod, dict):
            return None
        meta = pod.get("metadata")
        raw = {} if meta is None else meta.get("annotations") if isinstance(meta, dict) else 0
        if raw is None:
            raw = {}
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            return None  # Malformed: decided afresh
        ours = tuple((k, v) for k, v in raw.items()
                     if k.startswith(keys.ANNOTATION_PREFIX) or k == requests.DEFAULT_CONTAINER)
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            return None
        found = spec.get("containers")
        if not isinstance(found, list):
            return None
        shapes = []
        for c in found:
            name = c.get("name") if isinstance(c, dict) else None
            if not isinstance(name, str):
                return None
            shapes.append((name, _resources_shape(c.get("resources"))))
        init = spec.get("initContainers")
        init_names = tuple(c["name"] for c in init if isinstance(c, dict)
                           and isinstance(c.get("name"), str)) if isinstance(init, list) else ()
        return (ours, tuple(shapes), init_names, _freeze(spec.get("affinity")),
                _freeze(spec.get("schedulerName")))
    except (_Unkeyable, AttributeError, TypeError):
        return None
