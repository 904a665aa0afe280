"""The simulated world: GPUs with their MIG instances, nodes, pods, and the cluster view.

The cluster state is a real ``migfit.cluster.Cluster`` fed with Node and Pod objects as the
API server would show them (``objects``), so the webhook's decision and the extender's
filter and score read exactly what they read in a real cluster. ``World`` keeps, next to it,
what the API does not show: which MIG instance on which GPU each pod holds (the device
plugin's choice, ``Allocation``), and cpu/memory in use.

The event loop (``engine``), kube-scheduler (``scheduler``) and the figures (``metrics``)
all read this module; it imports none of them.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from migfit import advisor, cluster, keys, placements, profiles, records
from migfit.simulate import objects, policies, spec, workload

# The device plugin's choice of instance inside a node (which GPU's instance a pod gets):
# distributed = the GPU with the fewest instances in use, packed = the one with the most.
Allocation = policies.Allocation
RELAYOUT_TAINT = keys.relayout_taint()


class Gpu:
    """One GPU: its instances (placed) and which pod holds each."""

    __slots__ = ("holders", "instances")

    def __init__(self, instances: Sequence[placements.Instance]) -> None:
        self.instances: list[placements.Instance] = sorted(instances)
        self.holders: list[str | None] = [None] * len(self.instances)

    def names(self) -> tuple[profiles.ProfileName, ...]:
        return tuple(sorted(i.profile for i in self.instances))

    def held(self) -> list[placements.Instance]:
        return [i for i, h in zip(self.instances, self.holders, strict=True) if h is not None]

    def in_use(self) -> int:
        return sum(1 for h in self.holders if h is not None)


class Node:
    """A simulated node (a cpu-only node has no GPU)."""

    __slots__ = ("busy_until", "config", "cpu_alloc", "cpu_used", "gpu_pods", "gpus",
                 "group", "mem_alloc", "mem_used", "model", "name", "pending_plan",
                 "position", "total_compute",
                 "total_memory", "trace_model", "used_compute", "version")

    def __init__(self, s: spec.NodeSpec, *, on_demand: bool) -> None:
        self.name = s.name
        self.model = s.model
        self.trace_model = s.trace_model
        self.config = s.config
        self.cpu_alloc = s.cpu_milli
        self.mem_alloc = s.memory_mib
        self.cpu_used = 0
        self.mem_used = 0
        self.gpus: list[Gpu] = []
        for lay in s.gpu_layouts:
            self.gpus.append(Gpu(()) if on_demand else Gpu(placement_of(s.model, lay)))
        self.total_compute = s.model.compute_slices * len(self.gpus)
        self.total_memory = s.model.memory_slices * len(self.gpus)
        self.used_compute = 0
        self.gpu_pods = 0
        self.busy_until: float | None = None
        self.pending_plan: advisor.Recommendation | None = None
        self.version = 0  # bumped on every change (FGD's per-node cache)
        self.position = 0  # its index in ``World.order`` (set by the world)
        kinds = {"+".join(lay) or "no instance" for lay in s.gpu_layouts}
        # The initial layout, for the report's picture (nodes grouped by it).
        self.group = (f"{s.model.id}, every GPU {kinds.pop()}" if len(kinds) == 1
                      else f"{s.model.id}, {s.config}" if s.gpu_layouts else "cpu only")

    @property
    def free_compute(self) -> int:
        return self.total_compute - self.used_compute

    def layouts(self) -> list[tuple[profiles.ProfileName, ...]]:
        return [g.names() for g in self.gpus]

    def takes_model(self, allowed: frozenset[str]) -> bool:
        """``gpu_spec``: whether the pod's allowed trace models include this node's."""
        return not allowed or self.trace_model in allowed


def placement_of(model: profiles.GpuModel, names: Sequence[str]
                 ) -> tuple[placements.Instance, ...]:
    fit = placements.fit(model, names)
    if fit.placement is None:
        raise ValueError(f"{names} does not fit {model.id}")
    return fit.placement.instances


class Pod:
    """A pod in the simulation, from arrival to departure."""

    __slots__ = ("arrival", "blocked", "compute", "held", "node", "obj", "profiles",
                 "record", "request", "spec", "start", "uid", "usable_mib")

    def __init__(self, s: workload.PodSpec, uid: str, arrival: float) -> None:
        self.spec = s
        self.uid = uid
        self.arrival = arrival
        self.obj: dict[str, Any] = {}
        self.profiles: tuple[str, ...] = ()
        self.record: records.PodRecord | None = None
        self.request: Any = None
        self.node: str | None = None
        self.start: float | None = None
        self.held: list[tuple[int, int]] = []  # (gpu index, instance index)
        self.blocked = False
        self.compute = 0
        self.usable_mib = 0

    @property
    def wants(self) -> Counter[str]:
        return Counter(self.profiles)


def node_object(n: Node) -> dict[str, Any]:
    """The Node object of ``n`` as the API server shows it now."""
    busy = n.busy_until is not None
    # While the MIG Manager works, nvidia.com/mig.config names the target (setting it is what
    # starts the change): the advisor reads it to count the node's coming instances.
    target = n.pending_plan.target if busy and n.pending_plan is not None else n.config
    return objects.node_object(
        name=n.name, model=n.model if n.gpus else None, gpu_layouts=n.layouts(),
        cpu_milli=n.cpu_alloc, memory_mib=n.mem_alloc, config=target,
        config_state="pending" if busy else "success",
        taints=(RELAYOUT_TAINT,) if busy else (), trace_model=n.trace_model)


@dataclasses.dataclass(slots=True)
class Counters:
    arrived: int = 0
    gpu_arrived: int = 0
    placed: int = 0
    gpu_placed: int = 0
    denied: int = 0
    mismatch: int = 0
    blocked: int = 0
    relayouts: int = 0
    gpus_relaid: int = 0
    disrupted: int = 0
    demand_slices: int = 0
    demand_trace_gpus: float = 0.0
    placed_trace_gpus: float = 0.0  # FGD's unit: the trace's GPUs of the placed pods
    wasted_mib: int = 0
    usable_mib: int = 0
    waits: list[float] = dataclasses.field(default_factory=list)
    gpu_waits: list[float] = dataclasses.field(default_factory=list)
    # the same per pod class (``metrics.class_name`` of the instances the webhook gave it)
    gpu_waits_by_class: dict[str, list[float]] = dataclasses.field(default_factory=dict)


class World:
    """The nodes, the cluster view and what the API does not show (module docstring)."""

    def __init__(self, nodes: Sequence[spec.NodeSpec], *, catalog: profiles.Catalog,
                 on_demand: bool, allocation: Allocation) -> None:
        self.on_demand = on_demand
        self.allocation: Allocation = allocation
        self.catalog = catalog
        self.cluster = cluster.Cluster(catalog)
        self.nodes: dict[str, Node] = {s.name: Node(s, on_demand=on_demand) for s in nodes}
        self.order: list[str] = list(self.nodes)  # kube-scheduler's node list order
        for i, n in enumerate(self.nodes.values()):
            n.position = i
        self.capacity_slices = max(1, sum(n.total_compute for n in self.nodes.values()))
        self.capacity_memory = max(1, sum(n.total_memory for n in self.nodes.values()))
        self.gpus = sum(len(n.gpus) for n in self.nodes.values())
        self.free_hist: Counter[int] = Counter()
        # Positions of the nodes that ``hist`` saw change, in turn (the scheduler's kept
        # filters read what changed since their last use, and clear it now and then).
        self.changed: list[int] = []
        for n in self.nodes.values():
            if n.gpus:
                self.free_hist[n.free_compute] += 1
            self.cluster.apply("Node", "ADDED", node_object(n))
        self.cluster.mark_synced()
        self.allocated_slices = 0
        self.allocated_memory = 0
        self.classes: Counter[tuple[str, int]] = Counter()
        self._fit_cache: dict[tuple[Any, ...], placements.Instance | None] = {}
        # node -> (its version, what metrics.idle_for_pending reads of its GPUs): kept
        # across the samples, recomputed for a node that changed since
        self.idle_summaries: dict[str, tuple[Any, ...]] = {}

    def touch(self, n: Node) -> None:
        """Record a change to ``n`` (its cpu or memory used, its taint, its instances): its
        version moves and ``changed`` lists it. Every such change goes through here
        (``hist`` calls it), which is what the kept per-node answers rely on."""
        n.version += 1
        self.changed.append(n.position)

    def hist(self, n: Node, sign: int) -> None:
        """Keep ``free_hist`` (free compute slices -> GPU nodes not being re-laid out)."""
        self.touch(n)
        if n.busy_until is None and n.gpus:
            self.free_hist[n.free_compute] += sign
            if not self.free_hist[n.free_compute]:
                del self.free_hist[n.free_compute]

    def top_free(self) -> int:
        return max((f for f, k in self.free_hist.items() if k), default=0)

    # ------------------------------------------------------------ instances in a node

    def choose(self, n: Node, profile: str, taken: frozenset[tuple[int, int]] = frozenset()
               ) -> tuple[int, int] | None:
        """The free instance of ``profile`` the device plugin would hand out (``allocation``),
        instances in ``taken`` counted as held; None when the node has none."""
        best: tuple[int, int, int] | None = None  # (rank, gpu, instance)
        for gi, g in enumerate(n.gpus):
            ii = next((k for k, inst in enumerate(g.instances)
                       if inst.profile == profile and g.holders[k] is None
                       and (gi, k) not in taken), -1)
            if ii < 0:
                continue
            used = g.in_use() + sum(1 for t in taken if t[0] == gi)
            rank = used if self.allocation == "distributed" else -used
            if best is None or rank < best[0]:
                best = (rank, gi, ii)
        return None if best is None else (best[1], best[2])

    def take_instance(self, n: Node, profile: str, uid: str) -> tuple[int, int]:
        """The instance the device plugin hands the pod (``choose``); on demand, a new one
        on the fullest GPU that can create it."""
        if not self.on_demand:
            got = self.choose(n, profile)
            if got is None:
                raise AssertionError(f"{n.name} has no free {profile}")
            n.gpus[got[0]].holders[got[1]] = uid
            return got
        pick: tuple[int, int] | None = None
        for gi, g in enumerate(n.gpus):
            if self.add_on(n, g, profile) is not None:
                used = sum(n.model.profile(i.profile).compute_slices for i in g.instances)
                if pick is None or used > pick[0]:
                    pick = (used, gi)
        assert pick is not None
        g = n.gpus[pick[1]]
        new = self.add_on(n, g, profile)
        assert new is not None
        g.instances.append(new)
        g.holders.append(uid)
        return pick[1], len(g.instances) - 1

    def add_on(self, n: Node, g: Gpu, profile: str) -> placements.Instance | None:
        """On demand: where one more ``profile`` instance could be created on ``g``."""
        key = (n.model.id, tuple(g.instances), profile)
        if key in self._fit_cache:
            return self._fit_cache[key]
        out: placements.Instance | None = None
        if n.model.has_profile(profile):
            fit = placements.fit(n.model, [profile], fixed=g.instances)
            if fit.placement is not None:
                have = set(g.instances)
                out = next(i for i in fit.placement.instances if i not in have)
        self._fit_cache[key] = out
        return out

    def can_add(self, n: Node, wants: Sequence[str]) -> bool:
        """On demand: whether the node's GPUs can grow instances for every wanted profile."""
        if len(wants) == 1:
            return any(self.add_on(n, g, wants[0]) is not None for g in n.gpus)
        trial = [Gpu(g.instances) for g in n.gpus]
        for p in wants:
            for g in trial:
                extra = self.add_on(n, g, p)
                if extra is not None:
                    g.instances = sorted([*g.instances, extra])
                    break
            else:
                return False
        return True
