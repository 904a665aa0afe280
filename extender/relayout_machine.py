"""The apply mode's state machine: one node's re-layout as pure transitions, no I/O.

:func:`advance` takes where a re-layout stands (:class:`Run`) and what the last API call
returned, and says what to do next. The calls are data (:class:`ReadNode`, :class:`ListPods`,
:class:`Patch`, :class:`Sleep`; :class:`Emit` for Events; :class:`Done` at the end);
``migfit.extender.relayout`` performs them against the API and feeds the answers back.
:func:`plan` chooses, from the nodes as listed, which re-layouts to adopt and which to start.

The node-level protocol (DESIGN.md §6), by phase. The record is ``migfit.io/relayout``
(``keys.RelayoutRecord``); its states are exactly what this machine writes (``tainted``,
``applying``, ``failed``) and the advice publisher's ``recommended``:

- ``ADOPT``: a fresh read of a node found in flight, which says where to resume (below).
- ``READ``: a fresh read of a recommended node; nothing changed yet.
- ``CLAIM``: one merge patch, with the resourceVersion read as precondition, that adds the
  taint *and* writes the record (``tainted``). The taint never exists without its record, so
  whichever replica leads adopts every tainted node. A 409 (someone wrote the node since the
  read), a 5xx or no answer is a retryable skip, once a re-read (``CONFIRM``) shows that the
  patch did not land after all (when it did, the re-layout goes on).
- ``CHECK``: list the node's pods. A GPU pod bound in the meantime (the taint does not stop a
  pod that names the node, tolerates the taint or was bound just before) aborts: taint and
  record are removed together, nothing else changed, and an Event says so. A busy-node run
  (``--apply-busy-nodes``; the record's ``running``) accepts exactly the pods of ``running``
  that are still bound, each using only MIG profiles that no GPU the change touches has
  (:func:`busy_check`: the advisor's rule, on a fresh list), and records them with their
  restart counts as ``kept``. ``USAGE`` (``--gpu-usage-from dcgm``): pods on a profile a
  re-created GPU also has are placed by a DCGM exporter report collected after the list;
  then the pods are listed once more and must be the same.
- ``CONFIG`` (``--apply-custom-configs`` only): read the ConfigMap the MIG Manager reads and
  list the nodes. A custom target is normally there already, written by :func:`stage` when
  it was advised; one that is not (a run adopted from another replica) is added with one
  conditional merge patch (``CONFIG_WRITE``; a 409 reads again), with configs migfit added
  that no node uses any more removed. A ConfigMap that is missing, does not parse or holds
  another config by that name aborts (nothing changed). ``SYNC``: sleep until
  ``config_sync_s`` has passed since the write (kubelet refreshes the MIG Manager's volume
  late), then ``CHECK`` once more.
- ``VERIFY``: read the node once more right before the label (CHECK, USAGE or SYNC may
  have taken minutes since the claim). Someone else's ``nvidia.com/mig.config`` (not the
  record's ``from``, the value when migfit tainted the node), ``mig.config.state`` pending
  or rebooting, or the taint or the ``tainted`` record gone aborts the run (through
  ``_refuse``: nothing of migfit's was set, so taint and record are removed and an Event
  says why; after a label patch whose answer was lost it fails instead).
- ``LABEL``: set ``nvidia.com/mig.config`` and the record (``applying``, ``started``: the wall
  clock, RFC 3339, so that a new leader keeps the timers running from then) in one patch,
  with VERIFY's resourceVersion as precondition: a 409 goes back to VERIFY (never an
  overwrite of a label set in between).
- ``WAIT``: poll the node and its pods until ``mig.config.state=success`` with the expected
  allocatable; at ``success`` with no instance advertised (the MIG Manager was seen at work,
  or ``untaint_after_s`` has passed) the taint comes off, so that the operands' DaemonSets
  can bring the device plugin back; ``failed``, a changed label, ``pending`` for
  ``wedge_s``, ``timeout_s`` or a pod bound meanwhile whose profile the new layout lacks fail
  it. Transient API errors are retried with backoff until the timeout. On every pod list,
  every ``kept`` pod still there
  must not have failed, restarted or lost a container (:func:`kept_check`); otherwise the
  run fails.
- ``RELEASE``: read, then one conditional patch that removes taint and record (and on success
  the recommended label) together; a 409 re-reads.
- ``FAIL``: the record becomes ``failed`` and ``migfit.io/relayout-failed`` is set; the taint
  stays (or, taken off at ``success``, is put back: the node read first, its taints kept), a
  Warning Event is sent, and the node is never retried until an operator clears it.
  While the taint is on, :func:`plan` counts the node against the bound (:func:`holds_slot`),
  so a failure that repeats on every node stops there.

Only the Lease holder acts: every transition made while not leading ends the run
(``lost-leadership``) before the next call; what was written stays for the next leader.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from migfit import advisor, errors, keys, migparted, profiles, records

REASON_STARTED = "MigRelayoutStarted"
REASON_DONE = "MigRelayoutSucceeded"
REASON_FAILED = "MigRelayoutFailed"
REASON_ABORTED = "MigRelayoutAborted"
REASON_CONFIG = "MigConfigAdded"
_STATES = keys.RelayoutState
# The most config.yaml text the apply mode writes: a ConfigMap's data is limited to 1 MiB
# (Kubernetes docs, ConfigMaps), and the annotations and other keys need room too.
CONFIG_TEXT_MAX = 768 * 1024


def share_of(share: float, gpu_nodes: int) -> int:
    """``--max-relayouts P%``: that share of ``gpu_nodes``, rounded down, at least one."""
    return max(1, math.floor(share * gpu_nodes + 1e-9))


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    max_concurrent: int = 1  # nodes being re-laid out at once, in the whole cluster
    # ... or, when set, this share of the GPU nodes listed (at least one): ``--max-relayouts
    # 10%`` keeps up with a cluster's size (docs/simulation.md, "How many re-layouts at once")
    max_share: float | None = None
    timeout_s: float = 1200.0  # from setting the label to success and the new allocatable
    wedge_s: float = 600.0  # mig.config.state stuck at pending this long: wedged
    # WAIT: the taint comes off at success once the MIG Manager was seen at work, or this
    # long after the label (it may have been done between two polls).
    untaint_after_s: float = 30.0
    poll_s: float = 5.0
    backoff_max_s: float = 60.0  # longest wait between polls while the API keeps failing
    interval_s: float = 30.0  # how often the advice is checked for new work
    # How long a write (or the pod list) that fails transiently before the label is set, or
    # while releasing or recording a failure, is retried before the run ends; what was
    # written then stays for a later pass to adopt.
    write_retry_s: float = 60.0
    # --apply-busy-nodes: also start re-layouts of busy nodes (pods run on GPUs the change
    # keeps exactly; advisor.Recommendation.running). Off: only nodes without GPU pods.
    apply_busy_nodes: bool = False
    # --gpu-usage-from dcgm is on: a busy-node run whose kept pods use a profile a re-created
    # GPU also has reads the node's DCGM exporter report (collected after the pods were
    # listed) to tell which GPU holds them; off: such a run is not started.
    gpu_usage: bool = False
    # dcgm-exporter serves the samples of its last collection (every 30 s by default, its
    # -c/--collect-interval): a report shows the state after the node's pods were listed
    # only if it was scraped at least this long after the list.
    exporter_collect_s: float = 30.0
    # How long a busy-node run waits for such a report before it is aborted (the extender
    # adds two scrapes' interval and one's timeout: usage.Settings).
    usage_wait_s: float = 95.0
    # --apply-custom-configs: the ConfigMap (namespace, name) the MIG Manager reads, into
    # which a custom config is written before a node is labelled with it. None: only named
    # configs already there are applied.
    custom_configs: tuple[str, str] | None = None
    # How long a config just written takes to reach the MIG Manager's file: kubelet
    # refreshes a ConfigMap volume on its periodic pod sync (syncFrequency, 1 min by
    # default) plus its cache's delay (Kubernetes docs, "Mounted ConfigMaps are updated
    # automatically"). The label is set only once this long has passed since the write.
    config_sync_s: float = 120.0
    # A config migfit added and no node uses (label, or a re-layout record) is removed
    # after this long (so that the ConfigMap does not grow without bound).
    config_keep_s: float = 3600.0
    # How often the GPU Operator's ClusterPolicy is read again, to check that the MIG
    # Managers read that ConfigMap (``policy_reads``).
    policy_check_s: float = 60.0

    def limit(self, nodes: Iterable[records.NodeRecord]) -> int:
        """Re-layouts allowed in flight at once on a cluster of ``nodes``: ``max_concurrent``,
        or ``max_share`` of its GPU nodes (a known GPU model or MIG resources), at least 1."""
        if self.max_share is None:
            return self.max_concurrent
        return share_of(self.max_share, sum(1 for n in nodes
                                            if n.model is not None or n.allocatable))

    def backoff(self, failing: int) -> float:
        """The wait after ``failing`` API errors in a row: doubling from ``poll_s``."""
        return float(min(self.backoff_max_s, self.poll_s * 2 ** min(failing, 30)))


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    node: str
    # success | failed | timeout | wedged | aborted | skipped | error | interrupted |
    # lost-leadership
    result: str
    reason: str = ""


class Phase(enum.StrEnum):
    ADOPT = "adopt"
    READ = "read"
    CLAIM = "claim"
    CONFIRM = "confirm"
    CHECK = "check"
    USAGE = "usage"
    CONFIG = "config"
    CONFIG_WRITE = "config-write"
    SYNC = "sync"
    VERIFY = "verify"
    LABEL = "label"
    LABELLED = "labelled"
    WAIT = "wait"
    RELEASE = "release"
    FAIL = "fail"
    DONE = "done"


# ---------------------------------------------------------------- what a call returned


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSeen:
    """The node as just read: its record, its taints as the API spells them, its version."""

    node: records.NodeRecord
    taints: tuple[Mapping[str, Any], ...]
    resource_version: str


@dataclasses.dataclass(frozen=True, slots=True)
class PodsSeen:
    """The pods bound to the node, as just listed (only those migfit decodes: GPU pods), and
    how often each one's containers have restarted (by uid; ``decoding.restart_count``)."""

    pods: tuple[records.PodRecord, ...]
    restarts: Mapping[str, int] = dataclasses.field(default_factory=dict)


# A DCGM exporter report of one node: per GPU index, its MIG instances, each as (profile,
# the pods (namespace/name) the exporter names on it).
Placed = Mapping[int, tuple[tuple[str, frozenset[str]], ...]]


@dataclasses.dataclass(frozen=True, slots=True)
class UsageSeen:
    """The node's DCGM exporter report as kept now (``Placed``), and when the scrape that got
    it began (the monotonic clock of ``Context.now``); both None when there is none."""

    gpus: Placed | None
    at: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class Written:
    """The patch was applied."""


@dataclasses.dataclass(frozen=True, slots=True)
class Slept:
    """The wait asked for is over."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigMapSeen:
    """The mig-parted ConfigMap as just read, with the configs the cluster's nodes use now
    (their ``nvidia.com/mig.config`` labels and the targets of their re-layout records)."""

    text: str | None  # data."config.yaml"; None when the ConfigMap has no such key
    added: Mapping[str, float]  # migfit.io/configs: what migfit added, and when (POSIX)
    resource_version: str
    in_use: frozenset[str]
    # Why the MIG Managers do not read this ConfigMap, by the ClusterPolicy (``policy_reads``
    # False); None when they do or it cannot be told.
    unread: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class CallFailed:
    """The call failed: ``retryable`` (5xx, 429, no answer) or not; ``conflict``: 409."""

    brief: str
    retryable: bool = False
    conflict: bool = False
    not_found: bool = False


Seen = NodeSeen | PodsSeen | UsageSeen | ConfigMapSeen | Written | Slept | CallFailed | None

# ---------------------------------------------------------------- what to do next


@dataclasses.dataclass(frozen=True, slots=True)
class ReadNode:
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class ListPods:
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class ReadUsage:
    """The node's DCGM exporter report, as the extender's scraper keeps it."""


@dataclasses.dataclass(frozen=True, slots=True)
class Patch:
    """A patch of the node: a merge patch (RFC 7386) body."""

    body: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class ReadConfigMap:
    """Read ``settings.custom_configs`` and list the nodes (for the configs in use)."""


@dataclasses.dataclass(frozen=True, slots=True)
class PatchConfigMap:
    """A merge patch of ``settings.custom_configs`` (with its resourceVersion)."""

    body: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclasses.dataclass(frozen=True, slots=True)
class Emit:
    """An Event on the node (sent best effort: a failure to send changes nothing)."""

    reason: str
    type: str
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class Done:
    outcome: Outcome


Action = (ReadNode | ListPods | ReadUsage | Patch | ReadConfigMap | PatchConfigMap | Sleep
          | Done)


@dataclasses.dataclass(frozen=True, slots=True)
class Context:
    """When a transition happens: ``now`` (monotonic), ``wall`` (POSIX, only for the record's
    ``started`` stamp other replicas read), whether this replica holds the Lease, and the
    settings."""

    now: float
    wall: float
    leading: bool = True
    settings: Settings = Settings()


@dataclasses.dataclass(frozen=True, slots=True)
class Run:
    """Where one node's re-layout stands (in this replica's memory)."""

    node: str
    phase: Phase
    record: keys.RelayoutRecord
    since: float | None = None  # when the current phase's retries began (monotonic)
    label_at: float | None = None  # when the label was set, by this replica's clock
    pending_since: float | None = None
    failing: int = 0  # API errors in a row
    settled: bool = False  # WAIT: success with the expected allocatable seen; pods next
    note: str = ""  # CONFIRM: the error the claim got
    resume: Phase | None = None  # ADOPT: where the view says the re-layout stands
    ending: Outcome | None = None  # RELEASE/FAIL: what is reported once written
    config_ready: bool = False  # a custom target is in the ConfigMap and has reached nodes
    checked: PodsSeen | None = None  # USAGE: the node's pods as CHECK listed them ...
    listed_at: float | None = None  # ... and when
    # A DCGM report that placed them; CHECK lists the pods once more and sets the label
    # only if they are still the same pods.
    placed: Placed | None = None
    usage_since: float | None = None  # USAGE: when its first pod list came (the deadline)
    label_tried: bool = False  # a label patch was sent (its answer may have been lost)
    advised_from: str | None = None  # the node's nvidia.com/mig.config when advised
    # ADOPT: the node's record, written by a newer migfit, has been left to it for
    # ``timeout_s`` already (``plan``'s ``overdue``): fail the node instead.
    overdue: bool = False
    # WAIT: the taint was taken off once the MIG Manager reported success (for the operands'
    # DaemonSets); a failure after that puts it back (FAIL).
    untainted: bool = False
    # WAIT: the MIG Manager was seen at work (pending or rebooting) since the label.
    acted: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    run: Run
    action: Action
    emits: tuple[Emit, ...] = ()


# ---------------------------------------------------------------- records and nodes


def planned(rec: advisor.Recommendation) -> keys.RelayoutRecord:
    """The ``recommended`` record of a recommendation (what the advice publisher writes, and
    what the apply mode starts from)."""
    expected = Counter(p for g in rec.gpus for p in g.after)
    return keys.RelayoutRecord(
        target=rec.target, config=rec.config,
        mig_parted=None if rec.mig_parted is None else dict(rec.mig_parted),
        gpus=tuple(keys.GpuChange(index=g.index, before=tuple(g.before), after=tuple(g.after))
                   for g in rec.gpus),
        unblocks=tuple(rec.unblocks), disrupts=tuple(rec.disrupts),
        running=tuple(rec.running), disruptive=rec.disruptive, command=rec.command,
        expected={str(p): n for p, n in sorted(expected.items())})


def failed(node: records.NodeRecord) -> bool:
    """The node's re-layout failed and waits for an operator."""
    if keys.ANNOTATION_RELAYOUT_FAILED in node.annotations:
        return True
    record = keys.relayout_of(node.annotations)
    return record is not None and record.state is _STATES.FAILED


def in_flight(node: records.NodeRecord) -> bool:
    """A re-layout is under way on the node (counted against ``max_concurrent``)."""
    return not failed(node) and records.relayout_under_way(node)


def clear_command(node: str) -> str:
    """What an operator runs to clear a failed re-layout of ``node`` once it is fixed."""
    return (f"kubectl taint node {node} {keys.TAINT_RELAYOUT}- && kubectl annotate node {node} "
            f"{keys.ANNOTATION_RELAYOUT}- {keys.ANNOTATION_RELAYOUT_FAILED}-")


def holds_slot(node: records.NodeRecord) -> bool:
    """The node's re-layout failed and it still carries migfit's taint: out of service until
    an operator clears it, so it keeps its place under ``--max-relayouts`` (as a rolling
    update's maxUnavailable counts a pod that never came up). Otherwise one failure that
    fails every change (a config missing from the MIG Manager's file) would take every
    recommended node out of service, one pass after another."""
    return failed(node) and node.relayout_tainted


def begin(rec: advisor.Recommendation) -> Run:
    """A new re-layout of a recommended node."""
    return Run(node=rec.node, phase=Phase.READ, record=planned(rec),
               advised_from=rec.before_config)


def adopt(node: records.NodeRecord, *, overdue: bool = False) -> Run | None:
    """The re-layout to resume on a node found in flight, or None when there is none.

    ``tainted``: re-check the pods, then set the label; ``applying``: wait (its timers run
    from the record's ``started``). The taint without a record in flight (an older migfit, or
    set by hand) cannot be resumed: it is recorded as failed, so an operator sees it. A
    tainted node whose record a newer migfit wrote is that migfit's to carry on (a rolling
    upgrade): left alone, node and taint as they are (:func:`plan` names such nodes), until
    it is ``overdue`` (no newer replica finished it within the timeout: a rollback), then
    failed like a taint without a record.
    """
    if failed(node):
        return None
    record = keys.relayout_of(node.annotations)
    newer = keys.newer_relayout(node.annotations) if record is None else None
    if newer is not None and node.relayout_tainted and not overdue:
        return None
    if record is not None and record.state is _STATES.TAINTED:
        if node.relayout_tainted:
            return Run(node=node.name, phase=Phase.CHECK, record=record)
        return Run(node=node.name, phase=Phase.RELEASE, record=record, ending=Outcome(
            node.name, "aborted", f"the taint {keys.TAINT_RELAYOUT} was removed before "
            f"{keys.LABEL_CONFIG} was set; nothing was changed"))
    if record is not None and record.state is _STATES.APPLYING:
        return Run(node=node.name, phase=Phase.WAIT, record=record)
    if not node.relayout_tainted:
        return None
    if newer is not None:
        reason = (f"the node carries the taint {keys.TAINT_RELAYOUT} and a re-layout record "
                  f"of version {newer['version']}, written by a newer migfit (this one reads "
                  f"{keys.RELAYOUT_VERSION}), which did not finish it in time (rolled back?), "
                  "so migfit cannot tell what it changed: check its MIG layout")
    else:
        reason = (f"the node carries the taint {keys.TAINT_RELAYOUT} without a re-layout "
                  f"record in {keys.ANNOTATION_RELAYOUT} (left by an older migfit, or set by "
                  "hand), so migfit cannot tell what it changed: check its MIG layout")
    base = record or keys.RelayoutRecord()
    return Run(node=node.name, phase=Phase.FAIL,
               record=base.but(state=_STATES.FAILED, result="failed", reason=reason),
               ending=Outcome(node.name, "failed", reason))


def may_start(rec: advisor.Recommendation, settings: Settings) -> bool:
    """The apply mode may carry ``rec`` out: safe, and on a busy node only with
    ``apply_busy_nodes`` (whatever is in flight; see :func:`plan`)."""
    return not rec.disruptive and (not rec.running or settings.apply_busy_nodes)


def _recreated(record: keys.RelayoutRecord) -> Iterator[keys.GpuChange]:
    """The GPUs the change re-creates: their instance counts change, so mig-parted clears
    them (the same instances in another order is no change)."""
    return (g for g in record.gpus if Counter(g.before) != Counter(g.after))


def touched_profiles(record: keys.RelayoutRecord) -> frozenset[str]:
    """The profiles of the GPUs the change re-creates: no pod that stays bound may use one."""
    return frozenset(p for g in _recreated(record) for p in g.before)


def touched_gpus(record: keys.RelayoutRecord) -> frozenset[int]:
    """The indices of the GPUs the change re-creates."""
    return frozenset(g.index for g in _recreated(record))


def _busy_findings(record: keys.RelayoutRecord, pods: Iterable[records.PodRecord], node: str
                   ) -> tuple[str | None, list[records.PodRecord]]:
    """What forbids the change whatever the usage report says, and the bound pods whose GPU
    only such a report can tell (they use a profile a re-created GPU also has)."""
    bound = _gpu_pods(pods, node)
    if not bound:
        return None, []
    names = ", ".join(p.key for p in bound)
    if not record.running:
        return f"GPU pods were bound to the node before its layout changed: {names}", []
    running = set(record.running)
    late = [p.key for p in bound if p.key not in running]
    if late:
        return (f"GPU pods were bound to the node after the advice: {', '.join(late)}; only "
                f"the pods it found running ({', '.join(record.running)}) may stay"), []
    whole = [p.key for p in bound
             if any(profiles.parse_resource(r) is None for r in p.requests)]
    if whole:
        return (f"pods use GPUs that are not MIG instances, whose place migfit cannot tell: "
                f"{', '.join(whole)}"), []
    touched = touched_profiles(record)
    return None, [p for p in bound if any(q in touched for q in p.mig_requests)]


def busy_check(record: keys.RelayoutRecord, pods: Iterable[records.PodRecord], node: str,
               placed: Placed | None = None
               ) -> str | None:
    """Why the GPU pods bound to ``node`` forbid the change now (None: they do not).

    A pod may stay bound only on a busy-node run, only if it is one of the record's
    ``running`` (bound before the advice), and only on GPUs the change keeps. The API does
    not say which GPU holds a pod's instance: a pod whose profiles no re-created GPU has is
    on a kept one (the advisor's rule without per-GPU usage, docs/relayout.md §1). For the
    others ``placed`` (the DCGM exporter's report: per GPU index, each instance's profile
    and the pods it names) must show every GPU of the change laid out as the advice assumed,
    no pod on a GPU it re-creates, and each such pod on kept GPUs as many times as it has
    instances."""
    hard, overlap = _busy_findings(record, pods, node)
    if hard is not None:
        return hard
    touched = touched_profiles(record)
    if overlap and placed is None:
        which = "; ".join(
            f"{p.key} ({', '.join(sorted(str(q) for q in p.mig_requests if q in touched))})"
            for p in overlap)
        return (f"pods use profiles a GPU the change re-creates also has, so they could be on "
                f"it: {which}; with --gpu-usage-from dcgm the exporter's report tells")
    if placed is None:
        return None
    for g in record.gpus:
        shown = Counter(q for q, _ in placed.get(g.index, ()))
        if g.index not in placed or shown != Counter(g.before):
            return (f"the DCGM exporter's report shows GPU {g.index} with "
                    f"{' '.join(sorted(shown.elements())) or 'nothing'}, not the layout the "
                    f"advice assumed ({' '.join(sorted(g.before)) or 'nothing'})")
    recreated = touched_gpus(record)
    there = sorted({name for i in recreated for _, names in placed.get(i, ()) for name in names})
    if there:
        return (f"the DCGM exporter puts pods on a GPU the change re-creates: "
                f"{', '.join(there)}")
    short = []
    for p in overlap:
        seen_on_kept = sum(p.key in names for i, inst in placed.items() if i not in recreated
                           for _, names in inst)
        if seen_on_kept < sum(p.mig_requests.values()):
            short.append(f"{p.key} ({seen_on_kept} of {sum(p.mig_requests.values())})")
    if short:
        return (f"the DCGM exporter's report does not name all the instances of "
                f"{', '.join(short)}, which use a profile a GPU the change re-creates also "
                "has")
    return None


def kept_of(pods: PodsSeen, node: str) -> tuple[keys.KeptPod, ...]:
    """The GPU pods bound to ``node`` as :func:`kept_check` checks them after the change."""
    return tuple(keys.KeptPod(pod=p.key, uid=p.uid, restarts=pods.restarts.get(p.uid, 0),
                              profiles={str(q): n for q, n in sorted(p.mig_requests.items())})
                 for p in _gpu_pods(pods.pods, node))


def kept_check(record: keys.RelayoutRecord, pods: PodsSeen
               ) -> tuple[str | None, tuple[str, ...]]:
    """Why the pods the change keeps were harmed (None: they were not), and the kept pods
    that are gone (deleted meanwhile: nothing to check). Harmed: Failed, or a container
    restarted or ended with an error since CHECK (``decoding.restart_count``)."""
    seen = {p.uid: p for p in pods.pods}
    by_name = {p.key: p for p in pods.pods}
    harmed, gone = [], []
    for kept in record.kept:
        pod = seen.get(kept.uid)
        again = by_name.get(kept.pod)
        if pod is None and again is not None:
            # The same name on the node with another uid: a pod that failed and was replaced
            # (a StatefulSet's, or one kubelet rejected and its controller made again), whose
            # failure was seen for too short a time to be listed (an outside check).
            harmed.append(f"{kept.pod} was replaced by a new pod (uid {again.uid})")
            continue
        if pod is None or pod.deleting:
            # Deleted meanwhile (its containers end with SIGTERM's exit code): not harm.
            gone.append(kept.pod)
            continue
        if pod.phase == "Succeeded":
            continue  # completed; a sidecar stopped after it may end non-zero
        restarts = pods.restarts.get(kept.uid, 0)
        if pod.phase == "Failed":
            harmed.append(f"{kept.pod} failed")
        elif restarts > kept.restarts:
            harmed.append(f"{kept.pod} restarted or lost a container {restarts - kept.restarts} "
                          "time(s)")
    if harmed:
        return (f"pods on the GPUs the change was to keep were harmed: {'; '.join(harmed)}",
                tuple(gone))
    return None, tuple(gone)


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    adopt: tuple[Run, ...]
    start: tuple[Run, ...]
    in_flight: frozenset[str]  # nodes under re-layout in the cluster, these included
    failed: int  # nodes whose re-layout failed and wait for an operator
    # Failed nodes still tainted (``holds_slot``): they count against ``limit`` as if in
    # flight, until an operator clears them.
    holding: tuple[str, ...] = ()
    limit: int = 1  # re-layouts allowed at once (``Settings.limit`` of these nodes)
    # Tainted nodes whose record a newer migfit wrote: (node, version), left to that migfit
    # (for at most the timeout: ``plan``'s ``overdue``).
    newer: tuple[tuple[str, int], ...] = ()


def plan(
    nodes: Iterable[records.NodeRecord],
    *,
    running: Iterable[str],
    recommendations: Sequence[advisor.Recommendation],
    settings: Settings,
    staged: frozenset[str] | None = None,
    bound: Callable[[str], Iterable[records.PodRecord]] | None = None,
    overdue: frozenset[str] = frozenset(),
) -> Plan:
    """Which re-layouts to adopt (in flight, not run here) and to start (within the bound).

    ``nodes`` should be a fresh list of the cluster: the bound on re-layouts at once counts
    what every replica ever started, from the nodes' taints and records, failed re-layouts
    whose taint is still there included (``holds_slot``: they count until an operator clears
    them, whoever failed them and whenever; a restart or a new leader sees them too). Pass no
    ``recommendations`` when the nodes may be stale. Only safe recommendations are started;
    to a custom config only with ``settings.custom_configs`` (the run writes it into that
    ConfigMap first; without it an operator adds it), busy-node ones (``rec.running``) only
    with ``settings.apply_busy_nodes``. ``staged``: the custom configs that have been in the
    ConfigMap for ``config_sync_s`` (:func:`stage`); a custom recommendation to another one
    waits for a later pass (None: no such check). ``bound``: the pods bound to a node, as
    the view has them; a busy-node recommendation that :func:`busy_check` refuses on them is
    not started (it would only be aborted after tainting the node). ``overdue``: nodes of
    ``Plan.newer`` left to a newer migfit for the timeout already, now to be failed.
    """
    listed = {n.name: n for n in nodes}
    mine = set(running)
    flight = {name for name, n in listed.items() if in_flight(n)} | mine
    # Confirmed by a fresh read of the node before anything is written (the nodes may be a
    # cache that has not seen this replica's own last writes yet).
    adopted = tuple(Run(node=name, phase=Phase.ADOPT, record=run.record, resume=run.phase,
                        overdue=name in overdue)
                    for name, n in sorted(listed.items())
                    if name not in mine
                    and (run := adopt(n, overdue=name in overdue)) is not None)
    holding = tuple(name for name, n in sorted(listed.items())
                    if holds_slot(n) and name not in flight)
    limit = settings.limit(listed.values())
    room = limit - len(flight) - len(holding)
    started: list[Run] = []
    for rec in recommendations:
        if room <= 0:
            break
        node = listed.get(rec.node)
        if (not may_start(rec, settings) or rec.node in flight
                or (rec.config is None and settings.custom_configs is None)
                or (rec.config is None and staged is not None and rec.target not in staged)
                or (node is not None and failed(node))
                or (rec.running and bound is not None
                    and not _may_try(planned(rec), bound(rec.node), rec.node, settings))):
            continue
        started.append(begin(rec))
        flight.add(rec.node)
        room -= 1
    newer = tuple((name, v["version"]) for name, n in sorted(listed.items())
                  if n.relayout_tainted and not failed(n)
                  and (v := keys.newer_relayout(n.annotations)) is not None)
    return Plan(adopt=adopted, start=tuple(started), in_flight=frozenset(flight),
                failed=sum(failed(n) for n in listed.values()), newer=newer, holding=holding,
                limit=limit)


def _may_try(record: keys.RelayoutRecord, pods: Iterable[records.PodRecord], node: str,
             settings: Settings) -> bool:
    """A busy-node run could pass its CHECK on these pods: nothing forbids it outright, and
    pods whose GPU only a usage report can tell need ``settings.gpu_usage``."""
    hard, overlap = _busy_findings(record, pods, node)
    return hard is None and (not overlap or settings.gpu_usage)


@dataclasses.dataclass(frozen=True, slots=True)
class Staging:
    """What :func:`stage` decided: the patch to write (None: nothing new), the custom
    configs ready to start re-layouts to, and why others cannot be written."""

    body: Mapping[str, Any] | None
    ready: frozenset[str]
    added: tuple[str, ...]
    problems: tuple[str, ...]
    # When the first config written but not yet ready will be (POSIX), so that the next pass
    # can come then rather than a whole interval later; None when none waits.
    next_ready: float | None = None
    waiting: tuple[str, ...] = ()  # written on an earlier pass, not yet ready


def stage(seen: ConfigMapSeen, targets: Mapping[str, Mapping[str, Any]], *, wall: float,
          settings: Settings) -> Staging:
    """``--apply-custom-configs``: write the custom configs of the recommendations into the
    ConfigMap as soon as they are advised, so that their re-layouts start once the MIG
    Managers' volumes have them, without holding a node tainted (or a place under
    ``--max-relayouts``) meanwhile.

    ``targets``: config name -> its rendered mig-parted document. Ready: in the ConfigMap
    since ``config_sync_s`` (by ``migfit.io/configs``), or there without migfit having added
    it (the run's CONFIG phase then waits the whole sync). Configs migfit added that no node
    uses are pruned as in the run.
    """
    where = _where(settings)
    if seen.text is None:
        return Staging(None, frozenset(), (), (f"{where} has no data."
                                               f"{migparted.CONFIGMAP_KEY}",))
    ready: set[str] = set()
    missing: dict[str, Any] = {}
    problems: list[str] = []
    waiting: dict[str, float] = {}  # name -> when it will be ready
    try:
        current = migparted.parse(seen.text, where=where)  # once, for every target
        verdicts = [(name, doc, migparted.same_config(current, name, doc))
                    for name, doc in sorted(targets.items())]
    except (errors.ConfigError, KeyError) as exc:
        return Staging(None, frozenset(), (), (f"{where}: {exc}",))
    for name, doc, same in verdicts:
        if same is None:
            missing[name] = doc["mig-configs"][name]
        elif not same:
            # (an older migfit named RTX PRO 6000 layouts with +me and -me alike: such a
            # config, if no node uses it, can go)
            problems.append(f"{where} already has a config {name} with other entries; if no "
                            "node's nvidia.com/mig.config names it, delete it from the "
                            "ConfigMap and migfit writes its own")
        elif name not in seen.added or wall - seen.added[name] >= settings.config_sync_s:
            ready.add(name)
        else:
            waiting[name] = seen.added[name] + settings.config_sync_s
    next_ready = min([*waiting.values(), *([wall + settings.config_sync_s] if missing else [])],
                     default=None)
    if not missing:
        return Staging(None, frozenset(ready), (), tuple(problems), next_ready, tuple(waiting))
    body = _addition(seen, missing, wanted=targets, wall=wall, settings=settings)
    if isinstance(body, str):
        return Staging(None, frozenset(ready), (), (*problems, body), next_ready,
                       tuple(waiting))
    return Staging(body, frozenset(ready), tuple(missing), tuple(problems), next_ready,
                   tuple(waiting))


def _addition(seen: ConfigMapSeen, missing: Mapping[str, Any], *, wanted: Iterable[str],
              wall: float, settings: Settings) -> dict[str, Any] | str:
    """The merge patch (resourceVersion as precondition) that adds the configs ``missing``
    (name -> entries) to the ConfigMap and stamps them in ``migfit.io/configs``, removing
    what migfit added that no node uses, nothing ``wanted`` asks for, and is older than
    ``config_keep_s``; or, when it cannot be written, why."""
    assert seen.text is not None
    where = _where(settings)
    keep = set(wanted) | set(missing)
    stale = [name for name, when in seen.added.items()
             if name not in seen.in_use and name not in keep
             and wall - when >= settings.config_keep_s]
    try:
        text = migparted.with_config(seen.text, {"version": "v1", "mig-configs": missing},
                                     drop=stale, where=where)
    except (errors.ConfigError, KeyError) as exc:
        return f"{where}: {exc}"
    if len(text.encode()) > CONFIG_TEXT_MAX:
        return (f"{where}: with {', '.join(missing)} its config.yaml would be "
                f"{len(text.encode()):,} bytes, over the {CONFIG_TEXT_MAX:,} migfit writes "
                "(a ConfigMap holds at most 1 MiB): remove configs no node uses")
    kept = {n: t for n, t in seen.added.items() if n not in stale}
    kept.update((name, wall) for name in missing)
    return {"metadata": {**_precondition(seen.resource_version),
                         "annotations": {keys.ANNOTATION_CONFIGS: keys.encode_configs(kept)}},
            "data": {migparted.CONFIGMAP_KEY: text}}


def policy_reads(policies: Sequence[Mapping[str, Any]], configmap: tuple[str, str]
                 ) -> tuple[bool | None, str]:
    """Whether the GPU Operator's ClusterPolicies have the MIG Managers read ``configmap``
    (``spec.migManager.config.name``; the GPU Operator's default when unset), and why not.
    None: no ClusterPolicy to tell (a MIG Manager deployed without the GPU Operator)."""
    if not policies:
        return None, "no ClusterPolicy (nvidia.com/v1) found"
    wrong = []
    def field(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
        value = obj.get(key)
        return value if isinstance(value, Mapping) else {}

    for obj in policies:
        manager = field(field(obj, "spec"), "migManager")
        name = field(manager, "config").get("name") or migparted.DEFAULT_CONFIGMAP
        policy = str((obj.get("metadata") or {}).get("name") or "?")
        if manager.get("enabled") is False:
            wrong.append(f"ClusterPolicy {policy} has the MIG Manager disabled "
                         "(spec.migManager.enabled: false)")
        elif name != configmap[1]:
            wrong.append(f"ClusterPolicy {policy} has the MIG Managers read ConfigMap {name} "
                         f"(spec.migManager.config.name), not {configmap[1]}")
    if wrong:
        return False, "; ".join(wrong)
    return True, ""


def _where(settings: Settings) -> str:
    assert settings.custom_configs is not None
    ns, name = settings.custom_configs
    return f"ConfigMap {ns}/{name}"


# ---------------------------------------------------------------- transitions


def advance(run: Run, seen: Seen, clock: Context) -> Step:
    """The next step of ``run`` given what its last call returned (None: nothing yet)."""
    if run.phase is Phase.DONE:
        raise ValueError(f"the re-layout of {run.node} is over")
    if not clock.leading:
        return _done(run, "lost-leadership", "this replica no longer holds the Lease; what "
                     "was written stays, and the next leader adopts the node")
    return _PHASES[run.phase](run, seen, clock)


def _done(run: Run, result: str, reason: str = "", *emits: Emit) -> Step:
    outcome = Outcome(run.node, result, reason)
    return Step(dataclasses.replace(run, phase=Phase.DONE, ending=outcome), Done(outcome),
                emits)


def _finish(run: Run, *emits: Emit) -> Step:
    assert run.ending is not None
    return Step(dataclasses.replace(run, phase=Phase.DONE), Done(run.ending), emits)


def _unexpected(run: Run, seen: Seen) -> Step:
    return _done(run, "error", f"internal: {type(seen).__name__} in phase {run.phase}")


def _taint_text() -> str:
    t = keys.relayout_taint()
    return f"{t['key']}={t['value']}:{t['effect']}"


def _annotate(record: keys.RelayoutRecord) -> dict[str, Any]:
    return {keys.ANNOTATION_RELAYOUT: keys.encode_relayout(record)}


def _without_ours(taints: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A node's taints but migfit's (the whole list goes into a merge patch)."""
    return [dict(t) for t in taints if t.get("key") != keys.TAINT_RELAYOUT]


def _precondition(resource_version: str) -> dict[str, Any]:
    # A merge patch carrying metadata.resourceVersion is refused with 409 Conflict (and
    # changes nothing) when the object was written since that version was read.
    return {"resourceVersion": resource_version} if resource_version else {}


def _retry(run: Run, brief: str, clock: Context, *, then: Phase, gave_up: str) -> Step:
    """Back off and go on in phase ``then``, or end ``interrupted`` after ``write_retry_s``."""
    settings = clock.settings
    since = clock.now if run.since is None else run.since
    if clock.now - since >= settings.write_retry_s:
        return _done(run, "interrupted", f"{gave_up} ({brief}); what was written stays, and "
                     "a later pass resumes the node")
    failing = run.failing + 1
    return Step(dataclasses.replace(run, phase=then, since=since, failing=failing),
                Sleep(settings.backoff(failing)))


def _adopt(run: Run, seen: Seen, clock: Context) -> Step:
    if seen is None:
        return Step(run, ReadNode())
    if isinstance(seen, CallFailed):
        if run.resume is Phase.WAIT and seen.retryable:
            # Waiting is what the view says: its timers and backoff apply while the API fails.
            return _wait(dataclasses.replace(run, phase=Phase.WAIT), seen, clock)
        return _done(run, "skipped", f"cannot read the node to adopt it ({seen.brief}); a "
                     "later pass tries again")
    if not isinstance(seen, NodeSeen):
        return _unexpected(run, seen)
    resumed = adopt(seen.node, overdue=run.overdue)
    if resumed is None:
        return _done(run, "skipped", "no longer under re-layout")
    # WAIT and RELEASE go on from the node just read; CHECK and FAIL begin with their call.
    first = seen if resumed.phase in (Phase.WAIT, Phase.RELEASE) else None
    return _PHASES[resumed.phase](resumed, first, clock)


def _read(run: Run, seen: Seen, clock: Context) -> Step:
    if seen is None:
        return Step(run, ReadNode())
    if isinstance(seen, CallFailed):
        return _done(run, "skipped", f"cannot read the node ({seen.brief}); nothing was "
                     "changed, a later pass tries again")
    if not isinstance(seen, NodeSeen):
        return _unexpected(run, seen)
    node = seen.node
    record = keys.relayout_of(node.annotations)
    if node.relayout_tainted or failed(node) or (record is not None and record.active):
        return _done(run, "skipped", "already under re-layout or failed")
    if node.config_state in keys.REPARTITIONING_STATES:
        return _done(run, "skipped", "the MIG Manager is busy on it")
    if node.config == run.record.target:
        return _done(run, "skipped", f"{keys.LABEL_CONFIG} is {node.config} already (the "
                     "advice came from a view that has not caught up)")
    if run.record.running and node.config != run.advised_from:
        # A busy node's kept GPUs are kept only if the layout is still the advised one.
        return _done(run, "skipped", f"{keys.LABEL_CONFIG} changed since the advice "
                     f"({run.advised_from} -> {node.config}); nothing was changed")
    claim = run.record.but(state=_STATES.TAINTED, from_config=node.config)
    body = {"metadata": {**_precondition(seen.resource_version), "annotations": _annotate(claim)},
            "spec": {"taints": [*(dict(t) for t in seen.taints), keys.relayout_taint()]}}
    return Step(dataclasses.replace(run, phase=Phase.CLAIM, record=claim), Patch(body))


def _claim(run: Run, seen: Seen, clock: Context) -> Step:
    if isinstance(seen, Written):
        return Step(dataclasses.replace(run, phase=Phase.CHECK, since=clock.now, failing=0),
                    ListPods())
    if not isinstance(seen, CallFailed):
        return _unexpected(run, seen)
    if seen.conflict or seen.retryable:
        # Nothing changed, or the patch landed and its answer was lost (a 409 then comes from
        # a retry of it): a read tells which.
        note = ("the node changed between reading it and tainting it (409 Conflict)"
                if seen.conflict else f"tainting failed ({seen.brief})")
        return Step(dataclasses.replace(run, phase=Phase.CONFIRM, note=note), ReadNode())
    return _done(run, "error", f"the API refused the taint ({seen.brief}); nothing was changed")


def _confirm(run: Run, seen: Seen, clock: Context) -> Step:
    if isinstance(seen, CallFailed):
        return _done(run, "skipped", f"{run.note}, and the node could not be read again "
                     f"({seen.brief}); had the taint landed, its record lets a later pass adopt "
                     "the node")
    if not isinstance(seen, NodeSeen):
        return _unexpected(run, seen)
    record = keys.relayout_of(seen.node.annotations)
    if (seen.node.relayout_tainted and record is not None
            and record.state is _STATES.TAINTED and record.target == run.record.target):
        # The patch landed although its answer was lost: go on.
        return Step(dataclasses.replace(run, phase=Phase.CHECK, since=clock.now, failing=0),
                    ListPods())
    if seen.node.relayout_tainted or (record is not None and record.active):
        return _done(run, "skipped", f"{run.note}, and the node is now under another re-layout")
    return _done(run, "skipped", f"{run.note}; nothing was changed, a later pass tries again")


def _gpu_pods(pods: Iterable[records.PodRecord], node: str) -> list[records.PodRecord]:
    """GPU pods bound to ``node`` (holding their instances), by namespace/name."""
    return sorted((p for p in pods if p.node == node and p.holds_instances and p.requests),
                  key=lambda p: p.key)


def _check(run: Run, seen: Seen, clock: Context) -> Step:
    if seen is None and run.record.running and not clock.settings.apply_busy_nodes:
        # A run adopted from a replica that had --apply-busy-nodes (a rollout that turned
        # it off): only new starts were guarded, and the adopted run set the label anyway.
        return _abort(run, clock, "it re-lays out a node with pods running on it and "
                      "--apply-busy-nodes is off; nothing was changed")
    if seen is None or isinstance(seen, Slept):
        since = clock.now if run.since is None else run.since
        return Step(dataclasses.replace(run, since=since), ListPods())
    if isinstance(seen, CallFailed):
        if seen.retryable:
            return _retry(run, seen.brief, clock, then=Phase.CHECK,
                          gave_up="listing the node's pods kept failing")
        return _fail(run, clock, "error", f"cannot list the node's pods ({seen.brief})")
    if not isinstance(seen, PodsSeen):
        return _unexpected(run, seen)
    hard, overlap = _busy_findings(run.record, seen.pods, run.node)
    if hard is None and overlap and clock.settings.gpu_usage:
        checked, placed = run.checked, run.placed
        if (placed is not None and checked is not None
                and _uids(seen, run.node) == _uids(checked, run.node)):
            # The same pods as the report placed, listed just now: judge and go on at once.
            refused = busy_check(run.record, seen.pods, run.node, placed=placed)
            if refused is not None:
                return _refuse(run, clock, refused)
            return _checked(dataclasses.replace(run, checked=None, placed=None), seen, clock)
        # Which GPU holds those pods: a DCGM report of the state after this list.
        first = clock.now if run.usage_since is None else run.usage_since
        if clock.now - first >= 2 * clock.settings.usage_wait_s:
            # The pods changed between every list and its report: give up (and rest).
            return _refuse(run, clock, f"the node's GPU pods kept changing while their GPUs "
                           f"were being told ({clock.now - first:.0f}s)")
        return Step(dataclasses.replace(run, phase=Phase.USAGE, checked=seen, placed=None,
                                        listed_at=clock.now, usage_since=first), ReadUsage())
    refused = busy_check(run.record, seen.pods, run.node)
    if refused is not None:
        return _refuse(run, clock, refused)
    return _checked(run, seen, clock)


def _uids(pods: PodsSeen, node: str) -> frozenset[str]:
    return frozenset(p.uid for p in _gpu_pods(pods.pods, node))


def _usage(run: Run, seen: Seen, clock: Context) -> Step:
    """Wait for a DCGM report that shows the node after CHECK's pod list (scraped at least
    ``exporter_collect_s`` after it), judge by it, then list the pods once more (CHECK)."""
    checked, listed_at = run.checked, run.listed_at
    assert checked is not None and listed_at is not None
    if seen is None or isinstance(seen, Slept):
        return Step(run, ReadUsage())
    if not isinstance(seen, UsageSeen):
        return _unexpected(run, seen)
    settings = clock.settings
    if seen.gpus is None or seen.at is None or seen.at < listed_at + settings.exporter_collect_s:
        waited = clock.now - listed_at
        if waited >= settings.usage_wait_s:
            return _refuse(run, clock, f"no DCGM exporter report of the node collected after "
                           f"its pods were listed came within {settings.usage_wait_s:.0f}s, so "
                           "which GPU holds its pods is not known")
        return Step(run, Sleep(min(settings.poll_s, settings.usage_wait_s - waited)))
    refused = busy_check(run.record, checked.pods, run.node, placed=seen.gpus)
    if refused is not None:
        return _refuse(run, clock, refused)
    return Step(dataclasses.replace(run, phase=Phase.CHECK, placed=seen.gpus, since=clock.now,
                                    failing=0), ListPods())


def _checked(run: Run, seen: PodsSeen, clock: Context) -> Step:
    """CHECK passed on ``seen``: record the pods that stay, then the config or the label.

    After a label patch whose answer was lost (it may have landed, and the MIG Manager
    begun), the pods kept before keep their first restart counts, and stay kept whatever
    their phase now: what happened since is checked, not made the new baseline."""
    run = dataclasses.replace(run, checked=None, placed=None, listed_at=None, usage_since=None)
    kept = kept_of(seen, run.node)
    if run.label_tried and run.record.kept:
        before = {k.uid for k in run.record.kept}
        kept = (*run.record.kept, *(k for k in kept if k.uid not in before))
    run = dataclasses.replace(run, record=run.record.but(kept=kept))
    custom = run.record.config is None
    if not run.config_ready and (custom or clock.settings.custom_configs is not None):
        if clock.settings.custom_configs is None:
            return _abort(run, clock, f"its target {run.record.target} is a custom config "
                          "and --apply-custom-configs is off; nothing was changed")
        return Step(dataclasses.replace(run, phase=Phase.CONFIG, since=clock.now, failing=0),
                    ReadConfigMap())
    return Step(dataclasses.replace(run, phase=Phase.VERIFY, since=clock.now, failing=0),
                ReadNode())


def _verify(run: Run, seen: Seen, clock: Context) -> Step:
    """Read the node right before the label: since the claim (up to ``usage_wait_s`` or
    ``config_sync_s`` ago) someone may have set ``nvidia.com/mig.config`` themselves, and the
    MIG Manager be applying it. The label goes only onto the node as claimed (taint and
    ``tainted`` record still there, the label still ``from``, the MIG Manager idle), with
    the resourceVersion read as precondition: a write in between is a 409 and a new read,
    never an overwrite."""
    if seen is None or isinstance(seen, Slept):
        return Step(run, ReadNode())
    if isinstance(seen, CallFailed):
        if seen.retryable:
            return _retry(run, seen.brief, clock, then=Phase.VERIFY,
                          gave_up="reading the node before setting its label kept failing")
        return _fail(run, clock, "error", f"cannot read the node before setting "
                     f"{keys.LABEL_CONFIG} ({seen.brief})")
    if not isinstance(seen, NodeSeen):
        return _unexpected(run, seen)
    node, target = seen.node, run.record.target
    mark = keys.relayout_of(node.annotations)
    if mark is not None and mark.state is _STATES.APPLYING and mark.target == target:
        # A label patch of ours landed (a 409 answering a retry of it, or a lost answer).
        if node.config == target:
            return _labelled(run, seen, clock)
        return _fail(run, clock, "failed", f"{keys.LABEL_CONFIG} was changed to "
                     f"{node.config!r} by someone else right after migfit set it")
    if (not node.relayout_tainted or mark is None or mark.state is not _STATES.TAINTED
            or mark.target != target):
        return _refuse(run, clock, f"the taint {keys.TAINT_RELAYOUT} or the re-layout record "
                       "was removed or changed before the label was set (by an operator?)")
    before = mark.from_config
    if node.config != before:
        return _refuse(run, clock, f"{keys.LABEL_CONFIG} was changed from {before!r} to "
                       f"{node.config!r} by someone else since migfit tainted the node (the "
                       "MIG Manager applies theirs; migfit does not overwrite it)")
    if node.config_state in keys.REPARTITIONING_STATES:
        return _refuse(run, clock, f"the MIG Manager is at work on the node "
                       f"({keys.LABEL_CONFIG_STATE}={node.config_state}) since migfit tainted "
                       "it")
    applying = run.record.but(state=_STATES.APPLYING, started=keys.rfc3339(clock.wall))
    body = {"metadata": {**_precondition(seen.resource_version),
                         "labels": {keys.LABEL_CONFIG: target},
                         "annotations": _annotate(applying)}}
    return Step(dataclasses.replace(run, phase=Phase.LABEL, record=applying), Patch(body))


def _refuse(run: Run, clock: Context, cause: str) -> Step:
    """CHECK or USAGE refuses the change for ``cause``: abort (taint and record removed,
    nothing else changed). Once a label patch was sent (its answer lost, so it may have
    landed and the MIG Manager be at work) nothing is known to be unchanged: the run fails
    and the taint stays."""
    if run.label_tried:
        return _fail(run, clock, "failed", f"{cause}, after a {keys.LABEL_CONFIG} patch whose "
                     "answer was lost (it may have landed)")
    return _abort(run, clock, f"{cause}; nothing was changed, the taint and the record are "
                  "removed")


def _abort(run: Run, clock: Context, reason: str) -> Step:
    """End before the label was set: the taint and the record go, nothing else changed
    (before any label patch: after one CHECK and USAGE refuse through :func:`_refuse`)."""
    return Step(dataclasses.replace(run, phase=Phase.RELEASE, since=clock.now, failing=0,
                                    ending=Outcome(run.node, "aborted", reason)), ReadNode())


def _config(run: Run, seen: Seen, clock: Context) -> Step:
    """Read the ConfigMap; write the custom target into it unless it is there already."""
    if seen is None or isinstance(seen, Slept):
        return Step(run, ReadConfigMap())
    where = _where(clock.settings)
    if isinstance(seen, CallFailed):
        if seen.retryable:
            return _retry(run, seen.brief, clock, then=Phase.CONFIG,
                          gave_up=f"reading {where} kept failing")
        fix = ("create it as a copy of the GPU Operator's default-mig-parted-config and name "
               "it in the ClusterPolicy's migManager.config.name (docs/relayout.md, custom "
               "configs)" if seen.not_found else "the extender's Role needs get on it")
        return _abort(run, clock, f"cannot read {where} ({seen.brief}): {fix}; nothing was "
                      "changed")
    if not isinstance(seen, ConfigMapSeen):
        return _unexpected(run, seen)
    record = run.record
    target = record.target
    if seen.unread is not None and record.config is None:
        # Checked here too, not only before a start: a run adopted after a restart or a
        # change of leader wrote its config and set the label anyway (an outside check).
        return _abort(run, clock, f"{seen.unread}: the MIG Manager would not find the custom "
                      f"config {target}; nothing was changed")
    if seen.text is None:
        return _abort(run, clock, f"{where} has no data.{migparted.CONFIGMAP_KEY}, the file the "
                      "MIG Manager reads: put its configs under that key; nothing was changed")
    if record.config is not None:
        # A named config: one migfit wrote lately (the advice reads the ConfigMap every
        # minute, so it may call it named before the MIG Managers' files have it) waits out
        # the rest of the sync; any other has been there since before the advice.
        added = seen.added.get(target)
        return _synced(run, clock, 0.0 if added is None else _left(clock, added))
    if record.mig_parted is None:
        return _abort(run, clock, f"the record of the custom config {target} carries no "
                      "mig_parted document; nothing was changed")
    try:
        same = migparted.same_config(migparted.parse(seen.text, where=where), target,
                                     record.mig_parted)
    except (errors.ConfigError, KeyError) as exc:
        return _abort(run, clock, f"{where}: {exc}; migfit writes nothing into a config it "
                      "cannot read, and nothing was changed")
    if same is False:
        return _abort(run, clock, f"{where} already has a config {target} with other "
                      "entries (not written by migfit, or edited since); rename or remove "
                      "it. Nothing was changed")
    if same:
        # There already: wait out what is left of its way to the MIG Managers' files (all
        # of it when migfit did not add it and cannot tell since when it is there).
        added = seen.added.get(target)
        return _synced(run, clock, _left(clock, clock.wall if added is None else added))
    body = _addition(seen, {target: record.mig_parted["mig-configs"][target]},
                     wanted=(target,), wall=clock.wall, settings=clock.settings)
    if isinstance(body, str):
        return _abort(run, clock, f"{body}; nothing was changed")
    return Step(dataclasses.replace(run, phase=Phase.CONFIG_WRITE), PatchConfigMap(body))


def _config_write(run: Run, seen: Seen, clock: Context) -> Step:
    where = _where(clock.settings)
    if isinstance(seen, Written):
        return _synced(run, clock, clock.settings.config_sync_s, emit=Emit(
            REASON_CONFIG, "Normal", f"Added config {run.record.target} to {where}; the label "
            f"is set in {clock.settings.config_sync_s:.0f}s, once the MIG Manager's file has "
            "it"))
    if not isinstance(seen, CallFailed):
        return _unexpected(run, seen)
    if seen.conflict or seen.retryable:
        # Someone wrote it since the read (or the answer was lost): read it again.
        return _retry(run, seen.brief, clock, then=Phase.CONFIG,
                      gave_up=f"writing {where} kept failing")
    return _abort(run, clock, f"the API refused writing {where} ({seen.brief}): the "
                  "extender's Role needs patch on it (deploy/components/apply-custom-configs/"
                  "rbac.yaml grants it on migfit-mig-parted-config); nothing was changed")


def _left(clock: Context, added: float) -> float:
    """What is left of ``config_sync_s`` for a config written at ``added`` (POSIX; a stamp
    from a clock ahead of ours counts as now)."""
    return clock.settings.config_sync_s - max(0.0, clock.wall - added)


def _synced(run: Run, clock: Context, left: float, *, emit: Emit | None = None) -> Step:
    emits = () if emit is None else (emit,)
    if left > 0:
        return Step(dataclasses.replace(run, phase=Phase.SYNC), Sleep(left), emits)
    # In the ConfigMap long enough: check the pods once more, then set the label.
    return Step(dataclasses.replace(run, phase=Phase.CHECK, config_ready=True, since=clock.now,
                                    failing=0), ListPods(), emits)


def _sync(run: Run, seen: Seen, clock: Context) -> Step:
    if not isinstance(seen, Slept):
        return _unexpected(run, seen)
    return _synced(run, clock, 0.0)


def _label(run: Run, seen: Seen, clock: Context) -> Step:
    if isinstance(seen, Written):
        started = Emit(REASON_STARTED, "Normal", f"Re-laying out to {run.record.target}: "
                       f"tainted {_taint_text()}, set {keys.LABEL_CONFIG}")
        return Step(dataclasses.replace(run, phase=Phase.WAIT, label_at=clock.now,
                                        pending_since=clock.now, failing=0), ReadNode(),
                    (started,))
    if not isinstance(seen, CallFailed):
        return _unexpected(run, seen)
    since = clock.now if run.since is None else run.since
    if seen.conflict:
        # The node was written since VERIFY read it (or a retry of ours that landed was
        # refused): read it again and decide again.
        if clock.now - since >= clock.settings.write_retry_s:
            return _done(run, "interrupted", f"setting {keys.LABEL_CONFIG} kept meeting "
                         "writes of the node (409 Conflict); what was written stays, and a "
                         "later pass resumes the node")
        return Step(dataclasses.replace(run, phase=Phase.VERIFY, since=since), ReadNode())
    if seen.retryable:
        # Did it land? Read the node: if so, wait for the MIG Manager as if the answer had
        # come; if not, check the pods again before setting it again.
        return _retry(dataclasses.replace(run, label_tried=True), seen.brief, clock,
                      then=Phase.LABELLED, gave_up=f"setting {keys.LABEL_CONFIG} kept failing")
    return _fail(run, clock, "error", f"setting {keys.LABEL_CONFIG} failed ({seen.brief})")


def _labelled(run: Run, seen: Seen, clock: Context) -> Step:
    """After a label patch whose answer was lost: read the node to tell whether it landed."""
    if seen is None or isinstance(seen, Slept):
        return Step(run, ReadNode())
    if isinstance(seen, CallFailed):
        if seen.retryable:
            return _retry(run, seen.brief, clock, then=Phase.LABELLED,
                          gave_up="reading the node after a lost label answer kept failing")
        return _fail(run, clock, "error", f"cannot read the node after a lost label answer "
                     f"({seen.brief})")
    if not isinstance(seen, NodeSeen):
        return _unexpected(run, seen)
    mark = keys.relayout_of(seen.node.annotations)
    if (seen.node.config == run.record.target and mark is not None
            and mark.state is _STATES.APPLYING):
        # It landed, with the record (and its kept pods) as sent: wait as usual.
        started = Emit(REASON_STARTED, "Normal", f"Re-laying out to {run.record.target}: "
                       f"tainted {_taint_text()}, set {keys.LABEL_CONFIG}")
        return Step(dataclasses.replace(run, phase=Phase.WAIT, record=mark, label_at=clock.now,
                                        pending_since=clock.now, failing=0, since=clock.now),
                    ReadNode(), (started,))
    return Step(dataclasses.replace(run, phase=Phase.CHECK, since=clock.now, failing=0),
                ListPods())


def _wait(run: Run, seen: Seen, clock: Context) -> Step:
    settings = clock.settings
    if run.label_at is None:
        # Adopted: from when the label was set, by the record's stamp; a stamp from a clock
        # ahead of ours counts as now. The MIG Manager sets pending as soon as it sees the
        # label, so pending may have lasted since then too.
        started = run.record.started_at()
        elapsed = max(0.0, clock.wall - (clock.wall if started is None else started))
        run = dataclasses.replace(run, label_at=clock.now - elapsed,
                                  pending_since=clock.now - elapsed)
    label_at = run.label_at
    assert label_at is not None
    if seen is None or isinstance(seen, Slept):
        return Step(run, ReadNode())
    target = run.record.target
    expected = dict(run.record.expected)
    if isinstance(seen, Written):  # the taint is off (below): on with the pods
        return Step(dataclasses.replace(run, untainted=True), ListPods())
    if isinstance(seen, CallFailed) and seen.conflict and clock.now - label_at < settings.timeout_s:
        return Step(run, ReadNode())  # the node changed since it was read: read it again
    if isinstance(seen, CallFailed):
        if not seen.retryable:
            return _fail(run, clock, "error", f"API error: {seen.brief}")
        failing = run.failing + 1
        left = settings.timeout_s - (clock.now - label_at)
        if left <= 0:
            return _fail(run, clock, "timeout", f"no success with the new allocatable within "
                         f"{settings.timeout_s:.0f}s (the API kept failing: {seen.brief})")
        return Step(dataclasses.replace(run, failing=failing),
                    Sleep(min(left, settings.backoff(failing))))
    if isinstance(seen, PodsSeen):
        gone = []
        for p in _gpu_pods(seen.pods, run.node):
            missing = sorted(str(q) for q in p.mig_requests if str(q) not in expected)
            if missing:
                gone.append(f"{p.key} ({', '.join(missing)})")
        if gone:
            return _fail(run, clock, "failed", f"pods were bound to the node during the "
                         f"re-layout with profiles the new layout {target} does not have: "
                         f"{'; '.join(gone)}")
        harmed, vanished = kept_check(run.record, seen)  # on every list, not only the last
        if harmed is not None:
            return _fail(run, clock, "failed", harmed)
        if run.settled:
            note = ""
            if run.record.kept:
                checked = len(run.record.kept) - len(vanished)
                note = (f"{checked} pod(s) on the GPUs it kept run on, none restarted"
                        + (f"; deleted meanwhile, not checked: {', '.join(vanished)}"
                           if vanished else ""))
            ending = Outcome(run.node, "success", note)
            return Step(dataclasses.replace(run, phase=Phase.RELEASE, since=clock.now,
                                            failing=0, ending=ending), ReadNode())
        return Step(run, Sleep(settings.poll_s))
    if not isinstance(seen, NodeSeen):
        return _unexpected(run, seen)
    node = seen.node
    # (untainted: also a run adopted after its taint was taken off at success)
    run = dataclasses.replace(run, failing=0,
                              untainted=run.untainted or not node.relayout_tainted,
                              acted=run.acted or node.config_state in keys.REPARTITIONING_STATES)
    state = node.config_state
    mark = keys.relayout_of(node.annotations)
    if mark is None or mark.state is not _STATES.APPLYING:
        # An operator cleared it, or a view this run was adopted from was stale.
        return _done(run, "skipped", f"no longer under re-layout ({keys.ANNOTATION_RELAYOUT} "
                     f"is {'gone' if mark is None else mark.state.value})")
    if node.config != target:
        return _fail(run, clock, "failed", f"{keys.LABEL_CONFIG} was changed to "
                     f"{node.config!r} by someone else")
    if state == "failed":
        hint = ("" if run.record.config is not None else
                f"; {target} is a custom config: if the MIG Manager's log says it is not in "
                "its config file, the ConfigMap had not reached the node yet (with "
                "--apply-custom-configs, raise --config-sync)")
        return _fail(run, clock, "failed",
                     f"the MIG Manager reported mig.config.state=failed{hint}")
    # Instances, not the advertised count: time-slicing (GFD's <resource>.replicas) shares
    # each instance among that many pods, and the device plugin advertises each so often.
    if state == "success" and node.instances == expected:
        return Step(dataclasses.replace(run, settled=True), ListPods())
    pending_since = run.pending_since
    if state == "pending":
        pending_since = clock.now if pending_since is None else pending_since
        if clock.now - pending_since >= settings.wedge_s:
            return _fail(run, clock, "wedged", f"mig.config.state stuck at pending for "
                         f"{clock.now - pending_since:.0f}s")
    else:
        pending_since = None
    if clock.now - label_at >= settings.timeout_s:
        return _fail(run, clock, "timeout", f"no success with the new allocatable within "
                     f"{settings.timeout_s:.0f}s (state {state!r}, instances "
                     f"{node.instances})")
    if (state == "success" and node.relayout_tainted and not any(node.instances.values())
            and (run.acted or clock.now - label_at >= settings.untaint_after_s)):
        # The MIG Manager is done (seen at work since the label, or long enough ago; success,
        # and no instance advertised: the device plugin it paused is gone) and has restored
        # the operands' deploy labels, but their DaemonSets create no pod on a node with a
        # NoSchedule taint they do not tolerate (the GPU Operator's default tolerations are
        # nvidia.com/gpu's only): with migfit's taint kept until the new instances showed,
        # the device plugin never came back and every re-layout timed out. The record stays
        # "applying" until the checks below pass (the advisor, the filter and `status` read
        # it as a re-layout under way), and a failure puts the taint back (FAIL).
        return Step(run, Patch({"metadata": _precondition(seen.resource_version),
                                "spec": {"taints": _without_ours(seen.taints)}}))
    return Step(dataclasses.replace(run, pending_since=pending_since, settled=False),
                ListPods())


def _release(run: Run, seen: Seen, clock: Context) -> Step:
    ending = run.ending
    assert ending is not None
    since = clock.now if run.since is None else run.since
    run = dataclasses.replace(run, since=since)
    if seen is None or isinstance(seen, Slept):
        return Step(run, ReadNode())
    if isinstance(seen, NodeSeen):
        node = seen.node
        if not node.relayout_tainted and keys.ANNOTATION_RELAYOUT not in node.annotations:
            return _finish(run, *_release_events(run))  # an earlier patch landed
        labels = ({keys.LABEL_RELAYOUT_RECOMMENDED: None}
                  if ending.result == "success" else {})
        body = {"metadata": {**_precondition(seen.resource_version),
                             "annotations": {keys.ANNOTATION_RELAYOUT: None},
                             **({"labels": labels} if labels else {})},
                "spec": {"taints": _without_ours(seen.taints)}}
        return Step(run, Patch(body))
    if isinstance(seen, Written):
        return _finish(run, *_release_events(run))
    if not isinstance(seen, CallFailed):
        return _unexpected(run, seen)
    what = "removing the taint and the record"
    if seen.conflict and clock.now - since < clock.settings.write_retry_s:
        return Step(run, ReadNode())  # the node changed since the read: read it again
    if seen.retryable:
        return _retry(run, seen.brief, clock, then=Phase.RELEASE, gave_up=f"{what} kept failing")
    return _done(run, "error", f"{what} failed ({seen.brief}); the node stays tainted with its "
                 f"record (re-layout {ending.result}), and a later pass resumes it")


def _release_events(run: Run) -> tuple[Emit, ...]:
    assert run.ending is not None
    if run.ending.result == "success":
        kept = f"; {run.ending.reason}" if run.ending.reason else ""
        return (Emit(REASON_DONE, "Normal",
                     f"Re-laid out to {run.record.target}; taint removed{kept}"),)
    return (Emit(REASON_ABORTED, "Warning", f"Re-layout to {run.record.target} aborted: "
                 f"{run.ending.reason}"),)


def _fail(run: Run, clock: Context, result: str, reason: str) -> Step:
    record = run.record.but(state=_STATES.FAILED, result=result, reason=reason)
    run = dataclasses.replace(run, phase=Phase.FAIL, record=record, since=clock.now, failing=0,
                              ending=Outcome(run.node, result, reason))
    return _failing(run, None, clock)


def _failing(run: Run, seen: Seen, clock: Context) -> Step:
    assert run.ending is not None
    since = clock.now if run.since is None else run.since  # the first write's retries
    if run.untainted and (seen is None or isinstance(seen, Slept)):
        # The taint goes back on with the failure (the node's taints read first: the patch
        # replaces the list), so that a failed node is out of service as any other.
        return Step(dataclasses.replace(run, since=since), ReadNode())
    if seen is None or isinstance(seen, (Slept, NodeSeen)):
        body: dict[str, Any] = {"metadata": {"annotations": {
            **_annotate(run.record),
            keys.ANNOTATION_RELAYOUT_FAILED: keys.encode_failure(
                result=run.ending.result, reason=run.ending.reason)}}}
        if isinstance(seen, NodeSeen):
            body["metadata"].update(_precondition(seen.resource_version))
            body["spec"] = {"taints": [*_without_ours(seen.taints), keys.relayout_taint()]}
        return Step(dataclasses.replace(run, since=since), Patch(body))
    if (run.untainted and isinstance(seen, CallFailed) and seen.conflict
            and clock.now - since < clock.settings.write_retry_s):
        return Step(run, ReadNode())  # the node changed since it was read: read it again
    if isinstance(seen, Written):
        return _finish(run, Emit(
            REASON_FAILED, "Warning", f"Re-layout to {run.record.target} {run.ending.result}: "
            f"{run.ending.reason}. The taint {keys.TAINT_RELAYOUT} stays, and until it goes "
            "the node holds one of the --max-relayouts slots (no other re-layout takes its "
            f"place); once the node is fixed remove it and the {keys.ANNOTATION_RELAYOUT} and "
            f"{keys.ANNOTATION_RELAYOUT_FAILED} annotations ({clear_command(run.node)})"))
    if not isinstance(seen, CallFailed):
        return _unexpected(run, seen)
    settings = clock.settings
    assert run.since is not None
    if seen.retryable and clock.now - run.since < settings.write_retry_s:
        failing = run.failing + 1
        return Step(dataclasses.replace(run, failing=failing), Sleep(settings.backoff(failing)))
    ending = dataclasses.replace(run.ending, reason=(
        f"{run.ending.reason}; recording the failure failed too ({seen.brief}): the node keeps "
        "its taint and its re-layout record, and a later pass adopts it"))
    return Step(dataclasses.replace(run, phase=Phase.DONE, ending=ending), Done(ending))


_PHASES = {
    Phase.ADOPT: _adopt,
    Phase.READ: _read,
    Phase.CLAIM: _claim,
    Phase.CONFIRM: _confirm,
    Phase.CHECK: _check,
    Phase.USAGE: _usage,
    Phase.CONFIG: _config,
    Phase.CONFIG_WRITE: _config_write,
    Phase.SYNC: _sync,
    Phase.VERIFY: _verify,
    Phase.LABEL: _label,
    Phase.LABELLED: _labelled,
    Phase.WAIT: _wait,
    Phase.RELEASE: _release,
    Phase.FAIL: _failing,
}
