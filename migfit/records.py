"""Compact records of Nodes and Pods, and a node's instance accounting.

What migfit keeps of an API object (never the whole object) and the per-node figures the
store (``migfit.cluster``) recomputes when the node or a pod on it changes. Decoding API
objects into these records lives in ``migfit.decoding``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from types import MappingProxyType

from migfit import keys, profiles

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
# Every phase Kubernetes gives a pod (core/v1 PodPhase).
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
_NO_LABELS: Mapping[str, str] = MappingProxyType({})
#: What a bound pod without GPU requests takes on its node: (node, cpu milli, memory bytes).
HostUse = tuple[str, int, int]


@dataclasses.dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclasses.dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement (``matchExpressions`` / ``matchFields`` item)."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One ``nodeSelectorTerms`` item: its requirements are ANDed."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()  # metadata.name only, as Kubernetes allows


@dataclasses.dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # Equal | Exists
    value: str
    effect: str  # "" = every effect


@dataclasses.dataclass(frozen=True, slots=True)
class PodConstraints:
    """Where an unbound pod may go: nodeSelector, required node affinity, tolerations.

    Kept for unbound pods only (the advisor counts a pending pod toward a node only when
    the node can take it); bound pods carry ``NO_CONSTRAINTS``.
    """

    node_selector: tuple[tuple[str, str], ...] = ()
    # requiredDuringSchedulingIgnoredDuringExecution terms (ORed); None = no such affinity
    affinity: tuple[SelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()


NO_CONSTRAINTS = PodConstraints()


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
    # Every label of the node (``labels`` keeps the GPU and migfit ones only): what pods'
    # nodeSelector and node affinity are matched against.
    all_labels: Mapping[str, str] = dataclasses.field(default_factory=lambda: _NO_LABELS)
    # pods sharing one MIG instance, per profile, where > 1 (GFD's <resource>.replicas):
    # capacity and allocatable count each instance that many times (gpulabels.GpuView)
    replicas: Mapping[profiles.ProfileName, int] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}))
    # profiles advertised under the device plugin's renamed shared name (….shared)
    renamed: frozenset[profiles.ProfileName] = frozenset()
    # When the node's ``nvidia.com/mig.config.state`` label was last written (POSIX
    # seconds): the time of the ``metadata.managedFields`` entry that owns it, which the API
    # server sets. The MIG Manager writes the label as a re-layout begins and as it ends, so
    # this is the end of the node's last re-layout (or a later write by the same field
    # manager), known to every process that reads the node, also after a restart. None when
    # the object carries no such entry (managedFields trimmed).
    layout_written_at: float | None = None

    def resource_for(self, profile: str) -> str:
        """The extended resource a pod requests for ``profile`` on this node, as migfit
        keeps requests: the plain name (a renamed shared one is read as it,
        ``decoding.effective_requests``)."""
        if self.strategy == "single":
            return profiles.GPU_RESOURCE
        return profiles.resource_name(profile)

    @property
    def advertised(self) -> dict[profiles.ProfileName, int]:
        """Profiles with allocatable > 0 (a zero leftover counts as not advertised)."""
        return {p: n for p, n in self.allocatable.items() if n > 0}

    @property
    def instances(self) -> dict[profiles.ProfileName, int]:
        """MIG instances per profile with allocatable > 0: the advertised count divided by
        the replicas that share each one (what a layout holds)."""
        return profiles.instances_of(self.allocatable, self.replicas)

    @property
    def relayout_tainted(self) -> bool:
        return any(t.key == keys.TAINT_RELAYOUT for t in self.taints)


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
    constraints: PodConstraints = NO_CONSTRAINTS  # unbound pods only

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
    # cpu (milli) and memory (bytes) requested by the node's pods without GPU requests (not
    # kept as PodRecords): with the GPU pods' own, what kube-scheduler's NodeResourcesFit sees.
    other_cpu_milli: int = 0
    other_memory_bytes: int = 0

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
    most: int = 0  # the most instances one of the nodes advertises
    most_free: int = 0  # the most free on one of them



# ---------------------------------------------------------------- disruption facts (--defrag)


@dataclasses.dataclass(frozen=True, slots=True)
class PodFacts:
    """What moving a bound pod needs beyond its PodRecord: decoded only for ``migfit advise
    --defrag`` (``decoding.pod_facts``), never kept by the servers."""

    labels: Mapping[str, str]
    # (kind, name) of the ownerReference with controller: true; None for a bare pod
    controller: tuple[str, str] | None
    # the pod's nodeSelector, required node affinity and tolerations (a bound pod's
    # PodRecord carries NO_CONSTRAINTS): where its replacement may go
    constraints: PodConstraints


@dataclasses.dataclass(frozen=True, slots=True)
class LabelSelector:
    """A ``metav1.LabelSelector``: ``matchLabels`` and ``matchExpressions``, ANDed."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()  # In | NotIn | Exists | DoesNotExist

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy the selector (an empty one matches everything)."""
        if any(labels.get(k) != v for k, v in self.match_labels):
            return False
        for r in self.expressions:
            value = labels.get(r.key)
            if r.operator == "In":
                ok = value is not None and value in r.values
            elif r.operator == "NotIn":
                ok = value is None or value not in r.values
            elif r.operator == "Exists":
                ok = value is not None
            elif r.operator == "DoesNotExist":
                ok = value is None
            else:
                ok = False  # the API server rejects other operators
            if not ok:
                return False
        return True


@dataclasses.dataclass(frozen=True, slots=True)
class PdbRecord:
    """What migfit reads of a policy/v1 PodDisruptionBudget."""

    namespace: str
    name: str
    selector: LabelSelector | None  # None (no spec.selector): selects no pod in policy/v1
    min_available: str | None  # an int or a percentage, as written
    max_unavailable: str | None
    disruptions_allowed: int | None  # status: what the eviction API checks
    current_healthy: int | None
    desired_healthy: int | None
    expected_pods: int | None
    generation: int | None = None
    observed_generation: int | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclasses.dataclass(frozen=True, slots=True)
class Disruption:
    """The PodDisruptionBudgets and the facts of the bound MIG pods (by pod key)."""

    pdbs: tuple[PdbRecord, ...] = ()
    pods: Mapping[str, PodFacts] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}))


def relayout_under_way(record: NodeRecord) -> bool:
    """Whether migfit's apply mode is re-laying the node out: its taint, or its record in an
    active state (the taint comes off at the MIG Manager's success, the record once the new
    instances show and the pods are checked)."""
    if record.relayout_tainted:
        return True
    mark = keys.relayout_of(record.annotations)
    return mark is not None and mark.active


def relayout_failure(record: NodeRecord) -> str | None:
    """The result of migfit's failed re-layout of a node that still carries its taint
    (``timeout``, ``failed``, …; ``unknown`` when neither mark names one), or None.

    Such a node keeps the taint until an operator removes it and both annotations (README,
    the apply mode): waiting never clears it, so it is told apart from a change in flight.
    Failed is what the apply mode reads as failed: the ``migfit.io/relayout-failed``
    annotation, or the record's ``state: failed``.
    """
    if not record.relayout_tainted or not keys.relayout_failed(record.annotations):
        return None
    mark = keys.relayout_of(record.annotations)
    if mark is not None and mark.state is keys.RelayoutState.FAILED and mark.result:
        return mark.result
    return _failure_result(record.annotations.get(keys.ANNOTATION_RELAYOUT_FAILED)) or "unknown"


def _failure_result(text: str | None) -> str:
    """The result a ``migfit.io/relayout-failed`` value names: its JSON ``result``
    (``keys.encode_failure``) or the bare word; "" when it names none."""
    if not text:
        return ""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = text
    if isinstance(doc, dict):
        doc = doc.get("result")
    return doc[:40] if isinstance(doc, str) else ""
