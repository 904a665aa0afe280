"""Per-node and cluster-wide figures that filter and score read, precomputed when the cache changes.

The cluster model calls a listener with a node's name whenever that node's state changes; the
index only marks it dirty. The next filter or prioritize call rebuilds the dirty nodes (and
adjusts the cluster-wide free supply per model and profile incrementally), so the hot path is
a few dict lookups per node. Demand (what pending pods ask for) depends on every pod, so it is
recomputed only when the set of pending pods changes (``Cluster.pending_generation``).

An ``Index`` belongs to whoever builds it (the command that assembles the extender, a test,
the simulator): nothing here is process-wide, so two extenders in one process share nothing.
Its memo tables hold entries for nodes of the cluster only, and forget a node when it is
deleted, so their size is bounded by the cluster, never by the names a request carries.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from migfit import cluster, keys, layouts, profiles, records, requests

# The key under which supply and demand are counted: (lower-cased model id, profile). The same
# profile name means a different instance on another model (reference/MIG.md 3.1).
ModelProfile = tuple[str, profiles.ProfileName]
MEMO_KEYS = 32  # request shapes whose per-node verdicts are kept
# The demand mix the score reads (``Index.mix``): the most common pod classes, each share
# rounded to 1/MIX_UNITS, so that the mix (and the answers keyed on it) moves only when the
# workload's shape does, not on every arrival.
MIX_CLASSES = 16
MIX_UNITS = 16


@dataclasses.dataclass(frozen=True, slots=True)
class NodeFigures:
    """What the extender needs of one node, derived from its ``NodeState``."""

    state: records.NodeState
    model: profiles.GpuModel | None
    model_key: str  # lower-cased model id, "" when unknown
    single: bool  # mig.strategy=single: every MIG device is nvidia.com/gpu
    schedulable: bool  # not cordoned, ready, not being re-partitioned, no failed re-layout
    memory: Mapping[profiles.ProfileName, int]  # usable MiB per advertised profile
    slices: Mapping[profiles.ProfileName, int]  # memory slices of one instance
    total_slices: int  # memory slices of every advertised instance
    used_slices: int
    free_slices: int
    largest_free_slices: int  # the biggest single free instance, in memory slices
    idle_gpus: int  # GPUs that certainly hold no pod (a lower bound: placement is unknown)
    advertised: tuple[tuple[profiles.ProfileName, int, int], ...]  # (profile, alloc, free)
    tie: float  # a stable per-name number in [0, 1) for deterministic tie-breaks
    repartitioning: str | None  # why the node is being re-partitioned, when it is
    #: the result of migfit's failed re-layout of a node still carrying its taint, when so:
    #: the node waits for an operator, not for a change to finish
    relayout_failed: str | None = None
    #: a re-layout migfit advises for the node and has not begun (its ``recommended``
    #: record): instances of each profile on the GPUs it changes (a pod bound there now
    #: spoils the plan), and the pods (namespace/name) it is for
    planned: Mapping[profiles.ProfileName, int] = dataclasses.field(default_factory=dict)
    planned_for: frozenset[str] = frozenset()

    @property
    def fragmentation(self) -> float:
        """External fragmentation: 1 - largest free instance / all free memory slices."""
        if self.free_slices <= 0:
            return 0.0
        return 1.0 - self.largest_free_slices / self.free_slices


def tie_of(name: str) -> float:
    """The node's tie-break in [0, 1): a stable hash of its name (``scoring``'s formula adds
    0.1·(tie − 0.5) before rounding; the scoring log writes it)."""
    return (zlib.crc32(name.encode(errors="surrogatepass")) & 0xFFFFFFFF) / 2**32


def _figures(state: records.NodeState, models: Mapping[str, profiles.GpuModel]) -> NodeFigures:
    record = state.node
    model = models.get(record.model) if record.model else None
    memory: dict[profiles.ProfileName, int] = {}
    slices: dict[profiles.ProfileName, int] = {}
    total = used = largest = 0
    order: dict[str, int] = {}
    if model is not None:
        order = {p.name: i for i, p in enumerate(model.profiles)}
    advertised: list[tuple[profiles.ProfileName, int, int]] = []
    for p, alloc in record.allocatable.items():
        prof = model.profile(p) if model is not None and model.has_profile(p) else None
        mem = record.memory_mib.get(p)
        if mem is None and prof is not None:
            mem = prof.memory_mib
        if mem is not None:
            memory[p] = mem
        size = prof.memory_slices if prof is not None else 1
        slices[p] = size
        if alloc <= 0:
            continue
        free = state.free.get(p, 0)
        advertised.append((p, alloc, free))
        # Slices are the instances' (time-slicing advertises each instance once per replica,
        # and a replica in use holds its instance's slices as much as the rest do).
        shared = max(record.replicas.get(p, 1), 1)
        instances = -(-alloc // shared)
        total += instances * size
        used += min(instances, -(-state.used.get(p, 0) // shared)) * size
        if free > 0:
            largest = max(largest, size)
    advertised.sort(key=lambda t: (order.get(t[0], len(order)), t[0]))
    # Each bound instance sits on at most one GPU, so at least gpu_count - used GPUs are idle.
    idle_gpus = max(0, record.gpu_count - state.used_total)
    failure = records.relayout_failure(record)
    why = None if failure is not None else _repartitioning(state)
    planned, planned_for = _planned(record)
    return NodeFigures(
        state=state,
        model=model,
        model_key=model.id.lower() if model is not None else "",
        single=record.strategy == "single",
        schedulable=(not record.unschedulable and record.ready and why is None
                     and failure is None),
        memory=memory,
        slices=slices,
        total_slices=total,
        used_slices=used,
        free_slices=total - used,
        largest_free_slices=largest,
        idle_gpus=idle_gpus,
        advertised=tuple(advertised),
        tie=tie_of(record.name),
        repartitioning=why,
        relayout_failed=failure,
        planned=planned,
        planned_for=planned_for,
    )


_NOTHING_PLANNED: tuple[dict[profiles.ProfileName, int], frozenset[str]] = ({}, frozenset())


def _planned(record: records.NodeRecord
             ) -> tuple[dict[profiles.ProfileName, int], frozenset[str]]:
    """What the node's ``recommended`` re-layout record plans: per profile, what the node
    advertises of the instances on the GPUs it changes (each instance as many times as
    time-slicing shares it, as free counts are), and the pods it is for
    (``NodeFigures.planned``). Nothing for a node without one, whose re-layout has begun
    (then it takes no new pods at all), whose change is for no waiting pod (ahead of demand:
    a pod that fits now goes first), or whose change disrupts pods (the apply mode never
    starts one, and its changed GPUs hold instances in use that the record does not tell
    apart from free ones)."""
    if keys.ANNOTATION_RELAYOUT not in record.annotations:
        return _NOTHING_PLANNED
    mark = keys.relayout_of(record.annotations)
    if (mark is None or mark.state is not keys.RelayoutState.RECOMMENDED
            or not mark.unblocks or mark.disruptive or mark.disrupts):
        return _NOTHING_PLANNED
    changed: Counter[profiles.ProfileName] = Counter()
    for gpu in mark.gpus:
        if gpu.before != gpu.after:
            changed.update(profiles.ProfileName(p) for p in gpu.before)
    if not changed:
        return _NOTHING_PLANNED
    return ({p: n * max(record.replicas.get(p, 1), 1) for p, n in changed.items()},
            frozenset(mark.unblocks))


# States of the ``migfit.io/relayout`` record that mean the advisor's apply mode is changing
# the node's layout right now (DESIGN.md 6): the state machine's in-flight states.
RELAYOUT_ACTIVE_STATES = keys.ACTIVE_STATES


def _repartitioning(state: records.NodeState) -> str | None:
    """Why the node cannot take new MIG pods until its layout settles, or None.

    The MIG Manager sets ``nvidia.com/mig.config.state`` to pending/rebooting while it works
    (reference/MIG.md 5); migfit's apply mode taints the node ``migfit.io/relayout`` and
    records its progress in the ``migfit.io/relayout`` annotation.
    """
    record = state.node
    if record.config_state in keys.REPARTITIONING_STATES:
        target = f" (to {record.config})" if record.config else ""
        return f"{keys.LABEL_CONFIG_STATE}={record.config_state}{target}"
    if record.relayout_tainted:
        return f"taint {keys.TAINT_RELAYOUT} (a migfit re-layout is in progress)"
    mark = keys.relayout_of(record.annotations)
    if mark is not None and mark.state in RELAYOUT_ACTIVE_STATES:
        return f"annotation {keys.ANNOTATION_RELAYOUT} state={mark.state}"
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Want:
    """One profile a pod needs on a single node."""

    profile: profiles.ProfileName
    resource: str  # the extended resource the pod requests
    count: int
    request_mib: int | None  # the largest request recorded by the webhook for this profile
    models: frozenset[str] | None  # lower-cased model ids it may use; None: any
    #: those models as the webhook recorded them (``A100-40GB``), for messages
    model_names: tuple[str, ...] = ()

    @property
    def single(self) -> bool:
        return self.resource == profiles.GPU_RESOURCE

    def allows(self, model_key: str) -> bool:
        return self.models is None or model_key in self.models


def wants_of(
    gpu_requests: Mapping[str, int], annotations: Mapping[str, str]
) -> tuple[Want, ...]:
    """A pod's MIG needs from its effective GPU requests and the webhook's decision record.

    Mixed strategy: each ``nvidia.com/mig-<profile>`` is one need. Single strategy: the pod asks
    for ``nvidia.com/gpu`` and only the decision (``strategy: single``) says which profile.
    The decision also gives the memory the request needs and the models it fits on.
    Pods of one workload repeat the same requests and record: the answer (immutable) is
    cached on them, in a bounded table.
    """
    return _wants(tuple(sorted(gpu_requests.items())), annotations.get(keys.DECISION))


@functools.lru_cache(maxsize=4096)
def _wants(gpu_items: tuple[tuple[str, int], ...], decision_text: str | None
           ) -> tuple[Want, ...]:
    gpu_requests = dict(gpu_items)
    decision = (None if decision_text is None
                else requests.decision_of({keys.DECISION: decision_text}))
    needs = {p: (mib, models) for p, mib, models in requests.recorded_needs(decision_text)}
    # The record's own spelling of each model, for messages (matching is case-insensitive).
    spelt = {m.lower(): m for c in (decision["containers"] if decision is not None else ())
             for m in c["models"]}

    def make(profile: str, resource: str, count: int) -> Want:
        mib, models = needs.get(profile, (None, None))
        names = () if models is None else tuple(sorted(spelt.get(m, m) for m in models))
        return Want(profile=profiles.ProfileName(profile), resource=resource, count=count,
                    request_mib=mib, models=models, model_names=names)

    out: list[Want] = []
    for res, n in sorted(gpu_requests.items()):
        p = profiles.parse_resource(res)
        if p is not None and n > 0:
            out.append(make(p, res, n))
    gpus = gpu_requests.get(profiles.GPU_RESOURCE, 0)
    if not out and gpus > 0 and decision is not None and decision["strategy"] == "single":
        counts = Counter(profiles.canonical_profile(c["profile"])
                         for c in decision["containers"])
        if len(counts) == 1:
            out.append(make(next(iter(counts)), profiles.GPU_RESOURCE, gpus))
        else:
            # Several profiles under single can never share one node (it has one profile);
            # keep them all so that every node reports what it lacks.
            for name, n in counts.items():
                out.append(make(name, profiles.GPU_RESOURCE, n))
    return tuple(out)


@dataclasses.dataclass(frozen=True, slots=True)
class ClassShare:
    """One pod class of the demand mix: what a pod of it needs, and its share of the mix."""

    wants: tuple[Want, ...]
    cpu_milli: int
    memory_bytes: int
    share: float  # of the mix's pods, the kept classes summing to 1


# What a class asks of one profile: (share, cpu, memory, instances, single strategy, models).
Ask = tuple[float, int, int, int, bool, frozenset[str] | None]


@dataclasses.dataclass(frozen=True, slots=True)
class Mix:
    """The demand mix: its classes, and per profile the classes asking for it (with their
    total share) so that the score reads one profile's askers without a scan."""

    classes: tuple[ClassShare, ...] = ()
    asks: Mapping[profiles.ProfileName, tuple[float, tuple[Ask, ...]]] = dataclasses.field(
        default_factory=dict, compare=False, hash=False, repr=False)
    # the most cpu (milli) and memory (bytes) a class asks: a node with this much left serves
    # every class's host needs, so its fragment does not depend on the exact room
    most_cpu: int = dataclasses.field(default=0, compare=False, hash=False, repr=False)
    most_memory: int = dataclasses.field(default=0, compare=False, hash=False, repr=False)
    # the share of the mix's pods that need more than one instance on one node (multi-GPU
    # pods, several MIG containers): what breaking a node's last whole GPUs costs them
    multi: float = dataclasses.field(default=0.0, compare=False, hash=False, repr=False)
    # the hash of ``classes``, computed once: the answer tables key on the mix on every call
    _hash: int = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(self.classes))

    def __hash__(self) -> int:
        return self._hash

    def __bool__(self) -> bool:
        return bool(self.classes)

    def __iter__(self) -> Iterator[ClassShare]:
        return iter(self.classes)

    @staticmethod
    def of(classes: Sequence[ClassShare]) -> Mix:
        rows: dict[profiles.ProfileName, list[Ask]] = {}
        for c in classes:
            for w in c.wants:
                rows.setdefault(w.profile, []).append(
                    (c.share, c.cpu_milli, c.memory_bytes, w.count, w.single, w.models))
        return Mix(classes=tuple(classes), asks={
            p: (sum(r[0] for r in rs), tuple(rs)) for p, rs in rows.items()},
            most_cpu=max((c.cpu_milli for c in classes), default=0),
            most_memory=max((c.memory_bytes for c in classes), default=0),
            multi=sum(c.share for c in classes if sum(w.count for w in c.wants) > 1))


EMPTY_MIX = Mix()


def mix_of(classes: Mapping[cluster.PodClass, int],
           known: dict[cluster.PodClass, tuple[str, tuple[Want, ...]]] | None = None) -> Mix:
    """The demand mix of a cluster's pod class counts (``Cluster.pod_classes``).

    The ``MIX_CLASSES`` most common classes whose GPU needs migfit reads, each share rounded
    to 1/``MIX_UNITS`` of the pods counted (classes below half a unit are dropped), then
    renormalised; ties between equally common classes go to the smaller key, so the same
    counts give the same mix on every replica. ``known`` keeps each class's decoded needs
    between calls (``Index.mix``).
    """
    if known is None:
        known = {}
    return _mix_from(_mix_units(classes, known), known)


# The kept classes of a mix with their units (``mix_of``): equal lists give equal mixes.
_Units = list[tuple[int, cluster.PodClass]]


def _mix_units(classes: Mapping[cluster.PodClass, int],
               known: dict[cluster.PodClass, tuple[str, tuple[Want, ...]]]) -> _Units:
    """``mix_of``'s choice of classes and their units (before the mix is built)."""
    counted: list[tuple[int, str, cluster.PodClass]] = []
    total = 0
    for key, n in classes.items():
        entry = known.get(key)
        if entry is None:
            items, decision, _cpu, _mem = key
            entry = known[key] = (repr(key), wants_of(
                dict(items), {keys.DECISION: decision} if decision else {}))
        if entry[1] and n > 0:
            counted.append((-n, entry[0], key))
            total += n
    if not total:
        return []
    # (-count, repr) orders the classes (reprs of distinct classes differ): the keys
    # themselves are never compared.
    top = heapq.nsmallest(MIX_CLASSES, counted)
    kept = [(round(-m * MIX_UNITS / total), key) for m, _, key in top]
    return [t for t in kept if t[0] > 0]


def _mix_from(kept: _Units, known: Mapping[cluster.PodClass, tuple[str, tuple[Want, ...]]]
              ) -> Mix:
    if not kept:
        return EMPTY_MIX
    units = sum(u for u, _ in kept)
    return Mix.of([ClassShare(wants=known[key][1], cpu_milli=key[2], memory_bytes=key[3],
                              share=u / units) for u, key in kept])


class Index:
    """The extender's view of one ``cluster.Cluster``, kept current through its listener.

    Build one per cluster and pass it to filter, score and the server; call ``refresh()``
    before reading ``figures`` (``filter_nodes`` and ``score_nodes`` do).
    """

    def __init__(self, model: cluster.Cluster) -> None:
        self._cluster = model
        self._models: dict[str, profiles.GpuModel] = {m.id: m for m in model.catalog.models}
        self._figures: dict[str, NodeFigures] = {}
        self._dirty: set[str] = set(model.node_names())
        self._supply: Counter[ModelProfile] = Counter()
        self._demand: Counter[ModelProfile] = Counter()
        self._demand_any: Counter[profiles.ProfileName] = Counter()
        self._demand_generation = -1
        self._pending_wants: dict[str, tuple[records.PodRecord, tuple[Want, ...]]] = {}
        self._demand_total: Counter[profiles.ProfileName] = Counter()
        self._memos: dict[object, dict[str, Any]] = {}
        self._mix: Mix = EMPTY_MIX
        self._mix_generation = -1
        self._mix_known: dict[cluster.PodClass, tuple[str, tuple[Want, ...]]] = {}
        self._mix_units: _Units | None = None  # what ``_mix`` was last built from
        self._on_refresh: list[Callable[[Sequence[str]], None]] = []
        # pod (namespace/name) -> the nodes whose recommended re-layout is for it
        self._planned_for: dict[str, set[str]] = {}
        model.add_listener(self._dirty.add)

    @property
    def cluster(self) -> cluster.Cluster:
        """The cluster this index follows."""
        return self._cluster

    # ------------------------------------------------------------ nodes

    def add_refresh_listener(self, listener: Callable[[Sequence[str]], None]) -> None:
        """Call ``listener`` with the names whose figures ``refresh`` rebuilt or dropped.

        What keeps answers per node (``answers.Tables``) forgets exactly these nodes' entries:
        every cache event that can change what filter or score reads of a node dirties it.
        """
        self._on_refresh.append(listener)

    def refresh(self) -> None:
        """Rebuild the figures of nodes that changed since the last call: O(changed nodes)."""
        if not self._dirty:
            return
        # The listener holds this very set: copy and clear it in place, never rebind it.
        dirty = list(self._dirty)
        self._dirty.clear()
        for listener in self._on_refresh:
            listener(dirty)
        for name in dirty:
            old = self._figures.pop(name, None)
            if old is not None:
                self._account(old, -1)
                self._plan(name, old.planned_for, False)
            state = self._cluster.node(name)
            if state is None:
                for table in self._memos.values():  # a deleted node leaves no memo entry
                    table.pop(name, None)
                continue
            fig = _figures(state, self._models)
            self._figures[name] = fig
            self._account(fig, +1)
            self._plan(name, fig.planned_for, True)

    def _plan(self, name: str, pods: frozenset[str], add: bool) -> None:
        for pod in pods:
            nodes = self._planned_for.get(pod)
            if add:
                if nodes is None:
                    nodes = self._planned_for[pod] = set()
                nodes.add(name)
            elif nodes is not None:
                nodes.discard(name)
                if not nodes:
                    del self._planned_for[pod]

    def planned_for(self, pod: str) -> frozenset[str]:
        """The nodes whose recommended re-layout is for ``pod`` (namespace/name): it spoils
        none of them by landing there (``NodeFigures.planned``). Call ``refresh()`` first."""
        nodes = self._planned_for.get(pod)
        return frozenset(nodes) if nodes else frozenset()

    def _account(self, fig: NodeFigures, sign: int) -> None:
        if not fig.schedulable or not fig.model_key:
            return
        for p, _alloc, free in fig.advertised:
            if free:
                key = (fig.model_key, p)
                self._supply[key] += sign * free
                if self._supply[key] <= 0:
                    del self._supply[key]

    @property
    def figures(self) -> Mapping[str, NodeFigures]:
        """Figures by node name; call ``refresh()`` first."""
        return self._figures

    def supply(self, model_key: str, profile: str) -> int:
        """Free instances of ``profile`` on schedulable nodes of that model."""
        return self._supply.get((model_key, profiles.ProfileName(profile)), 0)

    # ------------------------------------------------------------ demand

    def _refresh_demand(self) -> None:
        """Recount demand after a change: only pods that changed since the last count are
        decoded and counted again (records are immutable, so identity means unchanged)."""
        if self._demand_generation == self.cluster.pending_generation:
            return
        previous = self._pending_wants
        known: dict[str, tuple[records.PodRecord, tuple[Want, ...]]] = {}
        for pod in self.cluster.pending_pods():
            cached = previous.pop(pod.uid, None)
            if cached is not None and cached[0] is pod:
                known[pod.uid] = cached
                continue
            if cached is not None:
                self._count(cached[1], -1)
            wants = wants_of(pod.requests, pod.annotations)
            known[pod.uid] = (pod, wants)
            self._count(wants, +1)
        for _pod, wants in previous.values():  # no longer pending
            self._count(wants, -1)
        self._pending_wants = known
        self._demand_generation = self.cluster.pending_generation

    def _count(self, wants: tuple[Want, ...], sign: int) -> None:
        for w in wants:
            self._demand_total[w.profile] += sign * w.count
            if w.models is None:
                self._demand_any[w.profile] += sign * w.count
            else:
                for m in w.models:
                    self._demand[(m, w.profile)] += sign * w.count

    def memo(self, key: object) -> dict[str, Any]:
        """A per-key scratch dict kept across calls (least recently used keys dropped).

        Filter and score keep each node's verdict for a request shape here, next to the
        figures it was computed from, so an unchanged node costs one lookup. Keys must be
        names of nodes in ``figures`` (never a name a request merely carries): an entry is
        dropped when its node is deleted.
        """
        table = self._memos.pop(key, None)
        if table is None:
            table = {}
            if len(self._memos) >= MEMO_KEYS:
                del self._memos[next(iter(self._memos))]
        self._memos[key] = table
        return table

    def memo_entries(self) -> int:
        """Entries in all memo tables (bounded by nodes × ``MEMO_KEYS``)."""
        return sum(len(t) for t in self._memos.values())

    def own_demand(self, uid: str) -> tuple[Want, ...] | None:
        """The wants of pending pod ``uid`` as counted in demand; None when it is not counted
        (``demand(..., exclude=uid)`` subtracts exactly these)."""
        self._refresh_demand()
        own = self._pending_wants.get(uid)
        return None if own is None else own[1]

    def demand(self, model_key: str, profile: str, *, exclude: str | None = None) -> int:
        """Instances of ``profile`` that pending pods (but ``exclude``, a uid) could use on
        ``model_key``."""
        self._refresh_demand()
        p = profiles.ProfileName(profile)
        total = self._demand.get((model_key, p), 0) + self._demand_any.get(p, 0)
        if exclude is not None:
            own = self._pending_wants.get(exclude)
            if own is not None:
                for w in own[1]:
                    if w.profile == p and w.allows(model_key):
                        total -= w.count
        return max(0, total)

    def mix(self) -> Mix:
        """The demand mix now (``mix_of`` the cluster's pod classes): the same object while
        it is unchanged, so that what is keyed on it stays put."""
        generation = self._cluster.classes_generation
        if generation != self._mix_generation:
            classes = self._cluster.pod_classes()
            if len(self._mix_known) > 4 * len(classes) + 64:  # forget classes long gone
                self._mix_known.clear()
            units = _mix_units(classes, self._mix_known)
            if units != self._mix_units:  # else the same mix (most count changes round away)
                mix = _mix_from(units, self._mix_known)
                if mix != self._mix:
                    self._mix = mix
                self._mix_units = units
            self._mix_generation = generation
        return self._mix

    def demand_profiles(self) -> dict[profiles.ProfileName, int]:
        """Instances per profile that pending pods ask for, any model (for the advisor and
        metrics)."""
        self._refresh_demand()
        return {p: n for p, n in self._demand_total.items() if n > 0}


@dataclasses.dataclass(frozen=True, slots=True)
class RelayoutChance:
    """Whether some valid layout of a model holds a profile that serves a request, and how
    many instances of it one GPU of the model holds at most (0 when none)."""

    possible: bool
    why_not: str
    per_gpu: int = 0


# Keyed on the model itself, not its id: a catalog override may give the same id other
# profiles or memory. Bounded: request sizes come from pods and are unbounded in number.
@functools.lru_cache(maxsize=4096)
def relayout_chance(
    model: profiles.GpuModel, profile: str, request_mib: int | None
) -> RelayoutChance:
    """Cached per (model, profile, request): valid layouts are computed, not listed.

    Of one instance: how many a node's GPUs can hold is the caller's (``per_gpu`` × GPUs).
    """
    if not model.has_profile(profile):
        return RelayoutChance(False, f"its GPU model {model.id} has no {profile} profile")
    if request_mib is not None and model.profile(profile).memory_mib < request_mib:
        return RelayoutChance(False, f"{profile} on {model.id} has "
                                     f"{model.profile(profile).memory_mib} MiB, "
                                     f"below the {request_mib} MiB requested")
    if any(lay.count(profile) for lay in layouts.of(model).all):
        return RelayoutChance(True, "", model.profile(profile).max_instances)
    return RelayoutChance(False, f"no valid layout of {model.id} holds {profile}")
