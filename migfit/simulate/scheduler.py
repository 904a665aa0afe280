"""A model of kube-scheduler's cycle for one pod: Filter, Score, extender, highest total wins.

Filter: NodeResourcesFit on cpu, memory and the extended resources the pod requests
(``nvidia.com/mig-*``: allocatable minus what bound pods request), the NoSchedule taint of a
re-layout in progress (TaintToleration), NodeAffinity on the node's trace GPU model for pods
whose trace ``gpu_spec`` names models. As upstream (``findNodesThatFitPod``), the filters stop
once ``numFeasibleNodesToFind`` nodes passed, starting where the previous cycle stopped
(``nextStartNodeIndex``, advanced by the nodes examined):

- fewer than 100 nodes: every node;
- percentageOfNodesToScore unset or 0 (the shipped config): adaptive, 50 − nodes/125 %
  (at least 5 %); with 1,213 nodes 41 %, 497 nodes; a set value p: p % of the nodes;
- never fewer than 100 nodes; 100 % or more: every node.

Then, for ``migfit``, the extender's filter on the nodes found (kube-scheduler calls extenders
after its own filters, on the same sample).

Score (pkg/scheduler/framework/plugins/noderesources, integer arithmetic as there):

- LeastAllocated: per resource ``(allocatable − requested) × 100 / allocatable``, weighted mean
  over cpu and memory (the default config's resources), requested including this pod;
- MostAllocated: ``requested × 100 / allocatable``, over cpu, memory and the pod's MIG
  resource (extended resources the pod does not request are skipped, as upstream does),
  weights 1, 1, 1 (``binpack``) or 1, 1, ``gpu_weight`` (``binpack-gpu``, default 3);
- BalancedAllocation: ``(1 − std(requested/allocatable over cpu, memory)) × 100``;
- extender: its 0..10 score × weight × (MaxNodeScore / MaxExtenderPriority = 10);
- ``fgd``: the fragmentation-gradient plugin (``fgd``) alone, as in FGD's own scheduler.

``default`` = LeastAllocated + BalancedAllocation; ``binpack``/``binpack-gpu`` =
MostAllocated + BalancedAllocation (the scoring strategy changed, the plugin set kept);
``migfit`` = default + the extender; ``random`` = any feasible node. Plugins whose score is the
same on every node here (ImageLocality, NodeAffinity, PodTopologySpread, ...) are left out:
they change no choice. The highest total wins; ties are broken at random (seeded), as
``selectHost`` does. Not modelled: preemption.

``upper-bound`` (kept for comparison; it is no bound, see ``bound``) is no scheduler: a node
fits when its GPUs can *create* the pod's instances next to the ones in use
(``placements.fit``), and the node whose GPUs are fullest wins.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Mapping, Sequence

from migfit import profiles
from migfit.simulate import adapters, fgd, policies, world

MAX_NODE_SCORE = 100
MAX_EXTENDER_PRIORITY = 10
MIN_FEASIBLE_NODES = 100
MIN_FEASIBLE_PERCENTAGE = 5
BASE_PERCENTAGE = 50


def nodes_to_find(percentage: int | None, nodes: int) -> int:
    """kube-scheduler's ``numFeasibleNodesToFind`` (module docstring)."""
    if nodes < MIN_FEASIBLE_NODES:
        return nodes
    pct = percentage or 0
    if pct >= 100:
        return nodes
    if pct <= 0:
        pct = max(MIN_FEASIBLE_PERCENTAGE, BASE_PERCENTAGE - nodes // 125)
    return max(MIN_FEASIBLE_NODES, nodes * pct // 100)


def least_allocated(n: world.Node, cpu: int, mem: int) -> int:
    req_c = n.cpu_used + cpu
    req_m = n.mem_used + mem
    sc = (n.cpu_alloc - req_c) * MAX_NODE_SCORE // n.cpu_alloc if req_c <= n.cpu_alloc else 0
    sm = (n.mem_alloc - req_m) * MAX_NODE_SCORE // n.mem_alloc if req_m <= n.mem_alloc else 0
    return (sc + sm) // 2


def most_allocated(n: world.Node, cpu: int, mem: int, mig: tuple[int, int] | None,
                   gpu_weight: int = 1) -> int:
    total = 0
    weights = 0
    for req, alloc, w in ((n.cpu_used + cpu, n.cpu_alloc, 1), (n.mem_used + mem, n.mem_alloc, 1),
                          (*(mig or (0, 0)), gpu_weight)):
        if alloc <= 0:
            continue
        total += min(req, alloc) * MAX_NODE_SCORE // alloc * w
        weights += w
    return total // weights if weights else 0


def balanced(n: world.Node, cpu: int, mem: int) -> int:
    fc = min(1.0, (n.cpu_used + cpu) / n.cpu_alloc)
    fm = min(1.0, (n.mem_used + mem) / n.mem_alloc)
    std = abs(fc - fm) / 2  # the population std of two fractions
    return int((1 - std) * MAX_NODE_SCORE)


# Node changes ``World.changed`` holds before it is cleared and every kept list rebuilt.
CHANGES_KEPT = 65_536


class _Passing:
    """Nodes that pass kube-scheduler's filters for one pod shape, in ``World.order``."""

    __slots__ = ("names", "positions", "synced")

    def __init__(self) -> None:
        self.positions: list[int] = []  # ascending
        self.names: list[str] = []  # the node at each position
        self.synced = 0  # ``World.changed`` up to here is applied


class _Spread:
    """LeastAllocated + BalancedAllocation per node for one pod cpu and memory."""

    __slots__ = ("synced", "table")

    def __init__(self) -> None:
        self.table: dict[str, int] = {}
        self.synced = 0  # ``World.changed`` up to here is applied


class KubeScheduler:
    """Schedules one pod at a time on a ``World``'s nodes."""

    def __init__(self, state: world.World, *, scorer: policies.Scorer,
                 options: policies.Options, extender: adapters.Extender,
                 frag: fgd.Fgd | None, rng: random.Random) -> None:
        self.world = state
        self.rng = rng
        self.scorer = scorer
        self.options = options
        self.weight = options.extender_weight
        self.extender = extender
        self.frag = frag
        self.position = {name: i for i, name in enumerate(state.order)}
        self.to_find = nodes_to_find(options.percentage_of_nodes_to_score, len(state.order))
        self.next_start = 0
        # (cpu, memory) -> node -> LeastAllocated + BalancedAllocation (``_spread_of``)
        self._spread: dict[tuple[int, int], _Spread] = {}
        # (profile or "" for a pod without GPUs, cpu, memory) -> the nodes that pass, kept
        # in order across cycles and brought up to date from ``World.changed`` (``_passing``)
        self._passing: dict[tuple[str, int, int], _Passing] = {}
        self._by_position = [state.nodes[name] for name in state.order]

    def _sample(self, feasible: list[str]) -> list[str]:
        """The first ``to_find`` feasible nodes from ``next_start`` on; advances it."""
        if not feasible or len(feasible) < self.to_find:
            return feasible  # every node examined: a full round, the start stays
        return self._sample_positions(list(map(self.position.__getitem__, feasible)))

    def _sample_positions(self, feasible: list[int]) -> list[str]:
        """``_sample`` of the feasible nodes' positions in ``World.order``."""
        order = self.world.order
        if not feasible or len(feasible) < self.to_find:
            return [order[p] for p in feasible]  # a full round, the start stays
        total = len(order)
        start = self.next_start
        ranked = sorted(feasible)
        cut = bisect.bisect_left(ranked, start)
        chosen = (ranked[cut:] + ranked[:cut])[: self.to_find]
        examined = (chosen[-1] - start) % total + 1
        self.next_start = (start + examined) % total
        return [order[p] for p in chosen]

    def feasible(self, pod: world.Pod) -> list[str]:
        """Nodes that pass kube-scheduler's own filters (before any extender), sampled."""
        state = self.world
        nodes = state.nodes
        cpu, mem = pod.spec.cpu_milli, pod.spec.memory_mib
        if len(state.changed) > CHANGES_KEPT:  # every kept list rebuilds on its next use
            state.changed.clear()
            self._passing.clear()
            self._spread.clear()
        if pod.spec.gpu and not state.on_demand:
            first = pod.profiles[0]  # pod.wants' first entry, without building the Counter
            k = pod.profiles.count(first)
            # NodeResourcesFit on nvidia.com/mig-<p>: the cluster's index holds the nodes with
            # a free instance (and excludes those being re-partitioned, which are tainted).
            free = state.cluster.free_nodes(first)
            if len(free) > 2 * self.to_find:
                # Dense: examine nodes in kube-scheduler's order until enough passed.
                return self._scan(pod, free, k)
            if len(pod.profiles) > 1 or pod.spec.gpu_spec:
                return self._sample([name for name, f in free.items()
                                     if f >= k and self._passes(pod, state.nodes[name])])
            if len(free) < self.to_find:  # fewer than to_find pass: no sample, no sort
                return [  # _passes, inlined for the common case (one instance)
                    name for name, f in free.items()
                    if f >= k and (n := nodes[name]).busy_until is None
                    and n.cpu_used + cpu <= n.cpu_alloc and n.mem_used + mem <= n.mem_alloc]
            # The same nodes (k is 1 here: every node in ``free`` has one), kept in order.
            kept = self._passing_nodes(first, free, cpu, mem)
            if len(kept.positions) < self.to_find:  # every node examined: as listed
                return [name for name, f in free.items()
                        if f >= k and (n := nodes[name]).busy_until is None
                        and n.cpu_used + cpu <= n.cpu_alloc and n.mem_used + mem <= n.mem_alloc]
            return self._sample_kept(kept)
        if not pod.spec.gpu:  # _passes, inlined: the nodes in order, as they are kept
            kept = self._passing_nodes("", None, cpu, mem)
            if len(kept.positions) < self.to_find:  # a full round, the start stays
                return list(kept.names)
            return self._sample_kept(kept)
        return self._sample([name for name, n in nodes.items() if self._passes(pod, n)])

    def _passing_nodes(self, profile: str, free: Mapping[str, int] | None, cpu: int,
                       mem: int) -> _Passing:
        """The nodes that pass the filters of a pod of one ``profile`` instance (none: "",
        ``free`` None), ``cpu`` and ``mem``, in ``World.order``: kept per (profile, cpu,
        memory) and updated for the nodes that changed since its last use (every change to
        a node's cpu, memory, taint or free instances goes through ``World.hist``)."""
        state = self.world
        changed = state.changed
        key = (profile, cpu, mem)
        kept = self._passing.get(key)
        if kept is None or len(changed) - kept.synced > len(self._by_position) // 4:
            kept = self._passing[key] = _Passing()
            for n in self._by_position:
                if (n.busy_until is None and n.cpu_used + cpu <= n.cpu_alloc
                        and n.mem_used + mem <= n.mem_alloc
                        and (free is None or n.name in free)):
                    kept.positions.append(n.position)
                    kept.names.append(n.name)
        elif kept.synced < len(changed):
            positions, names = kept.positions, kept.names
            for p in set(changed[kept.synced:]):
                n = self._by_position[p]
                passes = (n.busy_until is None and n.cpu_used + cpu <= n.cpu_alloc
                          and n.mem_used + mem <= n.mem_alloc
                          and (free is None or n.name in free))
                i = bisect.bisect_left(positions, p)
                there = i < len(positions) and positions[i] == p
                if passes and not there:
                    positions.insert(i, p)
                    names.insert(i, n.name)
                elif there and not passes:
                    del positions[i]
                    del names[i]
        kept.synced = len(changed)
        return kept

    def _sample_kept(self, kept: _Passing) -> list[str]:
        """``_sample_positions`` of kept nodes (at least ``to_find`` of them, in order)."""
        positions = kept.positions
        want = self.to_find
        start = self.next_start
        cut = bisect.bisect_left(positions, start)
        after = len(positions) - cut
        if after >= want:
            last = positions[cut + want - 1]
            chosen = kept.names[cut:cut + want]
        else:
            last = positions[want - after - 1]
            chosen = kept.names[cut:] + kept.names[:want - after]
        total = len(self.world.order)
        self.next_start = (start + (last - start) % total + 1) % total
        return chosen

    def _passes(self, pod: world.Pod, n: world.Node) -> bool:
        """The filters other than the free-instance count of the pod's first profile."""
        s = pod.spec
        if (n.busy_until is not None or n.cpu_used + s.cpu_milli > n.cpu_alloc
                or n.mem_used + s.memory_mib > n.mem_alloc):
            return False
        if not s.gpu:
            return True
        if s.gpu_spec and n.trace_model not in s.gpu_spec:
            return False
        state = self.world
        if state.on_demand:
            return n.free_compute >= pod.compute and state.can_add(n, list(pod.profiles))
        if len(pod.profiles) > 1 and len(wants := pod.wants) > 1:
            ns = state.cluster.node(n.name)
            if ns is None or any(ns.free.get(profiles.ProfileName(p), 0) < c
                                 for p, c in wants.items()):
                return False
        return True

    def _scan(self, pod: world.Pod, free: Mapping[str, int], k: int) -> list[str]:
        """``findNodesThatFitPod``'s loop: from ``next_start``, stop at ``to_find`` nodes."""
        order = self.world.order
        nodes = self.world.nodes
        total = len(order)
        start = self.next_start
        want = self.to_find
        out: list[str] = []
        examined = 0
        for i in range(total):
            name = order[(start + i) % total]
            examined += 1
            if free.get(name, 0) >= k and self._passes(pod, nodes[name]):
                out.append(name)
                if len(out) >= want:
                    break
        if len(out) >= want:
            self.next_start = (start + examined) % total
        return out

    def schedule(self, pod: world.Pod) -> str | None:
        """The chosen node, or None when no node passes the filters."""
        names = self.feasible(pod)
        if not names:
            return None
        scorer = self.scorer
        gpu = pod.spec.gpu and pod.request is not None
        if scorer == "migfit" and gpu:
            names = self.extender.filter(pod.request, names)
            if not names:
                return None
        if len(names) == 1:
            return names[0]
        if scorer == "random":
            return self.rng.choice(names)
        scores = self._scores(pod, names)
        best = max(scores)
        if scores.count(best) == 1:
            return names[scores.index(best)]
        return self.rng.choice([name for name, s in zip(names, scores, strict=True)
                                if s == best])

    def _scores(self, pod: world.Pod, names: Sequence[str]) -> list[float]:
        nodes = self.world.nodes
        cpu, mem = pod.spec.cpu_milli, pod.spec.memory_mib
        scorer = self.scorer
        if scorer == "upper-bound":
            return [nodes[n].used_compute * MAX_NODE_SCORE // max(1, nodes[n].total_compute)
                    for n in names]
        if scorer == "fgd" and pod.spec.gpu and self.frag is not None:
            return [-d for d in self.frag.deltas(pod, names)]
        if scorer in ("binpack", "binpack-gpu"):
            weight = self.options.gpu_weight if scorer == "binpack-gpu" else 1
            first = pod.profiles[0] if pod.profiles else None
            k = len(pod.profiles)
            out: list[float] = []
            for name in names:
                n = nodes[name]
                mig: tuple[int, int] | None = None
                if first is not None:
                    ns = self.world.cluster.node(name)
                    if ns is not None:
                        pname = profiles.ProfileName(first)
                        mig = (ns.used.get(pname, 0) + k, ns.node.allocatable.get(pname, 0))
                out.append(most_allocated(n, cpu, mem, mig, weight) + balanced(n, cpu, mem))
            return out
        # LeastAllocated + BalancedAllocation, plus the extender's score × weight × 10.
        if scorer == "migfit" and pod.spec.gpu and pod.request is not None:
            ext = self.extender.scores(pod.request, names)
        elif scorer == "migfit" and not pod.spec.gpu and self.options.score_all_pods:
            request = adapters.Extender.host_request(pod.uid, cpu, mem)
            ext = self.extender.scores(request, names, all_pods=True)
        else:
            ext = [0] * len(names)
        factor = self.weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
        spread = self._spread_of(cpu, mem)
        totals: list[float] = []
        for name, e in zip(names, ext, strict=True):
            value = spread.get(name)
            if value is None:
                n = nodes[name]
                value = spread[name] = least_allocated(n, cpu, mem) + balanced(n, cpu, mem)
            totals.append(value + e * factor)
        return totals

    def _spread_of(self, cpu: int, mem: int) -> dict[str, int]:
        """LeastAllocated + BalancedAllocation per node for a pod of ``cpu`` and ``mem``, as
        kept: the nodes changed since its last use (``World.changed``) dropped."""
        changed = self.world.changed
        kept = self._spread.get((cpu, mem))
        if kept is None or len(changed) - kept.synced > len(self._by_position) // 4:
            kept = self._spread[(cpu, mem)] = _Spread()
        elif kept.synced < len(changed):
            table, order = kept.table, self.world.order
            for p in set(changed[kept.synced:]):
                table.pop(order[p], None)
        kept.synced = len(changed)
        return kept.table
