"""The cluster's MIG view: the store of node and pod records, instance accounting and indexes.

One answer shared by the webhook, the extender, the advisor and the simulator: which MIG
instances each node advertises and how many are free right now. Whole API objects are never
kept; each change updates the affected node's state and the per-profile indexes
incrementally, so a request reads them with a few dict lookups. Objects arrive as plain JSON
dicts from a source (the file source or the Kubernetes watch), through ``replace``/``apply``.

The records live in ``migfit.records``, their decoding in ``migfit.decoding`` (GPU labels in
``migfit.gpulabels``), the label and annotation keys in ``migfit.keys``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

from migfit import errors, fields, keys, profiles
from migfit.decoding import RequestMaps, host_use, node_from_api, pod_from_api, uid_of
from migfit.records import (
    HostUse,
    NodeRecord,
    NodeState,
    PodConstraints,
    PodRecord,
    ProfileStats,
    relayout_under_way,
)

log = logging.getLogger(__name__)

Kind = Literal["Node", "Pod"]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]



Listener = Callable[[str], None]  # called with the name of a node whose state changed


class Cluster:
    """The compact MIG view of a cluster, kept current by a source (implements its Sink)."""

    def __init__(self, catalog: profiles.Catalog | None = None) -> None:
        self.catalog = catalog or profiles.builtin()
        self._nodes: dict[str, NodeRecord] = {}
        self._states: dict[str, NodeState] = {}
        self._pods: dict[str, PodRecord] = {}
        # (namespace, name) -> uids, latest last: a pod re-created under its name (StatefulSet)
        # may briefly coexist with the old one whose deletion has not arrived yet.
        self._by_name: dict[tuple[str, str], list[str]] = {}
        self._pods_on: dict[str, set[str]] = {}  # node -> uids of pods holding instances
        self._used: dict[str, Counter[str]] = {}  # node -> resource -> instances held
        # profile -> node -> free instances (only nodes with >= 1 free, schedulable)
        self._free_index: dict[profiles.ProfileName, dict[str, int]] = {}
        self._stats: dict[tuple[profiles.ModelId, profiles.ProfileName], ProfileStats] = {}
        # (model, profile) -> usable-memory label value -> nodes reporting it, so that
        # ProfileStats.memory_mib stays the least value of the nodes present now.
        self._stat_memory: dict[tuple[profiles.ModelId, profiles.ProfileName],
                                Counter[int]] = {}
        # (model, profile) -> (allocatable, free) on one node -> nodes with it, so that
        # ProfileStats.most and most_free stay the most of the nodes present now.
        self._stat_sizes: dict[tuple[profiles.ModelId, profiles.ProfileName],
                               tuple[dict[int, int], dict[int, int]]] = {}
        self._overcommitted: set[str] = set()  # nodes with used > allocatable somewhere
        self._models: Counter[profiles.ModelId] = Counter()
        self._pending: set[str] = set()  # uids of pending pods with GPU requests
        # MIG instances the pending pods ask for, per profile, any model (``claims_of``):
        # what the webhook's choice under contention does not count as free (webhook.view).
        self._claims: Counter[profiles.ProfileName] = Counter()
        # Of those, the pods that ask for several instances of one profile: (profile,
        # instances) -> pods. They claim only while some node has that many free.
        self._multi_claims: Counter[tuple[profiles.ProfileName, int]] = Counter()
        # per claim_key of a waiting pod's constraints: its claims, and of them those of
        # several instances of a profile (profile, n) per pod, as ``_multi_claims``
        self._claims_by: dict[PodConstraints, Counter[profiles.ProfileName]] = {}
        self._multi_by: dict[PodConstraints, Counter[tuple[profiles.ProfileName, int]]] = {}
        # The workload's pod classes: pods pending or holding instances, by the shape the
        # score reads (``PodClass``); ``classes_generation`` moves when one count does.
        self._classes: Counter[PodClass] = Counter()
        # Bound pods without GPU requests: uid -> (node, cpu, memory), and per node their
        # sums (NodeState.other_*). Three numbers per pod of the cluster, whatever the order
        # in which nodes and pods are listed.
        self._others: dict[str, tuple[str, int, int]] = {}
        # The names (Nodes) or uids (Pods) a list in progress has shown so far (begin_list).
        self._listing: dict[Kind, set[str]] = {}
        self._other_use: dict[str, tuple[int, int]] = {}
        self.classes_generation = 0
        self.synced = False
        self.generation = 0  # bumped on every change; caches key on it
        # bumped when the set of pending GPU pods (or one of them) changes: demand caches
        self.pending_generation = 0
        self._listeners: list[Listener] = []
        self._request_maps = RequestMaps()  # equal request maps shared between pod records

    # ------------------------------------------------------------ reading

    def node(self, name: str) -> NodeState | None:
        return self._states.get(name)

    def nodes(self) -> Iterator[NodeState]:
        return iter(self._states.values())

    def node_names(self) -> list[str]:
        return list(self._states)

    def pod(self, uid: str) -> PodRecord | None:
        return self._pods.get(uid)

    def pods(self) -> Iterator[PodRecord]:
        return iter(self._pods.values())

    def find_pod(self, namespace: str, name: str) -> PodRecord | None:
        uids = self._by_name.get((namespace, name))
        return self._pods.get(uids[-1]) if uids else None

    def pods_on(self, node: str) -> list[PodRecord]:
        """Pods bound to ``node`` that hold GPU instances there."""
        return [self._pods[u] for u in self._pods_on.get(node, ()) if u in self._pods]

    def pending_pods(self) -> list[PodRecord]:
        return [self._pods[u] for u in self._pending]

    def pending_claims(self) -> Mapping[profiles.ProfileName, int]:
        """MIG instances per profile that pending pods ask for, any model (``claims_of``);
        kept as pods come, go and bind. A pod that asks for n > 1 instances of a profile
        must get them on one node: it claims them only while some schedulable node has n
        free. Free instances scattered one or two per node are not its (it waits for a node
        to free n), and the next pod that can use one should not wait beside them."""
        if not self._multi_claims:
            return self._claims
        return _less(self._claims, self._multi_claims, self._most_free())

    def _most_free(self) -> dict[profiles.ProfileName, int]:
        """Per profile of a claim of several instances, the most free on one node (up to
        the most one pod asks for)."""
        need: dict[profiles.ProfileName, int] = {}  # the most instances one pod asks for
        for profile, n in self._multi_claims:
            need[profile] = max(n, need.get(profile, 0))
        most: dict[profiles.ProfileName, int] = {}  # free on one node, up to ``need``
        for profile, n in need.items():
            best = 0
            for free in self._free_index.get(profile, {}).values():
                if free > best:
                    best = free
                    if best >= n:
                        break
            most[profile] = best
        return most

    def claims_beside(self, constraints: PodConstraints) -> Mapping[profiles.ProfileName, int]:
        """``pending_claims`` less those of waiting pods whose own nodeSelector or required
        node affinity differs from ``constraints`` (``claims_apart``): what a pod limited so
        is charged whatever nodes it may use. Pods that may go anywhere, or where it may,
        count."""
        mine = claim_key(constraints)
        others = [k for k in self._claims_by if k != mine]
        if not others:
            return self.pending_claims()
        most = self._most_free() if self._multi_claims else {}
        out = Counter(self.pending_claims())
        for k in others:  # as pending_claims counts them: not the claims it leaves out
            out.subtract(_less(self._claims_by[k], self._multi_by.get(k, Counter()), most))
        return +out

    def claims_apart(self, constraints: PodConstraints
                     ) -> list[tuple[PodConstraints, Counter[profiles.ProfileName]]]:
        """The claims ``claims_beside`` leaves out, per claim key (``claim_key``) of the
        waiting pods limited otherwise than ``constraints``, counted as ``pending_claims``
        counts them. Where such a selection shares nodes with the pod's, the caller charges
        what the shared nodes must give it (``view._Scope.supply``)."""
        mine = claim_key(constraints)
        others = [k for k in self._claims_by if k != mine]
        if not others:
            return []
        most = self._most_free() if self._multi_claims else {}
        return [(k, _less(self._claims_by[k], self._multi_by.get(k, Counter()), most))
                for k in others]

    def free_nodes(self, profile: str) -> Mapping[str, int]:
        """Schedulable nodes with at least one free instance of ``profile``, and how many."""
        return self._free_index.get(profiles.ProfileName(profile), {})

    def profile_stats(self) -> Mapping[tuple[profiles.ModelId, profiles.ProfileName],
                                       ProfileStats]:
        return self._stats

    def overcommitted(self) -> list[NodeState]:
        """Nodes where bound pods hold more instances than the node advertises."""
        return [self._states[n] for n in sorted(self._overcommitted) if n in self._states]

    def models_present(self) -> list[profiles.GpuModel]:
        """GPU models of the nodes, most common first."""
        return [self.catalog.get(m) for m, _ in self._models.most_common()]

    def __len__(self) -> int:
        return len(self._states)

    def pod_classes(self) -> Mapping[PodClass, int]:
        """How many pods of each class are pending or hold instances (the demand mix)."""
        return self._classes

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # ------------------------------------------------------------ the Sink protocol

    def replace(self, kind: Kind, objects: list[dict[str, Any]]) -> None:
        """A complete list of ``kind``: objects missing from it are removed."""
        self.begin_list(kind)
        self.list_page(kind, objects)
        self.end_list(kind)

    def begin_list(self, kind: Kind) -> None:
        """A list of ``kind`` starts (again, when one was abandoned part way)."""
        self._listing[kind] = set()

    def list_page(self, kind: Kind, objects: list[dict[str, Any]]) -> None:
        """One page of a list: its objects applied now, and noted as listed."""
        seen = self._listing.setdefault(kind, set())
        for obj in objects:
            if kind == "Node":
                name = fields.as_dict(obj.get("metadata")).get("name")
                if isinstance(name, str):
                    seen.add(name)
            else:
                seen.add(uid_of(obj))
            self.apply(kind, "ADDED", obj)

    def end_list(self, kind: Kind) -> None:
        """The list is complete: what none of its pages held is removed."""
        seen = self._listing.pop(kind, set())
        if kind == "Node":
            for name in [n for n in self._nodes if n not in seen]:
                self._remove_node(name)
        else:
            for uid in [u for u in (*self._pods, *self._others) if u not in seen]:
                self._remove_pod(uid)

    def apply(self, kind: Kind, event_type: EventType, obj: Mapping[str, Any]) -> None:
        """One watch event. A malformed object is logged and skipped; state is never half-set."""
        try:
            if kind == "Node":
                if event_type == "DELETED":
                    name = fields.as_dict(obj.get("metadata")).get("name")
                    if isinstance(name, str):
                        self._remove_node(name)
                else:
                    self._set_node(node_from_api(obj, self.catalog))
            elif event_type == "DELETED":
                self._remove_pod(uid_of(obj))
            else:
                pod = pod_from_api(obj, self._request_maps)
                if pod is None:
                    uid = uid_of(obj)
                    self._remove_pod(uid)
                    self._set_other(uid, host_use(obj))
                else:
                    if pod.uid in self._others:
                        self._set_other(pod.uid, None)
                    self._set_pod(pod)
        except errors.MigfitError as exc:
            log.warning("skipping %s %s: %s", kind, uid_of(obj), exc)

    def mark_synced(self) -> None:
        self.synced = True

    def load_records(self, nodes: Iterable[NodeRecord], pods: Iterable[PodRecord],
                     others: Iterable[tuple[str, HostUse]] = ()) -> None:
        """Like ``replace`` for both kinds, from records already decoded (the file source);
        ``others``: (uid, ``decoding.host_use``) of the bound pods without GPU requests."""
        node_list = list(nodes)
        names = {n.name for n in node_list}
        for name in [n for n in self._nodes if n not in names]:
            self._remove_node(name)
        for record in node_list:
            self._set_node(record)
        pod_list = list(pods)
        uids = {p.uid for p in pod_list}
        for uid in [u for u in self._pods if u not in uids]:
            self._remove_pod(uid)
        for pod in pod_list:
            self._set_pod(pod)
        other_list = list(others)
        kept = {uid for uid, _ in other_list}
        for uid in [u for u in self._others if u not in kept]:
            self._set_other(uid, None)
        for uid, use in other_list:
            self._set_other(uid, use)

    # ------------------------------------------------------------ mutation

    def _set_node(self, record: NodeRecord) -> None:
        old = self._nodes.get(record.name)
        if old is not None and old.model:
            self._models[old.model] -= 1
            if not self._models[old.model]:
                del self._models[old.model]
        self._nodes[record.name] = record
        if record.model:
            self._models[record.model] += 1
        self._recompute(record.name)

    def _remove_node(self, name: str) -> None:
        old = self._nodes.pop(name, None)
        if old is None:
            return
        if old.model:
            self._models[old.model] -= 1
            if not self._models[old.model]:
                del self._models[old.model]
        self._recompute(name)

    def _set_pod(self, pod: PodRecord) -> None:
        old = self._pods.get(pod.uid)
        if old is not None and _same_accounting(old, pod):
            # Most pod events (status, conditions, labels) change nothing the indexes hold.
            self._pods[pod.uid] = pod
            self.generation += 1
            if pod.uid in self._pending:
                # A pending pod's record changed (annotations, Unschedulable condition):
                # demand caches keyed on pending_generation must see the new record.
                self.pending_generation += 1
            return
        if old is not None:
            self._unaccount(old)
            self._unindex_name(old)
        self._pods[pod.uid] = pod
        self._by_name.setdefault((pod.namespace, pod.name), []).append(pod.uid)
        self._account(pod)

    def _set_other(self, uid: str, use: tuple[str, int, int] | None) -> None:
        """Account a pod without GPU requests (``decoding.host_use``; None: it takes none)."""
        old = self._others.get(uid)
        if old == use:
            return
        if old is not None:
            del self._others[uid]
            self._add_other(old, -1)
        if use is not None:
            self._others[uid] = use
            self._add_other(use, +1)

    def _add_other(self, use: tuple[str, int, int], sign: int) -> None:
        node, cpu, mem = use
        had = self._other_use.get(node, (0, 0))
        now = (had[0] + sign * cpu, had[1] + sign * mem)
        if now == (0, 0):
            self._other_use.pop(node, None)
        else:
            self._other_use[node] = now
        if node in self._nodes:  # a node listed later reads the sums when it is added
            self._recompute(node)

    def _remove_pod(self, uid: str) -> None:
        if uid in self._others:
            self._set_other(uid, None)
        old = self._pods.pop(uid, None)
        if old is not None:
            self._unindex_name(old)
            self._unaccount(old)

    def _unindex_name(self, pod: PodRecord) -> None:
        key = (pod.namespace, pod.name)
        uids = self._by_name.get(key)
        if uids is not None:
            with contextlib.suppress(ValueError):
                uids.remove(pod.uid)
            if not uids:
                del self._by_name[key]

    def _account(self, pod: PodRecord) -> None:
        if pod.requests and (pod.pending or pod.holds_instances):
            self._classes[class_of(pod)] += 1
            self.classes_generation += 1
        if pod.pending and pod.requests:
            self._pending.add(pod.uid)
            claims = claims_of(pod)
            self._claims.update(claims)
            self._multi_claims.update((p, n) for p, n in claims.items() if n > 1)
            key = claim_key(pod.constraints)
            if key.node_selector or key.affinity is not None:
                self._claims_by.setdefault(key, Counter()).update(claims)
                multi = [(p, n) for p, n in claims.items() if n > 1]
                if multi:
                    self._multi_by.setdefault(key, Counter()).update(multi)
            self.pending_generation += 1
        if pod.holds_instances and pod.requests and pod.node is not None:
            used = self._used.setdefault(pod.node, Counter())
            for res, n in pod.requests.items():
                used[res] += n
            self._pods_on.setdefault(pod.node, set()).add(pod.uid)
            self._recompute(pod.node)
        else:
            self.generation += 1

    def _unaccount(self, pod: PodRecord) -> None:
        if pod.requests and (pod.pending or pod.holds_instances):
            key = class_of(pod)
            self._classes[key] -= 1
            if self._classes[key] <= 0:
                del self._classes[key]
            self.classes_generation += 1
        if pod.uid in self._pending:
            self._pending.discard(pod.uid)
            group = claim_key(pod.constraints)
            placed = group.node_selector or group.affinity is not None
            mine = self._claims_by.get(group) if placed else None
            multi = self._multi_by.get(group) if placed else None
            for profile, n in claims_of(pod).items():
                self._claims[profile] -= n
                if self._claims[profile] <= 0:
                    del self._claims[profile]
                if n > 1:
                    self._multi_claims[(profile, n)] -= 1
                    if self._multi_claims[(profile, n)] <= 0:
                        del self._multi_claims[(profile, n)]
                if mine is not None:
                    mine[profile] -= n
                    if mine[profile] <= 0:
                        del mine[profile]
                if multi is not None and n > 1:
                    multi[(profile, n)] -= 1
                    if multi[(profile, n)] <= 0:
                        del multi[(profile, n)]
            if mine is not None and not mine:
                del self._claims_by[group]
            if multi is not None and not multi:
                del self._multi_by[group]
            self.pending_generation += 1
            self.generation += 1  # the claims moved (what the webhook's supply reads)
        if pod.holds_instances and pod.requests and pod.node is not None:
            used = self._used.get(pod.node)
            if used is not None:
                for res, n in pod.requests.items():
                    used[res] -= n
                    if used[res] <= 0:
                        del used[res]
                if not used:
                    del self._used[pod.node]
            on = self._pods_on.get(pod.node)
            if on is not None:
                on.discard(pod.uid)
                if not on:
                    del self._pods_on[pod.node]
            self._recompute(pod.node)

    def _recompute(self, name: str) -> None:
        """Rebuild one node's state and its share of the indexes: O(profiles on the node)."""
        self.generation += 1
        old = self._states.pop(name, None)
        if old is not None:
            self._index(old, -1)
        record = self._nodes.get(name)
        if record is None:
            self._overcommitted.discard(name)
            self._notify(name)
            return
        used_by_res = self._used.get(name, Counter())
        used: dict[profiles.ProfileName, int] = {}
        free: dict[profiles.ProfileName, int] = {}
        over: dict[profiles.ProfileName, int] = {}
        for p, alloc in record.allocatable.items():
            u = used_by_res.get(record.resource_for(p), 0)
            used[p] = u
            free[p] = max(0, alloc - u)
            if u > alloc:
                over[p] = u - alloc
        # Instances of profiles the node no longer advertises at all are overcommit too.
        for res, u in used_by_res.items():
            gone = profiles.parse_resource(res)
            if gone is not None and profiles.ProfileName(gone) not in record.allocatable:
                used[profiles.ProfileName(gone)] = u
                over[profiles.ProfileName(gone)] = u
        repartitioning = (record.config_state in keys.REPARTITIONING_STATES
                          or relayout_under_way(record))
        other = self._other_use.get(name, (0, 0))
        state = NodeState(
            node=record,
            used=used,
            free=free,
            overcommit=over,
            alloc_total=sum(record.allocatable.values()),
            used_total=sum(used.values()),
            free_total=sum(free.values()),
            repartitioning=repartitioning,
            other_cpu_milli=other[0],
            other_memory_bytes=other[1],
        )
        self._states[name] = state
        if over:
            self._overcommitted.add(name)
        else:
            self._overcommitted.discard(name)
        self._index(state, +1)
        self._notify(name)

    def _index(self, state: NodeState, sign: int) -> None:
        record = state.node
        schedulable = not record.unschedulable and not state.repartitioning
        for p, alloc in record.allocatable.items():
            f = state.free.get(p, 0)
            if schedulable and f > 0:
                if sign > 0:
                    self._free_index.setdefault(p, {})[record.name] = f
                else:
                    bucket = self._free_index.get(p)
                    if bucket is not None:
                        bucket.pop(record.name, None)
                        if not bucket:
                            del self._free_index[p]
            if record.model is None or alloc <= 0 or record.unschedulable:
                continue
            key = (record.model, p)
            stats = self._stats.setdefault(key, ProfileStats())
            stats.nodes += sign
            stats.allocatable += sign * alloc
            stats.free += sign * f
            pair = self._stat_sizes.get(key)
            if pair is None:
                pair = self._stat_sizes[key] = ({}, {})
            sizes, free_sizes = pair
            if sign > 0:  # the most only grows; it is looked for again only when it goes
                sizes[alloc] = sizes.get(alloc, 0) + 1
                free_sizes[f] = free_sizes.get(f, 0) + 1
                if alloc > stats.most:
                    stats.most = alloc
                if f > stats.most_free:
                    stats.most_free = f
            else:
                stats.most = _count_out(sizes, alloc, stats.most)
                stats.most_free = _count_out(free_sizes, f, stats.most_free)
            mem = record.memory_mib.get(p)
            if mem is not None:
                seen = self._stat_memory.setdefault(key, Counter())
                seen[mem] += sign
                if seen[mem] <= 0:
                    del seen[mem]
                stats.memory_mib = min(seen) if seen else None
                if not seen:
                    del self._stat_memory[key]
            if stats.nodes <= 0:
                del self._stats[key]
                self._stat_memory.pop(key, None)
                self._stat_sizes.pop(key, None)

    def _notify(self, name: str) -> None:
        for listener in self._listeners:
            listener(name)


def _count_out(counts: dict[int, int], n: int, most: int) -> int:
    """One node with ``n`` counted out of ``counts`` (nodes per count); the most left."""
    left = counts[n] - 1
    if left:
        counts[n] = left
        return most
    del counts[n]
    return max(counts, default=0) if n == most else most


# A pod's class: its GPU requests (sorted), the webhook's decision record when the requests
# alone do not name a profile (single strategy asks for nvidia.com/gpu), its cpu (milli) and
# memory (bytes). Pods of one workload share one.
PodClass = tuple[tuple[tuple[str, int], ...], str | None, int, int]


def class_of(pod: PodRecord) -> PodClass:
    """The class ``pod`` counts in (``Cluster.pod_classes``)."""
    items = tuple(sorted(pod.requests.items()))
    named = any(r.startswith(profiles.RESOURCE_PREFIX) for r, _ in items)
    decision = None if named else pod.annotations.get(keys.DECISION)
    return items, decision, pod.cpu_milli, pod.memory_bytes


def claims_of(pod: PodRecord) -> dict[profiles.ProfileName, int]:
    """The MIG instances per profile that ``pod`` asks for: its ``nvidia.com/mig-*``
    requests, or its ``nvidia.com/gpu`` under a single-strategy decision record naming one
    profile (a whole GPU without MIG claims none)."""
    named = pod.mig_requests
    gpus = pod.requests.get(profiles.GPU_RESOURCE, 0)
    if named or gpus <= 0:
        return named
    profile = _single_profile(pod.annotations.get(keys.DECISION))
    return {} if profile is None else {profile: gpus}


@functools.lru_cache(maxsize=1024)
def _single_profile(text: str | None) -> profiles.ProfileName | None:
    """The one profile a single-strategy decision record names (None otherwise)."""
    record = None if text is None else keys.decision_of({keys.DECISION: text})
    if record is None or record["strategy"] != "single":
        return None
    names = {profiles.canonical_profile(c["profile"]) for c in record["containers"]}
    return profiles.ProfileName(names.pop()) if len(names) == 1 else None


def _same_accounting(old: PodRecord, new: PodRecord) -> bool:
    """Whether replacing ``old`` by ``new`` leaves every index and node state as it is."""
    return (old.node == new.node and old.namespace == new.namespace and old.name == new.name
            and old.holds_instances == new.holds_instances and old.pending == new.pending
            and (old.requests is new.requests or old.requests == new.requests)
            # cpu/memory feed the extender's host-room figures (an in-place resize changes them)
            and old.cpu_milli == new.cpu_milli and old.memory_bytes == new.memory_bytes
            # the decision record can name a single-strategy pod's class (class_of)
            and old.annotations.get(keys.DECISION) == new.annotations.get(keys.DECISION))


def load_objects(cluster: Cluster, objects: Iterable[Mapping[str, Any]]) -> None:
    """Replace the cluster's contents with a list of Node and Pod objects (other kinds ignored)."""
    items = list(objects)
    cluster.replace("Node", [dict(o) for o in items if o.get("kind") == "Node"])
    cluster.replace("Pod", [dict(o) for o in items if o.get("kind") == "Pod"])
    cluster.mark_synced()


def _less(claims: Mapping[profiles.ProfileName, int],
          multi: Mapping[tuple[profiles.ProfileName, int], int],
          most: Mapping[profiles.ProfileName, int]) -> Counter[profiles.ProfileName]:
    """``claims`` less the claims of several instances (``multi``: pods per (profile, n))
    that no node has ``n`` free of (``most``)."""
    out = Counter(claims)
    for (profile, n), pods in multi.items():
        if most.get(profile, 0) < n:
            out[profile] -= n * pods
    return +out


def claim_key(constraints: PodConstraints) -> PodConstraints:
    """What the claims of waiting pods are grouped by (``Cluster.claims_beside``): their
    nodeSelector and required node affinity, without tolerations (a GPU taint's toleration
    is often added only once a pod asks for the GPU) and without ``nvidia.com/gpu.product``
    requirements (migfit's webhook adds one to the pods it patches: the next pod of the same
    workload arrives without it). Terms left empty are dropped; none left, no affinity."""
    affinity = constraints.affinity
    if affinity is not None:
        terms = tuple(
            dataclasses.replace(t, expressions=tuple(
                e for e in t.expressions if e.key != keys.LABEL_PRODUCT))
            for t in affinity)
        kept = tuple(t for t in terms if t.expressions or t.fields)
        affinity = kept or None
    if affinity == constraints.affinity and not constraints.tolerations:
        return constraints
    return PodConstraints(node_selector=constraints.node_selector, affinity=affinity)
