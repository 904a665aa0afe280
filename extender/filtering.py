"""The extender's Filter step: which nodes can take a pod's MIG instances, and why not, as data.

The pod's request is decoded once (``decode_pod``), then each node gets a verdict from a few
dict lookups on precomputed figures (``figures.Index``). Reasons are frozen values with a
code and structured fields; they become the extender's strings only at the HTTP edge
(``message``). Outcomes follow kube-scheduler's two failure kinds (WIRE.md 1.2):

- ``UNRESOLVABLE`` (``FailedAndUnresolvableNodes``): preemption cannot help — the node does
  not advertise the profile at all (the scheduler never splits an idle 3g.40gb into 1g.10gb,
  DESIGN.md 1.4), advertises fewer instances than the pod needs, uses the other MIG strategy,
  is being re-partitioned (or migfit's re-layout of it failed), is unknown to the cache, or
  its instance (or model) is too small for the request the webhook recorded.
- ``FAILED`` (``FailedNodes``): the profile is advertised but not enough instances are free;
  evicting pods could free them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from migfit import decoding, errors, keys, quantity, records, requests, strictfiles
from migfit.extender import figures


class Outcome(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    UNRESOLVABLE = "unresolvable"


class Code(enum.StrEnum):
    UNKNOWN_NODE = "unknown-node"
    REPARTITIONING = "repartitioning"
    RELAYOUT_FAILED = "relayout-failed"
    NOT_ADVERTISED = "not-advertised"
    TOO_FEW_ADVERTISED = "too-few-advertised"
    STRATEGY_MISMATCH = "strategy-mismatch"
    MEMORY_TOO_SMALL = "memory-too-small"
    MODEL_NOT_ALLOWED = "model-not-allowed"
    INSUFFICIENT_FREE = "insufficient-free"


class Relayout(enum.StrEnum):
    """Whether a different layout of the node's GPUs could provide a missing profile."""

    IDLE = "idle"  # yes, on GPUs that hold no pod
    DISRUPTIVE = "disruptive"  # yes, but only by stopping pods on the node's GPUs
    IMPOSSIBLE = "impossible"  # no layout of the node's model serves the request
    TOO_MANY = "too-many"  # a layout holds it, but no layout of the node's GPUs holds enough
    GPUS_UNKNOWN = "gpus-unknown"  # one GPU holds too few, and the node's GPU count is unknown
    UNKNOWN_MODEL = "unknown-model"  # the node's GPU model is not known


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Reason:
    """Why one node cannot take the pod: a code and the figures that explain it."""

    code: Code
    profile: str = ""
    need: int = 0
    free: int = 0
    allocatable: int = 0
    advertised: tuple[tuple[str, int, int], ...] = ()  # (profile, allocatable, free)
    relayout: Relayout | None = None
    idle_gpus: int = 0
    gpus: int = 0
    per_gpu: int = 0  # the most instances of ``profile`` one GPU of the node's model holds
    memory_mib: int | None = None
    request_mib: int | None = None
    model: str = ""
    models: tuple[str, ...] = ()
    detail: str = ""

    @property
    def unresolvable(self) -> bool:
        return self.code is not Code.INSUFFICIENT_FREE


# Reasons are values: nodes in the same situation share one object (and its message).
_reason = functools.lru_cache(maxsize=65536)(Reason)


@dataclasses.dataclass(frozen=True, slots=True)
class PodRequest:
    """A pod's MIG request, decoded once per call."""

    uid: str
    namespace: str
    name: str
    wants: tuple[figures.Want, ...]
    # the pod's effective cpu (milli) and memory (bytes) requests, as sent or cached
    cpu_milli: int = 0
    memory_bytes: int = 0

    @property
    def mig(self) -> bool:
        """False for a pod without any MIG request: it passes every node untouched."""
        return bool(self.wants)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def describe(self) -> str:
        """``1g.10gb`` or ``1g.10gb×2+3g.40gb``; ``-`` without a MIG request."""
        parts = [w.profile if w.count == 1 else f"{w.profile}×{w.count}" for w in self.wants]
        return "+".join(parts) or "-"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class BadPod(ValueError):
    """The Pod kube-scheduler sent holds a GPU request no API server would have admitted
    (the extender answers 400 with this message: which container, which resource, what to
    send)."""


_WHOLE = 'send a whole number of instances, e.g. "1"'


def _check_gpu_requests(spec: Mapping[str, Any]) -> None:
    """BadPod when a container's MIG (``nvidia.com/mig-*``) or ``nvidia.com/gpu`` request or
    limit is not a non-negative whole-number quantity, or the containers are not a list of
    objects: read loosely, such a request would count as none and pass every node.

    Other resources (cpu, memory) are read as the cache reads them: a malformed value counts
    as none (``decoding.effective_requests``).
    """
    for field in ("containers", "initContainers"):
        where = f"Pod.spec.{field}"
        listed = spec.get(field)
        if listed is None:
            continue
        if not isinstance(listed, list):
            raise BadPod(f"{where} is a {_kind(listed)}; send a list of containers")
        for i, c in enumerate(listed):
            if not isinstance(c, dict):
                raise BadPod(f"{where}[{i}] is a {_kind(c)}; send a container object")
            name = c.get("name")
            at = f"{where}[{i}]" + (f" ({_quoted(name)})" if isinstance(name, str)
                                    else "")
            resources = c.get("resources")
            if resources is None:
                continue
            if not isinstance(resources, dict):
                raise BadPod(f"{at}.resources is a {_kind(resources)}; send an object with "
                             "requests and limits")
            for part in ("limits", "requests"):
                values = resources.get(part)
                if values is None:
                    continue
                if not isinstance(values, dict):
                    raise BadPod(f"{at}.resources.{part} is a {_kind(values)}; send an object "
                                 "of resource name to quantity")
                for res, value in values.items():
                    if isinstance(res, str) and decoding.is_gpu_resource(res):
                        why = _not_whole(value)
                        if why:
                            raise BadPod(f"{at}.resources.{part}[{_quoted(res)}] "
                                         f"{why}; {_WHOLE}")


def _quoted(text: str) -> str:
    """A name or value from the request for a message: JSON-quoted, cut after 100
    characters."""
    return json.dumps(requests.cut(text, 100))


def _kind(value: Any) -> str:
    """A JSON value's type for a message: ``string``, ``number``, ``list``, ``object``..."""
    return strictfiles.kind_of(value, mapping="object")


def _not_whole(value: Any) -> str:
    """Why ``value`` is not a non-negative whole-number quantity; "" when it is one."""
    if value is None:
        return "is null, not a quantity"
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        return f"is a {_kind(value)}, not a quantity"
    shown = _quoted(value) if isinstance(value, str) else repr(value)
    try:
        amount = quantity.parse(value)
    except errors.QuantityError as exc:
        return f"is {shown}, not a Kubernetes quantity ({_cause(str(exc))})"
    if amount < 0:
        return f"is {shown}, a negative count"
    if amount.denominator != 1:
        return f"is {shown}, not a whole number (MIG instances and GPUs are not divisible)"
    return ""


def _cause(text: str) -> str:
    """The part of a QuantityError's message in parentheses (what is wrong), or all of it."""
    start, end = text.find("("), text.find("):")
    return text[start + 1:end] if 0 <= start < end else text


def decode_pod(pod: Mapping[str, Any]) -> PodRequest:
    """The MIG request of a v1.Pod as kube-scheduler sends it (``ExtenderArgs.Pod``).

    Container requests follow Kubernetes' effective-request rules (``cluster.
    effective_requests``: sum of containers and sidecars, max with init containers; an
    extended resource's request defaults to its limit). BadPod when a GPU request is not a
    non-negative whole number (``_check_gpu_requests``).
    """
    meta = _dict(pod.get("metadata"))
    annotations = {str(k): str(v) for k, v in _dict(meta.get("annotations")).items()}
    spec = _dict(pod.get("spec"))
    _check_gpu_requests(spec)
    gpu, _per_container, cpu, mem = decoding.effective_requests(spec)
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or meta.get("generateName") or "")
    return PodRequest(
        uid=str(meta.get("uid") or f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        wants=figures.wants_of(gpu, annotations),
        cpu_milli=int(cpu),
        memory_bytes=int(mem),
    )


def request_of(pod: records.PodRecord) -> PodRequest:
    """The MIG request of a pod held in the cache (the simulator and the advisor use it)."""
    return PodRequest(uid=pod.uid, namespace=pod.namespace, name=pod.name,
                      wants=figures.wants_of(pod.requests, pod.annotations),
                      cpu_milli=pod.cpu_milli, memory_bytes=pod.memory_bytes)


@dataclasses.dataclass(frozen=True, slots=True)
class FilterResult:
    """Every input node in exactly one of ``passed``, ``failed`` or ``unresolvable``."""

    passed: list[str]
    failed: dict[str, tuple[Reason, ...]]
    unresolvable: dict[str, tuple[Reason, ...]]
    # nodes per (unresolvable?, first reason's code), counted in the same pass (metrics)
    codes: dict[tuple[bool, Code], int] = dataclasses.field(default_factory=dict)

    def outcome(self, name: str) -> Outcome | None:
        if name in self.unresolvable:
            return Outcome.UNRESOLVABLE
        if name in self.failed:
            return Outcome.FAILED
        return Outcome.PASSED if name in self.passed else None


_UNKNOWN: tuple[Reason, ...] = (_reason(code=Code.UNKNOWN_NODE),)
_NO_REASONS: tuple[Reason, ...] = ()


def _relayout(fig: figures.NodeFigures, want: figures.Want) -> tuple[Relayout, str, int]:
    """Whether a re-layout of the node could give ``want`` (all its instances), why not, and
    the most instances of its profile one GPU of the model holds."""
    if fig.model is None:
        return Relayout.UNKNOWN_MODEL, fig.state.node.model_error or (
            f"no {keys.LABEL_PRODUCT} label"), 0
    chance = figures.relayout_chance(fig.model, want.profile, want.request_mib)
    if not chance.possible:
        return Relayout.IMPOSSIBLE, chance.why_not, 0
    per_gpu = chance.per_gpu
    gpus = fig.state.node.gpu_count
    needed = -(-want.count // per_gpu)  # GPUs the instances need at the least
    if needed > 1 and gpus <= 0:
        return Relayout.GPUS_UNKNOWN, "", per_gpu
    if needed > gpus > 0:
        return Relayout.TOO_MANY, "", per_gpu
    if fig.state.used_total == 0 or fig.idle_gpus >= needed:
        return Relayout.IDLE, "", per_gpu
    return Relayout.DISRUPTIVE, "", per_gpu


def check(fig: figures.NodeFigures | None, request: PodRequest) -> tuple[Reason, ...]:
    """The reasons ``fig``'s node cannot take ``request``; empty when it can.

    A function of ``fig`` and ``request.wants`` only: callers may memoise on them.
    """
    if fig is None:
        return _UNKNOWN
    if fig.relayout_failed is not None:
        return (_reason(code=Code.RELAYOUT_FAILED, detail=fig.relayout_failed),)
    if fig.repartitioning is not None:
        return (_reason(code=Code.REPARTITIONING, detail=fig.repartitioning),)
    state = fig.state
    # a node without any MIG GPU (no model, no GPUs, nothing advertised): says so first
    no_gpu = fig.model is None and not fig.advertised and not state.node.gpu_count
    out: list[Reason] | None = None
    for w in request.wants:
        p = w.profile
        reason: Reason | None = None
        alloc = state.node.allocatable.get(p, 0)
        if no_gpu:
            # (before the decision's models: a CPU node is not "an unknown GPU model")
            relayout, detail, _per = _relayout(fig, w)
            reason = _reason(code=Code.NOT_ADVERTISED, profile=p, need=w.count,
                             relayout=relayout, detail=detail, request_mib=w.request_mib)
        elif w.models is not None and fig.model_key not in w.models:
            reason = _reason(code=Code.MODEL_NOT_ALLOWED, profile=p,
                             model=fig.model.id if fig.model else "",
                             models=w.model_names, request_mib=w.request_mib)
        elif w.single != fig.single and state.node.strategy in ("single", "mixed"):
            # (a node without a MIG strategy is one without MIG instances: said below)
            reason = _reason(code=Code.STRATEGY_MISMATCH, profile=p, detail=w.resource,
                             model="single" if fig.single else "mixed")
        elif alloc <= 0:
            relayout, detail, per_gpu = _relayout(fig, w)
            reason = _reason(code=Code.NOT_ADVERTISED, profile=p, need=w.count,
                             advertised=fig.advertised, relayout=relayout, detail=detail,
                             idle_gpus=fig.idle_gpus, gpus=state.node.gpu_count,
                             per_gpu=per_gpu, model=fig.model.id if fig.model else "",
                             request_mib=w.request_mib)
        elif alloc < w.count:
            reason = _reason(code=Code.TOO_FEW_ADVERTISED, profile=p, need=w.count,
                             allocatable=alloc)
        else:
            mem = fig.memory.get(p)
            if w.request_mib is not None and mem is not None and mem < w.request_mib:
                reason = _reason(code=Code.MEMORY_TOO_SMALL, profile=p, memory_mib=mem,
                                 request_mib=w.request_mib,
                                 model=fig.model.id if fig.model else "")
            else:
                free = state.free.get(p, 0)
                if free < w.count:
                    reason = _reason(code=Code.INSUFFICIENT_FREE, profile=p, need=w.count,
                                     free=free, allocatable=alloc)
        if reason is not None:
            if out is None:
                out = []
            out.append(reason)
    if out is None:
        return _NO_REASONS
    # Unresolvable reasons first: they decide the outcome and lead the message.
    out.sort(key=lambda r: not r.unresolvable)
    return tuple(out)


def filter_nodes(
    index: figures.Index, request: PodRequest, names: Iterable[str]
) -> FilterResult:
    """A verdict for every distinct name in ``names``, in input order.

    Verdicts of the index's nodes are memoised; a name the cluster does not know is answered
    ``UNKNOWN_NODE`` and leaves nothing behind.
    """
    unique = list(dict.fromkeys(names))
    if not request.mig:
        return FilterResult(passed=unique, failed={}, unresolvable={})
    index.refresh()
    figs = index.figures
    memo = index.memo(request.wants)
    passed: list[str] = []
    failed: dict[str, tuple[Reason, ...]] = {}
    unresolvable: dict[str, tuple[Reason, ...]] = {}
    codes: dict[tuple[bool, Code], int] = {}
    for name in unique:
        fig = figs.get(name)
        if fig is None:
            reasons = _UNKNOWN
        else:
            hit = memo.get(name)
            if hit is not None and hit[0] is fig:
                reasons = hit[1]
            else:
                reasons = check(fig, request)
                memo[name] = (fig, reasons)
        if not reasons:
            passed.append(name)
            continue
        first = reasons[0]
        bad = first.code is not Code.INSUFFICIENT_FREE
        if bad:
            unresolvable[name] = reasons
        else:
            failed[name] = reasons
        key = (bad, first.code)
        codes[key] = codes.get(key, 0) + 1
    return FilterResult(passed=passed, failed=failed, unresolvable=unresolvable, codes=codes)


# ---------------------------------------------------------------- the edge: reasons as text


def _advertised(items: Sequence[tuple[str, int, int]]) -> str:
    # The layout only, not how many are free right now: kube-scheduler groups identical
    # messages in the pod's FailedScheduling event ("3 node(s) ..."), and nodes with the same
    # layout should fall into one group (per-node free counts are in the debug log and
    # `migfit status`).
    parts = [f"{p}×{alloc}" if alloc > 1 else p for p, alloc, _free in items]
    return "node advertises " + ", ".join(parts)


@functools.lru_cache(maxsize=65536)
def message(reason: Reason) -> str:
    """One short, helpful sentence for an operator (what ``kubectl describe pod`` shows)."""
    c = reason.code
    if c is Code.UNKNOWN_NODE:
        return "node is unknown to migfit's cache (not yet seen, or deleted)"
    if c is Code.REPARTITIONING:
        return f"node's MIG layout is being changed ({reason.detail}); wait for it to finish"
    if c is Code.RELAYOUT_FAILED:
        return (f"migfit's re-layout of this node failed (result: {reason.detail}; the "
                f"reason is in its {keys.ANNOTATION_RELAYOUT} annotation), so it keeps the "
                f"taint {keys.TAINT_RELAYOUT}: fix the node, then remove the taint and the "
                f"annotations {keys.ANNOTATION_RELAYOUT} and "
                f"{keys.ANNOTATION_RELAYOUT_FAILED} (kubectl taint node NODE "
                f"{keys.TAINT_RELAYOUT}- && kubectl annotate node NODE "
                f"{keys.ANNOTATION_RELAYOUT}- {keys.ANNOTATION_RELAYOUT_FAILED}-)")
    if c is Code.MODEL_NOT_ALLOWED:
        have = reason.model or "an unknown GPU model"
        return (f"node has {have}; the request ({reason.request_mib} MiB) fits "
                f"{reason.profile} only on {', '.join(reason.models) or 'no model'}")
    if c is Code.STRATEGY_MISMATCH:
        return (f"node uses the {reason.model} MIG strategy; the pod asks for "
                f"{reason.detail} ({reason.profile})")
    if c is Code.NOT_ADVERTISED:
        r = reason.relayout
        if not reason.advertised and r is Relayout.UNKNOWN_MODEL and not reason.gpus:
            return f"node has no MIG GPU ({reason.detail})"
        head = (f"{_advertised(reason.advertised)} but no {reason.profile}" if reason.advertised
                else f"node advertises no MIG instances, so no {reason.profile}")
        # GPUs the pod's instances need at the least (one GPU holds ``per_gpu``)
        needed = -(-reason.need // reason.per_gpu) if reason.per_gpu else 1
        them = "it" if reason.need <= 1 else f"{_count(reason.need)} {reason.profile}"
        if r is Relayout.IDLE:
            if needed > 1 and needed >= reason.gpus:
                which = "its idle GPUs"
            elif needed > 1:
                which = f"{needed} of its idle GPUs"
            elif reason.idle_gpus >= reason.gpus and reason.gpus > 1:
                which = "its idle GPUs"
            elif reason.gpus > 1:
                which = "one of its idle GPUs"
            else:
                which = "its idle GPU"
            return f"{head}; a re-layout of {which} could provide {them} (see migfit advise)"
        if r is Relayout.DISRUPTIVE:
            return (f"{head}; a re-layout could provide {them}, but only after the pods on "
                    f"its GPUs stop (see migfit advise)")
        if r is Relayout.IMPOSSIBLE:
            return f"{head}; no re-layout can provide it: {reason.detail}"
        if r is Relayout.TOO_MANY:
            gpus = f"{reason.gpus} GPUs" if reason.gpus > 1 else "1 GPU"
            return (f"{head}; no re-layout of this node can give {them}: the most is "
                    f"{reason.gpus * reason.per_gpu} ({gpus} × {reason.per_gpu} "
                    f"{reason.profile} per {reason.model}); the pod needs a node with "
                    f"{_count(needed)} or more GPUs, or fewer {reason.profile} per pod")
        if r is Relayout.GPUS_UNKNOWN:
            return (f"{head}; a re-layout could provide {them} only on {_count(needed)} or "
                    f"more GPUs "
                    f"({reason.per_gpu} {reason.profile} per {reason.model}), and the node's "
                    f"GPU count is unknown (no {keys.LABEL_GPU_COUNT} label)")
        return f"{head}; its GPU model is unknown ({reason.detail})"
    if c is Code.TOO_FEW_ADVERTISED:
        return (f"node advertises {reason.allocatable} {reason.profile} in all; the pod "
                f"needs {_count(reason.need)}")
    if c is Code.MEMORY_TOO_SMALL:
        on = f" on {reason.model}" if reason.model else ""
        return (f"{reason.profile}{on} has {reason.memory_mib} MiB usable, below the "
                f"{reason.request_mib} MiB requested")
    return (f"every {reason.profile} instance is in use" if reason.free == 0
            else f"only {reason.free} {reason.profile} free; the pod needs "
            f"{_count(reason.need)}")


def _count(n: int) -> str:
    """An instance count for a message: as it is, or ``about 1e+100`` for one no node could
    hold (a pod's limit may be any integer quantity)."""
    return str(n) if n < 10**6 else f"about {n:.0e}"


def node_message(reasons: Sequence[Reason]) -> str:
    """All of a node's reasons as one string (what the extender's maps carry)."""
    return _joined(tuple(reasons))


class Messages:
    """``node_message`` with its answers kept by the verdict tuple's identity (per server).

    Verdict tuples are kept per node in the index's memo and reused while the node is
    unchanged, so they are cached here by identity (hashing a Reason costs more than the
    lookup); an entry holds its tuple, so its id cannot be reused while cached. At most
    ``limit`` entries, then the table starts again.
    """

    def __init__(self, limit: int = 65536) -> None:
        self._limit = limit
        self._by_identity: dict[int, tuple[Sequence[Reason], str]] = {}

    def of(self, reasons: Sequence[Reason]) -> str:
        hit = self._by_identity.get(id(reasons))
        if hit is not None and hit[0] is reasons:
            return hit[1]
        text = node_message(reasons)
        if len(self._by_identity) >= self._limit:
            self._by_identity.clear()
        self._by_identity[id(reasons)] = (reasons, text)
        return text

    def __len__(self) -> int:
        return len(self._by_identity)


@functools.lru_cache(maxsize=16384)
def _joined(reasons: tuple[Reason, ...]) -> str:
    # Reasons are shared values (see _reason), so nodes in the same situation hit this cache.
    return "; ".join(message(r) for r in reasons)
