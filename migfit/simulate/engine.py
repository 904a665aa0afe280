"""The discrete-event replay: pods arrive, kube-scheduler places them, the MIG Manager re-lays out.

The cluster state is a real ``migfit.cluster.Cluster`` fed with Node and Pod objects as the API
server would show them (``objects``), so the webhook's decision and the extender's filter and
score read exactly what they read in a real cluster. The simulator keeps, next to it, what the
API does not show: which MIG instance on which GPU each pod holds, and cpu/memory in use.

kube-scheduler is modelled by ``scheduler``. The MIG Manager: a re-layout labels the node
``nvidia.com/mig.config.state=pending`` and taints it ``migfit.io/relayout=pending:NoSchedule``
for ``relayout_seconds``, during which the node takes no new pod; then the new layout is
advertised and the taint goes. Re-layouts come from the advisor (``migfit.advisor.advise``,
safe nodes only), so they never disrupt a pod.

Modes: ``fill`` (one arrival every ``fill_interval`` seconds, no departures, until the
requested GPU share reaches ``target``; in-flight re-layouts are let finish, then the end
figures are taken) and ``events`` (arrivals and departures in trace time; pending pods are
retried on each departure and each finished re-layout).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

from migfit import advisor, cluster, migparted, placements, planner, profiles
from migfit.simulate import adapters, metrics, objects, scheduler, spec, workload

Mode = Literal["fill", "events"]
Scorer = Literal["default", "binpack", "random", "migfit", "upper-bound"]
SCORERS: tuple[Scorer, ...] = ("default", "binpack", "random", "migfit", "upper-bound")
EPOCH = 1_767_225_600.0  # simulated time 0 = 2026-01-01T00:00:00Z (pod condition timestamps)
RELAYOUT_TAINT = {"key": cluster.TAINT_RELAYOUT, "value": "pending", "effect": "NoSchedule"}


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    """One scheduling policy: a scorer, with or without the advisor's re-layouts."""

    scorer: Scorer
    advisor: bool = False

    @property
    def name(self) -> str:
        return self.scorer + ("+advisor" if self.advisor else "")

    @staticmethod
    def parse(text: str) -> Policy:
        base, plus, extra = text.partition("+")
        if base not in SCORERS or (plus and extra != "advisor"):
            valid = ", ".join(SCORERS)
            raise ValueError(f"unknown policy {text!r}; use one of {valid}, each optionally "
                             f"with +advisor")
        if base == "upper-bound" and plus:
            raise ValueError("upper-bound creates any instance on demand; it takes no advisor")
        scorer: Scorer = next(s for s in SCORERS if s == base)
        return Policy(scorer=scorer, advisor=bool(plus))


ALL_POLICIES: tuple[Policy, ...] = (
    *(Policy(s, a) for s in ("default", "binpack", "random", "migfit") for a in (False, True)),
    Policy("upper-bound"),
)


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    mode: Mode = "fill"
    target: float = 1.3  # fill: stop when requested GPUs reach this share of capacity
    order: Literal["sample", "trace"] = "sample"  # fill: sample with replacement, or trace order
    fill_interval: float = 1.0  # fill: seconds between arrivals
    relayout_seconds: float = 180.0
    advise_interval: float = 30.0
    max_relayouts: int = 16  # re-layouts in flight at once
    advisor: Literal["advisor", "planner"] = "advisor"  # see Simulation.advise
    advisor_grace: float = 0.0  # seconds a pod must have been unschedulable to count
    # ... and to count although free instances of its profile exist (CPU-blocked nodes): one
    # flush of kube-scheduler's unschedulable queue (podMaxInUnschedulablePodsDuration).
    advisor_free_grace: float = 300.0
    extender_weight: int = 5
    samples: int = 200  # points of each time series
    snapshot_at: float | None = None  # events: time of the GPU picture (default: last arrival)


# ---------------------------------------------------------------- the simulated world


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


class Node:
    """A simulated node."""

    __slots__ = ("busy_until", "config", "cpu_alloc", "cpu_used", "gpu_pods", "gpus",
                 "mem_alloc", "mem_used", "model", "name", "pending_plan", "total_compute",
                 "used_compute")

    def __init__(self, s: spec.NodeSpec, *, on_demand: bool) -> None:
        self.name = s.name
        self.model = s.model
        self.config = s.config
        self.cpu_alloc = s.cpu_milli
        self.mem_alloc = s.memory_mib
        self.cpu_used = 0
        self.mem_used = 0
        self.gpus: list[Gpu] = []
        for lay in s.gpu_layouts:
            if on_demand:
                self.gpus.append(Gpu(()))
            else:
                placement = _placement(s.model, lay)
                self.gpus.append(Gpu(placement))
        self.total_compute = s.model.compute_slices * len(self.gpus)
        self.used_compute = 0
        self.gpu_pods = 0
        self.busy_until: float | None = None
        self.pending_plan: advisor.Recommendation | None = None

    @property
    def free_compute(self) -> int:
        return self.total_compute - self.used_compute

    def layouts(self) -> list[tuple[profiles.ProfileName, ...]]:
        return [g.names() for g in self.gpus]


def _placement(model: profiles.GpuModel, names: Sequence[str]) -> tuple[placements.Instance, ...]:
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
        self.record: cluster.PodRecord | None = None
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


@dataclasses.dataclass(slots=True)
class _Counters:
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
    wasted_mib: int = 0
    usable_mib: int = 0
    waits: list[float] = dataclasses.field(default_factory=list)


class Simulation:
    """One policy, one seed, one workload on one cluster."""

    def __init__(self, nodes: Sequence[spec.NodeSpec], *, policy: Policy, seed: int,
                 options: Options, catalog: profiles.Catalog) -> None:
        self.policy = policy
        self.options = options
        self.on_demand = policy.scorer == "upper-bound"
        self.rng = random.Random(f"ties-{seed}")
        self.now = 0.0
        self.catalog = catalog
        self.cluster = cluster.Cluster(catalog)
        self.nodes: dict[str, Node] = {s.name: Node(s, on_demand=self.on_demand) for s in nodes}
        self.capacity_slices = sum(n.total_compute for n in self.nodes.values())
        self.capacity_memory = sum(n.model.memory_slices * len(n.gpus)
                                   for n in self.nodes.values())
        self.gpus = sum(len(n.gpus) for n in self.nodes.values())
        self.free_hist: Counter[int] = Counter()
        for n in self.nodes.values():
            self.free_hist[n.free_compute] += 1
            # Upper bound: the nodes advertise nothing (instances are created on demand), so
            # the webhook decides from the models present, as it does before a re-layout.
            self.cluster.apply("Node", "ADDED", self._node_object(n))
        self.cluster.mark_synced()
        self.decider = adapters.Decider(self.cluster)
        self.extender = adapters.Extender(self.cluster)
        self.kube = scheduler.KubeScheduler(self, rng=self.rng)
        self.pods: dict[str, Pod] = {}
        self.pending: list[Pod] = []
        self.in_flight: dict[str, advisor.Recommendation] = {}
        self.counters = _Counters()
        self.allocated_slices = 0
        self.allocated_memory = 0
        self.classes: Counter[tuple[str, int]] = Counter()
        self.series: list[dict[str, float]] = []
        self.snapshot: list[dict[str, Any]] | None = None
        self._events: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self._last_advice = -math.inf
        self._advice_queued = False
        self._fit_cache: dict[tuple[Any, ...], placements.Instance | None] = {}
        self.end_figures: dict[str, float] = {}
        self._no_advice = False

    # ------------------------------------------------------------ objects

    def _node_object(self, n: Node) -> dict[str, Any]:
        busy = n.busy_until is not None
        return objects.node_object(
            name=n.name, model=n.model, gpu_layouts=n.layouts(), cpu_milli=n.cpu_alloc,
            memory_mib=n.mem_alloc, config=n.config,
            config_state="pending" if busy else "success",
            taints=(RELAYOUT_TAINT,) if busy else ())

    # ------------------------------------------------------------ events

    def _push(self, at: float, kind: str, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, data))

    def _run_until(self, t: float) -> None:
        while self._events and self._events[0][0] <= t:
            at, _, kind, data = heapq.heappop(self._events)
            self.now = max(self.now, at)
            self._dispatch(kind, data)
        self.now = max(self.now, t)

    def _dispatch(self, kind: str, data: Any) -> None:
        if kind == "arrive":
            self.arrive(data)
        elif kind == "depart":
            self.depart(data)
        elif kind == "relayout-done":
            self.relayout_done(data)
        elif kind == "advise":
            self._advice_queued = False
            self.advise()
        elif kind == "sample":
            self.sample()
        elif kind == "snapshot":
            self.take_snapshot()
        elif kind == "end":
            self.end_figures = self.figures()

    # ------------------------------------------------------------ arrivals

    def arrive(self, s: workload.PodSpec) -> None:
        c = self.counters
        c.arrived += 1
        uid = f"{s.name}-{c.arrived}"
        pod = Pod(s, uid, self.now)
        self.pods[uid] = pod
        if s.gpu:
            c.gpu_arrived += 1
            c.demand_trace_gpus += s.trace_gpus
            obj = objects.pod_object(name=uid, cpu_milli=s.cpu_milli, memory_mib=s.memory_mib,
                                     annotations=s.annotations, containers=s.containers)
            if s.explicit:
                profs, patch, denial = s.explicit, (), ""
            else:
                profs, patch, denial = self.decider.decide(obj)
            if denial:
                c.denied += 1
                return
            if patch:
                adapters.apply_patch(obj, patch)
            else:
                obj = objects.pod_object(name=uid, cpu_milli=s.cpu_milli,
                                         memory_mib=s.memory_mib, annotations=s.annotations,
                                         containers=s.containers, profile_per_container=profs)
            pod.obj = obj
            pod.profiles = profs
            if any(p != s.expected for p in profs):
                c.mismatch += 1
            model = next(iter(self.nodes.values())).model
            pod.compute = sum(model.profile(p).compute_slices for p in profs
                              if model.has_profile(p))
            pod.usable_mib = sum(model.profile(p).memory_mib for p in profs
                                 if model.has_profile(p))
            c.demand_slices += pod.compute
            self.classes[(profs[0], len(profs))] += 1
            if not self.on_demand:
                self.cluster.apply("Pod", "ADDED", obj)
                pod.record = self.cluster.pod(f"uid-{uid}")
                if pod.record is not None:
                    pod.request = self.extender.request(pod.record)
        if not self.try_schedule(pod):
            if s.gpu and not self.on_demand and pod.obj:
                # kube-scheduler marks the pod PodScheduled=False/Unschedulable (the advisor's
                # demand reads it).
                pod.obj["status"]["conditions"] = [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "lastTransitionTime": objects.timestamp(EPOCH + self.now)}]
                self.cluster.apply("Pod", "MODIFIED", pod.obj)
                pod.record = self.cluster.pod(f"uid-{uid}")
                if pod.record is not None:
                    pod.request = self.extender.request(pod.record)
            # Blocked by fragmentation (metrics): some node had enough free slices in total.
            if s.gpu and any(free >= pod.compute and k for free, k in self.free_hist.items()):
                pod.blocked = True
                c.blocked += 1
            self.pending.append(pod)
            self._want_advice()

    def try_schedule(self, pod: Pod) -> bool:
        name = self.kube.schedule(pod)
        if name is None:
            return False
        self.bind(pod, self.nodes[name])
        return True

    # ------------------------------------------------------------ binding

    def _hist(self, n: Node, sign: int) -> None:
        if n.busy_until is None:
            self.free_hist[n.free_compute] += sign
            if not self.free_hist[n.free_compute]:
                del self.free_hist[n.free_compute]

    def bind(self, pod: Pod, n: Node) -> None:
        c = self.counters
        self._hist(n, -1)
        n.cpu_used += pod.spec.cpu_milli
        n.mem_used += pod.spec.memory_mib
        pod.node = n.name
        pod.start = self.now
        if pod.spec.gpu:
            for p in pod.profiles:
                gi, ii = self._take_instance(n, p, pod.uid)
                pod.held.append((gi, ii))
                inst = n.gpus[gi].instances[ii]
                prof = n.model.profile(inst.profile)
                n.used_compute += prof.compute_slices
                self.allocated_slices += prof.compute_slices
                self.allocated_memory += prof.memory_slices
            n.gpu_pods += 1
            c.gpu_placed += 1
            c.wasted_mib += max(0, pod.usable_mib - pod.spec.gpu_memory_mib * len(pod.profiles))
            c.usable_mib += pod.usable_mib
            if not self.on_demand:
                obj = pod.obj
                obj["spec"]["nodeName"] = n.name
                obj["status"]["phase"] = "Running"
                self.cluster.apply("Pod", "MODIFIED", obj)
        self._hist(n, +1)
        c.placed += 1
        c.waits.append(self.now - pod.arrival)
        if self.options.mode == "events" and math.isfinite(pod.spec.duration):
            self._push(self.now + pod.spec.duration, "depart", pod.uid)

    def _take_instance(self, n: Node, profile: str, uid: str) -> tuple[int, int]:
        if not self.on_demand:
            for gi, g in enumerate(n.gpus):
                for ii, inst in enumerate(g.instances):
                    if inst.profile == profile and g.holders[ii] is None:
                        g.holders[ii] = uid
                        return gi, ii
            raise AssertionError(f"{n.name} has no free {profile}")
        best: tuple[int, int] | None = None
        for gi, g in enumerate(n.gpus):
            if self.add_on(n, g, profile) is not None:
                used = sum(n.model.profile(i.profile).compute_slices for i in g.instances)
                if best is None or used > best[0]:
                    best = (used, gi)
        assert best is not None
        g = n.gpus[best[1]]
        new = self.add_on(n, g, profile)
        assert new is not None
        g.instances.append(new)
        g.holders.append(uid)
        return best[1], len(g.instances) - 1

    def add_on(self, n: Node, g: Gpu, profile: str) -> placements.Instance | None:
        """Upper bound: where one more ``profile`` instance could be created on ``g``."""
        key = (n.model.id, tuple(g.instances), profile)
        if key in self._fit_cache:
            return self._fit_cache[key]
        out: placements.Instance | None = None
        fit = placements.fit(n.model, [profile], fixed=g.instances)
        if fit.placement is not None:
            have = set(g.instances)
            out = next(i for i in fit.placement.instances if i not in have)
        self._fit_cache[key] = out
        return out

    def can_add(self, n: Node, wants: Sequence[str]) -> bool:
        """Upper bound: whether the node's GPUs can grow instances for every wanted profile."""
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

    def depart(self, uid: str) -> None:
        pod = self.pods.pop(uid, None)
        if pod is None or pod.node is None:
            return
        n = self.nodes[pod.node]
        self._hist(n, -1)
        n.cpu_used -= pod.spec.cpu_milli
        n.mem_used -= pod.spec.memory_mib
        if pod.spec.gpu:
            for gi, ii in pod.held:
                g = n.gpus[gi]
                if self.on_demand:  # instances come and go: find this pod's by holder
                    ii = g.holders.index(uid)
                prof = n.model.profile(g.instances[ii].profile)
                n.used_compute -= prof.compute_slices
                self.allocated_slices -= prof.compute_slices
                self.allocated_memory -= prof.memory_slices
                if self.on_demand:
                    del g.instances[ii]
                    del g.holders[ii]
                else:
                    g.holders[ii] = None
            n.gpu_pods -= 1
            if not self.on_demand:
                self.cluster.apply("Pod", "DELETED", pod.obj)
        self._hist(n, +1)
        self.retry()

    def retry(self) -> None:
        """Try the pending pods again, oldest first."""
        if not self.pending:
            return
        still: list[Pod] = []
        top = max((f for f, k in self.free_hist.items() if k), default=0)
        for pod in self.pending:
            if pod.spec.gpu:
                if pod.compute > top:
                    still.append(pod)
                    continue
                if not self.on_demand and any(not self.cluster.free_nodes(p)
                                              for p in pod.profiles):
                    still.append(pod)
                    continue
            if self.try_schedule(pod):
                top = max((f for f, k in self.free_hist.items() if k), default=0)
            else:
                still.append(pod)
        self.pending = still

    # ------------------------------------------------------------ the advisor and MIG Manager

    def _want_advice(self) -> None:
        if not self.policy.advisor or self._advice_queued:
            return
        at = max(self.now, self._last_advice + self.options.advise_interval)
        if self.options.mode == "fill" and at <= self.now:
            self.advise()
            return
        self._advice_queued = True
        self._push(at, "advise", None)

    def advise(self) -> None:
        """Ask the advisor (``migfit.advisor.advise``, safe nodes only) and start re-layouts.

        Like an apply loop with a bound on nodes changed at once, a recommendation is taken
        only while the pending pods still need instances that in-flight re-layouts will not
        bring (the advisor itself does not count nodes being re-partitioned as supply).
        """
        if self._no_advice:
            return
        self._last_advice = self.now
        room = self.options.max_relayouts - len(self.in_flight)
        if room <= 0 or not any(p.spec.gpu for p in self.pending):
            return
        if self.options.advisor == "planner":
            recs = self._planner_advice(room)
        else:
            settings = advisor.Settings(grace_s=self.options.advisor_grace,
                                        free_grace_s=self.options.advisor_free_grace,
                                        allow_disruptive=False)
            recs = list(advisor.advise(self.cluster, now=EPOCH + self.now,
                                       settings=settings).recommendations)
        need: Counter[str] = Counter()
        for pod in self.pending:
            need.update(pod.profiles)
        coming: Counter[str] = Counter()
        for rec in self.in_flight.values():
            coming.update(rec.served)
        for rec in recs:
            if room <= 0:
                break
            if rec.disrupts or not any(need[p] > coming[p] for p in rec.served):
                continue
            coming.update(rec.served)
            room -= 1
            self._start_relayout(self.nodes[rec.node], rec)

    def _planner_advice(self, room: int) -> list[advisor.Recommendation]:
        """``--advisor planner``: ``migfit.planner.plan_cluster`` on every pending pod's
        instances (not only those no free instance serves) over the idle nodes, with the
        simulator's exact per-GPU layouts. For comparison with the advisor's own demand."""
        coming: Counter[str] = Counter()
        for rec in self.in_flight.values():
            coming.update(rec.served)
        items: list[tuple[str, float]] = []
        for pod in self.pending:  # oldest first: in-flight re-layouts serve those
            for p in pod.profiles:
                if coming[p] > 0:
                    coming[p] -= 1
                else:
                    items.append((p, 1.0 + (self.now - pod.arrival) / 3600))
        supply = [
            planner.NodeSupply(name=n.name, model=n.model, gpus=tuple(
                planner.GpuState(index=i, current=g.names()) for i, g in enumerate(n.gpus)))
            for n in self.nodes.values() if n.gpu_pods == 0 and n.busy_until is None]
        if not items or not supply:
            return []
        plan = planner.plan_cluster(supply, demand=planner.Demand.of_items(items),
                                    max_nodes=room)
        out = []
        for ch in plan.changes:
            gpus = tuple(advisor.GpuChange(index=g.index, before=tuple(g.before),
                                           after=g.after_names) for g in ch.plan.gpus)
            after = [g.after for g in gpus]
            out.append(advisor.Recommendation(
                node=ch.name, model=self.nodes[ch.name].model.id,
                config=migparted.custom_name(after), mig_parted=None, gpus=gpus, unblocks=(),
                disrupts=(), before_config=None, before_source="inferred", note="",
                served=dict(ch.plan.served)))
        return out

    def _start_relayout(self, n: Node, rec: advisor.Recommendation) -> None:
        c = self.counters
        c.relayouts += 1
        c.gpus_relaid += sum(1 for g in rec.gpus if g.changed)
        c.disrupted += n.gpu_pods  # the MIG Manager stops every GPU client of the node
        self._hist(n, -1)
        n.busy_until = self.now + self.options.relayout_seconds
        n.pending_plan = rec
        self.in_flight[n.name] = rec
        self.cluster.apply("Node", "MODIFIED", self._node_object(n))
        self._push(n.busy_until, "relayout-done", n.name)

    def relayout_done(self, name: str) -> None:
        n = self.nodes[name]
        rec = n.pending_plan
        assert rec is not None
        # The MIG Manager applies the whole config: every GPU gets its ``after`` layout.
        for g in rec.gpus:
            n.gpus[g.index] = Gpu(_placement(n.model, g.after))
        n.config = rec.target
        n.busy_until = None
        n.pending_plan = None
        del self.in_flight[name]
        self._hist(n, +1)
        self.cluster.apply("Node", "MODIFIED", self._node_object(n))
        self.retry()
        if self.pending:
            self._want_advice()

    # ------------------------------------------------------------ sampling

    def sample(self) -> None:
        self.series.append({
            "t": self.now,
            "arrived_share": self.counters.demand_slices / self.capacity_slices,
            "requested_share": self.counters.demand_trace_gpus / max(1, self.gpus),
            "allocated_share": self.allocated_slices / self.capacity_slices,
            "pending": float(len(self.pending)),
        })

    def take_snapshot(self) -> None:
        out: list[dict[str, Any]] = []
        for n in self.nodes.values():
            out.append({"node": n.name, "model": n.model.id,
                        "relayout": n.busy_until is not None,
                        "gpus": [[[i.start, i.size, i.profile, h is not None]
                                  for i, h in zip(g.instances, g.holders, strict=True)]
                                 for g in n.gpus]})
        self.snapshot = out

    # ------------------------------------------------------------ modes

    def run_fill(self, arrivals: Sequence[workload.PodSpec]) -> None:
        every = max(1, len(arrivals) // max(1, self.options.samples))
        for i, s in enumerate(arrivals):
            self._run_until(i * self.options.fill_interval)
            self.arrive(s)
            if i % every == 0:
                self.sample()
        self._advice_queued = True  # no new advice once arrivals stop
        self._no_advice = True
        self._run_until(math.inf)
        self.sample()
        self.take_snapshot()

    def run_events(self, arrivals: Sequence[workload.PodSpec]) -> None:
        for s in arrivals:
            self._push(s.arrival, "arrive", s)
        last = max((s.arrival for s in arrivals), default=0.0)
        snap_at = self.options.snapshot_at if self.options.snapshot_at is not None else last
        samples = max(1, self.options.samples)
        for k in range(samples + 1):
            self._push(last * k / samples, "sample", None)
        self._push(snap_at, "snapshot", None)
        self._push(last, "end", None)  # after every arrival at ``last`` (pushed later)
        self._run_until(math.inf)
        if self.snapshot is None:
            self.take_snapshot()

    # ------------------------------------------------------------ figures

    def figures(self) -> dict[str, float]:
        c = self.counters
        waits = sorted(c.waits)
        return {
            "pods_arrived": c.arrived,
            "gpu_pods_arrived": c.gpu_arrived,
            "pods_placed": c.placed,
            "gpu_pods_placed": c.gpu_placed,
            "pods_pending": len(self.pending),
            "pods_denied": c.denied,
            "decision_differs_from_mapping": c.mismatch,
            "requested_gpus_share": c.demand_trace_gpus / max(1, self.gpus),
            "arrived_slices": c.demand_slices,
            "arrived_slices_share": c.demand_slices / self.capacity_slices,
            "allocated_slices": self.allocated_slices,
            "allocated_share": self.allocated_slices / self.capacity_slices,
            "allocated_of_arrived": self.allocated_slices / max(1, c.demand_slices),
            "unallocated_share": 1 - self.allocated_slices / self.capacity_slices,
            "unallocated_memory_share": 1 - self.allocated_memory / self.capacity_memory,
            "fragmentation_share": metrics.fragmentation(self),
            "pending_p50_s": metrics.percentile(waits, 50),
            "pending_p99_s": metrics.percentile(waits, 99),
            "blocked_by_fragmentation": c.blocked,
            "relayouts": c.relayouts,
            "gpus_relaid": c.gpus_relaid,
            "pods_disrupted": c.disrupted,
            "memory_wasted_gib": c.wasted_mib / 1024,
            "memory_wasted_share": c.wasted_mib / max(1, c.usable_mib),
        }


def arrivals_for(pods: Sequence[workload.PodSpec], *, options: Options, seed: int,
                 gpus: int) -> list[workload.PodSpec]:
    """The arrival sequence of one seed. Fill: pods drawn (with replacement, or in trace order
    and then drawn) until their GPU request reaches ``target`` × the cluster's GPUs."""
    if options.mode == "events":
        return list(pods)
    rng = random.Random(f"workload-{seed}")
    goal = options.target * gpus
    out: list[workload.PodSpec] = []
    total = 0.0
    i = 0
    if not any(p.gpu for p in pods):
        raise ValueError("the workload has no GPU pods to fill the cluster with")
    while total < goal:
        if options.order == "trace" and i < len(pods):
            s = pods[i]
        else:
            s = pods[rng.randrange(len(pods))]
        i += 1
        out.append(s)
        total += s.trace_gpus
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class RunResult:
    policy: str
    seed: int
    figures: dict[str, float]
    series: list[dict[str, float]]
    snapshot: list[dict[str, Any]] | None
    wall_s: float


def run(nodes: Sequence[spec.NodeSpec], pods: Sequence[workload.PodSpec], *, policy: Policy,
        seed: int, options: Options, catalog: profiles.Catalog,
        keep_snapshot: bool = True) -> RunResult:
    """Simulate one policy with one seed."""
    started = time.perf_counter()
    sim = Simulation(nodes, policy=policy, seed=seed, options=options, catalog=catalog)
    arrivals = arrivals_for(pods, options=options, seed=seed, gpus=sim.gpus)
    if options.mode == "fill":
        sim.run_fill(arrivals)
        figs = sim.figures()
    else:
        sim.run_events(arrivals)
        figs = sim.end_figures or sim.figures()
        final = sim.figures()
        for k in ("pods_placed", "gpu_pods_placed", "pods_pending", "pending_p50_s",
                  "pending_p99_s", "blocked_by_fragmentation", "relayouts", "gpus_relaid",
                  "pods_disrupted", "memory_wasted_gib", "memory_wasted_share"):
            figs[k] = final[k]
    figs["wall_s"] = time.perf_counter() - started
    return RunResult(policy=policy.name, seed=seed, figures=figs, series=sim.series,
                     snapshot=sim.snapshot if keep_snapshot else None,
                     wall_s=figs["wall_s"])
