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
cluster's index when asked). Pure: no I/O, no HTTP.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Literal

from migfit import advisor, cluster, keys, profiles, records, requests

_MIG_SUFFIX = re.compile(r"-MIG-.*$", re.IGNORECASE)
Key = tuple[profiles.ModelId, profiles.ProfileName]
#: Whether a schedulable node with a free instance of an offer has this cpu (milli) and
#: memory (bytes) left (``SupplyTracker.fits``).
Fits = Callable[[Key, int, int], bool]
_UNBOUNDED = 1 << 62  # a node that reports neither cpu nor memory


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

    def usable(self, key: Key, cpu_milli: int, memory_bytes: int) -> bool:
        """Whether a free instance of ``key`` is on a node with ``cpu_milli`` and
        ``memory_bytes`` left (without ``fits``: whether one is free at all)."""
        offer = self.offers.get(key)
        if offer is None or offer.free <= 0:
            return False
        if self.fits is None:
            return True
        return self.fits(key, cpu_milli, memory_bytes)

    def same_content(self, other: Supply) -> bool:
        """Equal in everything the decision reads (the generation aside)."""
        return (self.available == other.available and self.models == other.models
                and self.offers == other.offers and self.products == other.products
                and self.strategy == other.strategy)

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


def _entry(state: records.NodeState | None) -> _NodeEntry | None:
    if state is None or state.node.model is None:
        return None
    node = state.node
    model: profiles.ModelId = state.node.model
    return _NodeEntry(
        model=model,
        strategy=node.strategy or "none",
        product=node.labels.get(keys.LABEL_PRODUCT, ""),
        advertised=frozenset(p for p, n in node.allocatable.items()
                             if n > 0 and not node.unschedulable),
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
        # Per node: its GPU model and the cpu and memory left (``advisor.host_room``), kept
        # current from the nodes the cluster reports changed (a pod bound or gone included).
        # Kept only once ``fits`` has been asked (``usable``): under the other choices the
        # names of changed nodes (autoscaled ones come and go) are not collected at all.
        self._rooms: dict[str, tuple[profiles.ModelId | None, int, int]] = {}
        self._rooms_stale: set[str] = set()
        self._rooms_kept = False

    def fits(self, key: Key, cpu_milli: int, memory_bytes: int) -> bool:
        """``Supply.fits``: whether a schedulable node of ``key``'s model with a free instance
        of its profile has ``cpu_milli`` and ``memory_bytes`` left, as the cluster is now.
        The rooms of the nodes changed since the last call are recomputed first (each
        O(pods on it)); then the nodes with a free instance are scanned until one fits."""
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
        for name in view.free_nodes(key[1]):
            r = rooms.get(name)
            if r is not None and r[0] == model and r[1] >= cpu_milli and r[2] >= memory_bytes:
                return True
        return False

    def rooms_kept(self) -> int:
        """How many nodes' rooms the tracker holds or has to recompute."""
        return len(self._rooms.keys() | self._rooms_stale)

    def _changed(self, name: str) -> None:
        self._pending.add(name)
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
            )
        fresh = Supply(
            available=bool(view.synced),
            models=tuple(view.models_present()),
            offers=offers,
            products=dict(self._products),
            strategy=dict(self._strategy),
        )
        self._generation = view.generation
        if self._snapshot is None or not fresh.same_content(self._snapshot):
            self._version += 1
            self._snapshot = dataclasses.replace(fresh, generation=self._version,
                                                 fits=self.fits)
        return self._snapshot

    def _absorb(self) -> None:
        pending, self._pending = self._pending, set()
        for name in pending:
            entry = _entry(self._cluster.node(name))
            old = self._entries.get(name)
            if entry == old:
                continue
            self._stale = True
            if entry is None:
                self._entries.pop(name, None)
            else:
                self._entries[name] = entry
        if self._stale:
            self._aggregate()
            self._stale = False

    def _aggregate(self) -> None:
        products: dict[profiles.ModelId, set[str]] = {}
        counts: dict[profiles.ModelId, Counter[str]] = {}
        strategies: dict[Key, set[str]] = {}
        mig_products: dict[Key, set[str]] = {}
        for entry in self._entries.values():
            counts.setdefault(entry.model, Counter())[entry.strategy] += 1
            if entry.product:
                # Base names (without a single-strategy -MIG-<profile> suffix) of every node.
                products.setdefault(entry.model, set()).add(_MIG_SUFFIX.sub("", entry.product))
            for p in entry.advertised:
                key = (entry.model, p)
                strategies.setdefault(key, set()).add(
                    "single" if entry.strategy == "single" else "mixed")
                if entry.strategy == "single" and entry.product:
                    mig_products.setdefault(key, set()).add(entry.product)
        self._products = {m: tuple(sorted(v)) for m, v in products.items()}
        self._strategy = {m: _majority(c) for m, c in counts.items()}
        self._strategies = {k: frozenset(v) for k, v in strategies.items()}
        self._mig_products = {k: tuple(sorted(v)) for k, v in mig_products.items()}


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
