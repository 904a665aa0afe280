"""Where re-layout advice shows: ``GET /advice``, a metric, and node/pod marks in the API.

The advice itself is pure (``migfit.advisor``); this module caches it per cluster
``generation`` (and a short time bucket, since the grace period depends on the clock),
exports Prometheus gauges, and, when running against an API server, publishes it: node
annotation ``migfit.io/relayout`` (JSON), label ``migfit.io/relayout-recommended=true``
(removed when no longer true), and Events ``MigRelayoutRecommended`` on the node and
``WaitingForMigProfile`` on each waiting pod, deduplicated and rate-limited.

The advice is computed off the event loop, in a forked child (``AdviceCache.fresh``,
``forked``): filter and prioritize never wait behind it.

Every extender replica computes the advice (``GET /advice`` and the gauges answer on each), but
only the one holding the leader Lease (``migfit.extender.leader``, the apply mode's) publishes
it, so that two replicas neither write each Event twice nor race on the node marks. A replica
that gains the Lease starts publishing within a second; one that loses it stops before its next
write. The advice's Events have names derived from the object, the reason and the message
(``event_name``), so an Event another replica already wrote (the former leader, or this one
before a restart, or a create retried after its answer was lost) is answered 409 AlreadyExists
and counts as sent: a new leader re-emits none of them while they last (kube-apiserver's
``--event-ttl``, one hour by default). What it may send at once is, per object, the Event of a
message its predecessor held back for ``event_interval_s`` (that rate limit is in memory only).
The same message about the same object is likewise not recorded twice while its Event lasts;
it is sent again after ``EVENT_REFRESH_S`` (50 minutes), so that once kube-apiserver's
``--event-ttl`` (an hour by default) has deleted it, a pod still waiting shows why again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import prometheus_client
from prometheus_client.metrics_core import GaugeMetricFamily
from prometheus_client.registry import Collector

from migfit import advisor, cluster, errors, keys, kube, migparted, records
from migfit.extender import forked, relayout_machine
from migfit.extender import leader as leadership
from migfit.extender import usage as usage_

log = logging.getLogger(__name__)

ANNOTATION = keys.ANNOTATION_RELAYOUT
LABEL = keys.LABEL_RELAYOUT_RECOMMENDED
REASON_NODE = "MigRelayoutRecommended"
REASON_POD = "WaitingForMigProfile"
COMPONENT = "migfit-advisor"


Key = tuple[int, int, int, int, int]


class AdviceUnavailable(errors.MigfitError):
    """No advice could be computed yet (the one computation there was failed): why."""

    status = 503


#: How long one computation may run in its child before it is killed: a few times the
#: publisher's interval (30 s). 5,000 nodes with 2,900 pods waiting take about 6 s (2 cores).
DEFAULT_TIMEOUT_S = 120.0

#: The histogram of what stays on the event loop per computation (``AdviceCache.loop_blocked``).
LOOP_BLOCKED = "migfit_extender_advice_loop_blocked_duration_seconds"
#: Its steps: the fork (a copy of the page tables: grows with the process) and reading the
#: result back (grows with the advice).
LOOP_STEPS = ("fork", "unpickle")
# Measured outside the server: fork 35-40 ms in a 2 GiB process, unpickling 30-55 ms (0.8 MB).
_LOOP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5,
                 1.0)


class Advise(Protocol):
    """What computes the advice, with ``advisor.advise``'s signature (the default): the
    function the cache runs (in the child, off the loop)."""

    def __call__(self, state: cluster.Cluster, *, now: float,
                 settings: advisor.Settings | None = None,
                 config: migparted.Config | None = None,
                 recent: Mapping[str, float] | None = None,
                 usage: Mapping[str, advisor.GpuUse] | None = None) -> advisor.Advice: ...


class AdviceCache:
    """Advice for a Cluster, recomputed when its generation or the time bucket changes.

    ``get`` computes on the calling thread (the CLI, tests: nothing else waits on it). A
    server uses ``fresh`` (awaited: GET /advice, the publisher, the apply mode) and
    ``current`` (synchronous, for the gauges: the advice last computed, never computing on
    the loop): they compute in a forked child (``forked``), at most one at a time, so that
    filter and prioritize never wait behind the advisor. A computation that fails (raised,
    crashed, ran past ``timeout_s``, gave a result that cannot be pickled) is logged as one
    line and the advice computed before is kept. Where the platform cannot fork, or with
    ``off_loop=False``, they compute inline.

    ``advise`` is what computes it (``advisor.advise``). ``loop_blocked`` is a histogram, in
    no registry until the server registers it in its ``/metrics``, of the event loop's time
    per forked computation, by step: the fork and, when a result came back, unpickling it;
    both observed when the computation ends (one that is stopped is not observed).
    """

    def __init__(
        self,
        *,
        settings: advisor.Settings | None = None,
        config: migparted.Config | None = None,
        bucket_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        usage: usage_.UsageScraper | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        off_loop: bool = True,
        advise: Advise = advisor.advise,
    ) -> None:
        self.settings = settings or advisor.Settings()
        self.config = config
        self.bucket_s = bucket_s
        self.clock = clock
        # Which GPU holds each instance in use (--gpu-usage-from dcgm); None: the counts only.
        self.usage = usage
        self.timeout_s = timeout_s
        self.off_loop = off_loop and forked.AVAILABLE
        self.advise = advise
        self.loop_blocked = prometheus_client.Histogram(
            LOOP_BLOCKED, "Time the extender's event loop spends on one computation of the "
            "advice in a forked child, by step: the fork, unpickling its result",
            ["step"], buckets=_LOOP_BUCKETS, registry=None)
        for step in LOOP_STEPS:
            self.loop_blocked.labels(step=step)  # shown at 0 before the first
        self._key: Key | None = None
        self._configs = 0  # how many times the configs were set
        self._advice: advisor.Advice | None = None
        # The computation in flight (a task reading its child), and what failed last.
        self._flight: asyncio.Task[advisor.Advice | None] | None = None
        self._failed: tuple[Key, str] | None = None
        # The child computing now, for close.
        self.child: forked.Child[advisor.Advice] | None = None
        # Hysteresis (docs/relayout.md §6): node -> when this process saw its MIG layout
        # change ((mig.config, mig.config.state) differ from the last time it looked), and
        # what it saw then. A process starting knows of no change before it.
        self.recent: dict[str, float] = {}
        self._layouts: dict[str, tuple[str | None, str | None]] = {}
        self._layouts_generation: tuple[int, int] | None = None

    def set_config(self, config: migparted.Config | None) -> None:
        """A newly read mig-parted ConfigMap (None when unreadable): invalidates the cache."""
        self.config = config
        self._key = None
        self._configs += 1  # a computation in flight is of the configs before

    def _inputs(self, state: cluster.Cluster, now: float | None
                ) -> tuple[Key, Callable[[], Callable[[], advisor.Advice]]]:
        """The cache key of ``state`` now, and how to compute its advice: ``prepare()`` does
        the hysteresis bookkeeping (here, in this process, so that a child sees it) and
        returns the computation."""
        at = self.clock() if now is None else now
        use = self.usage.current() if self.usage is not None else None
        key = (id(state), state.generation, int(at // self.bucket_s),
               use.version if use is not None else -1, self._configs)

        def prepare() -> Callable[[], advisor.Advice]:
            self._seen_layouts(state, at)
            settings, config, recent = self.settings, self.config, self.recent
            return functools.partial(self.advise, state, now=at, settings=settings,
                                     config=config, recent=recent,
                                     usage=use.nodes if use is not None else None)

        return key, prepare

    def get(self, state: cluster.Cluster, *, now: float | None = None) -> advisor.Advice:
        """The advice, computed here when the cached one is not of ``state`` now."""
        key, prepare = self._inputs(state, now)
        if self._advice is None or key != self._key:
            self._advice = prepare()()
            self._key = key
        return self._advice

    def last(self) -> advisor.Advice | None:
        """The advice computed last (of whatever state and time), None before the first."""
        return self._advice

    def current(self, state: cluster.Cluster) -> advisor.Advice | None:
        """For the gauges: the advice computed last, never computed here while an event loop
        runs (a computation starts in the background when it is stale; None before the
        first). Without a running loop (no server) it is computed here, as ``get``."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self.get(state)
        if not self.off_loop:  # no fork here: inline, as before
            return self.get(state)
        self.refresh(state)
        return self._advice

    def refresh(self, state: cluster.Cluster) -> asyncio.Task[advisor.Advice | None] | None:
        """Start computing the advice of ``state`` now in the background when the cached one
        is stale and nothing computes (the child is forked here, now); the computation in
        flight (None: nothing to do)."""
        key, prepare = self._inputs(state, None)
        if self._flight is None and (self._advice is None or key != self._key):
            self._start(key, prepare)
        return self._flight

    async def fresh(self, state: cluster.Cluster, *, now: float | None = None
                    ) -> advisor.Advice:
        """The advice of ``state`` now, computed off the loop (or the computation in flight,
        of a moment ago). When computing fails: the advice computed before; with none,
        AdviceUnavailable."""
        if not self.off_loop:
            return self.get(state, now=now)
        key, prepare = self._inputs(state, now)
        if self._advice is not None and key == self._key:
            return self._advice
        if self._flight is None:
            self._start(key, prepare)
        # Shielded: a caller that gives up (a client gone) leaves it to the others.
        got = self._advice if self._flight is None else await asyncio.shield(self._flight)
        if got is not None:
            return got
        why = self._failed[1] if self._failed is not None else "it was stopped"
        raise AdviceUnavailable(f"the re-layout advice could not be computed: {why}")

    def _start(self, key: Key, prepare: Callable[[], Callable[[], advisor.Advice]]) -> None:
        """Fork the child computing the advice of ``key`` (not when that failed already)."""
        if self._failed is not None and self._failed[0] == key:
            return
        try:
            child = forked.start(prepare())
        except forked.ChildFailed as exc:
            self._fail(key, str(exc))
            return
        self.child = child
        self._flight = asyncio.get_running_loop().create_task(
            self._compute(key, child), name="advice")

    def _fail(self, key: Key, why: str) -> None:
        self._failed = (key, why)
        kept = ("the advice computed before is kept" if self._advice is not None
                else "there is no advice yet")
        log.error("advice: computing it failed: %s; %s", why, kept)

    async def _compute(self, key: Key, child: forked.Child[advisor.Advice]
                       ) -> advisor.Advice | None:
        """The child's advice, or when that fails the one before (None: none)."""
        try:
            try:
                done = await child.result(self.timeout_s)
            except forked.ChildFailed as exc:
                self.loop_blocked.labels(step="fork").observe(child.fork_s)
                self._fail(key, str(exc))
                return self._advice
            self.loop_blocked.labels(step="fork").observe(done.fork_s)
            self.loop_blocked.labels(step="unpickle").observe(done.read_s)
            log.debug("advice: computed in %.2fs by process %d (%d MiB of its own memory; "
                      "on the event loop: fork %.1f ms, unpickling %.1f ms)", done.seconds,
                      done.pid, done.memory_kib // 1024, done.fork_s * 1e3, done.read_s * 1e3)
            self._advice, self._key, self._failed = done.value, key, None
            return done.value
        finally:
            self.child = None
            self._flight = None

    async def close(self) -> None:
        """Stop the computation in flight: its child is killed and reaped."""
        flight, child = self._flight, self.child
        if child is not None:
            child.kill()
        if flight is not None:
            flight.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flight

    def _seen_layouts(self, state: cluster.Cluster, now: float) -> None:
        """Note the nodes whose ``nvidia.com/mig.config`` or its state changed since the last
        look (a re-layout began or ended), for the advisor's cool-down; forget those cooled."""
        if self._layouts_generation == (id(state), state.generation):
            return
        self._layouts_generation = (id(state), state.generation)
        seen: dict[str, tuple[str | None, str | None]] = {}
        for ns in state.nodes():
            now_is = (ns.node.config, ns.node.config_state)
            seen[ns.name] = now_is
            before = self._layouts.get(ns.name)
            if before is not None and before != now_is:
                self.recent[ns.name] = now
        self._layouts = seen
        cool = self.settings.cooldown_s
        self.recent = {n: t for n, t in self.recent.items() if n in seen and now - t < cool}


def advice_json(state: cluster.Cluster, cache: AdviceCache | None = None, *,
                now: float | None = None) -> dict[str, Any]:
    """The ``GET /advice`` body: the ``migfit advise --json`` document.

    From ``cache`` (the server's, shared with its publisher) when given, else computed afresh
    with the default settings. There is no process-wide cache: whoever assembles the
    extender builds one ``AdviceCache`` and hands it to the app and the publisher.
    """
    return dict((cache if cache is not None else AdviceCache()).get(state, now=now).to_json())


class _AdviceCollector(Collector):
    """The advice's gauges, read at scrape time from what ``Metrics.current`` returns."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The families without values: registering the collector computes nothing."""
        return self._families(None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        return self._families(self._metrics.current())

    @staticmethod
    def _families(advice: advisor.Advice | None) -> Iterator[GaugeMetricFamily]:
        recs = advice.recommendations if advice is not None else ()
        disruptive = sum(r.disruptive for r in recs)
        family = GaugeMetricFamily("migfit_relayout_recommendations",
                                   "Nodes recommended for a MIG re-layout", labels=["disruptive"])
        family.add_metric(["false"], len(recs) - disruptive)
        family.add_metric(["true"], disruptive)
        yield family
        yield GaugeMetricFamily(
            "migfit_relayout_waiting_pods",
            "Pods waiting past the grace period for a MIG instance no node can give them",
            value=len(advice.waiting) if advice is not None else 0)
        yield GaugeMetricFamily(
            "migfit_relayout_unserved_pods",
            "Waiting pods that no recommended re-layout would unblock nor one in flight serves",
            value=len(advice.unserved) if advice is not None else 0)
        held = GaugeMetricFamily(
            "migfit_relayout_burst_reserve_instances",
            "Free MIG instances kept from re-layouts ahead of demand for a burst of pods as "
            "large as the largest seen", labels=["model", "profile"])
        for model, fall in sorted((advice.ahead if advice is not None else {}).items()):
            for profile, count in sorted(fall.held.items()):
                held.add_metric([str(model), str(profile)], count)
        yield held


class Metrics:
    """Gauges of the advice (and counters the apply mode uses).

    With ``state`` the advice gauges show the advice ``cache`` computed last (pass the cache
    ``GET /advice`` reads; default: one of its own), so they agree with ``/advice`` whether
    or not a publisher runs (``migfit extender --cluster FILE`` has none). A scrape never
    computes it on the event loop (``AdviceCache.current``): a stale one starts a computation
    off the loop that the next scrape shows; none is shown before the first. Without
    ``state`` they show the advice last passed to ``observe``.
    """

    def __init__(self, registry: prometheus_client.CollectorRegistry, *,
                 state: cluster.Cluster | None = None, cache: AdviceCache | None = None) -> None:
        self._state = state
        self._cache = cache if cache is not None else AdviceCache()
        self._observed: advisor.Advice | None = None
        registry.register(_AdviceCollector(self))
        self.applied = prometheus_client.Counter(
            "migfit_relayout_applied", "Re-layouts driven by the apply mode, by outcome",
            ["result"], registry=registry)
        self.failed_nodes = prometheus_client.Gauge(
            "migfit_relayout_failed_nodes",
            "Nodes whose re-layout failed and wait for an operator", registry=registry)
        self.held_slots = prometheus_client.Gauge(
            "migfit_relayout_held_slots",
            "Failed re-layouts still tainted: --max-relayouts slots they hold until an "
            "operator clears them", registry=registry)
        self.in_progress = prometheus_client.Gauge(
            "migfit_relayout_in_progress", "Re-layouts being applied now", registry=registry)
        self.configs_added = prometheus_client.Counter(
            "migfit_relayout_configs_added",
            "Custom configs the apply mode wrote into the mig-parted ConfigMap "
            "(--apply-custom-configs)", registry=registry)
        self.configs_waiting = prometheus_client.Gauge(
            "migfit_relayout_configs_waiting",
            "Custom configs written but not yet old enough (--config-sync) to re-lay out to",
            registry=registry)

    def observe(self, advice: advisor.Advice) -> None:
        self._observed = advice

    def current(self) -> advisor.Advice | None:
        """The advice the gauges show now."""
        if self._state is not None:
            return self._cache.current(self._state)
        return self._observed


def annotation_value(rec: advisor.Recommendation) -> str:
    """The ``migfit.io/relayout`` annotation: the recommendation's ``recommended`` record."""
    return keys.encode_relayout(relayout_machine.planned(rec))


def _apply_modes(record: records.NodeState | None) -> bool:
    """The apply mode holds the node (its taint, or a record past ``recommended``): the
    publisher neither overwrites nor removes its record, which a new leader adopts by. A
    record a newer migfit wrote on a node without the taint is advice, like this one's."""
    if record is None:
        return False
    mark = keys.relayout_of(record.node.annotations)
    return record.node.relayout_tainted or (
        mark is not None and mark.state is not keys.RelayoutState.RECOMMENDED)


def _now_iso() -> str:
    return keys.rfc3339(time.time(), micro=False)


# metadata.name is a DNS subdomain (RFC 1123): at most 253 characters.
_NAME_MAX = 253
_DIGEST_CHARS = 16


def event_name(*, kind: str, name: str, namespace: str, uid: str | None, reason: str,
               message: str) -> str:
    """The name of the advice's Event about one object with this reason and message: the
    object's name, a dot, and a digest of what the Event says, the same in every replica, so
    that a second create of it is refused (409 AlreadyExists) rather than a second Event."""
    what = "\0".join((kind, namespace, name, uid or "", reason, message))
    digest = hashlib.sha256(what.encode()).hexdigest()[:_DIGEST_CHARS]
    # Each dot-separated label of a subdomain starts and ends alphanumeric: a name cut short
    # must not end with "-" or ".".
    stem = name[:_NAME_MAX - _DIGEST_CHARS - 1].rstrip("-.")
    return f"{stem}.{digest}"


async def emit_event(
    api: kube.KubeClient | Any,
    *,
    kind: str,
    name: str,
    namespace: str,
    uid: str | None,
    reason: str,
    message: str,
    event_type: str = "Normal",
    once: bool = False,
) -> bool:
    """A core/v1 Event about one object (node events go to the ``default`` namespace).

    ``once``: the Event is named by ``event_name``, and when it exists already (another
    replica, or an earlier process, wrote it) nothing is written and the answer is False.
    Otherwise the name is random and every call records an Event. True when one was created.
    """
    ns = namespace or "default"
    if kind == "Node" and not uid:
        # The kubelet's convention, which kubectl describe node searches by: a node's Events
        # carry involvedObject.uid = the node's name (client-go tools/record, NodeRecorder).
        uid = name
    message = message[:1024]
    event = (event_name(kind=kind, name=name, namespace=namespace, uid=uid, reason=reason,
                        message=message)
             if once else f"{name}.{uuid.uuid4().hex[:12]}")
    body = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": event, "namespace": ns},
        "involvedObject": {"kind": kind, "name": name, "apiVersion": "v1",
                           **({"namespace": namespace} if namespace else {}),
                           **({"uid": uid} if uid else {})},
        "reason": reason, "message": message, "type": event_type,
        "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
        "firstTimestamp": _now_iso(), "lastTimestamp": _now_iso(), "count": 1,
    }
    try:
        await kube.as_client(api).create_event(ns, body)
    except kube.ApiError as exc:
        # A create has no precondition: 409 is AlreadyExists, the Event is there.
        if once and exc.conflict:
            return False
        raise
    return True


class _Resigned(Exception):
    """This replica no longer holds the Lease: the pass stops before its next write."""


@dataclasses.dataclass(slots=True)
class _Sent:
    message: str
    at: float


#: How long the same message about the same object is not sent again. Under kube-apiserver's
#: default ``--event-ttl`` (one hour) an Event is gone after it; sent again after 50 minutes,
#: it is there again for a pod still waiting (``kubectl describe`` shows why), and while the
#: old one lasts the create of the same name is refused (409) and nothing changes.
EVENT_REFRESH_S = 3000.0


class Publisher:
    """Writes the advice into the API: node annotation and label, node and pod Events.

    Marks are written only when they change; stale marks (a node no longer recommended) are
    removed. An Event is sent once per object and message (again after
    ``event_refresh_s``, by when kube-apiserver has usually deleted it), and at most once per
    ``event_interval_s`` for the same object even when its message changes.

    With an ``elector`` it writes only while this replica holds the Lease (module docstring);
    without one (a single process, the tests) it always does.
    """

    def __init__(
        self,
        state: cluster.Cluster,
        api: kube.KubeClient | Any,
        *,
        cache: AdviceCache | None = None,
        metrics: Metrics | None = None,
        interval_s: float = 30.0,
        event_interval_s: float = 600.0,
        event_refresh_s: float = EVENT_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
        elector: leadership.LeaseElector | None = None,
    ) -> None:
        self.state = state
        # A KubeClient (migfit.kube); a bare kubernetes-asyncio ApiClient is wrapped in one.
        self.api = kube.as_client(api)
        self.cache = cache if cache is not None else AdviceCache()
        self.metrics = metrics
        self.interval_s = interval_s
        self.event_interval_s = event_interval_s
        self.event_refresh_s = event_refresh_s
        self.clock = clock
        self._marked: dict[str, str] = {}  # node -> annotation value written
        # (kind, namespace, name, uid, reason) -> the last Event sent; only for objects still
        # in the cluster (pruned on every pass), so it stays as small as the cluster.
        self._events: dict[tuple[str, str, str, str, str], _Sent] = {}
        self.elector = elector
        self._led = False  # whether the last pass ran as leader

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader

    async def run(self) -> None:
        """Publish every ``interval_s`` until cancelled; API errors are logged and retried.

        Nothing is published before the cache has synced: advice from a half-listed cluster
        would remove marks that are still true. A replica that does not lead checks every
        second, so that a new leader publishes within a second rather than a whole interval.
        """
        while not self.state.synced:
            await asyncio.sleep(0.2)
        while True:
            if not self.leading:
                self._led = False
                await asyncio.sleep(min(1.0, self.interval_s))
                continue
            try:
                await self.publish_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("advice: publishing failed: %s", exc)
            await asyncio.sleep(self.interval_s)

    async def publish_once(self) -> advisor.Advice:
        """One pass (a replica that does not lead writes nothing); the advice it was of."""
        advice = await self.cache.fresh(self.state)
        if self.metrics is not None:
            self.metrics.observe(advice)
        if not self.leading:
            self._led = False
            return advice
        if not self._led:
            # Leading anew: another leader may have changed or removed the marks this replica
            # wrote before, so what it remembers writing is no reason to skip a write.
            self._marked.clear()
            self._led = True
        try:
            await self._publish(advice)
        except _Resigned:
            self._led = False
            log.info("advice: the Lease was lost; publishing is left to the new leader")
        return advice

    async def _publish(self, advice: advisor.Advice) -> None:
        self._prune_events()
        wanted = {r.node: r for r in advice.recommendations}
        for name, rec in wanted.items():
            value = annotation_value(rec)
            st = self.state.node(name)
            if st is None or _apply_modes(st):
                continue
            current = st.node.annotations.get(ANNOTATION)
            labelled = st.node.labels.get(LABEL) == "true"
            if (self._marked.get(name) != value and not (current == value and labelled)
                    and not await self._mark(st, {"annotations": {ANNOTATION: value},
                                                  "labels": {LABEL: "true"}})):
                continue
            self._marked[name] = value
            changes = "; ".join(
                f"GPU {g.index}: {' '.join(g.before) or '(none)'} -> "
                f"{' '.join(g.after) or '(none)'}" for g in rec.gpus if g.changed)
            who = ", ".join(rec.unblocks[:10]) + (" ..." if len(rec.unblocks) > 10 else "")
            hurt = (f"; disrupts {', '.join(rec.disrupts)}" if rec.disrupts
                    else "; disrupts no pod")
            why = (f"would unblock {len(rec.unblocks)} pod(s): {who}" if not rec.ahead else
                   f"ahead of demand: {rec.balance}" if rec.balance else
                   f"ahead of demand, for instances the demand mix will lack: {rec.lacking}")
            await self._event("Node", name, "", None, REASON_NODE,
                              f"Re-layout to {rec.target} ({changes}) {why}{hurt}. "
                              f"{rec.sentence}")
        for name in self._stale(wanted):
            st = self.state.node(name)
            if st is not None and await self._mark(st, {"annotations": {ANNOTATION: None},
                                                        "labels": {LABEL: None}}):
                self._marked.pop(name, None)
        for w in advice.waiting:
            ns, _, pod_name = w.key.partition("/")
            helps = advice.for_pod(w.key)
            wants = ", ".join(f"{n} × {p}" for p, n in sorted(w.requests.items()))
            coming = advice.awaiting.get(w.key)
            short = ("free instances fit it on a node it may use, yet kube-scheduler has not "
                     "placed it: something migfit does not model keeps it off (pod affinity, "
                     "topology spread, volumes)" if w.fits_free else "no node has one free")
            if helps is not None:
                msg = (f"Waiting for {wants}: {short}. Re-laying out node "
                       f"{helps.node} to {helps.target} would serve it (migfit explain {w.key}).")
            elif coming is not None:
                msg = (f"Waiting for {wants}: {short}. Node {coming} is being "
                       f"re-laid out to a layout that will serve it (migfit explain {w.key}).")
            elif w.fits_free:
                msg = f"Waiting for {wants}: {short} (migfit explain {w.key})."
            else:
                msg = (f"Waiting for {wants}: no node has one free and no idle GPU can be "
                       f"re-laid out for it (migfit explain {w.key}).")
            record = self.state.find_pod(ns, pod_name)
            await self._event("Pod", pod_name, ns, record.uid if record else None,
                              REASON_POD, msg)

    def _check_leading(self) -> None:
        """Before each write: the Lease may have been lost since the pass began."""
        if not self.leading:
            raise _Resigned

    async def _mark(self, st: records.NodeState, metadata: dict[str, Any]) -> bool:
        """Write the node's marks, on condition that it is still as this view has it: the
        apply mode may have claimed it since (taint and record in one write), and a stale
        view must not overwrite that record. False when it changed (a later pass decides)."""
        self._check_leading()
        version = st.node.resource_version
        try:
            await self.api.patch_node(st.name, {"metadata": {
                **({"resourceVersion": version} if version else {}), **metadata}})
        except kube.ApiError as exc:
            if not exc.conflict:
                raise
            log.debug("advice: node %s changed since it was seen; marks left to a later pass",
                      st.name)
            return False
        return True

    def _stale(self, wanted: Mapping[str, advisor.Recommendation]) -> list[str]:
        names = set(self._marked)
        for st in self.state.nodes():
            if st.node.labels.get(LABEL) == "true" or ANNOTATION in st.node.annotations:
                names.add(st.name)
        out = []
        for n in sorted(names):
            node = self.state.node(n)
            if node is None:
                self._marked.pop(n, None)
            # Leave alone what the apply mode is driving, including a node this publisher
            # marked before the apply mode claimed it: the annotation then holds the
            # "tainted"/"applying"/"failed" record a new leader adopts by.
            elif n not in wanted and not _apply_modes(node):
                out.append(n)
        return out

    def _prune_events(self) -> None:
        """Forget the Events of nodes and pods no longer in the cluster (a pod by its uid: one
        recreated under the same name is another pod and gets its own Event)."""
        for key in list(self._events):
            kind, namespace, name, uid, _ = key
            if kind == "Node":
                present = self.state.node(name) is not None
            elif uid:
                present = self.state.pod(uid) is not None
            else:
                present = self.state.find_pod(namespace, name) is not None
            if not present:
                del self._events[key]

    async def _event(self, kind: str, name: str, namespace: str, uid: str | None,
                     reason: str, message: str) -> None:
        key = (kind, namespace, name, uid or "", reason)
        now = self.clock()
        sent = self._events.get(key)
        if sent is not None and (now - sent.at < self.event_interval_s or (
                sent.message == message and now - sent.at < self.event_refresh_s)):
            return
        self._check_leading()
        # Named by what it says: written already (by a former leader) counts as sent.
        if not await emit_event(self.api, kind=kind, name=name, namespace=namespace, uid=uid,
                                reason=reason, message=message, once=True):
            log.debug("advice: %s event on %s %s was sent already", reason, kind, name)
        self._events[key] = _Sent(message=message, at=now)


@dataclasses.dataclass(frozen=True, slots=True)
class _Read:
    config: migparted.Config | None
    why: str | None  # what is wrong with the shared ConfigMap, if anything
    transient: bool  # a ConfigMap could not be read now (not: absent, refused or invalid)


async def _read(api: kube.KubeClient | Any, *, name: str, namespace: str) -> _Read:
    client = kube.as_client(api)
    shared: migparted.Config | None = None
    why: str | None = None
    transient = False
    try:
        shared = migparted.parse_configmap(await client.read_config_map(namespace, name))
    except kube.ApiError as exc:
        why, transient = f"cannot read ConfigMap {namespace}/{name}: {exc}", exc.retryable
    except errors.ConfigError as exc:
        why = exc.message
    # The configs the MIG Manager of each node generated for its GPUs (mig-parted v0.14.0+,
    # migparted.NODE_CONFIGMAP_SUFFIX): one list of the namespace, selected by their labels.
    try:
        objects, _ = await client.list_config_maps(
            namespace, label_selector=migparted.NODE_CONFIGMAP_SELECTOR)
    except kube.ApiError as exc:
        log.warning("advice: cannot list the MIG Manager's per-node ConfigMaps in %s (%s); "
                    "every node is read with %s/%s", namespace, exc, namespace, name)
        objects, transient = [], transient or exc.retryable
    config, problems = migparted.node_configs(shared, objects)
    for node, problem in sorted(problems.items()):
        log.warning("advice: node %s: its MIG Manager's ConfigMap %s/%s is not usable (%s); "
                    "the node is read with %s/%s", node, namespace,
                    migparted.node_configmap_name(node), problem, namespace, name)
    if why is not None and config is not None:
        why += (f" (the {len(config.per_node)} node(s) whose MIG Manager wrote its own "
                f"ConfigMap use that)")
    return _Read(config=config, why=why, transient=transient)


async def read_config(
    api: kube.KubeClient | Any,
    *,
    name: str = migparted.DEFAULT_CONFIGMAP,
    namespace: str = migparted.DEFAULT_NAMESPACE,
) -> tuple[migparted.Config | None, str | None]:
    """The mig-parted configs the MIG Manager applies, parsed strictly: the shared ConfigMap
    ``namespace/name``, with the per-node ConfigMaps the MIG Manager writes there attached
    (``migparted.node_configs``; each node uses its own). (config, why): ``why`` says what is
    wrong with the shared one, None when nothing is; config None when there is no config."""
    got = await _read(api, name=name, namespace=namespace)
    return got.config, got.why


class ConfigSource:
    """Keeps an ``AdviceCache``'s mig-parted configs current (``read_config`` every
    ``interval_s``).

    The MIG Manager writes a node's own ConfigMap when it starts there (a node that joins, a
    pod restarted), so the configs are read again, not once. When a ConfigMap cannot be read
    for a moment (no answer, 429, 5xx) the configs last read are kept.
    """

    def __init__(self, api: kube.KubeClient | Any, cache: AdviceCache, *, namespace: str,
                 name: str, interval_s: float = 60.0) -> None:
        self.api = api
        self.cache = cache
        self.namespace = namespace
        self.name = name
        self.interval_s = interval_s
        self._why: str | None = None
        self._read_once = False

    async def refresh(self) -> migparted.Config | None:
        """Read the configs once; the cache gets them when they changed. Returns them."""
        got = await _read(self.api, name=self.name, namespace=self.namespace)
        if got.transient and self._read_once:
            log.debug("advice: a mig-parted ConfigMap cannot be read now; keeping the "
                      "configs last read")
            return self.cache.config
        config = got.config
        if got.why != self._why and got.why is not None:
            log.warning("%s; layouts are inferred from allocatable", got.why)
        self._why = got.why
        if not self._read_once or config != self.cache.config:
            self.cache.set_config(config)
        self._read_once = True
        return config

    async def run(self) -> None:
        """Refresh every ``interval_s`` until cancelled; errors are logged and retried."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("advice: reading the mig-parted ConfigMaps failed: %s", exc)
