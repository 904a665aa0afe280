"""The MIG supply the webhook decides against: a snapshot of the cluster view, kept cheap to read.

The decision needs, per (GPU model, profile), whether schedulable nodes advertise it, how many
instances are free, the usable memory the node labels report, the device-plugin strategy of
those nodes and their ``nvidia.com/gpu.product`` values (for node affinity). Counts come from
the cluster's own incremental ``profile_stats``, less the instances pods already waiting ask
for (``Cluster.pending_claims``, ``set_aside``): a free instance a waiting pod will take is
not free for the next one (a pod that needs n instances on one node claims them only while
some node has n free); strategies and product labels only change
when a node changes, so they are re-aggregated only when some node's entry really changed,
never on a pod bind. For ``--choice usable`` the snapshot also answers whether a free
instance of an offer is on a node with given cpu and memory left (``SupplyTracker.fits``:
each node's room kept current as its pods change, the free instances read from the live
cluster's index when asked). For a pod whose nodeSelector, required node affinity or nodeName
limits its nodes, the same snapshot of those nodes alone (``SupplyTracker.within``: the sums
of the selections asked about lately kept current per node change). Pure: no I/O, no HTTP.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

from migfit import advisor, cluster, keys, layouts, profiles, records, requests

_MIG_SUFFIX = re.compile(r"-MIG-.*$", re.IGNORECASE)
Key = tuple[profiles.ModelId, profiles.ProfileName]
#: Whether a schedulable node with a free instance of an offer has this cpu (milli) and
#: memory (bytes) left (``SupplyTracker.fits``).
Fits = Callable[[Key, int, int], bool]
#: The supply of the nodes a pod may be placed on: its nodeSelector and required node
#: affinity, and its ``spec.nodeName`` when set, named in words for the messages
#: (``SupplyTracker.within``); None when no node with a GPU model migfit knows is one of them.
Within = Callable[[records.PodConstraints, str | None, str], "Supply | None"]
Holds = Callable[[Mapping[profiles.ProfileName, int], frozenset[profiles.ModelId], str],
                 tuple[bool, bool]]
_UNBOUNDED = 1 << 62  # a node that reports neither cpu nor memory
#: Constraints whose nodes' sums ``within`` keeps current: the workloads pinned lately. Each
#: holds a few counters per offer, never a list of nodes.
_SCOPES_KEPT = 32
#: Other selections whose waiting claims a pinned pod is charged where they must take from its
#: nodes (``_Scope._shared_claims``): each keeps two sums (its own, and its intersection with
#: the pod's), a quarter of ``_SCOPES_KEPT`` in all.
_APART_READ = _SCOPES_KEPT // 8
#: Affinity terms that two selections' intersection may hold (terms are ORed: it has the
#: product of their counts).
_TERMS_COMBINED = 16


@dataclasses.dataclass(frozen=True, slots=True)
class Offer:
    """One (model, profile) that some schedulable node advertises now."""

    nodes: int
    allocatable: int
    #: Free instances that no pending pod asks for: the cluster's free count less the
    #: instances of this profile that pods admitted earlier and still waiting ask for
    #: (``claimed``; ``set_aside``). Ten pods admitted in a burst against one free
    #: ``4g.40gb`` would otherwise all get ``4g.40gb``, and nine wait beside free larger ones.
    free: int
    label_mib: int | None  # least nvidia.com/mig-<p>.memory seen, when labelled
    strategies: frozenset[str]  # device-plugin strategies of the advertising nodes
    mig_products: tuple[str, ...]  # single-strategy product labels (…-MIG-<profile>)
    claimed: int = 0  # of the cluster's free instances, those set aside for waiting pods
    most: int = 0  # the most instances one node advertises: a pod needing n needs a node
    most_free: int = 0  # with n, and one with n free (before any is set aside)
    #: The device-plugin strategies ("mixed", "single") under which every advertising node
    #: advertises it by the renamed shared name (``….shared``): a pod must ask for that name
    #: there (``choice.renamed``).
    renamed: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True, slots=True)
class Supply:
    """What the decision reads. ``available`` is False without a (synced) cluster view."""

    available: bool
    models: tuple[profiles.GpuModel, ...]  # present in the cluster (or configured)
    offers: Mapping[Key, Offer]
    products: Mapping[profiles.ModelId, tuple[str, ...]]  # base product labels per model
    # (nvidia.com/gpu.product without a single-strategy -MIG-<profile> suffix)
    strategy: Mapping[profiles.ModelId, requests.Strategy]  # most common strategy per model
    #: Changes exactly when the content above changes (a tracker's count of distinct
    #: snapshots; 0 for a catalog's): what a memo of decisions keys on.
    generation: int = 0
    #: Whether a free instance of an offer is where given cpu and memory are left, read
    #: from the live cluster when asked (``--choice usable`` only; None: not known). Not part
    #: of the content: it moves with every pod's cpu and memory, so decisions that read it
    #: are not memoised.
    fits: Fits | None = dataclasses.field(default=None, compare=False)
    #: The same cluster seen from the nodes a pod may be placed on (None: not known, as
    #: without a cluster view). Not part of the content either: what one pod's nodes hold
    #: can change while the cluster's sums stay, so such decisions are not memoised.
    within: Within | None = dataclasses.field(default=None, compare=False)
    #: Whether one node, of the given models under the given strategy, advertises all of the
    #: instances (per profile) and whether one has them free, read node by node (None: not
    #: known). Not part of the content either, so decisions that read it are not memoised.
    holds: Holds | None = dataclasses.field(default=None, compare=False)
    #: Whether a node of this name is in the view, GPU or not (None: not known).
    named: Callable[[str], bool] | None = dataclasses.field(default=None, compare=False)
    #: Where the offers are: "" for every node; else the nodes a pod may be placed on, in
    #: words for the messages ("the nodes the pod's nodeSelector selects").
    scope: str = ""
    #: The most GPUs on one schedulable node, per GPU model and device-plugin kind
    #: ("single" or "mixed"): a pod's instances on one node cannot need more (absent: not
    #: known, no bound).
    gpus: Mapping[tuple[profiles.ModelId, str], int] = dataclasses.field(
        default_factory=dict)

    def usable(self, key: Key, cpu_milli: int, memory_bytes: int) -> bool:
        """Whether a free instance of ``key`` is on a node with ``cpu_milli`` and
        ``memory_bytes`` left (without ``fits``: whether one is free at all)."""
        offer = self.offers.get(key)
        if offer is None or offer.free <= 0:
            return False
        if self.fits is None:
            return True
        return self.fits(key, cpu_milli, memory_bytes)

    def known(self, name: str) -> bool:
        """Whether the view holds a node ``name`` (False without a view)."""
        return self.named is not None and self.named(name)

    def same_content(self, other: Supply) -> bool:
        """Equal in everything the decision reads (the generation aside)."""
        return (self.available == other.available and self.models == other.models
                and self.offers == other.offers and self.products == other.products
                and self.strategy == other.strategy and self.scope == other.scope
                and self.gpus == other.gpus)

    @classmethod
    def from_catalog(cls, models: tuple[profiles.GpuModel, ...]) -> Supply:
        """No cluster view: the configured models, nothing advertised, no product labels."""
        return cls(available=False, models=models, offers={}, products={}, strategy={})


@dataclasses.dataclass(frozen=True, slots=True)
class _NodeEntry:
    model: profiles.ModelId
    strategy: str
    product: str
    advertised: frozenset[profiles.ProfileName]
    #: physical GPUs (``gpus_of``); 0 while cordoned; None: not known
    gpus: int | None
    #: of ``advertised``, those under the renamed shared name (``….shared``)
    renamed: frozenset[profiles.ProfileName] = frozenset()


def gpus_of(node: records.NodeRecord, catalog: profiles.Catalog) -> int | None:
    """The physical GPUs of a MIG node, when known: its nvidia.com/gpu.count under the mixed
    strategy (under single GFD counts MIG devices, and migfit infers the GPUs from them,
    a lower bound), never fewer than its instances take (replicas of time-slicing aside);
    None when the node has no such label or runs the single strategy."""
    if node.model is None or node.strategy == "single" or node.gpu_count <= 0:
        return None
    instances = {p: n // max(node.replicas.get(p, 1), 1) for p, n in node.capacity.items()}
    return max(node.gpu_count, layouts.gpus_at_least(catalog.get(node.model), instances))


def _entry(state: records.NodeState | None, catalog: profiles.Catalog) -> _NodeEntry | None:
    if state is None or state.node.model is None:
        return None
    node = state.node
    model: profiles.ModelId = state.node.model
    gpus = gpus_of(node, catalog)
    advertised = frozenset(p for p, n in node.allocatable.items()
                           if n > 0 and not node.unschedulable)
    return _NodeEntry(
        model=model,
        strategy=node.strategy or "none",
        product=node.labels.get(keys.LABEL_PRODUCT, ""),
        advertised=advertised,
        gpus=0 if node.unschedulable and gpus is not None else gpus,
        renamed=node.renamed & advertised if node.renamed else frozenset(),
    )


class SupplyTracker:
    """Builds ``Supply`` snapshots from a live ``Cluster``, cached per cluster generation.

    A cluster change that leaves the snapshot's content as it was (a status update, a
    pending pod whose profile has no free instance left to claim) gives back the same
    snapshot object, so its ``generation`` moves only when what the decision reads moves
    (a pending pod that claims a free instance does move it).
    """

    def __init__(self, view: cluster.Cluster) -> None:
        self._cluster = view
        self._entries: dict[str, _NodeEntry] = {}
        self._pending: set[str] = set(view.node_names())
        view.add_listener(self._changed)
        self._generation = -1
        self._version = 0  # distinct snapshots so far: Supply.generation
        self._snapshot: Supply | None = None
        self._stale = True
        self._products: dict[profiles.ModelId, tuple[str, ...]] = {}
        self._strategy: dict[profiles.ModelId, requests.Strategy] = {}
        self._strategies: dict[Key, frozenset[str]] = {}
        self._mig_products: dict[Key, tuple[str, ...]] = {}
        self._gpus: dict[tuple[profiles.ModelId, str], int] = {}
        self._renamed: dict[Key, frozenset[str]] = {}
        # Per node: its GPU model and the cpu and memory left (``advisor.host_room``), kept
        # current from the nodes the cluster reports changed (a pod bound or gone included).
        # Kept only once ``fits`` has been asked (``usable``): under the other choices the
        # names of changed nodes (autoscaled ones come and go) are not collected at all.
        self._rooms: dict[str, tuple[profiles.ModelId | None, int, int]] = {}
        self._rooms_stale: set[str] = set()
        self._rooms_kept = False
        # ``within``: what each node with a known GPU model adds to the sums of a set of
        # nodes, and the sums of the constraints asked about lately. Kept only once asked.
        self._shares: dict[str, _Share] = {}
        self._share_stale: set[str] = set()
        self._shares_kept = False
        self._scopes: OrderedDict[records.PodConstraints, _Scope] = OrderedDict()

    def fits(self, key: Key, cpu_milli: int, memory_bytes: int, *,
             among: Callable[[str], bool] | None = None, only: str | None = None) -> bool:
        """``Supply.fits``: whether a schedulable node of ``key``'s model with a free instance
        of its profile (one ``among`` select, when given; the node ``only``, cordoned or not,
        when given: a pod's spec.nodeName) has ``cpu_milli`` and ``memory_bytes`` left, as the
        cluster is now. The rooms of the nodes changed since the last call are recomputed
        first (each O(pods on it)); then the nodes with a free instance are scanned until one
        fits."""
        view = self._cluster
        if not self._rooms_kept:
            self._rooms_kept = True
            self._rooms_stale = set(view.node_names())
        if self._rooms_stale:
            stale, self._rooms_stale = self._rooms_stale, set()
            for name in stale:
                state = view.node(name)
                if state is None:
                    self._rooms.pop(name, None)
                    continue
                room = advisor.host_room(view, state.node)
                cpu, mem = room if room is not None else (_UNBOUNDED, _UNBOUNDED)
                self._rooms[name] = (state.node.model, cpu, mem)
        model = key[0]
        rooms = self._rooms
        if only is not None:
            state, r = view.node(only), rooms.get(only)
            return (state is not None and r is not None and state.free.get(key[1], 0) > 0
                    and r[0] == model and r[1] >= cpu_milli and r[2] >= memory_bytes)
        for name in view.free_nodes(key[1]):
            r = rooms.get(name)
            if among is not None and r is not None and not among(name):
                continue
            if r is not None and r[0] == model and r[1] >= cpu_milli and r[2] >= memory_bytes:
                return True
        return False

    def within(self, constraints: records.PodConstraints, node_name: str | None,
               scope: str) -> Supply | None:
        """``Supply.within``: the supply of the nodes with a known GPU model that
        ``constraints`` select (nodeSelector and required node affinity; tolerations are not
        read: the toleration of a GPU taint is often added only once the pod asks for the
        GPU resource) and, when ``node_name`` is set, that node alone. None when no such
        node is in the view; the snapshot itself when every node is; else one whose ``scope``
        is ``scope`` (the nodes in words).

        The sums of the last ``_SCOPES_KEPT`` constraints asked about are kept current from
        the nodes the cluster reports changed (each change O(constraints kept)), so a pinned
        pod costs about what any pod does; constraints not asked about lately are counted
        afresh (O(nodes))."""
        view = self._cluster
        if node_name is not None:
            one = _share(view.node(node_name), view.catalog, cordoned=True)
            alone = _Scope(constraints, node_name)
            if one is None or not alone.selects(one.record):
                return None
            alone.add(one, 1)
            return alone.supply(view, scope, self)
        kept = self._kept(constraints)
        if kept.nodes == 0:
            return None
        if kept.nodes == len(self._shares):
            return self.supply()
        return kept.supply(view, scope, self)

    def holds(self, need: Mapping[profiles.ProfileName, int],
              models: frozenset[profiles.ModelId], kind: str, *,
              scope: _Scope | None = None) -> tuple[bool, bool]:
        """``Supply.holds``: whether one node of ``models`` under ``kind`` (one of
        ``scope``'s, when given) advertises ``need`` (instances per profile), and whether one
        has them free. Free: the nodes the cluster's index has with a free instance of the
        profile fewest nodes have free; advertised: every node, when none has them free."""
        view = self._cluster
        single = kind == "single"

        def serves(state: records.NodeState | None) -> bool:
            if state is None or state.node.model not in models:
                return False
            record = state.node
            if scope is not None and not scope.selects(record):
                return False
            return ((record.strategy == "single") == single
                    and (not record.unschedulable or (scope is not None
                                                      and scope.node_name is not None)))

        if scope is not None and scope.node_name is not None:  # that node, cordoned or not
            one = view.node(scope.node_name)
            if not serves(one) or one is None:
                return False, False
            return (all(one.node.allocatable.get(p, 0) >= n for p, n in need.items()),
                    all(one.free.get(p, 0) >= n for p, n in need.items()))
        rarest = min(need, key=lambda p: len(view.free_nodes(p)))
        for name in view.free_nodes(rarest):
            state = view.node(name)
            if serves(state) and state is not None and all(
                    state.free.get(p, 0) >= n for p, n in need.items()):
                return True, True
        for one in view.nodes():
            if serves(one) and one is not None and all(
                    one.node.allocatable.get(p, 0) >= n for p, n in need.items()):
                return True, False
        return False, False

    def free_within(self, constraints: records.PodConstraints,
                    profile: profiles.ProfileName) -> int:
        """Free instances of ``profile`` (any model) on the schedulable nodes with a known
        GPU model that ``constraints`` select, from their kept sums (``_kept``)."""
        return self._kept(constraints).free_of(profile)

    def _named(self, name: str) -> bool:
        return self._cluster.node(name) is not None

    def _kept(self, constraints: records.PodConstraints) -> _Scope:
        """The sums of the nodes ``constraints`` select, current (kept from now on)."""
        self._sync()
        kept = self._scopes.get(constraints)
        if kept is None:
            kept = _Scope(constraints)
            for share in self._shares.values():
                if kept.selects(share.record):
                    kept.add(share, 1)
            if len(self._scopes) >= _SCOPES_KEPT:
                self._scopes.popitem(last=False)
            self._scopes[constraints] = kept
        else:
            self._scopes.move_to_end(constraints)
        return kept

    def _sync(self) -> None:
        """Every node's share as the cluster is now, and the kept scopes' sums with it."""
        view = self._cluster
        if not self._shares_kept:
            self._shares_kept = True
            self._share_stale = set(view.node_names())
        if not self._share_stale:
            return
        stale, self._share_stale = self._share_stale, set()
        for name in stale:
            old = self._shares.pop(name, None)
            new = _share(view.node(name), view.catalog)
            if new is not None:
                self._shares[name] = new
            for kept in self._scopes.values():
                if old is not None and kept.selects(old.record):
                    kept.add(old, -1)
                if new is not None and kept.selects(new.record):
                    kept.add(new, 1)

    def most_gpus(self) -> dict[tuple[profiles.ModelId, str], int]:
        """``Supply.gpus`` of the whole cluster, as of the last snapshot."""
        return dict(self._gpus)

    def rooms_kept(self) -> int:
        """How many nodes' rooms the tracker holds or has to recompute."""
        return len(self._rooms.keys() | self._rooms_stale)

    def _changed(self, name: str) -> None:
        self._pending.add(name)
        if self._shares_kept:
            self._share_stale.add(name)
        if self._rooms_kept:
            self._rooms_stale.add(name)

    def supply(self) -> Supply:
        """The current snapshot; a few dict operations when nothing changed."""
        view = self._cluster
        if self._snapshot is not None and view.generation == self._generation:
            return self._snapshot
        self._absorb()
        offers: dict[Key, Offer] = {}
        stats_by_key = {k: s for k, s in view.profile_stats().items()
                        if s.nodes > 0 and s.allocatable > 0}
        claims = view.pending_claims()
        claimed = (set_aside({k: s.free for k, s in stats_by_key.items()}, claims)
                   if claims else {})
        for key, stats in stats_by_key.items():
            taken = claimed.get(key, 0)
            offers[key] = Offer(
                nodes=stats.nodes,
                allocatable=stats.allocatable,
                free=stats.free - taken,
                label_mib=stats.memory_mib,
                strategies=self._strategies.get(key, frozenset({"mixed"})),
                mig_products=self._mig_products.get(key, ()),
                claimed=taken,
                most=stats.most,
                most_free=stats.most_free,
                renamed=self._renamed.get(key, frozenset()),
            )
        fresh = Supply(
            available=bool(view.synced),
            models=tuple(view.models_present()),
            offers=offers,
            products=dict(self._products),
            strategy=dict(self._strategy),
            gpus=dict(self._gpus),
        )
        self._generation = view.generation
        if self._snapshot is None or not fresh.same_content(self._snapshot):
            self._version += 1
            self._snapshot = dataclasses.replace(fresh, generation=self._version,
                                                 fits=self.fits, within=self.within,
                                                 named=self._named, holds=self.holds)
        return self._snapshot

    def _absorb(self) -> None:
        pending, self._pending = self._pending, set()
        for name in pending:
            entry = _entry(self._cluster.node(name), self._cluster.catalog)
            old = self._entries.get(name)
            if entry == old:
                continue
            self._stale = True
            if entry is None:
                self._entries.pop(name, None)
            else:
                self._entries[name] = entry
        if self._stale:
            (self._products, self._strategy, self._strategies,
             self._mig_products, self._gpus, self._renamed) = _aggregate(self._entries.values())
            self._stale = False


def _aggregate(entries: Iterable[_NodeEntry]) -> tuple[
        dict[profiles.ModelId, tuple[str, ...]], dict[profiles.ModelId, requests.Strategy],
        dict[Key, frozenset[str]], dict[Key, tuple[str, ...]],
        dict[tuple[profiles.ModelId, str], int], dict[Key, frozenset[str]]]:
    """Of the nodes' entries: the base product labels and the most common strategy per
    model, the strategies and single-strategy product labels per offer, the most GPUs
    on one schedulable node per model and kind (``Supply.gpus``), and per offer the kinds in
    which every advertising node renames it (``Offer.renamed``)."""
    advertising: Counter[tuple[Key, str]] = Counter()
    renaming: Counter[tuple[Key, str]] = Counter()
    gpus: dict[tuple[profiles.ModelId, str], int] = {}
    unknown: set[tuple[profiles.ModelId, str]] = set()
    products: dict[profiles.ModelId, set[str]] = {}
    counts: dict[profiles.ModelId, Counter[str]] = {}
    strategies: dict[Key, set[str]] = {}
    mig_products: dict[Key, set[str]] = {}
    for entry in entries:
        counts.setdefault(entry.model, Counter())[entry.strategy] += 1
        kind = (entry.model, "single" if entry.strategy == "single" else "mixed")
        if entry.gpus is None:
            unknown.add(kind)  # one node of the kind not known: no bound for the kind
        elif entry.gpus:
            gpus[kind] = max(gpus.get(kind, 0), entry.gpus)
        if entry.product:
            # Base names (without a single-strategy -MIG-<profile> suffix) of every node.
            products.setdefault(entry.model, set()).add(_MIG_SUFFIX.sub("", entry.product))
        for p in entry.advertised:
            key = (entry.model, p)
            plugin = kind[1]
            advertising[(key, plugin)] += 1
            if p in entry.renamed:
                renaming[(key, plugin)] += 1
            strategies.setdefault(key, set()).add(plugin)
            if entry.strategy == "single" and entry.product:
                mig_products.setdefault(key, set()).add(entry.product)
    return ({m: tuple(sorted(v)) for m, v in products.items()},
            {m: _majority(c) for m, c in counts.items()},
            {k: frozenset(v) for k, v in strategies.items()},
            {k: tuple(sorted(v)) for k, v in mig_products.items()},
            {k: n for k, n in gpus.items() if k not in unknown},
            _renamed_kinds(renaming, advertising))


@dataclasses.dataclass(frozen=True, slots=True)
class _Share:
    """What one node with a known GPU model adds to the sums of a set of nodes."""

    record: records.NodeRecord
    entry: _NodeEntry
    # (offer, allocatable, free, label MiB) of what it advertises while schedulable
    offers: tuple[tuple[Key, int, int, int | None], ...]


def _share(state: records.NodeState | None, catalog: profiles.Catalog, *,
           cordoned: bool = False) -> _Share | None:
    """What ``state`` adds; a cordoned node adds no offer unless ``cordoned`` (a pod that
    names it in spec.nodeName skips the scheduler, and cordoning with it)."""
    entry = _entry(state, catalog)
    if state is None or entry is None:
        return None
    record = state.node
    if cordoned and record.unschedulable:
        entry = dataclasses.replace(entry, advertised=frozenset(
            p for p, n in record.allocatable.items() if n > 0))
    offers = () if record.unschedulable and not cordoned else tuple(
        ((entry.model, p), alloc, state.free.get(p, 0), record.memory_mib.get(p))
        for p, alloc in record.allocatable.items() if alloc > 0)
    return _Share(record=record, entry=entry, offers=offers)


class _Scope:
    """The sums of the nodes some constraints select, as ``SupplyTracker`` keeps the whole
    cluster's: per offer, and what the strategy and product affinity read."""

    def __init__(self, constraints: records.PodConstraints, node_name: str | None = None
                 ) -> None:
        self.constraints = constraints
        self.node_name = node_name
        self.nodes = 0
        self._offers: dict[Key, list[int]] = {}  # nodes, allocatable, free
        self._memory: dict[Key, Counter[int]] = {}
        self._models: Counter[profiles.ModelId] = Counter()
        self._node_strategies: Counter[tuple[profiles.ModelId, str]] = Counter()
        self._products: Counter[tuple[profiles.ModelId, str]] = Counter()
        self._kinds: Counter[tuple[Key, str]] = Counter()
        self._mig_products: Counter[tuple[Key, str]] = Counter()
        # per offer: how many nodes advertise, and have free, each count (``Offer.most``)
        self._sizes: dict[Key, tuple[Counter[int], Counter[int]]] = {}
        self._renamed: Counter[tuple[Key, str]] = Counter()  # nodes that rename, per kind

    def free_of(self, profile: profiles.ProfileName) -> int:
        """Free instances of ``profile`` on these nodes, any model."""
        return sum(sums[2] for key, sums in self._offers.items() if key[1] == profile)

    def selects(self, record: records.NodeRecord) -> bool:
        return ((self.node_name is None or record.name == self.node_name)
                and advisor.unselected(record, self.constraints) is None)

    def has_node(self, view: cluster.Cluster, name: str) -> bool:
        """Whether the node ``name`` of ``view`` is one of these nodes."""
        state = view.node(name)
        return state is not None and self.selects(state.node)

    def add(self, share: _Share, sign: int) -> None:
        """Count ``share`` in (``sign`` 1) or out (-1)."""
        entry = share.entry
        self.nodes += sign
        self._models[entry.model] += sign
        self._node_strategies[(entry.model, entry.strategy)] += sign
        if entry.product:
            self._products[(entry.model, _MIG_SUFFIX.sub("", entry.product))] += sign
        kind = "single" if entry.strategy == "single" else "mixed"
        for key, alloc, free, mib in share.offers:
            sums = self._offers.setdefault(key, [0, 0, 0])
            sums[0] += sign
            sums[1] += sign * alloc
            sums[2] += sign * free
            if sums[0] <= 0:
                del self._offers[key]
            if mib is not None:
                seen = self._memory.setdefault(key, Counter())
                seen[mib] += sign
                if seen[mib] <= 0:
                    del seen[mib]
                    if not seen:
                        del self._memory[key]
            self._kinds[(key, kind)] += sign
            sizes = self._sizes.setdefault(key, (Counter(), Counter()))
            for counter, count in zip(sizes, (alloc, free), strict=True):
                counter[count] += sign
                if counter[count] <= 0:
                    del counter[count]
            if entry.strategy == "single" and entry.product:
                self._mig_products[(key, entry.product)] += sign
            if key[1] in entry.renamed:
                self._renamed[(key, kind)] += sign

    def _gpus(self, view: cluster.Cluster, tracker: SupplyTracker
              ) -> dict[tuple[profiles.ModelId, str], int]:
        """``Supply.gpus`` of these nodes: the named node's own (cordoned or not), else the
        whole cluster's (a looser bound)."""
        if self.node_name is None:
            return tracker.most_gpus()
        state = view.node(self.node_name)
        if state is None or state.node.model is None:
            return {}
        n = gpus_of(state.node, view.catalog)
        kind = "single" if state.node.strategy == "single" else "mixed"
        return {} if n is None else {(state.node.model, kind): n}

    def _shared_claims(self, view: cluster.Cluster, tracker: SupplyTracker,
                       claims: Mapping[profiles.ProfileName, int]
                       ) -> Mapping[profiles.ProfileName, int]:
        """``claims`` plus, of each other selection's waiting claims
        (``Cluster.claims_apart``), those that its free instances outside these nodes cannot
        serve, as far as these nodes have them free: at least that many of its pods take
        instances here (a lower bound: the rest are taken to go elsewhere, or to wait for
        instances yet to be freed). The free counts are the kept sums of that selection and
        of its intersection with these nodes (``SupplyTracker.free_within``): O(1) per
        profile once kept. Only the ``_APART_READ`` selections with the most claims are
        read (each keeps two sums current); the rest are taken to wait elsewhere."""
        apart = view.claims_apart(self.constraints)
        if not apart:
            return claims
        out = Counter(claims)
        named = None if self.node_name is None else view.node(self.node_name)
        apart.sort(key=lambda kc: -sum(kc[1].values()))
        for key, theirs in apart[:_APART_READ]:
            both = _intersection(self.constraints, key)
            if both is None:
                continue  # too many affinity terms to combine: taken to wait elsewhere
            there = named is not None and advisor.unselected(named.node, key) is None
            for profile, wanted in theirs.items():
                if self.node_name is None:
                    inside = tracker.free_within(both, profile)
                else:  # these nodes are that one node: free there if it is schedulable
                    inside = view.free_nodes(profile).get(self.node_name, 0) if there else 0
                if inside <= 0:
                    continue  # none of its free instances is here: nothing to charge
                outside = tracker.free_within(key, profile) - inside
                if wanted > outside:
                    out[profile] += min(wanted - outside, inside)
        return out

    def supply(self, view: cluster.Cluster, scope: str, tracker: SupplyTracker) -> Supply:
        """A snapshot of these nodes alone, built as ``SupplyTracker.supply`` builds the
        whole one; O(offers)."""
        products: dict[profiles.ModelId, set[str]] = {}
        for (model, product), n in self._products.items():
            if n > 0:
                products.setdefault(model, set()).add(product)
        counts: dict[profiles.ModelId, Counter[str]] = {}
        for (model, strategy), n in self._node_strategies.items():
            if n > 0:
                counts.setdefault(model, Counter())[strategy] = n
        kinds: dict[Key, set[str]] = {}
        for (key, kind), n in self._kinds.items():
            if n > 0:
                kinds.setdefault(key, set()).add(kind)
        mig: dict[Key, set[str]] = {}
        for (key, product), n in self._mig_products.items():
            if n > 0:
                mig.setdefault(key, set()).add(product)
        # The claims of waiting pods that may go anywhere, or where this pod may: a burst of
        # one workload shares its constraints (``Cluster.claims_beside``); and of those
        # limited to other nodes, what the nodes shared with this pod's must give them.
        claims = self._shared_claims(view, tracker, view.claims_beside(self.constraints))
        claimed = (set_aside({k: v[2] for k, v in self._offers.items()}, claims)
                   if claims else {})
        offers = {key: Offer(nodes=n, allocatable=alloc, free=free - claimed.get(key, 0),
                             label_mib=min(self._memory[key]) if key in self._memory else None,
                             strategies=frozenset(kinds.get(key, {"mixed"})),
                             mig_products=tuple(sorted(mig.get(key, ()))),
                             claimed=claimed.get(key, 0),
                             most=max(self._sizes[key][0], default=0),
                             most_free=max(self._sizes[key][1], default=0),
                             renamed=frozenset(
                                 k for k in ("mixed", "single")
                                 if 0 < self._renamed[(key, k)] == self._kinds[(key, k)]))
                  for key, (n, alloc, free) in self._offers.items()}
        def holds(name: str) -> bool:
            return self.has_node(view, name)

        def fits(key: Key, cpu_milli: int, memory_bytes: int) -> bool:
            return tracker.fits(key, cpu_milli, memory_bytes, among=holds,
                                only=self.node_name)

        def one_node(need: Mapping[profiles.ProfileName, int],
                     models: frozenset[profiles.ModelId], kind: str) -> tuple[bool, bool]:
            return tracker.holds(need, models, kind, scope=self)

        return Supply(available=bool(view.synced),
                      models=tuple(view.catalog.get(m) for m, n in sorted(
                          self._models.items(), key=lambda mn: (-mn[1], mn[0])) if n > 0),
                      offers=offers,
                      products={m: tuple(sorted(v)) for m, v in products.items()},
                      strategy={m: _majority(c) for m, c in counts.items()},
                      generation=-1, fits=fits, holds=one_node, scope=scope,
                      gpus=self._gpus(view, tracker))


def _intersection(a: records.PodConstraints, b: records.PodConstraints
                  ) -> records.PodConstraints | None:
    """Constraints that select the nodes both ``a`` and ``b`` select (tolerations dropped),
    or None when their affinity terms would combine into more than ``_TERMS_COMBINED``."""
    selector = tuple(sorted(set(a.node_selector) | set(b.node_selector)))
    if a.affinity is None or b.affinity is None:
        affinity = a.affinity if b.affinity is None else b.affinity
    elif len(a.affinity) * len(b.affinity) > _TERMS_COMBINED:
        return None
    else:  # (t1 or t2) and (u1 or u2) = each ti and uj
        affinity = tuple(records.SelectorTerm(expressions=t.expressions + u.expressions,
                                              fields=t.fields + u.fields)
                         for t in a.affinity for u in b.affinity)
    return records.PodConstraints(node_selector=selector, affinity=affinity)


def _renamed_kinds(renaming: Counter[tuple[Key, str]], advertising: Counter[tuple[Key, str]]
                   ) -> dict[Key, frozenset[str]]:
    """Per offer, the kinds in which every node that advertises it renames it."""
    out: dict[Key, set[str]] = {}
    for (key, kind), n in renaming.items():
        if 0 < n == advertising[(key, kind)]:
            out.setdefault(key, set()).add(kind)
    return {k: frozenset(v) for k, v in out.items()}


def set_aside(free: Mapping[Key, int], claims: Mapping[profiles.ProfileName, int]
              ) -> dict[Key, int]:
    """How many of each offer's ``free`` instances the pending pods' ``claims`` (instances
    per profile, any model: ``Cluster.pending_claims``) set aside. A profile's claims go to
    its models' offers, most free first (then by model id), never more than an offer has:
    exact on a cluster of one GPU model; where a profile is on several, a pod restricted to
    one model may be charged to another (the decision record's models are not read)."""
    out: dict[Key, int] = {}
    for profile, wanted in claims.items():
        if wanted <= 0:
            continue
        keys_ = sorted((k for k in free if k[1] == profile and free[k] > 0),
                       key=lambda k: (-free[k], k[0]))
        for key in keys_:
            take = min(free[key], wanted)
            out[key] = take
            wanted -= take
            if wanted <= 0:
                break
    return out


def _majority(counts: Counter[str]) -> Literal["mixed", "single"]:
    single = counts.get("single", 0)
    return "single" if single > sum(counts.values()) - single else "mixed"
