"""A model of kube-scheduler's cycle for one pod: Filter, Score, extender, highest total wins.

Filter: NodeResourcesFit on cpu, memory and the extended resources the pod requests
(``nvidia.com/mig-*``: allocatable minus what bound pods request), the NoSchedule taint of a
re-layout in progress (TaintToleration), then, for the ``migfit`` policy, the extender's filter
on the nodes that passed (kube-scheduler calls extenders after its own filters).

Score (pkg/scheduler/framework/plugins/noderesources, integer arithmetic as there):

- LeastAllocated: per resource ``(allocatable − requested) × 100 / allocatable``, weighted mean
  over cpu and memory (the default config's resources), requested including this pod;
- MostAllocated: ``requested × 100 / allocatable``, over cpu, memory and the pod's MIG
  resource (extended resources the pod does not request are skipped, as upstream does);
- BalancedAllocation: ``(1 − std(requested/allocatable over cpu, memory)) × 100``;
- extender: its 0..10 score × weight × (MaxNodeScore / MaxExtenderPriority = 10).

``default`` = LeastAllocated + BalancedAllocation; ``binpack`` = MostAllocated +
BalancedAllocation (the scoring strategy changed, the plugin set kept); ``migfit`` = default +
the extender; ``random`` = any feasible node. Plugins whose score is the same on every node
here (ImageLocality, NodeAffinity, PodTopologySpread, ...) are left out: they change no choice.
The highest total wins; ties are broken at random (seeded), as ``selectHost`` does. Not
modelled: percentageOfNodesToScore sampling (every feasible node is scored), preemption.

``upper-bound`` is no scheduler: a node fits when its GPUs can *create* the pod's instances
next to the ones in use (``placements.fit``), and the node whose GPUs are fullest wins.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from migfit import profiles

if TYPE_CHECKING:
    from migfit.simulate.engine import Node, Pod, Simulation

MAX_NODE_SCORE = 100
MAX_EXTENDER_PRIORITY = 10


def least_allocated(n: Node, cpu: int, mem: int) -> int:
    req_c = n.cpu_used + cpu
    req_m = n.mem_used + mem
    sc = (n.cpu_alloc - req_c) * MAX_NODE_SCORE // n.cpu_alloc if req_c <= n.cpu_alloc else 0
    sm = (n.mem_alloc - req_m) * MAX_NODE_SCORE // n.mem_alloc if req_m <= n.mem_alloc else 0
    return (sc + sm) // 2


def most_allocated(n: Node, cpu: int, mem: int, mig: tuple[int, int] | None) -> int:
    total = 0
    weights = 0
    for req, alloc in ((n.cpu_used + cpu, n.cpu_alloc), (n.mem_used + mem, n.mem_alloc),
                       mig or (0, 0)):
        if alloc <= 0:
            continue
        total += min(req, alloc) * MAX_NODE_SCORE // alloc
        weights += 1
    return total // weights if weights else 0


def balanced(n: Node, cpu: int, mem: int) -> int:
    fc = min(1.0, (n.cpu_used + cpu) / n.cpu_alloc)
    fm = min(1.0, (n.mem_used + mem) / n.mem_alloc)
    std = abs(fc - fm) / 2  # the population std of two fractions
    return int((1 - std) * MAX_NODE_SCORE)


class KubeScheduler:
    """Schedules one pod at a time on a ``Simulation``'s nodes."""

    def __init__(self, sim: Simulation, *, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng
        self.scorer = sim.policy.scorer
        self.weight = sim.options.extender_weight

    def feasible(self, pod: Pod) -> list[str]:
        """Nodes that pass kube-scheduler's own filters (before any extender)."""
        sim = self.sim
        cpu, mem = pod.spec.cpu_milli, pod.spec.memory_mib
        nodes = sim.nodes
        out: list[str] = []
        if pod.spec.gpu and not sim.on_demand:
            wants = pod.wants
            first, k = next(iter(wants.items()))
            # NodeResourcesFit on nvidia.com/mig-<p>: the cluster's index holds the nodes with
            # a free instance (and excludes those being re-partitioned, which are tainted).
            for name, free in sim.cluster.free_nodes(first).items():
                if free < k:
                    continue
                n = nodes[name]
                if n.busy_until is not None:
                    continue
                if n.cpu_used + cpu > n.cpu_alloc or n.mem_used + mem > n.mem_alloc:
                    continue
                if len(wants) > 1:
                    state = sim.cluster.node(name)
                    if state is None or any(state.free.get(profiles.ProfileName(p), 0) < c
                                            for p, c in wants.items()):
                        continue
                out.append(name)
            return out
        wanted = list(pod.profiles)
        need = pod.compute
        for name, n in nodes.items():
            if n.busy_until is not None:
                continue
            if n.cpu_used + cpu > n.cpu_alloc or n.mem_used + mem > n.mem_alloc:
                continue
            if wanted and (n.free_compute < need or not sim.can_add(n, wanted)):
                continue
            out.append(name)
        return out

    def schedule(self, pod: Pod) -> str | None:
        """The chosen node, or None when no node passes the filters."""
        names = self.feasible(pod)
        if not names:
            return None
        sim = self.sim
        scorer = self.scorer
        if scorer == "migfit" and pod.spec.gpu and pod.request is not None:
            names = sim.extender.filter(pod.request, names)
            if not names:
                return None
        if len(names) == 1:
            return names[0]
        if scorer == "random":
            return self.rng.choice(names)
        nodes = sim.nodes
        cpu, mem = pod.spec.cpu_milli, pod.spec.memory_mib
        scores: list[int] = []
        if scorer == "upper-bound":
            scores = [nodes[n].used_compute * MAX_NODE_SCORE // nodes[n].total_compute
                      for n in names]
        elif scorer == "binpack":
            first = pod.profiles[0] if pod.profiles else None
            k = len(pod.profiles)
            for name in names:
                n = nodes[name]
                mig: tuple[int, int] | None = None
                if first is not None:
                    state = sim.cluster.node(name)
                    if state is not None:
                        pname = profiles.ProfileName(first)
                        mig = (state.used.get(pname, 0) + k,
                               state.node.allocatable.get(pname, 0))
                scores.append(most_allocated(n, cpu, mem, mig) + balanced(n, cpu, mem))
        else:
            for name in names:
                n = nodes[name]
                scores.append(least_allocated(n, cpu, mem) + balanced(n, cpu, mem))
            if scorer == "migfit" and pod.spec.gpu and pod.request is not None:
                ext = sim.extender.score(pod.request, names)
                factor = self.weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
                scores = [s + ext.get(name, 0) * factor
                          for s, name in zip(scores, names, strict=True)]
        best = max(scores)
        top = [name for name, s in zip(names, scores, strict=True) if s == best]
        return top[0] if len(top) == 1 else self.rng.choice(top)
