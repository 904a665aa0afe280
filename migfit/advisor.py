"""Which nodes to re-partition so that waiting MIG pods can run, and why one pod is pending.

kube-scheduler never splits an idle ``3g.40gb`` into ``1g.10gb``s and preemption cannot create
a resource a node does not advertise (DESIGN.md 1.4), so a pod waits next to idle slices until
someone changes the node's mig-parted config. This module (pure: no I/O) computes that
advice from the cluster model:

- demand: pending, unbound pods with MIG requests, unschedulable for longer than a grace
  period, that no schedulable node with free instances of their profiles can take right
  now (selectors, affinity, taints, cpu and memory; ``demand``);
- supply: schedulable, ready MIG nodes of a known model that are not being re-partitioned,
  with their layout per GPU (from the mig-parted config when the ConfigMap is readable and
  agrees with the allocatable, else inferred from the allocatable, and said so);
- re-layouts in flight (``incoming``): a node being re-partitioned whose target is known (the
  extender's ``migfit.io/relayout`` record while its own re-layout runs, else the config its
  ``nvidia.com/mig.config`` names in the ConfigMap) offers its target's instances less those
  its bound pods hold. The waiting pods those cover whole, where the node can take them (as
  below; migfit's own re-layout taint aside), await that node (``Advice.awaiting``): no other
  node is planned for them, and they are not ``unserved``. A target not known counts as
  nothing. Before, a pod a node was being re-laid out for was advised a second node;
- a node is safe when no bound, non-terminated pod uses a MIG instance on it. On a busy node
  (``Settings.busy_nodes``) only the GPUs that cannot hold an instance in use may change:
  the API does not say which GPU the device plugin gave a pod, so a GPU is taken as busy
  when any profile of its layout has an instance in use (the counts prove a GPU free only
  when none of its profiles is in use), and a busy GPU keeps its exact layout (mig-parted
  re-creates every instance of a GPU whose config changes). That needs the per-GPU layout
  known exactly: from the node's mig-parted config, or inferred when the allocatable admits
  one arrangement only and it is the same on every GPU; and no GPU with MIG disabled. Such a
  recommendation disrupts no pod and lists the node's pods as ``running``
  (docs/relayout.md says what the MIG Manager does on such a node);
- otherwise, with ``allow_disruptive``, a change lists every MIG pod of the node as
  disrupted and is marked disruptive; instances in use keep their profile. Safe nodes come
  first, then busy nodes' idle GPUs, then disruptive changes;
- a waiting pod counts toward a node only when the node can take it: its nodeSelector and
  required node affinity (the webhook's model affinity included) match the node's labels,
  it tolerates the node's NoSchedule and NoExecute taints, and its cpu and memory requests
  fit in the node's allocatable less what the pods bound there (and those the plan sends
  there) request: the GPU pods, and the others as the cache sums them per node;
- hysteresis: a node re-laid out less than ``cooldown_s`` ago (``recent``) is planned last,
  only for pods that became unschedulable after that re-layout, and only when the change
  serves at least ``cooldown_min`` of their instances;
- ahead of demand (``shortfall``, ``Settings.ahead_*``): once a pod waits, a filling cluster
  may have no idle node left, so idle nodes are also re-laid out, GPU by GPU, for the
  instances the demand mix will lack while its free supply of other profiles is more than
  the mix needs, less the largest burst of its pods seen (``burst_reserve``: what a burst
  faster than a re-layout takes from free instances; docs/relayout.md, 6). Such a
  recommendation is marked ``ahead``; and idle nodes of one model trade GPU layouts so
  that each node's cpu and memory can feed its instances (``hostbalance``; marked
  ``ahead`` with its ``balance`` reason).

The planner (``migfit.planner``) picks the layouts; a named config from the ConfigMap is
preferred when one serves at least as much and keeps what is in use, else a custom config in
mig-parted format is proposed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypedDict

from migfit import (
    cluster,
    errors,
    hostbalance,
    keys,
    layouts,
    migparted,
    placements,
    planner,
    profiles,
    quantity,
    records,
    requests,
)

ProfileName = profiles.ProfileName

LABEL_CONFIG = keys.LABEL_CONFIG
ANNOTATION_RELAYOUT = keys.ANNOTATION_RELAYOUT
LABEL_RELAYOUT_RECOMMENDED = keys.LABEL_RELAYOUT_RECOMMENDED
# Written by the apply mode when a re-layout failed; the node is left alone until an operator
# removes it (and the taint).
ANNOTATION_RELAYOUT_FAILED = keys.ANNOTATION_RELAYOUT_FAILED
FAILED_STATE = "failed"
# Where a custom config goes before the label names it, as every answer says it (a
# recommendation's command, explain's fix, advise --details): the ConfigMap the ClusterPolicy's
# migManager.config.name names, one of the operator's own (the GPU Operator creates its
# default-mig-parted-config from its assets), or the extender's --apply-custom-configs writes
# it there (docs/relayout.md §5).
CUSTOM_CONFIG_WHERE = (
    "the ConfigMap that the ClusterPolicy's migManager.config.name names (a copy of "
    f"{migparted.DEFAULT_CONFIGMAP}, not that one; or let the extender's "
    "--apply-custom-configs do it)")


AHEAD_FROM = 0.0  # Settings.ahead_from's default: from the start (once the mix is a sample)
# Settings.ahead_reserve_s's default: how long a re-layout takes to serve pods, the MIG
# Manager's re-partition as the simulator models it (its --relayout-seconds); the extender
# adds --config-sync when it writes custom configs (their re-layouts start that much later).
AHEAD_RESERVE_S = 180.0
BALANCE_GAIN = hostbalance.MIN_GAIN  # Settings.balance_gain's default


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """How the advisor decides (``--grace`` and friends)."""

    grace_s: float = 60.0  # a pod must have been unschedulable this long to count
    # ... and this long while free instances of its profile exist somewhere: kube-scheduler
    # moves unschedulable pods back to its active queue on cluster events and at the latest
    # every 5 minutes (podMaxInUnschedulablePodsDuration), so a pod still pending after three
    # such flushes cannot use those instances.
    free_grace_s: float = 900.0
    weight_per_hour: float = 1.0  # weight of a waiting instance: 1 + hours waited × this
    allow_disruptive: bool = True  # also recommend changes that disrupt running pods
    max_recommendations: int | None = None
    # Re-lay out the idle GPUs of nodes where pods run (their GPUs kept exactly; see the
    # module docstring). Off by default here; the server and ``migfit advise`` turn it on.
    busy_nodes: bool = False
    cooldown_s: float = 900.0  # a node re-laid out this recently is planned last ...
    cooldown_min: int = 2  # ... for at least this many instances of demand newer than that
    # Ahead of demand (``shortfall``): re-lay out idle nodes toward the demand mix once a
    # model's instances are this share allocated, for profiles whose free instances fall
    # short of the mix's share of the free slices by at least ``ahead_short`` of it, when
    # the mix counts at least ``ahead_min_pods`` pods. None: off.
    ahead_from: float | None = AHEAD_FROM
    ahead_short: float = 0.2
    ahead_min_pods: int = 50
    # Re-layouts ahead of demand leave each surplus profile the usable free instances that
    # the largest burst of pods seen asked for: the most instances of it that the pods
    # present (holding or waiting) created within any window this long asked for. The
    # window is the time a re-layout takes to serve (``burst_reserve``). None: no reserve.
    ahead_reserve_s: float | None = AHEAD_RESERVE_S
    # With ahead_from set: idle nodes of one model trade GPU layouts when that frees at least
    # this many memory slices from behind exhausted cpu or memory (``hostbalance``). None: off.
    balance_gain: float | None = BALANCE_GAIN
    # ... once the mix counts this many pods: a trade rests on the mix's mean cpu and memory
    # per instance of each profile, which a first sample of 50 pods estimates too poorly
    # (docs/simulation.md, "Trades once the mix counts 100 pods": 50, 100 and 200 measured).
    balance_min_pods: int = 100


@dataclasses.dataclass(frozen=True, slots=True)
class _Choice:
    """A node change from one planning pass, and whether it is a busy node's."""

    change: planner.NodeChange
    units: tuple[planner.Unit, ...]
    disruptive: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Waiting:
    """A pod in the demand."""

    key: str
    requests: Mapping[ProfileName, int]
    waited_s: float
    weight: float
    pod: records.PodRecord | None = None
    #: a schedulable node it may use has as many free instances as it asks for, and room
    #: for its cpu and memory: it waits for something migfit does not model
    fits_free: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class GpuChange:
    index: int
    before: tuple[str, ...]
    after: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return self.before != self.after


@dataclasses.dataclass(frozen=True, slots=True)
class Recommendation:
    """Re-lay out one node: to a named config or a custom one, with whom it helps and hurts."""

    node: str
    model: profiles.ModelId
    config: str | None  # a named config from the ConfigMap
    mig_parted: Mapping[str, Any] | None  # a custom config document (mig-parted v1)
    gpus: tuple[GpuChange, ...]
    unblocks: tuple[str, ...]
    disrupts: tuple[str, ...]
    before_config: str | None  # the node's nvidia.com/mig.config label now
    before_source: migparted.Source
    note: str
    served: Mapping[ProfileName, int]
    # Pods running on the node's GPUs that the change leaves exactly as they are (a busy-node
    # re-layout; the apply mode performs one only with --apply-busy-nodes).
    running: tuple[str, ...] = ()
    # Planned ahead of demand (``shortfall``): an idle node laid out for the instances the
    # demand mix will be short of; no pod waits for it yet.
    ahead: bool = False
    # Also planned ahead: an idle node that trades GPU layouts with another idle node so that
    # both nodes' cpu and memory can feed their instances (``hostbalance``); why, in words.
    balance: str = ""

    @property
    def disruptive(self) -> bool:
        return bool(self.disrupts)

    @property
    def busy_node(self) -> bool:
        """Pods run on the node: the change keeps their GPUs but the MIG Manager still pauses
        the node's GPU operands while it applies it (docs/relayout.md)."""
        return bool(self.running) or bool(self.disrupts)

    @property
    def lacking(self) -> str:
        """What a recommendation ahead of demand adds: ``2 × 7g.80gb, 1 × 4g.40gb``."""
        return ", ".join(f"{n} × {p}" for p, n in sorted(self.served.items()))

    @property
    def target(self) -> str:
        """The value ``nvidia.com/mig.config`` must take."""
        if self.config is not None:
            return self.config
        assert self.mig_parted is not None
        return str(next(iter(self.mig_parted["mig-configs"])))

    @property
    def command(self) -> str:
        label = f"kubectl label node {self.node} {LABEL_CONFIG}={self.target} --overwrite"
        if self.config is not None:
            return label
        return (f"add config {self.target} (printed by migfit advise --details; mig_parted in "
                f"GET /advice) to {CUSTOM_CONFIG_WHERE}, then: {label}")

    @property
    def sentence(self) -> str:
        """``command`` to follow a full stop: "Add config ..." (a command line stays as it is)."""
        command = self.command
        return command if self.config is not None else command[:1].upper() + command[1:]

    def to_json(self) -> RecommendationJson:
        return RecommendationJson(
            node=self.node,
            config=self.config,
            mig_parted=None if self.mig_parted is None else dict(self.mig_parted),
            gpus=[GpuJson(index=g.index, before=list(g.before), after=list(g.after))
                  for g in self.gpus],
            unblocks=list(self.unblocks),
            disrupts=list(self.disrupts),
            model=self.model,
            target=self.target,
            disruptive=self.disruptive,
            command=self.command,
            before_config=self.before_config,
            before_source=self.before_source,
            note=self.note,
            running=list(self.running),
            busy_node=self.busy_node,
            ahead=self.ahead,
            balance=self.balance,
        )


class GpuJson(TypedDict):
    index: int
    before: list[str]
    after: list[str]


class RecommendationJson(TypedDict):
    node: str
    config: str | None
    mig_parted: dict[str, Any] | None
    gpus: list[GpuJson]
    unblocks: list[str]
    disrupts: list[str]
    model: str
    target: str
    disruptive: bool
    command: str
    before_config: str | None
    before_source: str
    note: str
    running: list[str]
    busy_node: bool
    ahead: bool
    balance: str


class AdviceJson(TypedDict):
    recommendations: list[RecommendationJson]
    waiting: list[str]
    unserved: list[str]
    awaiting: dict[str, str]
    cooling: dict[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class Advice:
    """The recommendations, the demand they were computed for, the pods a re-layout in flight
    will serve, and what stays unserved."""

    recommendations: tuple[Recommendation, ...]
    waiting: tuple[Waiting, ...]
    # pod keys in the demand that no recommendation unblocks and no re-layout in flight serves
    unserved: tuple[str, ...]
    generation: int = 0
    # per GPU model, what the demand mix will lack (``shortfall``): the ahead demand
    ahead: Mapping[profiles.ModelId, Shortfall] = dataclasses.field(default_factory=dict)
    # pod key in the demand -> the node being re-partitioned whose target layout will serve it
    # (``incoming``): no other node is re-laid out for it
    awaiting: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # node -> when its last re-layout was seen (POSIX seconds), for the nodes still cooling
    # down (``Settings.cooldown_s``): planned only for pods unschedulable since
    cooling: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def for_node(self, name: str) -> Recommendation | None:
        for r in self.recommendations:
            if r.node == name:
                return r
        return None

    def for_pod(self, key: str) -> Recommendation | None:
        for r in self.recommendations:
            if key in r.unblocks:
                return r
        return None

    def to_json(self) -> AdviceJson:
        return AdviceJson(recommendations=[r.to_json() for r in self.recommendations],
                          waiting=[w.key for w in self.waiting],
                          unserved=list(self.unserved), awaiting=dict(self.awaiting),
                          cooling={n: keys.rfc3339(t)
                                   for n, t in sorted(self.cooling.items())})


# ---------------------------------------------------------------- demand


def unservable_profiles(state: cluster.Cluster, wanted: Sequence[str]) -> set[ProfileName]:
    """Profiles of ``wanted`` that no schedulable node has a free instance of."""
    return {ProfileName(p) for p in wanted if not state.free_nodes(p)}


def demand(state: cluster.Cluster, *, now: float, settings: Settings) -> list[Waiting]:
    """Pending unbound MIG pods, unschedulable for longer than the grace period (heaviest,
    i.e. longest waiting, first).

    The scheduler's verdict is the test of "nothing can serve it now". A pod counts after
    ``grace_s`` unless a schedulable node could take it on its free instances: as many free
    as it asks for of each profile, its selectors, affinity and taints, its cpu and memory
    (``_free_rooms``). Then it counts after ``free_grace_s``: kube-scheduler retries it on
    every cluster change and at least every 5 minutes, so still being Unschedulable then
    means those instances are of no use to it for a reason migfit does not model (pod
    affinity, topology spread, volumes, the extender's memory check). Treating them as
    supply for ever would hide the pod for as long as they stay free (``migfit simulate``
    showed it: nodes re-laid out to 7g.80gb ran out of CPU first, and their free 7g.80gb
    masked every waiting 7g pod); treating them as supply until ``free_grace_s`` when the
    pod's own cpu could not go there kept ``4g.40gb`` pods waiting 3–4 minutes next to idle
    GPUs (docs/simulation.md, "Free instances a pod cannot use").
    """
    out: list[Waiting] = []
    rooms = _Rooms(state)
    for pod in state.pending_pods():
        if not pod.pending or pod.unschedulable_since is None:
            continue
        reqs = pod.mig_requests
        if not reqs:
            continue
        waited = now - pod.unschedulable_since
        if waited < settings.grace_s:
            continue
        fits = rooms.takes(pod, reqs)
        if waited < settings.free_grace_s and fits:
            continue  # a node with a free instance could take it: kube-scheduler's turn
        weight = 1.0 + max(waited, 0.0) / 3600.0 * settings.weight_per_hour
        out.append(Waiting(key=pod.key, requests=reqs, waited_s=waited, weight=weight,
                           pod=pod, fits_free=fits))
    out.sort(key=lambda w: (-w.weight, w.key))
    return out


def stranded(state: cluster.Cluster) -> list[str]:
    """Pending MIG pods (``ns/name``, sorted) whose every profile has free instances on some
    schedulable node, none of which can take the pod (its cpu, memory, selectors, affinity
    or taints: ``_free_rooms``). Such a pod waits beside free instances; ``explain`` says
    why, and names a larger free profile where one has room (``_larger_free``)."""
    out: list[str] = []
    rooms = _Rooms(state)
    for pod in state.pending_pods():
        reqs = pod.mig_requests
        if not pod.pending or not reqs or not all(state.free_nodes(q) for q in reqs):
            continue
        if not rooms.takes(pod, reqs):
            out.append(pod.key)
    return sorted(out)


class _Rooms:
    """Whether some schedulable node can take a pod on its free instances (``_free_rooms``),
    asked once per class of pod (constraints and requests) and read per node once."""

    def __init__(self, state: cluster.Cluster) -> None:
        self._state = state
        self._nodes: dict[str, tuple[int, int]] = {}
        self._classes: dict[tuple[object, ...], list[tuple[int, int]]] = {}

    def takes(self, pod: records.PodRecord, reqs: Mapping[ProfileName, int]) -> bool:
        cls = (pod.constraints, tuple(sorted(reqs.items())))
        rooms = self._classes.get(cls)
        if rooms is None:
            rooms = self._classes[cls] = _free_rooms(self._state, pod.constraints, reqs,
                                                     self._nodes)
        return any(pod.cpu_milli <= cpu and pod.memory_bytes <= mem for cpu, mem in rooms)


def _admits(state: cluster.Cluster, name: str, constraints: records.PodConstraints,
            reqs: Mapping[ProfileName, int]) -> str | None:
    """Why schedulable node ``name`` cannot take a pod with ``constraints`` asking for
    ``reqs`` on its free instances, cpu and memory aside: fewer free instances than it asks
    for, or its selectors, affinity or taints (``excludes``); None when it can."""
    for p, n in reqs.items():
        free = state.free_nodes(p).get(name, 0)
        if free < n:
            return f"{free} free {p}, it asks for {n}"
    ns = state.node(name)
    return "not in migfit's view" if ns is None else excludes(ns.node, constraints)


def _room(state: cluster.Cluster, name: str, memo: dict[str, tuple[int, int]]
          ) -> tuple[int, int]:
    """``host_room`` of node ``name``, computed once per ``memo``; unbounded where the node
    reports neither."""
    if name not in memo:
        ns = state.node(name)
        left = None if ns is None else host_room(state, ns.node)
        memo[name] = (1 << 62, 1 << 62) if left is None else left
    return memo[name]


def _refusal(state: cluster.Cluster, pod: records.PodRecord, name: str,
             reqs: Mapping[ProfileName, int], memo: dict[str, tuple[int, int]]) -> str | None:
    """Why schedulable node ``name`` cannot take ``pod`` on its free instances now, or None
    (``_admits``, then its cpu and memory room)."""
    why = _admits(state, name, pod.constraints, reqs)
    if why is not None:
        return why
    cpu, mem = _room(state, name, memo)
    if pod.cpu_milli > cpu:
        return f"cpu: {cpu}m free, it asks for {pod.cpu_milli}m"
    if pod.memory_bytes > mem:
        return (f"memory: {quantity.format_bytes(mem)} free, it asks for "
                f"{quantity.format_bytes(pod.memory_bytes)}")
    return None


#: What each kind of obstacle ``explain`` names asks of the operator or the pod's owner.
_FIXES: Final = {
    "taint": "give the pod a toleration for the taint, or take the taint off such a node",
    "room": "free cpu or memory on such a node, or lower the pod's cpu or memory request",
    "placement": "widen the pod's nodeSelector or required node affinity to such a node",
    "wide": "split the pod into pods that ask for fewer instances",
    "busy": "wait for an instance to be freed (it runs then)",
    "state": "wait for such a node to finish its change or be Ready, or uncordon it or clear "
             "its failed re-layout (migfit status names its state)",
    "record": "recreate the pod with a migfit.io/gpu-memory such a node's instances hold, or "
              "add nodes of a GPU model its request fits",
    "layout": "lay out such a node with GPU instance profiles of its model's catalog, on "
              "GPUs of that one model (migfit status names what it advertises)",
    "kept": "find out what keeps the pods those instances fit off them (migfit explain and "
            "kubectl describe pod on them): once they run or go, the node can be re-laid out",
    "cooling": "wait for such a node's cool-down to end: it is re-laid out for the pod then "
               "if it still waits",
}
_FIX_ORDER: Final = ("taint", "room", "placement", "record", "state", "wide", "layout",
                     "kept", "cooling", "busy")
#: How ``_idle_refusals`` starts the refusal of a node cooling down after a re-layout.
_COOLING: Final = "cooling down: "
#: How ``_idle_refusals`` starts the refusal of a node whose layout migfit cannot read.
_UNKNOWN_LAYOUT: Final = "its layout is unknown to migfit"


def _cause(refusal: str | None) -> str:
    """The kind of a ``_refusal`` text (``_FIXES``' key)."""
    text = refusal or ""
    if text.startswith("taint "):
        return "taint"
    if text.startswith(("cpu:", "memory:")):
        return "room"
    if " free " in text and "it asks for" in text:
        return "wide"  # fewer free on the node than the pod's instances
    if text.startswith(_UNKNOWN_LAYOUT):
        return "layout"
    if text.startswith(_RECORD_REFUSALS):
        return "record"
    if text.startswith(_NODE_STATE):
        return "state"
    if text.startswith(_COOLING):
        return "cooling"
    return "placement"


def _larger_free(state: cluster.Cluster, pod: records.PodRecord, name: ProfileName,
                 reqs: Mapping[ProfileName, int], memo: dict[str, tuple[int, int]]) -> str | None:
    """For a pod of one ``name`` instance whose free instances all sit where it cannot go: the
    smallest larger profile that holds its recorded request (the webhook's decision record:
    the catalog's memory at least the request, at least as many compute slices, +me kept)
    with a free instance on a node that can take the pod, as an ``explain`` line; None when
    there is none or no record says what the pod asked for.

    The webhook's default ``--choice free`` counts a free instance wherever it is, so a pod
    can be given a profile whose free instances are all behind exhausted cpu or memory while
    a larger fitting one is free beside room (docs/simulation.md, "`--choice usable`").
    """
    if dict(reqs) != {name: 1}:
        return None
    try:
        record = keys.decode_decision(pod.annotations.get(keys.DECISION, ""))
    except keys.AnnotationError:
        return None
    mine = [c for c in record["containers"] if c["profile"] == name]
    if len(mine) != 1:
        return None
    mib = mine[0]["request_mib"]
    best: tuple[tuple[int, int, str], list[str]] | None = None
    for model in state.models_present():
        if not model.has_profile(name):
            continue
        chosen = model.profile(name)
        for q in model.profiles:
            if (q.name == name or q.memory_mib < mib
                    or q.compute_slices < chosen.compute_slices
                    or (chosen.media and not q.media)):
                continue
            order = (q.memory_mib, q.compute_slices, q.name)
            if best is not None and best[0] <= order:
                continue
            nodes = sorted(n for n in state.free_nodes(q.name)
                           if (ns := state.node(n)) is not None and ns.node.model == model.id
                           and _refusal(state, pod, n, {q.name: 1}, memo) is None)
            if nodes:
                best = (order, nodes)
    if best is None:
        return None
    larger = best[0][2]
    where = f"({_names(best[1])})"
    if keys.REASON_ROOM in mine[0].get("reason", ""):  # decided under --choice usable
        then = (f"a {name} with room for it was free when it was admitted and has been taken "
                f"since; delete and recreate it to be decided again")
    else:
        then = (f"the webhook's --choice free counted the free {name} wherever they were, and "
                f"may choose it again; under --choice usable it gives such a pod the larger "
                f"free instance (docs/simulation.md, \"--choice usable\"), and a pod admitted "
                f"before the change must be recreated")
    return (f"- {larger}: holds the {quantity.format_mib(mib)} it asked for and has a free "
            f"instance on a node with room for it {where}. The pod keeps its {name}: {then}.")


def _wide(state: cluster.Cluster, pod: records.PodRecord, name: ProfileName, need: int
          ) -> str:
    """For a pod that needs ``need`` > 1 instances of ``name`` on one node and finds no node
    with that many free: the nodes it may use (selectors, affinity, taints; schedulable, not
    being re-partitioned) that advertise that many, the one with the most free, and the pods
    that hold the rest there, as an ``explain`` line.

    kube-scheduler keeps no node for such a pod: instances freed one at a time go to the
    smaller pods that keep arriving, so it can wait for hours (README, "Troubleshooting").
    """
    usable = [s for s in state.nodes()
              if not s.repartitioning and not s.node.unschedulable
              and excludes(s.node, pod.constraints) is None]
    big = [s for s in usable if s.node.allocatable.get(name, 0) >= need]
    if not big:
        most = min(usable, key=lambda s: (-s.node.allocatable.get(name, 0), s.name),
                   default=None)
        top = 0 if most is None else most.node.allocatable.get(name, 0)
        where = f" (the most is {top}, on {most.name})" if most is not None and top else ""
        return (f"  No node it may use advertises {need} × {name}{where}, and a pod's "
                f"instances must all be on one node: a node must be re-partitioned to hold "
                f"them, or the work split into pods that ask for fewer.")
    free = state.free_nodes(name)
    short = [s for s in big if free.get(s.name, 0) < need]
    if not short:  # those with enough free were refused above (cpu, memory)
        return (f"  Every node it may use that advertises {need} has them free; what keeps "
                f"it off them is said above.")
    nearest = min(short, key=lambda s: (-free.get(s.name, 0), s.name))
    holders = sorted(q.key for q in state.pods_on(nearest.name)
                     if q.mig_requests.get(name, 0) > 0)
    held = (f"; the rest are held by {_names(holders)}" if holders else "")
    return (f"  {len(big)} node(s) it may use advertise {need} or more; the nearest, "
            f"{nearest.name}, has {free.get(nearest.name, 0)} of its "
            f"{nearest.node.allocatable.get(name, 0)} free{held}. It runs once one node has "
            f"{need} free at once: kube-scheduler holds no node for it, and smaller pods take "
            f"instances freed meanwhile (README, \"Troubleshooting\": a PriorityClass or a "
            f"dedicated pool).")


def _free_rooms(state: cluster.Cluster, constraints: records.PodConstraints,
                reqs: Mapping[ProfileName, int],
                memo: dict[str, tuple[int, int]]) -> list[tuple[int, int]]:
    """The cpu and memory room of the nodes that could take a pod with ``constraints`` on
    free instances of ``reqs`` (``_admits``), less those another one's room covers: the pod
    fits one of them if and only if its requests fit one of these. The test kube-scheduler
    applies, short of the rules migfit does not model (pod affinity, topology spread,
    volumes), which ``Settings.free_grace_s`` covers."""
    smallest = min((state.free_nodes(p) for p in reqs), key=len)
    found = sorted((_room(state, n, memo) for n in smallest
                    if _admits(state, n, constraints, reqs) is None), reverse=True)
    out: list[tuple[int, int]] = []
    for cpu, mem in found:  # most cpu first: keep each that has more memory than all before
        if not out or mem > out[-1][1]:
            out.append((cpu, mem))
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Shortfall:
    """One GPU model's free supply against its demand mix (``shortfall``)."""

    short: Mapping[ProfileName, int]  # instances the mix will lack, per profile
    surplus: frozenset[ProfileName]  # profiles with free instances beyond what it needs
    # per short profile, the mix's mean cpu (milli) and memory (bytes) per instance of it:
    # what a node must have free for each instance it is laid out with
    needs: Mapping[ProfileName, tuple[int, int]]
    # per surplus profile, the instances re-layouts ahead of demand may take (usable free
    # beyond the need and the reserve, ``Settings.ahead_reserve_s``); None: every one
    spare: Mapping[ProfileName, int] | None = None
    # per surplus profile, the free instances the reserve keeps from them (shown by
    # ``migfit advise``: why idle GPUs of a profile nobody seems to need stay as they are)
    held: Mapping[ProfileName, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class DemandMix:
    """The pods that hold or wait for instances (``demand_mix``), per profile."""

    instances: Mapping[ProfileName, int]  # instances they hold or ask for
    needs: Mapping[ProfileName, tuple[int, int]]  # mean cpu (milli), memory (bytes) per one
    pods: int
    # per profile, how many instances of it the pods that ask for several want (all on one
    # node), e.g. {7g.80gb: {2, 4, 8}}
    together: Mapping[ProfileName, frozenset[int]] = dataclasses.field(default_factory=dict)
    # per GPU model present that lacks a profile the mix counts: the mix as that model would
    # serve it (``demand_mix``); other models read the mix itself (``on``)
    models: Mapping[profiles.ModelId, DemandMix] = dataclasses.field(default_factory=dict)

    def on(self, model: profiles.ModelId) -> DemandMix:
        """The mix as GPU model ``model`` would serve it."""
        return self.models.get(model, self)


def demand_mix(state: cluster.Cluster) -> DemandMix:
    """The demand mix of ``shortfall`` and ``hostbalance``: ``Cluster.pod_classes`` less the
    waiting pods whose profiles have free instances (they wait for something else: cpu,
    memory, taints; more instances would not serve them). Counting them too, as ``demand``
    does when the free instances cannot take them, measured the same (docs/simulation.md,
    "Unseen seeds, and four tries"). A pod asking for several profiles counts its cpu and
    memory toward each.

    With several GPU models present, a model that lacks a profile the mix counts gets a mix
    of its own (``DemandMix.models``): a pod of such a profile counts there as the model's
    smallest profile that holds the request the webhook recorded for it (``_stand_in``),
    as a profile name two models share counts on each. The webhook gives a pod the smallest
    fitting profile of any model present, so without it a mixed cluster's small pods count
    only toward the smaller model, and the larger one is laid out for its own profiles alone
    (docs/simulation.md, "What the mixed cluster's GPU wait is")."""
    blocked: Counter[cluster.PodClass] = Counter(
        cluster.class_of(p) for p in state.pending_pods()
        if p.mig_requests and all(state.free_nodes(q) for q in p.mig_requests))
    counted: list[tuple[list[tuple[ProfileName, int]], int, int, int]] = []
    for cls, n in state.pod_classes().items():
        n -= blocked.get(cls, 0)
        items, _decision, cpu, memory = cls
        named = [(ProfileName(q), k) for q, k in ((profiles.parse_resource(r), k)
                                                   for r, k in items) if q is not None]
        if n > 0 and named:
            counted.append((named, cpu, memory, n))
    mix = _tally(counted)
    present = state.models_present()
    lacking = [m for m in present if any(not m.has_profile(q) for q in mix.instances)]
    if len(present) < 2 or not lacking:
        return mix
    # The pods the mix counts (as above: not a pending one that free instances could take),
    # chosen once for every model.
    pods = [p for p in state.pods() if (p.pending or p.holds_instances) and p.mig_requests
            and not (p.pending and all(state.free_nodes(q) for q in p.mig_requests))]
    models: dict[profiles.ModelId, DemandMix] = {}
    for model in lacking:
        entries: list[tuple[list[tuple[ProfileName, int]], int, int, int]] = []
        for pod in pods:
            named = []
            for q, k in sorted(pod.mig_requests.items()):
                alt = q if model.has_profile(q) else _stand_in(
                    model, q, pod.annotations.get(keys.DECISION), _asks(pod.annotations))
                if alt is not None:
                    named.append((alt, k))
            if named:
                entries.append((named, pod.cpu_milli, pod.memory_bytes, 1))
        models[model.id] = _tally(entries)
    return dataclasses.replace(mix, models=models)


def _tally(counted: Sequence[tuple[Sequence[tuple[ProfileName, int]], int, int, int]]
           ) -> DemandMix:
    """A ``DemandMix`` of (profiles and instances, cpu, memory, pods) entries."""
    mix: Counter[ProfileName] = Counter()
    host: dict[ProfileName, list[float]] = {}  # cpu, memory, instances
    together: dict[ProfileName, set[int]] = {}
    pods = 0
    for named, cpu, memory, n in counted:
        pods += n
        for q, k in named:
            mix[q] += k * n
            acc = host.setdefault(q, [0.0, 0.0, 0.0])
            acc[0] += cpu * n
            acc[1] += memory * n
            acc[2] += k * n
            if k > 1:
                together.setdefault(q, set()).add(k)
    return DemandMix(instances=mix, pods=pods,
                     together={q: frozenset(ks) for q, ks in together.items()},
                     needs={q: (int(h[0] / h[2]), int(h[1] / h[2])) for q, h in host.items()})


def _asks(annotations: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The pod's compute and media annotations (``migfit.io/gpu-compute``, ...), sorted."""
    return tuple(sorted((k, v) for k, v in annotations.items()
                        if k.startswith((keys.GPU_COMPUTE, keys.GPU_MEDIA))))


@functools.lru_cache(maxsize=4096)
def _stand_in(model: profiles.GpuModel, profile: ProfileName, decision: str | None,
              asks: tuple[tuple[str, str], ...]) -> ProfileName | None:
    """``model``'s smallest profile (``profiles.profile_order``) that holds what the pod's
    containers given ``profile`` asked for: the memory of the webhook's decision record, the
    compute slices and media of their annotations (per container, else pod-wide); None
    without a record naming ``profile`` or when no profile of ``model`` holds it."""
    record = None if decision is None else keys.decision_of({keys.DECISION: decision})
    mine = [] if record is None else [c for c in record["containers"]
                                      if profiles.canonical_profile(c["profile"]) == profile]
    if not mine:
        return None
    given = dict(asks)
    mib = compute = 0
    media = False
    for c in mine:
        mib = max(mib, c["request_mib"])
        name = c["container"]
        try:
            text = given.get(keys.GPU_COMPUTE_PREFIX + name, given.get(keys.GPU_COMPUTE))
            if text is not None:
                compute = max(compute, requests.parse_compute(keys.GPU_COMPUTE, text))
            text = given.get(keys.GPU_MEDIA_PREFIX + name, given.get(keys.GPU_MEDIA))
            media = media or (text is not None
                              and requests.parse_media(keys.GPU_MEDIA, text))
        except requests.RequestError:
            return None
    fits = [p for p in model.profiles if p.memory_mib >= mib and p.compute_slices >= compute
            and (p.media or not media)]
    return min(fits, key=profiles.profile_order).name if fits else None


def shortfall(state: cluster.Cluster, settings: Settings, mixed: DemandMix | None = None
              ) -> dict[profiles.ModelId, Shortfall]:
    """Per GPU model, the instances of each profile that the demand mix will be short of.

    The mix is the pods that hold or wait for instances (``Cluster.pod_classes``; not a
    waiting pod whose profiles have free instances: it waits for something else), in memory
    slices per profile; a profile name two models share counts its whole demand on each.
    If it goes on as it is until the model's usable free slices are taken (free instances
    on nodes whose free cpu and memory can still feed them at the mix's mean, ``_usable``),
    a profile q needs mix share(q) × usable free slices / slices(q) instances; it is short
    when its usable free instances fall below that by at least ``ahead_short`` of the need
    (and in surplus when they exceed it by as much, or nobody asks for it), and by more
    than twice the mix's sampling error; and short by at most the instances of it the mix
    itself counts (each round adds at most what the mix has shown, however far the
    projection reaches). Of a surplus profile's usable free instances, re-layouts ahead may
    take only those beyond the need and the largest burst seen (``Shortfall.spare``,
    :func:`burst_reserve` over ``ahead_reserve_s``; a profile name two models share counts
    the bursts of both).
    Only once the model's instances are ``ahead_from`` allocated (before, the free supply of
    every profile is large and the mix still moves) and the mix counts ``ahead_min_pods``
    pods. Pods of the single strategy (``nvidia.com/gpu``) are not counted.
    """
    if settings.ahead_from is None:
        return {}
    mixed = mixed or demand_mix(state)
    if mixed.pods < settings.ahead_min_pods:
        return {}
    window = settings.ahead_reserve_s
    recent: Counter[ProfileName] | None = None  # burst_reserve, once a profile is surplus
    out: dict[profiles.ModelId, Shortfall] = {}
    for model, projected in _projection(state, mixed, settings.ahead_from).items():
        mine = mixed.on(model.id)
        mix = mine.instances
        short: dict[ProfileName, int] = {}
        surplus: set[ProfileName] = set()
        spare: dict[ProfileName, int] = {}
        held: dict[ProfileName, int] = {}
        count = sum(k for q, k in mix.items() if q in projected)
        for q, (need, have) in projected.items():
            # The mix is a sample: a share p of n instances is off by sqrt(p(1 - p)/n) of
            # itself, so a gap under twice that (or under ahead_short) is no shift.
            p = mix.get(q, 0) / count
            noise = 2.0 * math.sqrt((1.0 - p) / (p * count)) if p > 0 else 0.0
            margin = max(1.0, max(settings.ahead_short, noise) * need)
            if need - have >= margin:
                # Never more ahead than the mix holds or asks for of q: the projection
                # extrapolates the mix to every free slice, and on an empty cluster a mix
                # of 50 pods would re-lay out a tenth of it at once, then the next sample
                # the other way (gpushare100 in events: 128 GPUs to 3g+4g at 30 s, 18
                # back to 7g at 210 s). Each round adds at most what the mix has shown.
                short[q] = min(int(need - have), mix.get(q, 0))
            elif have - need >= margin:
                surplus.add(q)
                if window is not None:
                    if recent is None:
                        recent = burst_reserve(state, window)
                    beyond = math.floor(have - need)  # at least 1: have - need >= margin
                    spare[q] = max(0, beyond - recent[q])
                    if beyond > spare[q]:
                        held[q] = beyond - spare[q]
        if short:
            out[model.id] = Shortfall(
                short=short, surplus=frozenset(surplus),
                needs={q: mine.needs[q] for q in short},
                spare=None if window is None else spare, held=held)
    return out


def burst_reserve(state: cluster.Cluster, window_s: float) -> Counter[ProfileName]:
    """Per profile, the most instances of it that the pods present (holding or waiting for
    instances) created within any ``window_s`` asked for: the largest burst seen, which
    free instances must absorb because a re-layout takes that long to serve (gpushare100 in
    events ×200: re-layouts ahead of demand had turned the free ``7g.80gb`` into smaller
    profiles for a mix half of small pods, and a burst of one-GPU pods then waited)."""
    times: dict[ProfileName, list[tuple[float, int]]] = {}
    for pod in state.pods():
        if (pod.pending or pod.holds_instances) and pod.created is not None:
            for q, k in pod.mig_requests.items():
                times.setdefault(q, []).append((pod.created, k))
    peak: Counter[ProfileName] = Counter()
    for q, stamps in times.items():
        stamps.sort()
        first = total = 0
        for t, k in stamps:  # a window ending at each creation, its start moved up
            total += k
            while stamps[first][0] < t - window_s:
                total -= stamps[first][1]
                first += 1
            peak[q] = max(peak[q], total)
    return peak


def _projection(state: cluster.Cluster, mixed: DemandMix, allocated: float
                ) -> dict[profiles.GpuModel, dict[ProfileName, tuple[float, int]]]:
    """Per GPU model whose instances are at least ``allocated`` allocated, per profile of it:
    the instances the mix needs if it goes on in its proportions until the model's usable
    free slices are taken (share × usable free slices / the profile's slices), and the
    usable free ones (``_usable``: instances behind exhausted cpu or memory are no supply)."""
    stats = state.profile_stats()
    rooms: dict[str, tuple[int, int] | None] = {}
    out: dict[profiles.GpuModel, dict[ProfileName, tuple[float, int]]] = {}
    for model in state.models_present():
        size = {p.name: p.memory_slices for p in model.profiles}
        total = free = 0
        for (m, q), st in stats.items():
            if m != model.id or q not in size:
                continue
            total += st.allocatable * size[q]
            free += st.free * size[q]
        mix = mixed.on(model.id)
        wanted = {q: k * size[q] for q, k in mix.instances.items() if q in size}
        weight = sum(wanted.values())
        if not total or not weight or total - free < allocated * total:
            continue
        usable = {q: _usable(state, model.id, q, mix.needs.get(q), rooms) for q in size}
        supply = sum(k * size[q] for q, k in usable.items())
        out[model] = {q: (wanted.get(q, 0) / weight * supply / size[q], usable[q])
                      for q in size}
    return out


def _usable(state: cluster.Cluster, model: profiles.ModelId, profile: ProfileName,
            need: tuple[int, int] | None, rooms: dict[str, tuple[int, int] | None]) -> int:
    """Free instances of ``profile`` on schedulable nodes of ``model`` (``free_nodes``: a
    cordoned node's are no supply either), each node's counted at most as many times as its
    free cpu and memory hold ``need`` (the mix's mean pod of the profile; None: every free
    instance counts). A free instance on a node whose cpu is taken is no supply: the history
    layouts of the Alibaba default list give 16-core 2-GPU nodes ``3g.40gb + 4g.40gb`` GPUs,
    and with arrivals ×100 ``4g.40gb`` pods (the one logged: 12 cores, 46 GiB) waited while
    every free ``4g.40gb`` was on a node without the pod's cpu or memory, such nodes among
    them. ``rooms``: the nodes' free cpu and memory (``host_room``), filled as read."""
    total = 0
    for name, k in state.free_nodes(profile).items():
        ns = state.node(name)
        if ns is None or ns.node.model != model:
            continue
        if need is not None:
            if name not in rooms:
                rooms[name] = host_room(state, ns.node)
            room = rooms[name]
            if room is not None:
                for have, want in zip(room, need, strict=True):
                    if want > 0:
                        k = min(k, have // want)
        total += k
    return total


# ---------------------------------------------------------------- supply


@dataclasses.dataclass(frozen=True, slots=True)
class NodeView:
    """A node's MIG layout as the advisor sees it."""

    name: str
    model: profiles.GpuModel
    layout: migparted.NodeLayout
    used: Mapping[ProfileName, int]
    pods: tuple[str, ...]  # bound pods holding MIG instances here
    gpus: tuple[planner.GpuState, ...]
    label: str | None = None  # nvidia.com/mig.config now
    busy: tuple[bool, ...] = ()  # per GPU: may hold an instance in use (see busy_gpus)
    unknown: str | None = None  # why the per-GPU layout is not known exactly, or None

    @property
    def safe(self) -> bool:
        return not self.pods

    def frozen(self) -> tuple[planner.GpuState, ...]:
        """The GPUs for a busy-node re-layout: every busy GPU, and every GPU without
        instances (its MIG mode is not known; enabling MIG resets all GPUs), frozen. A
        frozen busy GPU's instances all count as in use (which are is not known)."""
        out = []
        for i, names in enumerate(self.layout.gpus):
            if self.busy[i] or not names:
                out.append(planner.GpuState(index=i, current=names, frozen=True,
                                            fixed=_placed(self.model, names)))
            else:
                out.append(planner.GpuState(index=i, current=names))
        return tuple(out)


def excluded(state: records.NodeState) -> str | None:
    """Why a node cannot be re-laid out now, or None."""
    rec = state.node
    if rec.model is None:
        return rec.model_error or "no known MIG-capable GPU model"
    if rec.strategy == "single":
        return "single strategy (re-layouts are planned for the mixed strategy)"
    # A failed migfit re-layout keeps its taint, which reads as "being re-partitioned": said
    # first, since waiting never clears it (an outside check).
    if keys.relayout_failed(rec.annotations):
        return "a migfit re-layout failed here; an operator must clear it"
    if state.repartitioning:
        return "being re-partitioned"
    if rec.config_state == FAILED_STATE:
        return "the MIG Manager reported mig.config.state=failed"
    if rec.unschedulable:
        return "cordoned"
    if not rec.ready:
        return "not Ready"
    if rec.gpu_count <= 0 and not rec.advertised:
        return "no GPUs"
    return None


@functools.lru_cache(maxsize=8192)
def _inferred(model: profiles.GpuModel, alloc: tuple[tuple[ProfileName, int], ...],
              gpu_count: int) -> migparted.NodeLayout:
    return migparted.infer(model, dict(alloc), gpu_count)


@functools.lru_cache(maxsize=8192)
def _placed(model: profiles.GpuModel, names: tuple[ProfileName, ...]
            ) -> tuple[placements.Instance, ...]:
    if not names:
        return ()
    fit = layouts.check(model, names)
    assert fit.placement is not None
    return fit.placement.instances


def current_layout(
    state: records.NodeState, model: profiles.GpuModel, config: migparted.Config | None
) -> migparted.NodeLayout:
    """The node's layout per GPU: its named config when readable and matching the allocatable
    (the device plugin advertises what the MIG Manager applied), else inferred.

    The config is the node's own when its MIG Manager wrote one (``Config.for_node``); the
    allocatable counts instances, not the time-slicing replicas of each (``instances``).
    """
    rec = state.node
    alloc = tuple(sorted(rec.instances.items()))
    note = ""
    if config is not None and rec.config:
        try:
            resolved = _labelled_layout(config, rec, model)
        except errors.ConfigError as exc:
            note = f"{exc.message}; "
        else:
            if dict(resolved.totals()) == dict(alloc):
                return resolved
            note = f"config {rec.config} does not match the allocatable; "
    whole = min(max(rec.whole_gpus, 0), max(rec.gpu_count, 0))
    layout = _inferred(model, alloc, rec.gpu_count - whole)
    if whole and len(layout.gpus) + whole == rec.gpu_count:
        # GPUs with MIG disabled advertise nvidia.com/gpu and hold no instance: shown last
        # (which indexes they are is not known).
        layout = dataclasses.replace(
            layout, gpus=layout.gpus + ((),) * whole,
            disabled=frozenset(range(len(layout.gpus), rec.gpu_count)),
            note=f"{layout.note}; {whole} GPU(s) with MIG disabled (nvidia.com/gpu), shown "
                 f"last: which ones is not known")
    if note:
        layout = dataclasses.replace(layout, note=note + layout.note)
    return layout


def _labelled_layout(config: migparted.Config, rec: records.NodeRecord,
                     model: profiles.GpuModel) -> migparted.NodeLayout:
    """The layout of the config ``rec``'s nvidia.com/mig.config names, as the node's MIG
    Manager resolves it (its own configs when it wrote them, ``Config.for_node``; mig-parted
    filters on the GPU's own PCI id: the ids the product label pins); ConfigError when it
    cannot."""
    assert rec.config
    return migparted.resolve(config.for_node(rec.name), rec.config, model=model,
                             gpu_count=rec.gpu_count,
                             device_ids=model.device_ids_for(rec.labels.get(keys.LABEL_PRODUCT)))


def busy_gpus(gpus: Sequence[Sequence[str]], used: Mapping[ProfileName, int]
              ) -> tuple[bool, ...]:
    """Per GPU, whether it may hold an instance in use.

    The scheduler counts instances per node; the device plugin picks which one a pod gets,
    and the API does not say which. Any GPU with an instance of profile ``p`` may hold the
    one in use, so a GPU counts as free only when no profile of its layout is in use.
    """
    return tuple(any(used.get(ProfileName(p), 0) > 0 for p in set(g)) for g in gpus)


class _TooMany(Exception):
    pass


@functools.lru_cache(maxsize=4096)
def _only_arrangement(model: profiles.GpuModel, alloc: tuple[tuple[ProfileName, int], ...],
                      gpu_count: int, budget: int = 20_000) -> bool:
    """Whether the allocatable admits exactly one arrangement over ``gpu_count`` GPUs, the
    same layout on every GPU (then the inferred layout is each GPU's real one)."""
    inferred = _inferred(model, alloc, gpu_count)
    if gpu_count <= 0 or len(inferred.gpus) != gpu_count or len(set(inferred.gpus)) != 1:
        return False
    need: Counter[ProfileName] = Counter(dict(alloc))
    keys_ = [k for k in layouts.of(model).by_key if all(need[p] >= n for p, n in k)]
    keys_.append(())
    found = 0
    steps = 0

    def walk(start: int, gpus_left: int) -> None:
        nonlocal found, steps
        steps += 1
        if steps > budget:
            raise _TooMany
        if gpus_left == 0:
            found += not any(v for v in need.values())
            return
        for i in range(start, len(keys_)):
            k = keys_[i]
            if all(need[p] >= n for p, n in k):
                need.subtract(dict(k))
                walk(i, gpus_left - 1)
                need.update(dict(k))
                if found > 1:
                    return

    try:
        walk(0, gpu_count)
    except _TooMany:
        return False
    return found == 1


def unknown_layout(node: records.NodeState, model: profiles.GpuModel,
                   layout: migparted.NodeLayout) -> str | None:
    """Why a busy node's per-GPU layout is not known exactly enough to change some GPUs and
    keep the others, or None when it is (see the module docstring)."""
    rec = node.node
    if rec.whole_gpus > 0:
        return ("some of its GPUs run with MIG disabled (nvidia.com/gpu): enabling MIG makes "
                "mig-parted reset every GPU of the node")
    empty = [i for i, g in enumerate(layout.gpus) if not g]
    if empty:
        return (f"GPU {empty[0]} has no instances: whether MIG is enabled there is not known, "
                f"and enabling it makes mig-parted reset every GPU of the node")
    if layout.source == "config":
        return None
    alloc = tuple(sorted(rec.instances.items()))
    if _only_arrangement(model, alloc, rec.gpu_count):
        return None
    return ("its per-GPU layout is inferred from the allocatable, which other arrangements "
            "fit too: which GPU holds what is not known (make its mig-parted ConfigMap "
            "readable)")


def _pin(model: profiles.GpuModel, gpus: Sequence[tuple[ProfileName, ...]],
         left: Sequence[Counter[ProfileName]]) -> tuple[planner.GpuState, ...]:
    """GPU ``i`` holds, of its instances, those ``left[i]`` still counts as in use (taken off
    it as they are placed; the same Counter for every GPU packs the count onto few GPUs)."""
    out = []
    for i, names in enumerate(gpus):
        fixed: list[placements.Instance] = []
        for inst in _placed(model, names):
            if left[i][inst.profile] > 0:
                left[i][inst.profile] -= 1
                fixed.append(inst)
        out.append(planner.GpuState(index=i, current=names, fixed=tuple(fixed)))
    return tuple(out)


def _pin_used(model: profiles.GpuModel, gpus: Sequence[tuple[ProfileName, ...]],
              used: Mapping[ProfileName, int]) -> tuple[planner.GpuState, ...]:
    """Assign the instances in use to GPUs holding their profile (packed onto few GPUs)."""
    left = Counter({p: n for p, n in used.items() if n > 0})
    return _pin(model, gpus, [left] * len(gpus))


GpuUse = Sequence[Mapping[ProfileName, int]]  # per GPU index: instances in use, per profile


def usage_holds(use: GpuUse, gpus: Sequence[Sequence[str]], used: Mapping[ProfileName, int]
                ) -> bool:
    """Whether a per-GPU report of instances in use (``use``) can be trusted against the
    node's layout and the API's count of instances in use: one entry per GPU, no GPU using
    more instances of a profile than it has, and the same totals as the pods bound there
    (a pod bound after the report, or one gone since, makes it stale)."""
    if len(use) != len(gpus):
        return False
    total: Counter[ProfileName] = Counter()
    for held, names in zip(use, gpus, strict=True):
        have = Counter(names)
        for p, n in held.items():
            if n < 0 or n > have[p]:
                return False
            total[p] += n
    return +total == +Counter(used)


def _pin_reported(model: profiles.GpuModel, gpus: Sequence[tuple[ProfileName, ...]],
                  use: GpuUse) -> tuple[planner.GpuState, ...]:
    """The instances in use, on the GPUs the report puts them on."""
    return _pin(model, gpus, [Counter(held) for held in use])


def _on_gpus(pod: records.PodRecord) -> bool:
    """Whether ``pod`` runs on its node's GPUs: on MIG instances, or, under the mixed
    strategy, on whole GPUs (MIG off there: enabling it, as any config with instances on
    that GPU does, makes mig-parted reset every GPU of the node, and kills it too)."""
    return pod.holds_instances and bool(
        pod.mig_requests or pod.requests.get(profiles.GPU_RESOURCE, 0) > 0)


def view(
    state: cluster.Cluster, node: records.NodeState, config: migparted.Config | None,
    use: GpuUse | None = None,
) -> NodeView | None:
    """The advisor's view of one node, or None when it is excluded (see ``excluded``).

    ``use``: which GPU holds the instances in use, when a per-GPU report says it (see
    ``advise``); trusted only when it agrees with the node (``usage_holds``)."""
    if excluded(node) is not None:
        return None
    rec = node.node
    assert rec.model is not None
    model = state.catalog.get(rec.model)
    try:
        layout = current_layout(node, model, config)
    except errors.ConfigError:
        return None
    if 0 < rec.gpu_count != len(layout.gpus):
        # The allocatable does not fit the GPUs the node reports (a stale count or stale
        # resources): a plan would re-lay out GPUs that do not exist.
        return None
    if layout.disabled and layout.source != "config":
        # Which GPUs run with MIG disabled is not known (shown last): a per-GPU config would
        # enable MIG on some and disable it on others, a mode change that resets every GPU
        # of the node. Known from the node's mig-parted config, they are kept as they are.
        return None
    on_gpus = [p for p in state.pods_on(rec.name) if _on_gpus(p)]
    pods = tuple(sorted(p.key for p in on_gpus))
    whole = any(p.requests.get(profiles.GPU_RESOURCE, 0) > 0 for p in on_gpus)
    used = {p: n for p, n in node.used.items() if n > 0}
    if use is not None and usage_holds(use, layout.gpus, used):
        busy = tuple(any(n > 0 for n in held.values()) for held in use)
        gpus = _pin_reported(model, layout.gpus, use)
    else:
        busy = busy_gpus(layout.gpus, used)
        gpus = _pin_used(model, layout.gpus, used)
    # A GPU with MIG disabled keeps it so: it serves nvidia.com/gpu pods, whose demand the
    # advisor does not count, and enabling MIG makes mig-parted reset every GPU of the node.
    gpus = tuple(dataclasses.replace(g, frozen=True) if g.index in layout.disabled else g
                 for g in gpus)
    unknown = unknown_layout(node, model, layout) if any(busy) or whole else None
    return NodeView(name=rec.name, model=model, layout=layout, used=used, pods=pods,
                    gpus=gpus, label=rec.config, busy=busy, unknown=unknown)


# ---------------------------------------------------------------- named configs


def prefer_named(
    config: migparted.Config | None,
) -> planner.Prefer | None:
    """A named config instead of the planner's custom layout when one serves as much.

    A node whose MIG Manager generated its own configs (mig-parted v0.14.0+) applies only
    those: a custom config added to the shared ConfigMap would never reach it. Such a node
    gets the best of its own named configs that serves anything, or no change at all.
    """
    if config is None or config.empty:
        return None
    cache: dict[tuple[str | None, profiles.ModelId, int, str],
                migparted.NodeLayout | None] = {}

    def resolved(configs: migparted.Config, model: profiles.GpuModel, count: int, name: str
                 ) -> migparted.NodeLayout | None:
        key = (configs.node, model.id, count, name)
        if key not in cache:
            try:
                cache[key] = migparted.resolve(configs, name, model=model, gpu_count=count)
            except errors.ConfigError:
                cache[key] = None
        return cache[key]

    def prefer(node: planner.NodeSupply, plan: planner.NodePlan, remaining: planner.Demand
               ) -> tuple[planner.NodePlan, str] | None:
        configs = config.for_node(node.name)
        own = configs.node is not None
        # Only the node's own configs can be applied there: keep the node as it is.
        stay = (planner.plan_from_layouts(node.model, gpus=node.gpus,
                                          after=[g.current for g in node.gpus],
                                          demand=remaining), "") if own else None
        if any(g.frozen and not g.current for g in node.gpus):
            # A named config may disable MIG on a GPU that has no instances: a mode change,
            # which resets every GPU of the node (docs/relayout.md). The custom config
            # keeps each GPU's MIG mode (``NodeLayout.disabled``).
            return stay
        best: tuple[tuple[float, int, int, str], planner.NodePlan, str] | None = None
        for name in configs.configs:
            lay = resolved(configs, node.model, len(node.gpus), name)
            if lay is None:
                continue
            try:
                alt = planner.plan_from_layouts(node.model, gpus=node.gpus, after=lay.gpus,
                                                demand=remaining)
            except errors.UsageError:
                continue  # drops an instance in use
            if not alt.changed or alt.value < (1e-9 if own else plan.value - 1e-9):
                continue
            rank = (-round(alt.value, 9), len(alt.changed),
                    sum(len(g.removed) for g in alt.gpus), name)
            if best is None or rank < best[0]:
                best = (rank, alt, name)
        return stay if best is None else (best[1], best[2])

    return prefer


# ---------------------------------------------------------------- advice


# ---------------------------------------------------------------- can the node take the pod


def _requirement_holds(req: records.Requirement, value: str | None) -> bool:
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(req.values) == 1:
        have, bound = _int64(value), _int64(req.values[0])
        if have is None or bound is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return False  # an unknown operator: kube-scheduler rejects the pod, so does this


_INT64: Final = re.compile(r"[+-]?[0-9]+")


def _int64(text: str) -> int | None:
    """``text`` as Go's strconv.ParseInt(text, 10, 64) reads it (what kube-scheduler's Gt
    and Lt use): an optional sign and decimal digits, within int64; else None, and the
    requirement matches no node. Python's int() also took "5_0", " 5" and any size."""
    if _INT64.fullmatch(text) is None:
        return None
    n = int(text)
    return n if -(1 << 63) <= n < (1 << 63) else None


def _term_holds(term: records.SelectorTerm, name: str, labels: Mapping[str, str]) -> bool:
    if not term.expressions and not term.fields:
        return False  # an empty term matches no node
    return (all(_requirement_holds(r, labels.get(r.key)) for r in term.expressions)
            and all(_requirement_holds(r, name if r.key == "metadata.name" else None)
                    for r in term.fields))


def _tolerated(taint: records.Taint, tolerations: Sequence[records.Toleration]) -> bool:
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.operator == "Exists":
            if not t.key or t.key == taint.key:
                return True
        elif t.key == taint.key and t.value == taint.value:
            return True
    return False


def unselected(node: records.NodeRecord, constraints: records.PodConstraints) -> str | None:
    """Why ``node`` is not one a pod with ``constraints`` selects (its nodeSelector and
    required node affinity; tolerations are not read), or None."""
    labels = node.all_labels or node.labels
    for key, value in constraints.node_selector:
        if labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    if constraints.affinity is not None and not any(
            _term_holds(t, node.name, labels) for t in constraints.affinity):
        return "required node affinity"
    return None


#: How ``_idle_refusals`` begins the refusal of a node no re-layout may start on now.
_NODE_STATE: Final = "no re-layout can start there now: "
#: How ``record_refusal`` begins its reasons (``_cause`` reads them).
_RECORD_REFUSALS: Final = ("its request fits only on ", "its request does not fit: ")
RecordedNeeds = requests.RecordedNeeds


def recorded_needs(pod: records.PodRecord | None) -> RecordedNeeds:
    """What the webhook recorded that ``pod``'s instances must hold
    (``requests.recorded_needs``, as the extender's filter reads it); () without a record."""
    return () if pod is None else requests.recorded_needs(pod.annotations.get(keys.DECISION))


def record_refusal(needs: RecordedNeeds, model: profiles.GpuModel,
                   wanted: Sequence[str] | None = None) -> str | None:
    """Why instances of ``model`` cannot serve a pod with ``needs`` (of the profiles in
    ``wanted``, else all): the model is not one its request fits, or the profile's memory
    on it is below the request; None when they can. The extender's filter refuses such a
    node after any re-layout, so none is planned for the pod there."""
    for p, mib, models in needs:
        if wanted is not None and p not in wanted:
            continue
        if models is not None and model.id.lower() not in models:
            return f"{_RECORD_REFUSALS[0]}{', '.join(sorted(models))}, not {model.id}"
        if model.has_profile(p) and model.profile(p).memory_mib < mib:
            return (f"{_RECORD_REFUSALS[1]}{p} on {model.id} has "
                    f"{model.profile(p).memory_mib} MiB, below the {mib} MiB requested")
    return None


def excludes(node: records.NodeRecord, constraints: records.PodConstraints) -> str | None:
    """Why a pod with ``constraints`` cannot run on ``node`` (selectors, affinity, taints),
    or None. Host room is checked apart (it changes as pods are planned there)."""
    why = unselected(node, constraints)
    if why is not None:
        return why
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and \
                not _tolerated(taint, constraints.tolerations):
            return f"taint {taint.key}={taint.value}:{taint.effect}"
    return None


def host_room(state: cluster.Cluster, node: records.NodeRecord) -> tuple[int, int] | None:
    """cpu (milli) and memory (bytes) allocatable less what the bound pods request (GPU
    pods, and the others' sums, ``NodeState.other_*``); None when the node reports neither."""
    if node.cpu_milli <= 0 and node.memory_bytes <= 0:
        return None
    cpu = node.cpu_milli if node.cpu_milli > 0 else 1 << 62
    mem = node.memory_bytes if node.memory_bytes > 0 else 1 << 62
    ns = state.node(node.name)
    if ns is not None:
        cpu -= ns.other_cpu_milli
        mem -= ns.other_memory_bytes
    for pod in state.pods_on(node.name):
        if pod.holds_instances:
            cpu -= pod.cpu_milli
            mem -= pod.memory_bytes
    return max(cpu, 0), max(mem, 0)


# ---------------------------------------------------------------- re-layouts in flight


@dataclasses.dataclass(frozen=True, slots=True)
class Incoming:
    """A node being re-partitioned to a layout migfit can read: what it offers once done.

    Counted as supply so that a pod its change serves is not advised a second node too (the
    change in flight was most often advised for that very pod)."""

    name: str
    target: str  # the config it is being re-laid out to
    offers: Mapping[ProfileName, int]  # the target's instances less those in use there


def _in_flight_target(state: cluster.Cluster, node: records.NodeState,
                      config: migparted.Config | None
                      ) -> tuple[str, Mapping[ProfileName, int]] | None:
    """The config ``node`` is being re-laid out to and its instances per profile, or None when
    that is not known: the extender's own record while its re-layout is in flight (it sets
    the label only after tainting the node, so the record names the target first), else the
    ``nvidia.com/mig.config`` label while the MIG Manager works, resolved in ``config``."""
    rec = node.node
    mark = keys.relayout_of(rec.annotations)
    if mark is not None and mark.active:
        totals = Counter({ProfileName(p): n for p, n in mark.expected.items() if n > 0})
        if not totals:
            totals = Counter(ProfileName(p) for g in mark.gpus for p in g.after)
        return (mark.target, dict(totals)) if mark.target and totals else None
    if (rec.config_state not in keys.REPARTITIONING_STATES or config is None
            or not rec.config or rec.model is None):
        return None
    try:
        layout = _labelled_layout(config, rec, state.catalog.get(rec.model))
    except errors.ConfigError:
        return None
    return rec.config, {p: n for p, n in layout.totals().items() if n > 0}


def incoming(state: cluster.Cluster, config: migparted.Config | None) -> list[Incoming]:
    """The nodes being re-partitioned whose target layout is known (``_in_flight_target``),
    by name, with the instances each will offer: its target's less those its bound pods
    hold. A node whose target is not known offers nothing, nor does a cordoned one (it takes
    no pod once done either), one of the single strategy or one whose re-layout failed."""
    out: list[Incoming] = []
    for node in sorted(state.nodes(), key=lambda s: s.name):
        rec = node.node
        if (not node.repartitioning or rec.model is None or rec.unschedulable
                or rec.strategy == "single" or keys.relayout_failed(rec.annotations)):
            continue
        found = _in_flight_target(state, node, config)
        if found is None:
            continue
        target, totals = found
        offers = {p: n - node.used.get(p, 0) for p, n in sorted(totals.items())
                  if n > node.used.get(p, 0)}
        if offers:
            out.append(Incoming(name=rec.name, target=target, offers=offers))
    return out


def _awaiting(state: cluster.Cluster, waiting: Sequence[Waiting],
              coming: Sequence[Incoming]) -> dict[str, str]:
    """Waiting pod -> the node being re-laid out that will serve it, for the pods whose every
    instance ``coming`` offers on one node (a pod's instances must all be on one node),
    heaviest first as the planner takes them, each on the first node by name that can take
    it: its selectors, affinity and taints (migfit's own re-layout taint aside: it goes when
    the change is done), the request the webhook recorded, and its cpu and memory within the
    node's room less what the pods before it were given there."""
    out: dict[str, str] = {}
    if not coming:
        return out
    left = {c.name: Counter(c.offers) for c in coming}
    nodes: dict[str, records.NodeRecord] = {}
    models: dict[str, profiles.GpuModel] = {}
    room: dict[str, list[int]] = {}
    for c in coming:
        ns = state.node(c.name)
        assert ns is not None and ns.node.model is not None  # as ``incoming`` keeps them
        models[c.name] = state.catalog.get(ns.node.model)
        nodes[c.name] = dataclasses.replace(ns.node, taints=tuple(
            t for t in ns.node.taints if t.key != keys.TAINT_RELAYOUT))
        room[c.name] = list(host_room(state, ns.node) or (1 << 62, 1 << 62))
    for w in waiting:
        cons = w.pod.constraints if w.pod is not None else records.NO_CONSTRAINTS
        needs = recorded_needs(w.pod)
        cpu, mem = (0, 0) if w.pod is None else (w.pod.cpu_milli, w.pod.memory_bytes)
        for c in coming:
            have, rec, free = left[c.name], nodes[c.name], room[c.name]
            if (any(have[p] < n for p, n in w.requests.items())
                    or cpu > free[0] or mem > free[1]
                    or excludes(rec, cons) is not None
                    or record_refusal(needs, models[c.name],
                                      tuple(w.requests)) is not None):
                continue
            have.subtract(w.requests)
            free[0] -= cpu
            free[1] -= mem
            out[w.key] = c.name
            break
    return out


# ---------------------------------------------------------------- advice


def recorded_changes(state: cluster.Cluster, recent: Mapping[str, float], now: float,
                     cooldown_s: float) -> Mapping[str, float]:
    """``recent`` with, for each node, the later of its time there and the time its
    ``nvidia.com/mig.config.state`` label was last written (``NodeRecord.layout_written_at``)
    when that is less than ``cooldown_s`` ago: a process that started after the change (a
    restarted extender, the one-shot ``migfit advise`` and ``migfit explain``) cools the
    node down too. A time ahead of ``now`` is the API server's clock ahead of this one's:
    it says nothing of how long ago the change was, and is left out (taking it as ``now``
    on every call would keep the node cooling down for as long as the clocks differ)."""
    out: dict[str, float] | None = None
    for node in state.nodes():
        at = node.node.layout_written_at
        if at is None or at > now or now - at >= cooldown_s:
            continue
        seen = recent.get(node.name)
        if seen is None or at > seen:
            if out is None:
                out = dict(recent)
            out[node.name] = at
    return recent if out is None else out


def advise(
    state: cluster.Cluster,
    *,
    now: float,
    settings: Settings | None = None,
    config: migparted.Config | None = None,
    recent: Mapping[str, float] | None = None,
    usage: Mapping[str, GpuUse] | None = None,
) -> Advice:
    """Recommendations for the cluster as it is at ``now`` (seconds since the epoch).

    ``recent``: node -> when (seconds since the epoch) it was last re-laid out, for the
    cool-down (see the module docstring); nodes not in it are not cooling down.
    ``usage``: node -> per GPU index, the instances in use there (the node's DCGM exporter
    says which GPU each pod's instance is on); where it agrees with the node, a GPU is busy
    only when it holds one, instead of whenever one of its profiles is in use.
    """
    settings = settings or Settings()
    waiting = demand(state, now=now, settings=settings)
    mixed = demand_mix(state) if settings.ahead_from is not None else None
    ahead = shortfall(state, settings, mixed)
    # What idle nodes trade layouts for (``hostbalance``): the sampled mix and the gain.
    trading = (None if mixed is None or settings.balance_gain is None
               or mixed.pods < max(settings.ahead_min_pods, settings.balance_min_pods)
               else (mixed, settings.balance_gain))
    # Pods a node being re-laid out will serve once done: planned for no other node.
    awaiting = _awaiting(state, waiting, incoming(state, config)) if waiting else {}
    planned = [w for w in waiting if w.key not in awaiting]
    recent = recorded_changes(state, recent or {}, now, settings.cooldown_s)
    cooled = {n: t for n, t in recent.items()
              if now - t < settings.cooldown_s and state.node(n) is not None}
    if not planned and not ahead and trading is None:
        return Advice(recommendations=(), waiting=tuple(waiting), unserved=(),
                      generation=state.generation, awaiting=awaiting, cooling=cooled)
    wanted = {p for w in planned for p in w.requests}
    wanted.update(p for fall in ahead.values() for p in fall.short)
    if trading is not None:
        wanted.update(trading[0].instances)
    by_key = {w.key: w for w in waiting}
    views: dict[str, NodeView] = {}
    records_: dict[str, records.NodeRecord] = {}
    fresh: list[planner.NodeSupply] = []  # idle nodes and busy nodes' idle GPUs
    cooling: list[planner.NodeSupply] = []
    disruptive: list[planner.NodeSupply] = []
    room: dict[str, tuple[int, ...]] = {}
    moving: set[profiles.ModelId] = set()  # models with a node being re-partitioned
    for node in state.nodes():
        rec = node.node
        if rec.model is None:
            continue
        if node.repartitioning:
            moving.add(rec.model)
        model = state.catalog.get(rec.model)
        if not any(model.has_profile(p) for p in wanted):
            continue
        v = view(state, node, config, None if usage is None else usage.get(rec.name))
        if v is None:
            continue
        views[v.name] = v
        records_[v.name] = rec
        left = host_room(state, rec)
        if left is not None:
            room[v.name] = left
        since = recent.get(v.name)
        cool = since is not None and now - since < settings.cooldown_s
        if v.safe:
            (cooling if cool else fresh).append(
                planner.NodeSupply(name=v.name, model=v.model, gpus=v.gpus))
            continue
        if settings.busy_nodes and v.unknown is None and not all(v.busy):
            (cooling if cool else fresh).append(planner.NodeSupply(
                name=v.name, model=v.model, gpus=v.frozen(), busy=len(v.pods)))
        if settings.allow_disruptive and not cool:
            disruptive.append(planner.NodeSupply(name=v.name, model=v.model, gpus=v.gpus,
                                                 disruption=len(v.pods)))

    present = sorted({rec.model for rec in records_.values() if rec.model is not None})

    @functools.cache
    def refused(needs: RecordedNeeds) -> frozenset[tuple[str, str]]:
        """(profile, model) pairs whose instances the webhook's record rules out: a handful
        of models, so pods of many request sizes still share a class."""
        return frozenset((p, m) for m in present for p, _, _ in needs
                         if record_refusal(needs, state.catalog.get(m), (p,)) is not None)

    def may_take(node: str, unit: planner.Unit) -> bool:
        """The node could take the unit's pod once re-laid out (its cool-down aside)."""
        w = by_key[unit.pod]
        cons = w.pod.constraints if w.pod is not None else records.NO_CONSTRAINTS
        if excludes(records_[node], cons) is not None:
            return False
        return (unit.profile, records_[node].model) not in refused(recorded_needs(w.pod))

    def eligible(node: str, unit: planner.Unit) -> bool:
        if not may_take(node, unit):
            return False
        w = by_key[unit.pod]
        since = recent.get(node)
        if since is not None and now - since < settings.cooldown_s:
            # Cooling down: only demand that arose after its last re-layout counts.
            return w.pod is not None and (w.pod.unschedulable_since or 0.0) > since
        return True

    # Pods alike for every node share a class: the planner asks ``eligible`` once per class.
    classes: dict[tuple[object, ...], int] = {}
    units: list[planner.Unit] = []
    for w in planned:
        cons = w.pod.constraints if w.pod is not None else records.NO_CONSTRAINTS
        since = w.pod.unschedulable_since if recent and w.pod is not None else None
        cls = classes.setdefault((cons, since, refused(recorded_needs(w.pod))), len(classes))
        needs = () if w.pod is None else (w.pod.cpu_milli, w.pod.memory_bytes)
        units.extend(planner.Unit(pod=w.key, profile=p, weight=w.weight, needs=needs, cls=cls)
                     for p, n in w.requests.items() for _ in range(n))
    prefer = prefer_named(config)
    limit = settings.max_recommendations
    chosen: list[_Choice] = []
    for supply, hurts in ((fresh, False), (cooling, False), (disruptive, True)):
        taken = {c.change.name for c in chosen}
        pool = [n for n in supply if n.name not in taken]
        if not pool or not units or (limit is not None and len(chosen) >= limit):
            continue
        if hurts and cooling:
            # A pod that a node cooling down could serve once its cool-down ends (at most
            # Settings.cooldown_s) is not worth a change that disrupts running pods.
            later = planner.plan_pods([n for n in cooling if n.name not in taken], units,
                                      eligible=may_take, room=room, prefer=prefer)
            waits = {id(u) for got in later.assigned.values() for u in got}
            units = [u for u in units if id(u) not in waits]
            if not units:
                continue
        left_n = None if limit is None else limit - len(chosen)
        plan = planner.plan_pods(pool, units, eligible=eligible, room=room, max_nodes=left_n,
                                 prefer=prefer)
        kept = list(plan.unserved)
        for change in plan.changes:
            got = plan.assigned.get(change.name, ())
            if supply is cooling and len(got) < settings.cooldown_min:
                kept.extend(got)  # not a clear enough change of demand: stay put
                continue
            chosen.append(_Choice(change=change, units=got, disruptive=hurts))
        units = sorted(kept, key=lambda u: -u.weight)

    recs: list[Recommendation] = []
    unblocked: set[str] = set()
    for choice in chosen:
        advised = recommendation(choice.change, views[choice.change.name], choice.units,
                                 by_key, disrupts=views[choice.change.name].pods
                                 if choice.disruptive else None)
        unblocked.update(advised.unblocks)
        recs.append(advised)
    if ahead and (limit is None or len(recs) < limit):
        taken = {c.change.name for c in chosen}
        pool = [n for n in fresh if not n.busy and n.name not in taken]
        for change in _ahead_changes(pool, ahead, room,
                                     None if limit is None else limit - len(recs)):
            recs.append(dataclasses.replace(
                recommendation(change, views[change.name], (), by_key), ahead=True))
    if trading is not None and (limit is None or len(recs) < limit):
        mix, gain = trading
        taken = {r.node for r in recs}
        # Not while a node of the model is being re-partitioned: a trade takes two nodes'
        # free instances out of service for minutes, and the changes in flight were made for
        # waiting pods, whose profiles newly arriving pods are likely to ask for too (with
        # fast arrivals a round of trades took the free 3g.40gb that such pods then waited
        # for beside idle GPUs: docs/simulation.md, "Trades after the changes in flight").
        pool = [n for n in fresh if not n.busy and n.name not in taken
                and n.model.id not in moving]
        for model_id in sorted({n.model.id for n in pool}):
            on = mix.on(model_id)  # each model trades for the mix as it would serve it
            for change, why in hostbalance.trades(
                    [n for n in pool if n.model.id == model_id], on.needs, on.instances, room,
                    together=on.together, limit=None if limit is None else limit - len(recs),
                    min_gain=gain):
                recs.append(dataclasses.replace(
                    recommendation(change, views[change.name], (), by_key), ahead=True,
                    balance=why))
    unserved = tuple(sorted(w.key for w in planned if w.key not in unblocked))
    return Advice(recommendations=tuple(recs), waiting=tuple(waiting), unserved=unserved,
                  generation=state.generation, ahead=ahead, awaiting=awaiting, cooling=cooled)


def _ahead_changes(pool: Sequence[planner.NodeSupply],
                   ahead: Mapping[profiles.ModelId, Shortfall],
                   room: Mapping[str, tuple[int, ...]],
                   limit: int | None) -> list[planner.NodeChange]:
    """Idle nodes of ``pool`` re-laid out for the instances the mix will be short of
    (``shortfall``), GPU by GPU, nodes with the most surplus first.

    An instance is worth its memory slices when its profile is short (while the shortfall
    lasts) or is neither short nor in surplus and already on that GPU (removing it would
    make a new shortfall); an instance of a surplus profile is worth nothing. A GPU changes
    when its best layout is worth at least one slice more than its layout now, and the
    node's free cpu and memory hold the short instances it adds (at the mix's mean per
    instance). A GPU without instances keeps its layout (its MIG mode is not known).
    """
    out: list[planner.NodeChange] = []
    for model_id, fall in sorted(ahead.items()):
        nodes = [n for n in pool if n.model.id == model_id]
        if not nodes:
            continue
        model = nodes[0].model
        size = {p.name: p.memory_slices for p in model.profiles}

        extra = {n.name: sum(size.get(p, 0) for g in n.gpus for p in g.current
                             if p in fall.surplus) for n in nodes}
        nodes.sort(key=lambda n: (-extra[n.name], n.name))
        left: Counter[ProfileName] = Counter(fall.short)
        spare = None if fall.spare is None else Counter(fall.spare)
        memo: _AheadMemo = {}
        for node in nodes:
            if not any(k > 0 for k in left.values()) or (
                    limit is not None and len(out) >= limit):
                break
            if not extra[node.name]:
                continue
            budget = list(room.get(node.name, ()))
            plans: list[planner.GpuPlan] = []
            for g in node.gpus:
                plan = _ahead_gpu(model, g, fall, left, size, budget, memo, spare)
                plans.append(plan if plan is not None else planner.unchanged(model, g))
            changed = [p for p in plans if p.changed]
            if changed:
                served: Counter[ProfileName] = Counter()
                for p in changed:
                    served.update(q for q in p.after_names if q in fall.short)
                out.append(planner.NodeChange(name=node.name, disruption=0, plan=planner.NodePlan(
                    model=model.id, gpus=tuple(plans), served=dict(served),
                    value=sum(p.value for p in changed))))
    return out


_AheadMemo = dict[tuple[tuple[ProfileName, ...], tuple[tuple[ProfileName, int], ...],
                        tuple[tuple[ProfileName, int], ...]], "planner.GpuPlan | None"]


def _ahead_gpu(model: profiles.GpuModel, gpu: planner.GpuState, fall: Shortfall,
               left: Counter[ProfileName], size: Mapping[ProfileName, int],
               budget: list[int], memo: _AheadMemo,
               spare: Counter[ProfileName] | None = None) -> planner.GpuPlan | None:
    """One GPU's change for ``_ahead_changes`` (None: it stays), with ``left`` (shortfall
    still open) and ``budget`` (the node's free cpu, memory) updated; ``memo`` keeps the
    plan per layout and open shortfall (GPUs alike are planned once). ``spare``: per surplus
    profile, the instances still free to take (``Shortfall.spare``; None: every one), updated;
    the GPU's instances of it beyond that are worth their slices."""
    if gpu.frozen or not gpu.current:
        return None
    # The GPU's surplus instances worth nothing: at most what ``spare`` still allows.
    nil: Counter[ProfileName] = Counter(p for p in gpu.current if p in fall.surplus)
    if spare is not None:
        nil = Counter({q: min(k, spare[q]) for q, k in nil.items() if spare[q] > 0})
    if not nil:
        return None
    # What the plan reads: the layout, and per open profile at most what one GPU can hold.
    opened = tuple(sorted((q, min(k, model.profile(q).max_instances))
                          for q, k in left.items() if k > 0))
    key = (tuple(sorted(gpu.current)), opened, tuple(sorted(nil.items())))
    hit = memo.get(key)
    if hit is None:
        worthless = Counter(nil)
        kept = []
        for p in gpu.current:
            if worthless[p] > 0:
                worthless[p] -= 1
            else:
                kept.append((p, float(size[p])))
        wanted = [(q, float(size[q])) for q, k in opened for _ in range(k)]
        demand = planner.Demand.of_items(kept + wanted)
        plan = planner.plan_gpu(model, demand=demand, current=gpu.current, index=gpu.index)
        now = demand.value(planner.serves(model, gpu.current, (), demand))
        hit = memo[key] = (plan if plan.changed and plan.value >= now + 1.0 else None)
    if hit is None:
        return None
    best = dataclasses.replace(hit, index=gpu.index)
    delta: Counter[ProfileName] = Counter(best.after_names)
    delta.subtract(gpu.current)
    if any(n < 0 and q in fall.surplus and -n > nil[q] for q, n in delta.items()):
        # Kept surplus instances (beyond ``spare``) traded for short ones: the reserve is
        # a bound, so the GPU stays.
        return None
    cost = [0, 0]
    for q, n in delta.items():
        if n > 0 and q in fall.short:
            need = fall.needs.get(q, (0, 0))
            cost[0] += need[0] * n
            cost[1] += need[1] * n
    if budget and any(c > b for c, b in zip(cost, budget, strict=False)):
        return None
    for i, c in enumerate(cost[: len(budget)]):
        budget[i] -= c
    for q, n in delta.items():
        if n < 0 and q in fall.surplus:  # taken: within ``nil``, checked above
            if spare is not None:
                spare[q] += n
        elif q in fall.short or n < 0:
            # an added short instance closes the gap, a removed needed one opens it ...
            left[q] -= n
        elif left[q] > 0:
            left[q] -= min(n, left[q])  # ... which adding one closes again
    return best


def recommendation(change: planner.NodeChange, v: NodeView, units: Sequence[planner.Unit],
                   waiting: Mapping[str, Waiting], *,
                   disrupts: tuple[str, ...] | None = None) -> Recommendation:
    """The recommendation for one planned node change serving ``units`` of ``waiting``.

    ``disrupts``: the pods the change stops (a disruptive change or a drain); None when the
    node's pods keep running (their GPUs unchanged)."""
    gpus = tuple(GpuChange(index=g.index, before=tuple(g.before), after=g.after_names)
                 for g in change.plan.gpus)
    here = Counter(u.pod for u in units)
    unblocks = tuple(sorted(k for k, n in here.items()
                            if n >= sum(waiting[k].requests.values())))
    if change.named is not None:
        cfg: str | None = change.named
        doc: Mapping[str, Any] | None = None
    else:
        after = [g.after for g in gpus]
        off = v.layout.disabled
        cfg, doc = None, migparted.render(migparted.custom_name(after, off), after,
                                          model=v.model, disabled=off)
    return Recommendation(
        node=change.name, model=v.model.id, config=cfg, mig_parted=doc, gpus=gpus,
        unblocks=unblocks, disrupts=disrupts or (), before_config=v.label,
        before_source=v.layout.source, note=v.layout.note, served=dict(change.plan.served),
        running=v.pods if disrupts is None else ())


def dumps(advice: Advice) -> str:
    """The ``migfit advise --json`` document."""
    return json.dumps(advice.to_json(), sort_keys=False)


# ---------------------------------------------------------------- explain


def _unpatched(pod: records.PodRecord) -> str | None:
    """For a pod annotated with GPU memory that asks for no GPU resource (the webhook did not
    patch it when it was created): why, as far as the annotation can say; None when it has
    no such annotation."""
    asked = sorted((k, v) for k, v in pod.annotations.items()
                   if k == keys.GPU_MEMORY or k.startswith(keys.GPU_MEMORY_PREFIX))
    if not asked:
        return None
    shown = ", ".join(f"{requests.shorten(k, 100)}={requests.quote(v)}" for k, v in asked[:3])
    head = f"is annotated {shown} but asks for no GPU resource: the webhook did not patch it"
    for k, v in asked:
        try:
            requests.parse_memory(k, v)
        except requests.RequestError as exc:
            return (f"{head}, and would refuse it: {exc.message}. Fix the annotation and "
                    f"create the pod again.")
    return (f"{head} when it was created. Pods are patched only then: check that migfit's "
            f"MutatingWebhookConfiguration is installed and reaches namespace "
            f"{pod.namespace} (kube-system, migfit-system and namespaces labelled "
            f"migfit.io/webhook=skip are left out), then create the pod again.")


def _never_fits(state: cluster.Cluster, pod: records.PodRecord,
                reqs: Mapping[ProfileName, int]) -> list[str] | None:
    """``explain``'s lines for a pod that no node it may use can ever hold, whatever its
    layout: more instances of a profile than the node's GPUs hold laid out for nothing else
    (a pod's instances are all on one node); None when some node could, or when a node it
    may use has a model or GPU count migfit does not know.

    Waiting, or re-partitioning a node, cannot help such a pod (an outside check saw
    ``explain`` tell a pod of 8 × 7g.80gb to wait for a 1-GPU node's change)."""
    needs = recorded_needs(pod)
    for p, need in sorted(reqs.items()):
        if need <= 1:
            continue
        best: tuple[int, str, int, int] | None = None  # (most, node, GPUs, per GPU)
        for s in state.nodes():
            rec = s.node
            # Selectors, affinity and the webhook's record only: a taint may be short-lived
            # (migfit's own re-layout taint, not-ready) or lifted; "never" must not rest on it.
            if unselected(rec, pod.constraints) is not None or (
                    rec.model is not None and record_refusal(
                        needs, state.catalog.get(rec.model), (p,)) is not None):
                continue
            if rec.model is None or rec.gpu_count <= 0:
                if rec.allocatable.get(p, 0) > 0 or rec.model is not None:
                    return None  # a MIG node whose capacity is not known
                continue
            model = state.catalog.get(rec.model)
            if not model.has_profile(p):
                continue
            per = model.profile(p).max_instances
            most = _most(rec, model, p)
            if best is None or (-most, s.name) < (-best[0], best[1]):
                best = (most, s.name, rec.gpu_count, per)
        if best is None or best[0] >= need:
            continue
        most, node, gpus, per = best
        return [f"- {p}: no node it may use can ever hold {need} of it, whatever its layout: "
                f"the most is {most}, on {node} ({gpus} GPU(s) × {per} per GPU), and a pod's "
                f"instances must all be on one node. Waiting or re-partitioning cannot help.",
                f"Fix: it can never be scheduled as it is: split the work into pods that ask "
                f"for at most {most} × {p} each, or add a node with more GPUs of a model that "
                f"has {p}."]
    return None


def _kept_for_others(state: cluster.Cluster, pod: records.PodRecord, blocked: Sequence[str],
                     advice: Advice, skip: set[str]) -> list[tuple[str, tuple[str, ...]]]:
    """Idle nodes (not in ``skip``) that could be re-laid out for ``pod`` but whose free
    instances fit other waiting pods of ``advice``: node, and those pods (by name).

    The planner does not take instances from a waiting pod that they fit for one that
    waited less; such a pod waits beside them for something migfit does not model (its
    ``explain`` says so). Without this line, ``explain`` said "no idle GPU can be re-laid
    out" next to an idle node (an outside check)."""
    out: list[tuple[str, tuple[str, ...]]] = []
    others = [w for w in advice.waiting if w.pod is not None and w.key != pod.key]
    if not others:
        return out
    for ns in sorted(state.nodes(), key=lambda n: n.name):
        rec = ns.node
        if rec.name in skip or ns.repartitioning:
            continue
        if _idle_candidate(state, ns, pod, blocked) is None:
            continue
        if excludes(rec, pod.constraints) is not None:
            continue
        fit = tuple(sorted(w.key for w in others
                           if all(ns.free.get(p, 0) >= n for p, n in w.requests.items())
                           and w.pod is not None
                           and _barred(state, w.pod, rec, tuple(w.requests)) is None))
        if fit:
            out.append((rec.name, fit))
    return out


def _idle_candidate(state: cluster.Cluster, ns: records.NodeState, pod: records.PodRecord,
                    blocked: Sequence[str]) -> profiles.GpuModel | None:
    """The GPU model of ``ns`` when it is an idle node (no pod on its GPUs) that a re-layout
    could serve ``pod``'s ``blocked`` profiles from (its model has them, and its GPUs can
    hold as many as the pod asks for), else None; whether the pod may go there is apart."""
    rec = ns.node
    if rec.model is None:
        return None
    model = state.catalog.get(rec.model)
    if not all(model.has_profile(p) for p in blocked) or any(
            _on_gpus(q) for q in state.pods_on(rec.name)):
        return None
    if rec.gpu_count > 0 and any(
            _most(rec, model, ProfileName(p)) < pod.mig_requests.get(ProfileName(p), 1)
            for p in blocked):
        return None  # too few GPUs to hold it in any layout: not worth waiting for
    return model


def _most(node: records.NodeRecord, model: profiles.GpuModel, profile: ProfileName) -> int:
    """The most instances of ``profile`` ``node`` could hold, every GPU laid out for it (what
    it advertises, if more: a GPU count label that lags)."""
    per = model.profile(profile).max_instances if model.has_profile(profile) else 0
    return max(node.gpu_count * per, node.allocatable.get(profile, 0))


def _barred(state: cluster.Cluster, pod: records.PodRecord, node: records.NodeRecord,
            wanted: Sequence[str]) -> str | None:
    """Why ``pod`` could not use instances of the ``wanted`` profiles on ``node`` even once
    they are free (its selectors, affinity, taints, or the request the webhook recorded), or
    None."""
    why = excludes(node, pod.constraints)
    if why is None and node.model is not None:
        why = record_refusal(recorded_needs(pod), state.catalog.get(node.model), wanted)
    return why


def _target_has(state: cluster.Cluster, name: str, profile: ProfileName,
                config: migparted.Config | None) -> bool | None:
    """Whether the layout node ``name`` is being re-partitioned to (its nvidia.com/mig.config)
    has ``profile``, read from ``config``; None when that is not known."""
    ns = state.node(name)
    if ns is None or config is None:
        return None
    rec = ns.node
    if rec.model is None or not rec.config:
        return None
    try:
        target = _labelled_layout(config, rec, state.catalog.get(rec.model))
    except errors.ConfigError:
        return None
    return target.totals()[profile] > 0


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _idle_refusals(state: cluster.Cluster, pod: records.PodRecord,
                   blocked: Sequence[str], memo: dict[str, tuple[int, int]], *,
                   now: float, settings: Settings, cooling: Mapping[str, float]
                   ) -> list[tuple[str, str]]:
    """The idle nodes (no pod on their GPUs) whose GPU model has every profile of
    ``blocked``, which a re-layout could serve the pod from, but which cannot take it (no
    re-layout may start there now, ``excluded``; its selection, a taint, the request the
    webhook recorded, the cool-down after its last re-layout, cpu or memory): name and why,
    by name. ``cooling``: the advice's nodes cooling down (``Advice.cooling``)."""
    out = []
    for ns in sorted(state.nodes(), key=lambda n: n.name):
        rec = ns.node
        model = _idle_candidate(state, ns, pod, blocked)
        if model is None:
            continue
        state_why = excluded(ns)
        why = (f"{_NODE_STATE}{state_why}" if state_why is not None
               else _barred(state, pod, rec, blocked))
        if why is None and view(state, ns, None) is None:
            odd = profiles.unknown_profiles_note(model, rec.allocatable, catalog=state.catalog,
                                                 labels=rec.all_labels)
            why = f"{_UNKNOWN_LAYOUT} ({odd or 'see migfit status'})"
        since = cooling.get(rec.name)
        if why is None and since is not None:
            newer = (pod.unschedulable_since or 0.0) > since
            why = (f"{_COOLING}its {keys.LABEL_CONFIG_STATE} label was written "
                   f"{_minutes(now - since)} ago (by the MIG Manager as a re-layout ended, or "
                   f"a later label write of the same field manager); for "
                   f"{_minutes(settings.cooldown_s)} after that it is re-laid out again only "
                   f"for pods unschedulable since, and only for at least "
                   f"{settings.cooldown_min} of their instances"
                   + (f" (this pod asks for {sum(pod.mig_requests.values())})" if newer
                      else " (this pod has waited since before)")
                   + f"; {_minutes(since + settings.cooldown_s - now)} left")
        if why is None:
            cpu, mem = _room(state, rec.name, memo)
            if pod.cpu_milli > cpu:
                why = f"cpu: {cpu}m free, it asks for {pod.cpu_milli}m"
            elif pod.memory_bytes > mem:
                why = (f"memory: {quantity.format_bytes(mem)} free, it asks for "
                       f"{quantity.format_bytes(pod.memory_bytes)}")
        if why is not None:
            out.append((rec.name, why))
    return out


def _per_node(items: Sequence[tuple[str, str | None]], limit: int = 5) -> str:
    """``a: why; b: why; and 3 more``: the first ``limit`` nodes with what ``explain`` says of
    each."""
    shown = "; ".join(f"{n}: {why}" for n, why in items[:limit])
    return shown + (f"; and {len(items) - limit} more" if len(items) > limit else "")


def _names(nodes: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


_NAMES_SHOWN: Final = 8  # pods named in an unknown pod's answer


def explain(
    state: cluster.Cluster,
    namespace: str,
    name: str,
    *,
    now: float,
    settings: Settings | None = None,
    config: migparted.Config | None = None,
    advice: Advice | None = None,
    source: str | None = None,
) -> str:
    """Why pod ``namespace/name`` is pending, in plain words, and what would fix it.

    ``source``: the file the cluster was read from (None: the API server), which an unknown
    pod's answer names with the pods the file has in that namespace."""
    settings = settings or Settings()
    pod = state.find_pod(namespace, name)
    key = f"{namespace}/{name}"
    if pod is None:
        tracked = (f"{key}: not in migfit's view of the cluster. migfit tracks pods that "
                   f"request GPUs or carry {keys.ANNOTATION_PREFIX} annotations; ")
        if source is None:
            return tracked + f"check the name with kubectl get pod -n {namespace} {name}."
        names = sorted(p.name for p in state.pods() if p.namespace == namespace)
        shown = ", ".join(names[:_NAMES_SHOWN]) + (", …" if len(names) > _NAMES_SHOWN else "")
        # A bare name is looked up in "default" with a file: the pod is often in another.
        elsewhere = sorted({f"{p.namespace}/{p.name}" for p in state.pods()
                            if p.name == name and p.namespace != namespace})
        meant = (f" Did you mean {' or '.join(elsewhere[:_NAMES_SHOWN])}?" if elsewhere
                 else "")
        stop = "" if shown.endswith("…") else "."  # no "…." after a cut list
        return tracked + (f"those of {source} in namespace {namespace}: {shown}{stop}" if names
                          else f"{source} has none in namespace {namespace}.") + meant
    if pod.node is not None:
        return f"{key} is not pending: it is bound to node {pod.node} (phase {pod.phase})."
    if pod.phase != "Pending" or pod.deleting:
        gone = ", being deleted" if pod.deleting else ""
        return f"{key} is not pending (phase {pod.phase}{gone})."
    reqs = pod.mig_requests
    if not reqs:
        gpu = pod.requests.get(profiles.GPU_RESOURCE)
        record = keys.decision_of(pod.annotations)
        if gpu and record is not None and record["strategy"] == "single":
            chosen = ", ".join(c["profile"] for c in record["containers"])
            return (f"{key} requests {gpu} × {profiles.GPU_RESOURCE}, as the webhook decided "
                    f"for single-strategy nodes ({chosen}); "
                    f"migfit advises on mixed-strategy MIG resources (nvidia.com/mig-*) "
                    f"only: a single-strategy node lays all its GPUs out as one profile.")
        if gpu:
            return (f"{key} requests {gpu} × {profiles.GPU_RESOURCE}, not a MIG profile; "
                    f"migfit advises on mixed-strategy MIG resources (nvidia.com/mig-*). "
                    f"To ask for memory instead, annotate it with {keys.GPU_MEMORY}.")
        unpatched = _unpatched(pod)
        if unpatched is not None:
            return f"{key} {unpatched}"
        return f"{key} requests no MIG profile; migfit has nothing to say about it."
    lines: list[str] = []
    want = ", ".join(f"{n} × {p}" for p, n in sorted(reqs.items()))
    lines.append(f"{key} is pending and needs {want}.")
    never = _never_fits(state, pod, reqs)
    if never is not None:
        lines.extend(never)
        return "\n".join(lines)
    blocked: list[str] = []
    causes: set[str] = set()  # what keeps it off: _FIXES' keys
    cordoned_at: list[str] = []
    memo: dict[str, tuple[int, int]] = {}  # host room per node
    refusals: dict[str, str | None] = {}  # per node: the verdict holds for all its profiles
    for p in sorted(reqs):
        free = sorted(state.free_nodes(p))
        for n in free:
            if n not in refusals:
                refusals[n] = _refusal(state, pod, n, reqs, memo)
        fits = [n for n in free if refusals[n] is None]
        if fits:
            lines.append(f"- {p}: {len(fits)} schedulable node(s) have a free instance and "
                         f"room for it ({_names(fits)}). MIG capacity is not what holds it; "
                         f"check what migfit does not model (pod affinity, topology spread, "
                         f"volumes) with kubectl describe pod -n {namespace} {name}.")
            continue
        blocked.append(p)
        if free:
            causes.update(_cause(refusals[n]) for n in free)
            lines.append(f"- {p}: {len(free)} schedulable node(s) have a free instance, but "
                         f"none can take it ({_per_node([(n, refusals[n]) for n in free])}).")
            if reqs[p] > 1:
                lines.append(_wide(state, pod, p, reqs[p]))
            larger = _larger_free(state, pod, p, reqs, memo)
            if larger is not None:
                lines.append(larger)
            continue
        advertising = [s for s in state.nodes() if s.node.allocatable.get(p, 0) > 0]
        busy = sorted(s.name for s in advertising
                      if not s.repartitioning and not s.node.unschedulable)
        moving = sorted(s.name for s in advertising if s.repartitioning)
        cordoned = sorted(s.name for s in advertising
                          if s.node.unschedulable and not s.repartitioning)
        nodes_of = {s.name: s.node for s in advertising}
        barred = {n: why for n in busy
                  if (why := _barred(state, pod, nodes_of[n], (p,))) is not None}
        if busy and len(barred) == len(busy):
            # A freed instance there would not serve it either: say why, not "wait".
            causes.update(_cause(why) for why in barred.values())
            lines.append(f"- {p}: advertised only by node(s) it cannot use "
                         f"({_per_node(list(barred.items()))}).")
        elif busy:
            usable = [n for n in busy if n not in barred]
            if any(nodes_of[n].allocatable.get(p, 0) >= reqs[p] for n in usable):
                causes.add("busy")
                lines.append(f"- {p}: every instance is in use on the node(s) that advertise "
                             f"it and that it may use ({_names(usable)}); it runs when "
                             f"{'one is freed' if reqs[p] == 1 else 'enough are'}.")
            else:
                # None of them advertises as many as it asks for: freed instances do not
                # place it, so it is not told to wait for them (an outside check).
                causes.add("wide")
                lines.append(f"- {p}: every instance is in use on the node(s) that advertise "
                             f"it and that it may use ({_names(usable)}), and none of them "
                             f"advertises {reqs[p]}.")
            if reqs[p] > 1:
                lines.append(_wide(state, pod, p, reqs[p]))
        elif moving or cordoned:
            parts = []
            keeps = [n for n in moving if _target_has(state, n, p, config) is not False]
            drops = [n for n in moving if n not in keeps]
            if keeps:
                parts.append(f"node(s) being re-partitioned ({_names(keeps)}): it can run "
                             f"there once they finish, if their new layout has it")
            if drops:
                parts.append(f"node(s) being re-partitioned to a layout without it "
                             f"({_names(drops)})")
            if cordoned:
                causes.add("cordoned")
                cordoned_at.extend(cordoned)
                parts.append(f"cordoned node(s) ({_names(cordoned)}), which the scheduler "
                             f"passes over")
            lines.append(f"- {p}: advertised only by " + "; and by ".join(parts) + ".")
        else:
            lines.append(f"- {p}: no node advertises it. The scheduler will not split a larger "
                         f"idle instance and preemption cannot create it: a node must be "
                         f"re-partitioned (its {keys.LABEL_CONFIG} changed).")
    if not blocked:
        return "\n".join(lines)
    waited = None if pod.unschedulable_since is None else now - pod.unschedulable_since
    if waited is None:
        lines.append("The scheduler has not reported it unschedulable yet; advice starts once "
                     "it has.")
        return "\n".join(lines)
    if waited < settings.grace_s:
        lines.append(f"It has been unschedulable for {waited:.0f}s, less than the grace period "
                     f"of {settings.grace_s:.0f}s; advice starts after that.")
        return "\n".join(lines)
    advice = advice or advise(state, now=now, settings=settings, config=config)
    rec = advice.for_pod(key)
    coming = advice.awaiting.get(key)
    if rec is None and coming is not None:
        node = state.node(coming)
        found = None if node is None else _in_flight_target(state, node, config)
        to = "" if found is None else f" ({keys.LABEL_CONFIG}={found[0]})"
        lines.append(f"Node {coming} is being re-laid out{to} to a layout that will serve it: "
                     f"it can run there once the change is done (migfit status names the "
                     f"node's state). No other node needs re-laying out for it.")
        return "\n".join(lines)
    if rec is None or rec.disrupts:
        # Idle nodes would serve it without disrupting a pod, but it cannot go there.
        # (a cordoned node that advertises the profile is named above already)
        refused = [(n, why) for n, why in _idle_refusals(state, pod, blocked, memo, now=now,
                                                          settings=settings,
                                                          cooling=advice.cooling)
                   if n not in cordoned_at]
        if refused:
            causes.update(_cause(why) for _n, why in refused)
            lines.append(f"- Idle node(s) a re-layout could give it from cannot take it "
                         f"({_per_node(refused)}).")
        if rec is None:
            kept = _kept_for_others(state, pod, blocked, advice,
                                    {n for n, _ in refused} | set(cordoned_at))
            if kept:
                causes.add("kept")
                lines.append(f"- Idle node(s) a re-layout could give it from keep their layout: "
                             f"their free instances fit other waiting pods, which the advisor "
                             f"does not take them from "
                             f"({_per_node([(n, _names(list(ws), 3)) for n, ws in kept])}).")
    if rec is None:
        models = sorted({m.id for m in state.models_present()
                         if all(m.has_profile(p) for p in blocked)})
        where = (f"GPU models present that have {', '.join(blocked)}: {', '.join(models)}"
                 if models else f"no GPU model in the cluster has {', '.join(blocked)}")
        fixes = [_FIXES[c] for c in _FIX_ORDER if c in causes]
        if "cordoned" in causes:
            names = sorted(set(cordoned_at))
            fixes.insert(0, f"uncordon {_names(names)} once it may take pods again (kubectl "
                            f"uncordon {names[0]})")
        fixes += ["add capacity", "ask for another profile"]
        text = f"{'; '.join(fixes[:-1])}; or {fixes[-1]}"
        but = (" without taking free instances that other waiting pods fit"
               if "kept" in causes else "")
        lines.append(f"Fix: no idle GPU can be re-laid out to provide it now{but} ({where}). "
                     f"{text[0].upper()}{text[1:]}.")
        return "\n".join(lines)
    changed = [g for g in rec.gpus if g.changed]
    gpu_text = "; ".join(f"GPU {g.index}: {' '.join(g.before) or '(none)'} -> "
                         f"{' '.join(g.after) or '(none)'}" for g in changed)
    lines.append(f"Fix: re-partition node {rec.node} ({gpu_text}). {rec.sentence}")
    if rec.disrupts:
        lines.append(f"This disrupts running pods: {', '.join(rec.disrupts)}.")
    elif rec.running:
        lines.append(f"Pods run on the node's other GPUs ({_names(list(rec.running))}): those "
                     f"GPUs keep their layout and the pods keep running, but the MIG Manager "
                     f"pauses the node's GPU operands (device plugin, GPU feature discovery, "
                     f"DCGM) while it applies the change (docs/relayout.md).")
    else:
        lines.append("Nothing runs on its MIG instances, so the change disrupts no pod.")
    return "\n".join(lines)
