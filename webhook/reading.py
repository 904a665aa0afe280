"""Reading an admission's Pod: its annotations and containers, checked for the shapes the API sends
and for how many MIG instances they ask (``MAX_INSTANCES``).

The decision reads only these (and the Supply): ``memo_key`` turns exactly them into a hashable
key, so that an identical request against the same supply can reuse a ready answer. Client
input is never trusted to be well formed: anything else is ``Malformed`` (a 400 the user can
act on), and no value is quoted back longer than ``requests.QUOTE_LIMIT`` characters. Pure:
no I/O, no HTTP.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

from migfit import decoding, errors, keys, records, requests

#: Deepest affinity structure a memo key is made for (deeper ones are decided afresh).
_FREEZE_DEPTH: Final = 16
#: Every GPU resource name starts so (``decoding.is_gpu_resource`` decides the rest).
_GPU_VENDOR: Final = "nvidia.com/"
#: GPUs on the largest MIG nodes: HGX and DGX boards of 8 (A100, H100, H200, B200, B300).
NODE_GPUS: Final = 8
#: MIG instances one GPU holds at most: one per compute slice (7g: 7 on every model of the
#: catalog but the A30 and RTX PRO, which hold fewer).
GPU_INSTANCES: Final = 7
#: MIG instances one pod may ask for. Each container given GPU memory gets an instance of its
#: own (DESIGN §4) and a pod runs on one node, so more than the largest node holds
#: (``NODE_GPUS`` × ``GPU_INSTANCES`` = 56) can never run; 64 leaves room above that. It is
#: checked before any per-container work: a 1 MiB request holds a pod of 16,000 annotated
#: containers, whose answer took seconds of the event loop and 6.7 MB, and whose
#: ``migfit.io/decision`` passed the API server's 256 KiB of annotations.
MAX_INSTANCES: Final = 64
#: The annotation prefixes that name one container each.
_PER_CONTAINER: Final = (requests.GPU_MEMORY_PREFIX, requests.GPU_COMPUTE_PREFIX,
                         requests.GPU_MEDIA_PREFIX)


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


def init_containers_of(pod: Mapping[str, Any]) -> list[Container]:
    """The Pod's init containers (sidecars included) that have a name, read leniently: the
    decision only warns about them."""
    spec = pod.get("spec")
    init = spec.get("initContainers") if isinstance(spec, Mapping) else None
    if not isinstance(init, list):
        return []
    return [Container(index=i, name=c["name"], resources=c.get("resources"))
            for i, c in enumerate(init) if isinstance(c, Mapping)
            and isinstance(c.get("name"), str)]


def instances_asked(annotations: Mapping[str, str], names: Sequence[str]) -> int:
    """How many containers migfit's annotations ask a MIG instance for: those of ``names``
    (the pod's containers) a per-container key names (gpu-memory, gpu-compute or gpu-media),
    and the main container when the pod-wide gpu-memory key is present. From the keys
    alone, in one pass: no value is parsed. Keys naming no container are not counted
    (``requests.parse`` refuses them by name)."""
    containers = set(names)
    asked = {key[len(prefix):] for key in annotations for prefix in _PER_CONTAINER
             if key.startswith(prefix) and key[len(prefix):] in containers}
    if requests.GPU_MEMORY in annotations:
        main, _note = requests.default_container(annotations, names)
        if main is not None:
            asked.add(main)
    return len(asked)


def check_instances(annotations: Mapping[str, str], names: Sequence[str]) -> None:
    """Denied when the pod asks for more than ``MAX_INSTANCES`` MIG instances."""
    asked = instances_asked(annotations, names)
    if asked > MAX_INSTANCES:
        raise Denied(
            f"the pod asks for {asked} MIG instances, one per container its "
            f"{keys.ANNOTATION_PREFIX.rstrip('/')} annotations name; all of a pod's instances "
            f"must be on its one node, and the largest MIG nodes hold {NODE_GPUS * GPU_INSTANCES} "
            f"({NODE_GPUS} GPUs × {GPU_INSTANCES}): give GPU memory to at most "
            f"{MAX_INSTANCES} containers, or split the pod into several")


_NONE: Final = frozenset({"0", "0.0", "0m"})  # an amount of nothing, as written


def own_gpus(containers: Sequence[Container], chosen: set[str]) -> list[tuple[str, str]]:
    """(container, resource) for the GPU resources the containers not in ``chosen`` ask for
    themselves (in limits or requests), each container once, in order."""
    out: list[tuple[str, str]] = []
    for c in containers:
        if c.name in chosen or not isinstance(c.resources, Mapping):
            continue
        for field in ("limits", "requests"):
            section = c.resources.get(field)
            names = [n for n, v in section.items() if isinstance(n, str)
                     and decoding.is_gpu_resource(n) and str(v).strip() not in _NONE
                     ] if isinstance(section, Mapping) else []
            if names:
                out.append((c.name, sorted(names)[0]))
                break
    return out


# ---------------------------------------------------------------- where the pod may go


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    """What of a pod limits the nodes it may run on, as kube-scheduler reads it (the
    tolerations aside: the GPU taint's is often added only once the pod asks for a GPU)."""

    constraints: records.PodConstraints
    node_name: str | None

    @property
    def limited(self) -> bool:
        return (self.node_name is not None or bool(self.constraints.node_selector)
                or self.constraints.affinity is not None)

    def words(self) -> str:
        """The nodes it allows, for a message: ``node gpu-a (the pod's spec.nodeName)``,
        ``the nodes the pod's nodeSelector and required node affinity select``."""
        if self.node_name is not None:
            return f"node {requests.shorten(self.node_name, 80)} (the pod's spec.nodeName)"
        selectors = self.selectors()
        return f"the nodes the pod's {selectors} select{'' if ' and ' in selectors else 's'}"

    def selectors(self) -> str:
        """``nodeSelector``, ``required node affinity``, or both joined by ``and``."""
        parts = (["nodeSelector"] if self.constraints.node_selector else []) + (
            ["required node affinity"] if self.constraints.affinity is not None else [])
        return " and ".join(parts) or "nodeSelector"


def placement_of(pod: Mapping[str, Any]) -> Placement:
    """The pod's nodeSelector, required node affinity and ``spec.nodeName``, read leniently
    (the API server has validated their types; anything else is read as absent)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return Placement(records.NO_CONSTRAINTS, None)
    full = decoding.pod_constraints(spec)
    constraints = records.PodConstraints(node_selector=full.node_selector,
                                         affinity=full.affinity)
    name = spec.get("nodeName")
    return Placement(constraints, name if isinstance(name, str) and name else None)


def placed(spec: Mapping[str, Any]) -> bool:
    """Whether ``spec`` may limit the pod's nodes (a memo does not know which nodes)."""
    if spec.get("nodeSelector") or spec.get("nodeName"):
        return True
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    return (isinstance(node_affinity, Mapping)
            and node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") is not None)


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
    container's name and GPU resources (in order), the init containers' too,
    ``spec.affinity`` and ``spec.schedulerName``. Two pods with equal keys get equal
    verdicts from the same supply and policy. Written for decoded JSON (dicts and lists, read
    once each): it runs on every admission, the decision only on a miss.

    None, too, for a pod whose nodeSelector, required node affinity or nodeName limits its
    nodes: its decision reads those nodes (``placement_of``), whose free instances can move
    while the cluster's sums, which the memo keys on, stay.
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
        if not isinstance(spec, dict) or placed(spec):
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
        named = [c for c in init if isinstance(c, dict) and isinstance(c.get("name"), str)
                 ] if isinstance(init, list) else []
        init_names = tuple(c["name"] for c in named)
        # their GPU resources, for the few that have any (the warning reads them)
        init_gpus = tuple((c["name"], shape) for c in named
                          if (shape := _resources_shape(c.get("resources"))) is not None
                          and isinstance(shape, tuple) and any(shape))
        return (ours, tuple(shapes), init_names, init_gpus, _freeze(spec.get("affinity")),
                _freeze(spec.get("schedulerName")))
    except (_Unkeyable, AttributeError, TypeError):
        return None
