"""Building the RFC 6902 JSON Patch that carries a decision into the Pod.

Extended resources in limits and requests (both, equal), a ``nvidia.com/gpu.product`` node
affinity ANDed into every live nodeSelectorTerm, ``spec.schedulerName`` when a migfit
scheduler is configured, and the ``migfit.io/profile`` and ``migfit.io/decision``
annotations. Only ``add`` and ``remove`` are emitted, each with the parent it needs. Pure: no
I/O, no HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal, NotRequired, TypedDict

from migfit import decoding, errors, keys, quantity, requests
from migfit.webhook.reading import Container, Denied

LABEL_PRODUCT: Final = keys.LABEL_PRODUCT


class PatchOp(TypedDict):
    """One RFC 6902 operation."""

    op: Literal["add", "remove"]
    path: str
    value: NotRequired[Any]


def _shown(value: object) -> str:
    """A quantity as the pod spells it (JSON for one that is not a string: ``{"a": 1}``, not
    Python's ``{'a': 1}``), shortened."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                             default=str)
    return requests.shorten(text)


def escape(token: str) -> str:
    """An RFC 6901 reference token: ``~`` as ``~0`` first, then ``/`` as ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def _is_one(value: Any) -> bool:
    try:
        return quantity.parse(value) == 1
    except errors.QuantityError:
        return False


def resource_ops(c: Container, resource: str, *, owned: str | None) -> list[PatchOp]:
    """Set ``resource: "1"`` in limits and requests (extended resources need both, equal),
    creating ``resources``/``limits``/``requests`` when absent (RFC 6902 add needs the parent)."""
    base = f"/spec/containers/{c.index}/resources"
    res = c.resources
    if not isinstance(res, Mapping):
        return [PatchOp(op="add", path=base,
                        value={"limits": {resource: "1"}, "requests": {resource: "1"}})]
    ops: list[PatchOp] = []
    for field in ("limits", "requests"):
        section = res.get(field)
        if not isinstance(section, Mapping):
            ops.append(PatchOp(op="add", path=f"{base}/{field}", value={resource: "1"}))
            continue
        has_target = False
        for name, value in section.items():
            if not isinstance(name, str) or not decoding.is_gpu_resource(name):
                continue
            if name == resource and _is_one(value):
                has_target = True
            elif name == owned:
                # Written by an earlier migfit decision for this container: replaced.
                if name != resource:
                    ops.append(PatchOp(op="remove", path=f"{base}/{field}/{escape(name)}"))
            else:
                raise Denied(
                    f"container {requests.quote(c.name)} already requests "
                    f"{requests.shorten(name, 100)}: {_shown(value)}; remove "
                    f"that resource to let migfit choose, or remove the {requests.GPU_MEMORY} "
                    f"annotations to keep it")
        if not has_target:
            ops.append(PatchOp(op="add", path=f"{base}/{field}/{escape(resource)}", value="1"))
    return ops


def affinity_ops(spec: Any, values: list[str]) -> list[PatchOp]:
    """Require ``nvidia.com/gpu.product In values``. nodeSelectorTerms are ORed, so the
    expression goes into every existing term (within a term, expressions are ANDed)."""
    expr = {"key": LABEL_PRODUCT, "operator": "In", "values": values}
    path = "/spec/affinity"
    affinity = spec.get("affinity") if isinstance(spec, Mapping) else None
    required = {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}
    if not isinstance(affinity, Mapping):
        return [PatchOp(op="add", path=path, value={"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": required}})]
    node = affinity.get("nodeAffinity")
    if not isinstance(node, Mapping):
        return [PatchOp(op="add", path=f"{path}/nodeAffinity",
                        value={"requiredDuringSchedulingIgnoredDuringExecution": required})]
    path += "/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    selector = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
    if not isinstance(terms, list) or not terms:
        return [PatchOp(op="add", path=path, value=required)]
    ops: list[PatchOp] = []
    for j, term in enumerate(terms):
        if _matches_nothing(term):
            continue  # AND-ing an expression into it would make it match GPU nodes
        exprs = term.get("matchExpressions")
        term_path = f"{path}/nodeSelectorTerms/{j}"
        if not isinstance(exprs, list):
            ops.append(PatchOp(op="add", path=f"{term_path}/matchExpressions", value=[expr]))
        elif not any(_same_expr(e, expr) for e in exprs):
            ops.append(PatchOp(op="add", path=f"{term_path}/matchExpressions/-", value=expr))
    return ops


def _matches_nothing(term: Any) -> bool:
    """A null or empty NodeSelectorTerm matches no node (core/v1 NodeSelectorTerm)."""
    return not isinstance(term, Mapping) or not (term.get("matchExpressions")
                                                 or term.get("matchFields"))


def has_product_affinity(spec: Any) -> bool:
    """Every required nodeSelectorTerm that can match a node already constrains
    nvidia.com/gpu.product with In."""
    try:
        terms = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        live = [t for t in terms if not _matches_nothing(t)]
        return bool(live) and all(
            any(e.get("key") == LABEL_PRODUCT and e.get("operator") == "In"
                for e in term["matchExpressions"]) for term in live)
    except (KeyError, TypeError, AttributeError):
        return False


def _same_expr(have: Any, want: Mapping[str, Any]) -> bool:
    return (isinstance(have, Mapping) and have.get("key") == want["key"]
            and have.get("operator") == want["operator"]
            and isinstance(have.get("values"), list)
            and sorted(map(str, have["values"])) == sorted(want["values"]))


def scheduler_ops(spec: Any, scheduler_name: str | None) -> list[PatchOp]:
    """Set ``spec.schedulerName`` when a migfit scheduler is configured and the pod left the
    default (RFC 6902 ``add`` replaces an existing member)."""
    if scheduler_name is None or not isinstance(spec, Mapping):
        return []
    current = spec.get("schedulerName")
    if current == scheduler_name or current not in (None, "", "default-scheduler"):
        return []
    return [PatchOp(op="add", path="/spec/schedulerName", value=scheduler_name)]


def annotation_ops(current: Mapping[str, str], wanted: Mapping[str, str]) -> list[PatchOp]:
    """Set the ``wanted`` annotations that differ from ``current``."""
    # metadata.annotations exists: the gpu-memory annotation brought the pod here.
    return [PatchOp(op="add", path=f"/metadata/annotations/{escape(k)}", value=v)
            for k, v in wanted.items() if current.get(k) != v]
