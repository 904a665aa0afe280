"""The extender's Filter step: which nodes can take a pod's MIG instances, and why not, as data.

The pod's request is decoded once (``decode_pod``), then each node gets a verdict from a few
dict lookups on precomputed figures (``figures.Index``). Reasons are frozen values with a
code and structured fields; they become the extender's strings only at the HTTP edge
(``message``). Outcomes follow kube-scheduler's two failure kinds (WIRE.md 1.2):

- ``UNRESOLVABLE`` (``FailedAndUnresolvableNodes``): preemption cannot help — the node does
  not advertise the profile at all (the scheduler never splits an idle 3g.40gb into 1g.10gb,
  DESIGN.md 1.4), advertises fewer instances than the pod needs, uses the other MIG strategy,
  is being re-partitioned, is unknown to the cache, or its instance (or model) is too small
  for the request the webhook recorded.
- ``FAILED`` (``FailedNodes``): the profile is advertised but not enough instances are free;
  evicting pods could free them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from migfit import decoding, keys, records
from migfit.extender import figures


class Outcome(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    UNRESOLVABLE = "unresolvable"


class Code(enum.StrEnum):
    UNKNOWN_NODE = "unknown-node"
    REPARTITIONING = "repartitioning"
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


def decode_pod(pod: Mapping[str, Any]) -> PodRequest:
    """The MIG request of a v1.Pod as kube-scheduler sends it (``ExtenderArgs.Pod``).

    Container requests follow Kubernetes' effective-request rules (``cluster.
    effective_requests``: sum of containers and sidecars, max with init containers; an
    extended resource's request defaults to its limit).
    """
    meta = _dict(pod.get("metadata"))
    annotations = {str(k): str(v) for k, v in _dict(meta.get("annotations")).items()}
    gpu, _per_container, cpu, mem = decoding.effective_requests(_dict(pod.get("spec")))
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


def _relayout(fig: figures.NodeFigures, want: figures.Want) -> tuple[Relayout, str]:
    if fig.model is None:
        return Relayout.UNKNOWN_MODEL, fig.state.node.model_error or (
            f"no {keys.LABEL_PRODUCT} label")
    chance = figures.relayout_chance(fig.model, want.profile, want.request_mib)
    if not chance.possible:
        return Relayout.IMPOSSIBLE, chance.why_not
    if fig.state.used_total == 0 or fig.idle_gpus > 0:
        return Relayout.IDLE, ""
    return Relayout.DISRUPTIVE, ""


def check(fig: figures.NodeFigures | None, request: PodRequest) -> tuple[Reason, ...]:
    """The reasons ``fig``'s node cannot take ``request``; empty when it can.

    A function of ``fig`` and ``request.wants`` only: callers may memoise on them.
    """
    if fig is None:
        return _UNKNOWN
    if fig.repartitioning is not None:
        return (_reason(code=Code.REPARTITIONING, detail=fig.repartitioning),)
    state = fig.state
    out: list[Reason] | None = None
    for w in request.wants:
        p = w.profile
        reason: Reason | None = None
        alloc = state.node.allocatable.get(p, 0)
        if w.models is not None and fig.model_key not in w.models:
            reason = _reason(code=Code.MODEL_NOT_ALLOWED, profile=p,
                             model=fig.model.id if fig.model else "",
                             models=w.model_names, request_mib=w.request_mib)
        elif w.single != fig.single and state.node.strategy in ("single", "mixed"):
            # (a node without a MIG strategy is one without MIG instances: said below)
            reason = _reason(code=Code.STRATEGY_MISMATCH, profile=p, detail=w.resource,
                             model="single" if fig.single else "mixed")
        elif alloc <= 0:
            relayout, detail = _relayout(fig, w)
            reason = _reason(code=Code.NOT_ADVERTISED, profile=p, need=w.count,
                             advertised=fig.advertised, relayout=relayout, detail=detail,
                             idle_gpus=fig.idle_gpus, gpus=state.node.gpu_count,
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
        if r is Relayout.IDLE:
            if reason.idle_gpus >= reason.gpus and reason.gpus > 1:
                which = "its idle GPUs"
            elif reason.gpus > 1:
                which = "one of its idle GPUs"
            else:
                which = "its idle GPU"
            return f"{head}; a re-layout of {which} could provide it (see migfit advise)"
        if r is Relayout.DISRUPTIVE:
            return (f"{head}; a re-layout could provide it, but only after the pods on its "
                    f"GPUs stop (see migfit advise)")
        if r is Relayout.IMPOSSIBLE:
            return f"{head}; no re-layout can provide it: {reason.detail}"
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
