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

import contextlib
import dataclasses
import gc
import heapq
import math
import random
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from migfit import advisor, migparted, planner, profiles
from migfit.simulate import (
    adapters,
    bound,
    fgd,
    metrics,
    objects,
    scheduler,
    spec,
    workload,
)
from migfit.simulate.policies import ALL_POLICIES, SCORERS, Mode, Options, Policy, Scorer
from migfit.simulate.world import Counters, Gpu, Node, Pod, World, node_object, placement_of

__all__ = ["ALL_POLICIES", "EPOCH", "SCORERS", "Mode", "Options", "Policy", "Scorer",
           "Simulation"]
#: Figures of how long pods waited: in fill mode read when arrivals stop, in events mode once
#: the replay is over.
WAIT_FIGURES = ("pending_p50_s", "pending_p99_s", "gpu_pending_p50_s", "gpu_pending_p95_s")
EPOCH = 1_767_225_600.0  # simulated time 0 = 2026-01-01T00:00:00Z (pod condition timestamps)


class Simulation(World):
    """One policy, one seed, one workload on one cluster: the event loop."""

    def __init__(self, nodes: Sequence[spec.NodeSpec], *, policy: Policy, seed: int,
                 options: Options, catalog: profiles.Catalog,
                 workload_pods: Sequence[workload.PodSpec] = ()) -> None:
        # Upper bound: the nodes advertise nothing (instances are created on demand), so the
        # webhook decides from the models present, as it does before a re-layout.
        super().__init__(nodes, catalog=catalog, on_demand=policy.scorer == "upper-bound",
                         allocation=options.allocation)
        self.policy = policy
        self.options = options
        self.rng = random.Random(f"ties-{seed}")
        self.now = 0.0
        self.decider = adapters.Decider(self.cluster, contention=options.webhook_choice)
        self.extender = adapters.Extender(self.cluster)
        frag = (fgd.Fgd(self, fgd.classes_of(workload_pods))
                if policy.scorer == "fgd" else None)
        self.kube = scheduler.KubeScheduler(self, scorer=policy.scorer, options=options,
                                            extender=self.extender, frag=frag, rng=self.rng)
        self.pods: dict[str, Pod] = {}
        self.pending: list[Pod] = []
        self.in_flight: dict[str, advisor.Recommendation] = {}
        self.counters = Counters()
        self.series: list[dict[str, float]] = []
        self.snapshot: list[dict[str, Any]] | None = None
        self._events: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self._live = 0  # arrivals and departures still queued
        self._futile = 0  # re-layouts finished since a pod was last placed
        self._last_advice = -math.inf
        self._advice_queued = False
        self.end_figures: dict[str, float] = {}
        self.end_waits_by_class: dict[str, dict[str, float]] = {}
        self._no_advice = False
        self._models = list({n.model.id: n.model for n in self.nodes.values() if n.gpus}.values())
        self._profiles: dict[str, profiles.Profile | None] = {}
        self.horizon = math.inf  # time-averaged figures stop here (the last arrival)
        self._area_t = 0.0  # allocated slices integrated over time, up to _area_t
        self.allocated_area = 0.0
        self.idle_pending_area = 0.0  # slice-seconds (sampled, metrics.idle_for_pending)
        self._idle_t = 0.0
        self.start_t = 0.0  # time averages start here
        self.settings = advisor.Settings(grace_s=options.advisor_grace,
                                         free_grace_s=options.advisor_free_grace,
                                         allow_disruptive=False,
                                         busy_nodes=options.busy_nodes,
                                         ahead_from=options.ahead_from,
                                         ahead_reserve_s=options.relayout_seconds
                                         + options.config_sync_seconds,
                                         balance_gain=advisor.BALANCE_GAIN
                                         if options.balance else None)
        # The mig-parted ConfigMap as the MIG Manager sees it: every config a node is
        # labelled with, per model (a device-filter of the model's ids), so that the advisor
        # resolves each node's layout GPU by GPU as it does from a real ConfigMap.
        self._entries: dict[str, list[migparted.Entry]] = {}
        self._registered: dict[tuple[str, str], list[tuple[str, ...]]] = {}
        self.mig_config: migparted.Config | None = None
        for n in self.nodes.values():
            if n.gpus and n.config:
                self._register(n.config, n.model, n.layouts())
        self._recent: dict[str, float] = {}  # node -> when its last re-layout finished
        self._written: dict[str, float] = {}  # custom config -> when it was written

    def _node_object(self, n: Node) -> dict[str, Any]:
        return node_object(n)

    def _register(self, name: str, model: profiles.GpuModel,
                  gpus: Sequence[Sequence[str]]) -> None:
        """Add config ``name`` for ``model`` (GPU ``i`` gets ``gpus[i]``) to ``mig_config``."""
        if (name, model.id) in self._registered or self.on_demand:
            return
        self._registered[(name, model.id)] = [tuple(g) for g in gpus]
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, names in enumerate(gpus):
            groups.setdefault(tuple(sorted(names)), []).append(i)
        out = self._entries.setdefault(name, [])
        for names, indices in groups.items():
            out.append(migparted.Entry(
                device_filter=tuple(model.device_ids),
                devices=None if len(groups) == 1 else tuple(indices),
                # MIG enabled on every GPU, an empty one too: a GPU with MIG disabled is one the
                # advisor keeps as it is (it serves nvidia.com/gpu pods), and the replay has none.
                mig_enabled=True,
                mig_devices=tuple(sorted(Counter(profiles.ProfileName(p) for p in names)
                                         .items()))))
        self.mig_config = migparted.Config(
            configs={k: tuple(v) for k, v in self._entries.items()})

    def _integrate(self) -> None:
        """Add allocated slices × elapsed time (up to ``horizon``) before a change."""
        t = min(self.now, self.horizon)
        if t > self._area_t:
            self.allocated_area += self.allocated_slices * (t - self._area_t)
            self._area_t = t

    # ------------------------------------------------------------ events

    def _push(self, at: float, kind: str, data: Any) -> None:
        if kind in ("arrive", "depart"):
            self._live += 1
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, data))

    def _run_until(self, t: float) -> None:
        while self._events and self._events[0][0] <= t:
            at, _, kind, data = heapq.heappop(self._events)
            self.now = max(self.now, at)
            self._dispatch(kind, data)
        if math.isfinite(t):
            self.now = max(self.now, t)

    def _dispatch(self, kind: str, data: Any) -> None:
        if kind in ("arrive", "depart"):
            self._live -= 1
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
            self._integrate()
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
                                     annotations=s.annotations, containers=s.containers,
                                     created=EPOCH + self.now)
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
                                         containers=s.containers, profile_per_container=profs,
                                         created=EPOCH + self.now)
            pod.obj = obj
            pod.profiles = profs
            if any(p != s.expected for p in profs):
                c.mismatch += 1
            found = [self._profile(p) for p in profs]
            pod.compute = sum(f.compute_slices for f in found if f is not None)
            pod.usable_mib = sum(f.memory_mib for f in found if f is not None)
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
        elif s.gpu and self.settings.ahead_from is not None:
            self._want_advice()  # the advisor plans ahead of demand as the mix grows

    def try_schedule(self, pod: Pod) -> bool:
        name = self.kube.schedule(pod)
        if name is None:
            return False
        self.bind(pod, self.nodes[name])
        return True

    # ------------------------------------------------------------ binding

    def _profile(self, name: str) -> profiles.Profile | None:
        """The profile ``name`` on a GPU model of the cluster (same slices on every model)."""
        hit = self._profiles.get(name)
        if hit is None and name not in self._profiles:
            hit = next((m.profile(name) for m in self._models if m.has_profile(name)), None)
            self._profiles[name] = hit
        return hit

    def bind(self, pod: Pod, n: Node) -> None:
        c = self.counters
        self._futile = 0
        self._integrate()
        self.hist(n, -1)
        n.cpu_used += pod.spec.cpu_milli
        n.mem_used += pod.spec.memory_mib
        pod.node = n.name
        pod.start = self.now
        if pod.spec.gpu:
            for p in pod.profiles:
                gi, ii = self.take_instance(n, p, pod.uid)
                pod.held.append((gi, ii))
                inst = n.gpus[gi].instances[ii]
                prof = n.model.profile(inst.profile)
                n.used_compute += prof.compute_slices
                self.allocated_slices += prof.compute_slices
                self.allocated_memory += prof.memory_slices
            n.gpu_pods += 1
            c.gpu_placed += 1
            c.placed_trace_gpus += pod.spec.trace_gpus
            c.wasted_mib += max(0, pod.usable_mib - pod.spec.gpu_memory_mib * len(pod.profiles))
            c.usable_mib += pod.usable_mib
            if not self.on_demand:
                obj = pod.obj
                obj["spec"]["nodeName"] = n.name
                obj["status"]["phase"] = "Running"
                self.cluster.apply("Pod", "MODIFIED", obj)
        elif not self.on_demand:
            # A pod without GPU requests takes the node's cpu and memory: the cache sums it
            # as it does from the API (NodeState.other_*), and the score reads the room left.
            pod.obj = objects.pod_object(name=pod.uid, cpu_milli=pod.spec.cpu_milli,
                                         memory_mib=pod.spec.memory_mib, annotations={},
                                         containers=1, node=n.name)
            pod.obj["status"]["phase"] = "Running"
            self.cluster.apply("Pod", "ADDED", pod.obj)
        self.hist(n, +1)
        c.placed += 1
        c.waits.append(self.now - pod.arrival)
        if pod.spec.gpu:
            c.gpu_waits.append(self.now - pod.arrival)
            c.gpu_waits_by_class.setdefault(metrics.class_name(pod.profiles), []).append(
                self.now - pod.arrival)
        if self.options.mode == "events" and math.isfinite(pod.spec.duration):
            self._push(self.now + pod.spec.duration, "depart", pod.uid)

    def depart(self, uid: str) -> None:
        pod = self.pods.pop(uid, None)
        if pod is None or pod.node is None:
            return
        n = self.nodes[pod.node]
        self._integrate()
        self.hist(n, -1)
        n.cpu_used -= pod.spec.cpu_milli
        n.mem_used -= pod.spec.memory_mib
        if pod.spec.gpu:
            self.counters.placed_trace_gpus -= pod.spec.trace_gpus
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
        elif pod.obj:
            self.cluster.apply("Pod", "DELETED", pod.obj)
        self.hist(n, +1)
        self.retry()
        if self.pending:
            self._want_advice()

    def retry(self) -> None:
        """Try the pending pods again, oldest first."""
        if not self.pending:
            return
        still: list[Pod] = []
        top = self.top_free()
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
                top = self.top_free()
            else:
                still.append(pod)
        self.pending = still

    # ------------------------------------------------------------ the advisor and MIG Manager

    def _want_advice(self, not_before: float = 0.0) -> None:
        if not self.policy.advisor or self._advice_queued:
            return
        if (self.options.mode == "events" and not self._live
                and self._futile > 2 * self.options.max_relayouts):
            return  # nothing arrives or leaves any more and re-layouts stopped placing pods
        at = max(self.now, not_before, self._last_advice + self.options.advise_interval)
        if self.options.mode == "fill" and at <= self.now:
            self.advise()
            return
        self._advice_queued = True
        self._push(at, "advise", None)

    def advise(self) -> None:
        """Ask the advisor (``migfit.advisor.advise``, safe nodes only) and start re-layouts.

        Like an apply loop with a bound on nodes changed at once, a recommendation is taken
        only while the pending pods still need instances that in-flight re-layouts will not
        bring. The advisor counts a node being re-laid out as supply too (its label names
        the target, ``world.node_object``), and so advises no node for a pod one serves.
        """
        if self._no_advice:
            return
        self._last_advice = self.now
        room = self.options.max_relayouts - len(self.in_flight)
        if not any(p.spec.gpu for p in self.pending) and self.settings.ahead_from is None:
            return
        if room <= 0:
            return  # a finished re-layout asks again
        need: Counter[str] = Counter()
        if self.options.advisor == "planner":
            recs = self._planner_advice(room)
        else:
            advice = advisor.advise(self.cluster, now=EPOCH + self.now, settings=self.settings,
                                    config=self.mig_config, recent=self._recent,
                                    usage=self._usage())
            recs = list(advice.recommendations)
            for fall in advice.ahead.values():  # what the ahead recommendations are for
                need.update(fall.short)
        for pod in self.pending:
            need.update(pod.profiles)
        coming: Counter[str] = Counter()
        for rec in self.in_flight.values():
            coming.update(rec.served)
        for rec in recs:
            if room <= 0:
                break
            if rec.disrupts or not (rec.balance or any(need[p] > coming[p]
                                                        for p in rec.served)):
                continue
            sync = self.options.config_sync_seconds
            if rec.config is None and sync > 0:
                # The apply mode's --apply-custom-configs writes a custom config into the
                # ConfigMap when it is first advised and starts the re-layout once kubelet
                # can have refreshed the MIG Manager's volume; the node serves meanwhile.
                written = self._written.setdefault(rec.target, self.now)
                if self.now - written < sync:
                    self._want_advice(not_before=written + sync)
                    continue
            coming.update(rec.served)
            room -= 1
            self._start_relayout(self.nodes[rec.node], rec)
        # Between arrivals, departures and re-layouts (each asks again) the advice changes
        # only when a waiting pod's grace runs out: ask again then.
        if self.options.mode == "events":
            graces = (self.options.advisor_grace, self.options.advisor_free_grace)
            due = min((p.arrival + g for p in self.pending if p.spec.gpu for g in graces
                       if p.arrival + g > self.now), default=None)
            if due is not None:
                self._want_advice(not_before=due)

    def _usage(self) -> dict[str, list[Counter[profiles.ProfileName]]] | None:
        """What the nodes' DCGM exporters report (``--gpu-usage``): per GPU, the instances
        held, per profile."""
        if not self.options.gpu_usage:
            return None
        return {n.name: [Counter(i.profile for i in g.held()) for g in n.gpus]
                for n in self.nodes.values() if n.gpu_pods}

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
        if not rec.running:
            # A node without pods, or a disruptive change: the MIG Manager stops every GPU
            # client of the node. A busy-node change keeps its pods' GPUs (relayout_done).
            c.disrupted += n.gpu_pods
        self.hist(n, -1)
        n.busy_until = self.now + self.options.relayout_seconds
        n.pending_plan = rec
        # The target is in the ConfigMap before the label names it (the extender's
        # --apply-custom-configs writes it first), so the advisor can read what the node
        # will offer while it is re-laid out.
        after: list[tuple[str, ...]] = [tuple(g) for g in n.layouts()]
        for g in rec.gpus:
            if g.index < len(after):
                after[g.index] = tuple(g.after)
        self._register(rec.target, n.model, after)
        self.in_flight[n.name] = rec
        self.cluster.apply("Node", "MODIFIED", self._node_object(n))
        self._push(n.busy_until, "relayout-done", n.name)

    def relayout_done(self, name: str) -> None:
        n = self.nodes[name]
        rec = n.pending_plan
        assert rec is not None
        self._apply_by_index(n, rec)
        n.config = rec.target
        if self._registered.get((n.config, n.model.id), n.layouts()) != n.layouts():
            n.config = migparted.custom_name(n.layouts())  # a GPU was kept (disruption)
        self._register(n.config, n.model, n.layouts())
        self._recent[name] = EPOCH + self.now
        n.busy_until = None
        n.pending_plan = None
        del self.in_flight[name]
        self._futile += 1
        self.hist(n, +1)
        self.cluster.apply("Node", "MODIFIED", self._node_object(n))
        self.retry()
        if self.pending:
            self._want_advice()

    def _apply_by_index(self, n: Node, rec: advisor.Recommendation) -> None:
        """The config as mig-parted applies it: the GPUs whose layout changes are re-created,
        by index (the advisor reads each node's layout per GPU from ``mig_config``, as from
        a real ConfigMap), the others are left as they are. A changed GPU that holds a
        pod's instance would be a disruption: counted, and that GPU kept (mig-parted cannot
        destroy an instance in use), so the figure shows it."""
        for g in rec.gpus:
            if not g.changed or g.index >= len(n.gpus):
                continue
            gpu = n.gpus[g.index]
            if gpu.in_use():
                self.counters.disrupted += gpu.in_use()
                continue
            if gpu.names() != tuple(sorted(g.after)):
                n.gpus[g.index] = Gpu(placement_of(n.model, g.after))
                self.counters.gpus_relaid += 1

    # ------------------------------------------------------------ sampling

    def sample(self) -> None:
        idle = metrics.idle_for_pending(self, self.pending)
        t = min(self.now, self.horizon)
        if self.series and t > self._idle_t:
            self.idle_pending_area += self.series[-1]["idle_for_pending"] * (t - self._idle_t)
        self._idle_t = max(self._idle_t, t)
        self.series.append({
            "t": self.now,
            "arrived_share": self.counters.demand_slices / self.capacity_slices,
            "requested_share": self.counters.demand_trace_gpus / max(1, self.gpus),
            "allocated_share": self.allocated_slices / self.capacity_slices,
            "pending": float(len(self.pending)),
            "idle_for_pending": float(idle),
        })

    def take_snapshot(self) -> None:
        out: list[dict[str, Any]] = []
        for n in self.nodes.values():
            out.append({"node": n.name, "model": n.model.id, "group": n.group,
                        "relayout": n.busy_until is not None,
                        "gpus": [[[i.start, i.size, i.profile, h is not None]
                                  for i, h in zip(g.instances, g.holders, strict=True)]
                                 for g in n.gpus]})
        self.snapshot = out

    # ------------------------------------------------------------ modes

    def run_fill(self, arrivals: Sequence[workload.PodSpec]) -> None:
        every = max(1, len(arrivals) // max(1, self.options.samples))
        self.horizon = max(0, len(arrivals) - 1) * self.options.fill_interval
        for i, s in enumerate(arrivals):
            self._run_until(i * self.options.fill_interval)
            self.arrive(s)
            if i % every == 0:
                self.sample()
        self._integrate()
        # When arrivals stop: the time-averaged figures, and the waits. Every policy's fill
        # stops arriving at the same moment, but an advisor's re-layouts in flight, and its
        # last queued call, run its clock on: waits read later would count that time too.
        self.end_figures = self.figures()
        self.end_waits_by_class = self.waits_by_class()
        self._advice_queued = True  # no new advice once arrivals stop
        self._no_advice = True
        self._run_until(math.inf)
        self.sample()
        self.take_snapshot()

    def run_events(self, arrivals: Sequence[workload.PodSpec]) -> None:
        for s in arrivals:
            self._push(s.arrival, "arrive", s)
        last = max((s.arrival for s in arrivals), default=0.0)
        self.horizon = last
        # Time averages run from the first arrival (a replayed slice of the trace starts late).
        self.start_t = self._area_t = self._idle_t = min((s.arrival for s in arrivals),
                                                         default=0.0)
        snap_at = self.options.snapshot_at if self.options.snapshot_at is not None else last
        samples = max(1, self.options.samples)
        for k in range(samples + 1):
            self._push(self.start_t + (last - self.start_t) * k / samples, "sample", None)
        self._push(snap_at, "snapshot", None)
        self._push(last, "end", None)  # after every arrival at ``last`` (pushed later)
        self._run_until(math.inf)
        if self.snapshot is None:
            self.take_snapshot()

    # ------------------------------------------------------------ figures

    def _waited(self, pod: Pod, *, ended: bool) -> float:
        """How long ``pod``, still pending, has waited: so far, or for ever (``math.inf``)
        once the run has ``ended`` (in events mode nothing is left to happen: it is never
        placed)."""
        return math.inf if ended else self.now - pod.arrival

    def waits_by_class(self, *, ended: bool = False) -> dict[str, dict[str, float]]:
        """How long the GPU pods of each class waited, now (``metrics.waits_by_class``)."""
        return metrics.waits_by_class(
            self.counters.gpu_waits_by_class,
            [(metrics.class_name(p.profiles), self._waited(p, ended=ended))
             for p in self.pending if p.spec.gpu])

    def figures(self, *, ended: bool = False) -> dict[str, float]:
        """The run's figures now; ``ended``: the replay is over, and the pods still pending
        were never placed (their waits count as ``math.inf``: a policy that never places a
        pod does not wait less for it than one that places it late)."""
        c = self.counters
        # Pods still waiting count with the time waited so far (else the worst waits of a
        # run that never places them would be missing).
        waits = sorted([*c.waits, *(self._waited(p, ended=ended) for p in self.pending)])
        gpu_waits = sorted([*c.gpu_waits,
                            *(self._waited(p, ended=ended) for p in self.pending if p.spec.gpu)])
        span = min(self.now, self.horizon) - self.start_t
        avg_alloc = self.allocated_area / span if span > 0 else float(self.allocated_slices)
        return {
            "pods_arrived": c.arrived,
            "gpu_pods_arrived": c.gpu_arrived,
            "pods_placed": c.placed,
            "gpu_pods_placed": c.gpu_placed,
            "pods_pending": len(self.pending),
            "gpu_pods_pending": sum(1 for p in self.pending if p.spec.gpu),
            "pods_denied": c.denied,
            "decision_differs_from_mapping": c.mismatch,
            "requested_gpus_share": c.demand_trace_gpus / max(1, self.gpus),
            "arrived_slices": c.demand_slices,
            "arrived_slices_share": c.demand_slices / self.capacity_slices,
            "allocated_slices": self.allocated_slices,
            "allocated_share": self.allocated_slices / self.capacity_slices,
            "allocated_of_arrived": self.allocated_slices / max(1, c.demand_slices),
            "unallocated_share": 1 - self.allocated_slices / self.capacity_slices,
            **metrics.unallocated_parts(self, self.pending),
            "unallocated_memory_share": 1 - self.allocated_memory / self.capacity_memory,
            "unallocated_trace_gpus_share": 1 - c.placed_trace_gpus / max(1, self.gpus),
            "fragmentation_share": metrics.fragmentation(self),
            "pending_p50_s": metrics.percentile(waits, 50),
            "pending_p99_s": metrics.percentile(waits, 99),
            "gpu_pending_p50_s": metrics.percentile(gpu_waits, 50),
            "gpu_pending_p95_s": metrics.percentile(gpu_waits, 95),
            "unallocated_share_time_avg": 1 - avg_alloc / self.capacity_slices,
            "idle_while_pending_slice_hours": self.idle_pending_area / 3600,
            "blocked_by_fragmentation": c.blocked,
            "relayouts": c.relayouts,
            "gpus_relaid": c.gpus_relaid,
            "pods_disrupted": c.disrupted,
            "memory_wasted_gib": c.wasted_mib / 1024,
            "memory_wasted_share": c.wasted_mib / max(1, c.usable_mib),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class RunResult:
    policy: str
    seed: int
    figures: dict[str, float]
    series: list[dict[str, float]]
    snapshot: list[dict[str, Any]] | None
    wall_s: float
    # GPU waits per pod class at the end of the run (``Simulation.waits_by_class``)
    waits_by_class: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)


# Allocations between two young collections of the cyclic GC during a replay (CPython's
# default: 700). See ``_rarer_collections``.
REPLAY_GC_THRESHOLD = 20_000


@contextlib.contextmanager
def _rarer_collections() -> Iterator[None]:
    """The cyclic GC's young generation collected every ``REPLAY_GC_THRESHOLD`` allocations
    while the block runs, then the thresholds as they were.

    A replay allocates millions of short-lived tuples and dicts (scores, memo entries) next
    to a few hundred thousand long-lived objects: at the default threshold ``migfit simulate
    --policies migfit --seeds 1`` ran about 1,200 young and 9 full collections, 0.8 s of a
    9.7 s run; with this one 0.3 s. Collecting less often changes no result (nothing in the
    simulator relies on when garbage is collected). A GC turned off stays off.
    """
    old = gc.get_threshold()
    if old[0] <= 0:
        yield
        return
    gc.set_threshold(max(old[0], REPLAY_GC_THRESHOLD), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def run(nodes: Sequence[spec.NodeSpec], pods: Sequence[workload.PodSpec], *, policy: Policy,
        seed: int, options: Options, catalog: profiles.Catalog,
        keep_snapshot: bool = True) -> RunResult:
    """Simulate one policy with one seed (``bound``/``bound-static``: solve the LP)."""
    with _rarer_collections():
        return _run(nodes, pods, policy=policy, seed=seed, options=options, catalog=catalog,
                    keep_snapshot=keep_snapshot)


def _run(nodes: Sequence[spec.NodeSpec], pods: Sequence[workload.PodSpec], *, policy: Policy,
         seed: int, options: Options, catalog: profiles.Catalog,
         keep_snapshot: bool) -> RunResult:
    started = time.perf_counter()
    gpus = sum(n.gpus for n in nodes)
    arrivals = workload.arrivals(pods, mode=options.mode, order=options.order,
                                 target=options.target, seed=seed, gpus=gpus,
                                 arrival_scale=options.arrival_scale)
    if policy.is_bound:
        figs = bound.figures(nodes, arrivals, options=options, catalog=catalog,
                             static=policy.scorer == "bound-static")
        figs["wall_s"] = time.perf_counter() - started
        return RunResult(policy=policy.name, seed=seed, figures=figs, series=[],
                         snapshot=None, wall_s=figs["wall_s"])
    sim = Simulation(nodes, policy=policy, seed=seed, options=options, catalog=catalog,
                     workload_pods=pods)
    if options.mode == "fill":
        sim.run_fill(arrivals)
        figs = sim.figures()
        figs["unallocated_share_at_last_arrival"] = sim.end_figures["unallocated_share"]
        for k in WAIT_FIGURES:  # measured when arrivals stop, the same moment for every policy
            figs[k] = sim.end_figures[k]
        waits = sim.end_waits_by_class
    else:
        sim.run_events(arrivals)
        figs = sim.end_figures or sim.figures()
        final = sim.figures(ended=True)
        for k in ("pods_placed", "gpu_pods_placed", "pods_pending", "gpu_pods_pending",
                  *WAIT_FIGURES, "blocked_by_fragmentation", "relayouts", "gpus_relaid",
                  "pods_disrupted", "memory_wasted_gib", "memory_wasted_share"):
            figs[k] = final[k]
        figs["unallocated_share_at_last_arrival"] = figs["unallocated_share"]
        waits = sim.waits_by_class(ended=True)
    figs["arrivals_end_s"] = sim.horizon
    figs["wall_s"] = time.perf_counter() - started
    return RunResult(policy=policy.name, seed=seed, figures=figs, series=sim.series,
                     snapshot=sim.snapshot if keep_snapshot else None,
                     wall_s=figs["wall_s"], waits_by_class=waits)
