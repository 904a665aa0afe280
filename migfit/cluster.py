"""The cluster's MIG view: compact node and pod records, instance accounting and hot-path indexes.

One answer shared by the webhook, the extender, the advisor and the simulator: which MIG
instances each node advertises and how many are free right now. Whole API objects are never
kept; each change updates the affected node's state and the per-profile indexes
incrementally, so a request reads them with a few dict lookups. Objects arrive as plain JSON
dicts from a source (the file source or the Kubernetes watch), through ``replace``/``apply``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import logging
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Literal

from migfit import errors, profiles, quantity

log = logging.getLogger(__name__)

Kind = Literal["Node", "Pod"]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]

ANNOTATION_PREFIX = "migfit.io/"
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
LABEL_STRATEGY = "nvidia.com/mig.strategy"
LABEL_CONFIG = "nvidia.com/mig.config"
LABEL_CONFIG_STATE = "nvidia.com/mig.config.state"
ANNOTATION_RELAYOUT = "migfit.io/relayout"
LABEL_RELAYOUT_RECOMMENDED = "migfit.io/relayout-recommended"
TAINT_RELAYOUT = "migfit.io/relayout"
# Node labels kept in the compact record: what GFD and the MIG Manager write about MIG and the
# operand switches (reference/MIG.md 4), and migfit's own.
_KEPT_LABEL_PREFIXES = ("nvidia.com/gpu.", "nvidia.com/mig.", "migfit.io/",
                        "kubernetes.io/hostname")
REPARTITIONING_STATES = frozenset({"pending", "rebooting"})
TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
# Shared read-only empty mapping: most pods carry no migfit annotation.
_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclasses.dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclasses.dataclass(frozen=True, slots=True)
class NodeRecord:
    """What migfit keeps of a Node."""

    name: str
    resource_version: str
    model: profiles.ModelId | None
    model_error: str | None  # why the GPU model is unknown, when it is
    gpu_count: int
    strategy: str | None  # none | single | mixed (nvidia.com/mig.strategy)
    # per profile, from nvidia.com/mig-<p> (mixed) or nvidia.com/gpu + product label (single)
    capacity: Mapping[profiles.ProfileName, int]
    allocatable: Mapping[profiles.ProfileName, int]
    memory_mib: Mapping[profiles.ProfileName, int]  # nvidia.com/mig-<p>.memory labels
    whole_gpus: int  # allocatable nvidia.com/gpu that is not a MIG device (mixed strategy)
    config: str | None
    config_state: str | None
    unschedulable: bool
    taints: tuple[Taint, ...]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]  # migfit.io/* only
    cpu_milli: int
    memory_bytes: int
    ready: bool

    def resource_for(self, profile: str) -> str:
        """The extended resource a pod requests for ``profile`` on this node."""
        if self.strategy == "single":
            return profiles.GPU_RESOURCE
        return profiles.resource_name(profile)

    @property
    def advertised(self) -> dict[profiles.ProfileName, int]:
        """Profiles with allocatable > 0 (a zero leftover counts as not advertised)."""
        return {p: n for p, n in self.allocatable.items() if n > 0}

    @property
    def relayout_tainted(self) -> bool:
        return any(t.key == TAINT_RELAYOUT for t in self.taints)


@dataclasses.dataclass(frozen=True, slots=True)
class PodRecord:
    """What migfit keeps of a Pod: only pods with GPU requests or migfit annotations."""

    uid: str
    namespace: str
    name: str
    resource_version: str
    node: str | None
    phase: str
    scheduler_name: str
    # effective pod-level request per GPU resource (nvidia.com/mig-* and nvidia.com/gpu)
    requests: Mapping[str, int]
    # (container, resource, count) for regular, init and sidecar containers
    container_requests: tuple[tuple[str, str, int], ...]
    annotations: Mapping[str, str]  # migfit.io/* only
    unschedulable_since: float | None  # PodScheduled=False, reason Unschedulable
    deleting: bool
    created: float | None
    cpu_milli: int
    memory_bytes: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holds_instances(self) -> bool:
        """Bound and not terminated; a deleting pod holds its instance until it is gone."""
        return self.node is not None and self.phase not in TERMINATED_PHASES

    @property
    def mig_requests(self) -> dict[profiles.ProfileName, int]:
        """Requested MIG profiles (mixed-strategy resources) and counts."""
        out: dict[profiles.ProfileName, int] = {}
        for res, n in self.requests.items():
            name = profiles.parse_resource(res)
            if name is not None and n > 0:
                out[profiles.ProfileName(name)] = n
        return out

    @property
    def pending(self) -> bool:
        return self.node is None and self.phase == "Pending" and not self.deleting

    @property
    def unschedulable(self) -> bool:
        """The scheduler said so: PodScheduled=False with reason Unschedulable."""
        return self.unschedulable_since is not None


@dataclasses.dataclass(frozen=True, slots=True)
class NodeState:
    """A node with its accounting, recomputed whenever the node or a pod on it changes."""

    node: NodeRecord
    used: Mapping[profiles.ProfileName, int]
    free: Mapping[profiles.ProfileName, int]
    overcommit: Mapping[profiles.ProfileName, int]  # used beyond allocatable, per profile
    alloc_total: int
    used_total: int
    free_total: int
    repartitioning: bool  # MIG Manager busy or a migfit re-layout in progress

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def idle(self) -> bool:
        return self.used_total == 0


@dataclasses.dataclass(slots=True)
class ProfileStats:
    """Cluster-wide figures of one (model, profile): what the webhook's candidates read."""

    nodes: int = 0  # schedulable nodes advertising it
    allocatable: int = 0
    free: int = 0
    memory_mib: int | None = None  # the least usable memory reported by a node label


# ---------------------------------------------------------------- decoding API objects


@functools.lru_cache(maxsize=4096)
def _count_text(value: str) -> int:
    try:
        return max(0, math.ceil(quantity.parse(value)))
    except errors.QuantityError:
        return 0


def _count(value: Any) -> int:
    """An extended-resource count; quantities like "1" or "2k" allowed, rounded up."""
    if isinstance(value, str):
        return _count_text(value)
    try:
        return max(0, math.ceil(quantity.parse(value)))
    except errors.QuantityError:
        return 0


@functools.lru_cache(maxsize=4096)
def _milli_text(value: str) -> int:
    return math.ceil(quantity.parse(value) * 1000)


@functools.lru_cache(maxsize=4096)
def _bytes_text(value: str) -> int:
    return quantity.parse_bytes(value)


def _milli(value: Any) -> int:
    """CPU in millicores; raises QuantityError."""
    if isinstance(value, str):
        return _milli_text(value)
    return math.ceil(quantity.parse(value) * 1000)


def _bytes(value: Any) -> int:
    """Memory in bytes; raises QuantityError."""
    if isinstance(value, str):
        return _bytes_text(value)
    return quantity.parse_bytes(value)


def _int_label(value: str | None) -> int | None:
    """A label holding a non-negative integer (ASCII digits only), else None."""
    if value and value.isascii() and value.isdigit():
        return int(value)
    return None


def _intern_map(value: Mapping[str, str]) -> Mapping[str, str]:
    if not value:
        return _EMPTY
    return {sys.intern(k): v for k, v in value.items()}


def _timestamp(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _dict(value).items()}


def node_from_api(obj: Mapping[str, Any], catalog: profiles.Catalog) -> NodeRecord:
    """Decode a Node; an unknown GPU product leaves the model None with the reason."""
    meta = _dict(obj.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise errors.UsageError("a Node without metadata.name")
    labels = _str_map(meta.get("labels"))
    status = _dict(obj.get("status"))
    spec = _dict(obj.get("spec"))
    cap_raw = _dict(status.get("capacity"))
    alloc_raw = _dict(status.get("allocatable"))
    strategy = labels.get(LABEL_STRATEGY)
    product = labels.get(LABEL_PRODUCT)

    model: profiles.GpuModel | None = None
    model_error: str | None = None
    gpu_mem = _int_label(labels.get(LABEL_GPU_MEMORY))
    if product:
        try:
            model = catalog.resolve(product, gpu_mem)
        except errors.UnknownModelError as exc:
            model_error = exc.message

    capacity: dict[profiles.ProfileName, int] = {}
    allocatable: dict[profiles.ProfileName, int] = {}
    memory: dict[profiles.ProfileName, int] = {}
    whole = 0
    if strategy == "single":
        prof = profiles.single_strategy_profile(product or "")
        if prof is not None:
            pname = profiles.ProfileName(prof)
            capacity[pname] = _count(cap_raw.get(profiles.GPU_RESOURCE, 0))
            allocatable[pname] = _count(alloc_raw.get(profiles.GPU_RESOURCE, 0))
            if gpu_mem is not None:
                memory[pname] = gpu_mem
    else:
        for res, val in cap_raw.items():
            p = profiles.parse_resource(res)
            if p is not None:
                capacity[profiles.ProfileName(p)] = _count(val)
        for res, val in alloc_raw.items():
            p = profiles.parse_resource(res)
            if p is not None:
                allocatable[profiles.ProfileName(p)] = _count(val)
        whole = _count(alloc_raw.get(profiles.GPU_RESOURCE, 0))
        for key, val in labels.items():
            mib = _int_label(val)
            if key.startswith("nvidia.com/mig-") and key.endswith(".memory") and mib is not None:
                spelled = key[len("nvidia.com/mig-"):-len(".memory")]
                memory[profiles.ProfileName(profiles.canonical_profile(spelled))] = mib
    for p in capacity:
        allocatable.setdefault(p, 0)

    gpu_count = _int_label(labels.get(LABEL_GPU_COUNT)) or 0
    if strategy == "single" and model is not None and allocatable:
        # Under single, gpu.count is the number of MIG devices (reference/MIG.md 4).
        (pname, devices), = capacity.items() or allocatable.items()
        per_gpu = model.profile(pname).max_instances if model.has_profile(pname) else 1
        gpu_count = math.ceil(max(devices, gpu_count) / per_gpu) if per_gpu else gpu_count
    elif not gpu_count:
        gpu_count = _count(cap_raw.get(profiles.GPU_RESOURCE, 0))

    taints = tuple(
        Taint(key=str(t.get("key", "")), value=str(t.get("value", "") or ""),
              effect=str(t.get("effect", "")))
        for t in _list(spec.get("taints")) if isinstance(t, dict)
    )
    ready = any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in _list(status.get("conditions"))
    ) or not status.get("conditions")
    try:
        cpu_milli = _milli(alloc_raw.get("cpu", 0))
        memory_bytes = _bytes(alloc_raw.get("memory", 0))
    except errors.QuantityError:
        cpu_milli, memory_bytes = 0, 0
    return NodeRecord(
        name=name,
        resource_version=str(meta.get("resourceVersion", "")),
        model=model.id if model else None,
        model_error=model_error,
        gpu_count=gpu_count,
        strategy=strategy,
        capacity=capacity,
        allocatable=allocatable,
        memory_mib=memory,
        whole_gpus=whole,
        config=labels.get(LABEL_CONFIG),
        config_state=labels.get(LABEL_CONFIG_STATE),
        unschedulable=bool(spec.get("unschedulable", False)),
        taints=taints,
        labels={k: v for k, v in labels.items() if k.startswith(_KEPT_LABEL_PREFIXES)},
        annotations=_intern_map({k: v for k, v in _str_map(meta.get("annotations")).items()
                                 if k.startswith(ANNOTATION_PREFIX)}),
        cpu_milli=cpu_milli,
        memory_bytes=memory_bytes,
        ready=ready,
    )


def is_gpu_resource(resource: str) -> bool:
    return resource == profiles.GPU_RESOURCE or resource.startswith(profiles.RESOURCE_PREFIX)


def _container_requests(container: Mapping[str, Any]) -> dict[str, Any]:
    """Requests of one container; for extended resources a missing request defaults to the limit."""
    res = _dict(container.get("resources"))
    out = dict(_dict(res.get("limits")))
    out.update(_dict(res.get("requests")))
    return out


def effective_requests(spec: Mapping[str, Any]) -> tuple[
        dict[str, int], tuple[tuple[str, str, int], ...], int, int]:
    """A pod's effective GPU requests by Kubernetes' rules, plus cpu (milli) and memory (bytes).

    Regular containers are summed; each non-restartable init container runs alone next to the
    sidecars started before it, so the pod needs the max of those; restartable init containers
    (sidecars, restartPolicy Always) run for the pod's life and add to the sum (KEP-753).
    ``spec.overhead`` (KEP-688) adds to cpu and memory.
    """
    per_container: list[tuple[str, str, int]] = []

    def decode(c: Mapping[str, Any]) -> dict[str, float]:
        out: dict[str, float] = {}
        cname = str(c.get("name", ""))
        for res, val in _container_requests(c).items():
            if is_gpu_resource(res):
                n = _count(val)
                out[res] = n
                if n:
                    per_container.append((cname, sys.intern(res), n))
            elif res == "cpu":
                with contextlib.suppress(errors.QuantityError):
                    out[res] = _milli(val)
            elif res == "memory":
                with contextlib.suppress(errors.QuantityError):
                    out[res] = _bytes(val)
        return out

    # Plain dicts, not Counters: this runs for every pod event.
    regular: dict[str, int] = {}
    for c in _list(spec.get("containers")):
        if isinstance(c, dict):
            for res, n in decode(c).items():
                regular[res] = regular.get(res, 0) + int(n)
    init = _list(spec.get("initContainers"))
    if not init:
        total = regular
    else:
        sidecars: dict[str, int] = {}
        init_max: dict[str, int] = {}
        for c in init:
            if not isinstance(c, dict):
                continue
            req = decode(c)
            if c.get("restartPolicy") == "Always":
                for res, n in req.items():
                    sidecars[res] = sidecars.get(res, 0) + int(n)
                for res, n in sidecars.items():
                    init_max[res] = max(init_max.get(res, 0), n)
            else:
                for res in set(req) | set(sidecars):
                    init_max[res] = max(init_max.get(res, 0),
                                        int(req.get(res, 0)) + sidecars.get(res, 0))
        total = {}
        for res in set(regular) | set(sidecars) | set(init_max):
            total[res] = max(regular.get(res, 0) + sidecars.get(res, 0), init_max.get(res, 0))
    cpu = total.pop("cpu", 0)
    mem = total.pop("memory", 0)
    # Pod overhead (RuntimeClass, KEP-688) is added to the pod's requests by the scheduler.
    overhead = _dict(spec.get("overhead"))
    with contextlib.suppress(errors.QuantityError):
        cpu += _milli(overhead["cpu"]) if "cpu" in overhead else 0
    with contextlib.suppress(errors.QuantityError):
        mem += _bytes(overhead["memory"]) if "memory" in overhead else 0
    gpu = {sys.intern(r): n for r, n in total.items() if n > 0}
    return gpu, tuple(per_container), cpu, mem


# Identical request maps are shared between pods (most ask for one instance of a few
# profiles): 150,000 pods then cost one small dict per distinct request, not per pod.
_REQUEST_MAPS: dict[tuple[tuple[str, int], ...], Mapping[str, int]] = {}


def _shared_requests(requests: dict[str, int]) -> Mapping[str, int]:
    key = tuple(sorted(requests.items()))
    shared = _REQUEST_MAPS.get(key)
    if shared is None:
        shared = MappingProxyType(requests) if len(_REQUEST_MAPS) < 10_000 else None
        if shared is None:
            return requests
        _REQUEST_MAPS[key] = shared
    return shared


def pod_from_api(obj: Mapping[str, Any]) -> PodRecord | None:
    """Decode a Pod; None for pods migfit has no interest in (no GPU request, no annotation)."""
    meta = _dict(obj.get("metadata"))
    annotations = _intern_map({k: v for k, v in _str_map(meta.get("annotations")).items()
                               if k.startswith(ANNOTATION_PREFIX)})
    spec = _dict(obj.get("spec"))
    requests, per_container, cpu, mem = effective_requests(spec)
    if not requests and not annotations:
        return None
    status = _dict(obj.get("status"))
    since = None
    for cond in _list(status.get("conditions")):
        if (isinstance(cond, dict) and cond.get("type") == "PodScheduled"
                and cond.get("status") == "False" and cond.get("reason") == "Unschedulable"):
            since = _timestamp(cond.get("lastTransitionTime")) or 0.0
    uid = _uid_of(obj)
    node = spec.get("nodeName")
    return PodRecord(
        uid=uid,
        namespace=sys.intern(str(meta.get("namespace") or "default")),
        name=str(meta.get("name") or meta.get("generateName") or ""),
        resource_version=str(meta.get("resourceVersion", "")),
        node=sys.intern(node) if isinstance(node, str) and node else None,
        phase=sys.intern(str(status.get("phase") or "Pending")),
        scheduler_name=sys.intern(str(spec.get("schedulerName") or "default-scheduler")),
        requests=_shared_requests(requests),
        container_requests=per_container,
        annotations=annotations,
        unschedulable_since=since,
        deleting=bool(meta.get("deletionTimestamp")),
        created=_timestamp(meta.get("creationTimestamp")),
        cpu_milli=int(cpu),
        memory_bytes=int(mem),
    )


def _uid_of(obj: Mapping[str, Any]) -> str:
    meta = _dict(obj.get("metadata"))
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")


# ---------------------------------------------------------------- the model


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
        self._overcommitted: set[str] = set()  # nodes with used > allocatable somewhere
        self._models: Counter[profiles.ModelId] = Counter()
        self._pending: set[str] = set()  # uids of pending pods with GPU requests
        self.synced = False
        self.generation = 0  # bumped on every change; caches key on it
        # bumped when the set of pending GPU pods (or one of them) changes: demand caches
        self.pending_generation = 0
        self._listeners: list[Listener] = []

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

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # ------------------------------------------------------------ the Sink protocol

    def replace(self, kind: Kind, objects: list[dict[str, Any]]) -> None:
        """A complete list of ``kind``: objects missing from it are removed."""
        if kind == "Node":
            seen: set[str] = set()
            for obj in objects:
                name = _dict(obj.get("metadata")).get("name")
                if isinstance(name, str):
                    seen.add(name)
                self.apply("Node", "ADDED", obj)
            for name in [n for n in self._nodes if n not in seen]:
                self._remove_node(name)
        else:
            seen_uids: set[str] = set()
            for obj in objects:
                seen_uids.add(_uid_of(obj))
                self.apply("Pod", "ADDED", obj)
            for uid in [u for u in self._pods if u not in seen_uids]:
                self._remove_pod(uid)

    def apply(self, kind: Kind, event_type: EventType, obj: Mapping[str, Any]) -> None:
        """One watch event. A malformed object is logged and skipped; state is never half-set."""
        try:
            if kind == "Node":
                if event_type == "DELETED":
                    name = _dict(obj.get("metadata")).get("name")
                    if isinstance(name, str):
                        self._remove_node(name)
                else:
                    self._set_node(node_from_api(obj, self.catalog))
            elif event_type == "DELETED":
                self._remove_pod(_uid_of(obj))
            else:
                pod = pod_from_api(obj)
                if pod is None:
                    self._remove_pod(_uid_of(obj))
                else:
                    self._set_pod(pod)
        except errors.MigfitError as exc:
            log.warning("skipping %s %s: %s", kind, _uid_of(obj), exc)

    def mark_synced(self) -> None:
        self.synced = True

    def load_records(self, nodes: Iterable[NodeRecord], pods: Iterable[PodRecord]) -> None:
        """Like ``replace`` for both kinds, from records already decoded (the file source)."""
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

    def _remove_pod(self, uid: str) -> None:
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
        if pod.pending and pod.requests:
            self._pending.add(pod.uid)
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
        if pod.uid in self._pending:
            self._pending.discard(pod.uid)
            self.pending_generation += 1
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
        repartitioning = (record.config_state in REPARTITIONING_STATES
                          or record.relayout_tainted)
        state = NodeState(
            node=record,
            used=used,
            free=free,
            overcommit=over,
            alloc_total=sum(record.allocatable.values()),
            used_total=sum(used.values()),
            free_total=sum(free.values()),
            repartitioning=repartitioning,
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

    def _notify(self, name: str) -> None:
        for listener in self._listeners:
            listener(name)


def _same_accounting(old: PodRecord, new: PodRecord) -> bool:
    """Whether replacing ``old`` by ``new`` leaves every index and node state as it is."""
    return (old.node == new.node and old.namespace == new.namespace and old.name == new.name
            and old.holds_instances == new.holds_instances and old.pending == new.pending
            and (old.requests is new.requests or old.requests == new.requests)
            # cpu/memory feed the extender's host-room figures (an in-place resize changes them)
            and old.cpu_milli == new.cpu_milli and old.memory_bytes == new.memory_bytes)


def load_objects(cluster: Cluster, objects: Iterable[Mapping[str, Any]]) -> None:
    """Replace the cluster's contents with a list of Node and Pod objects (other kinds ignored)."""
    items = list(objects)
    cluster.replace("Node", [dict(o) for o in items if o.get("kind") == "Node"])
    cluster.replace("Pod", [dict(o) for o in items if o.get("kind") == "Pod"])
    cluster.mark_synced()
