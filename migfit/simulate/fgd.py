"""The ``fgd`` baseline: Fragmentation Gradient Descent (Weng et al., USENIX ATC '23), on MIG.

FGD scores a node by how much placing the pod there grows the node's *fragmentation*: the
expected share of its free GPU capacity that the next pod, drawn from the workload's typical
pod classes, could not use. It picks the node with the smallest growth. Carried over to MIG
instances and host resources:

- a **class** c = (profile, instances per pod, cpu, memory) of the workload's GPU pods (the
  trace mapping's profile), with weight w_c its share of those pods; the most common classes
  covering the pods, at most ``TOP_CLASSES`` (weights renormalised);
- a node's **free slices** per GPU = its compute slices − those of instances held by pods
  (idle instances of any profile count as free);
- **fragment of a node for c**: every free slice when the node cannot take c at all (fewer
  than k free instances of c's profile, not enough cpu or memory left — FGD's rule that a
  task whose non-GPU resources do not fit sees the whole node as fragment — or a re-layout in
  progress); otherwise the free slices of its GPUs that hold no free instance of c's profile;
- **F(node)** = Σ_c w_c × fragment_c; the score is −(F(after) − F(before)), where *after*
  takes the instances the device plugin would hand the pod (``world.World.choose``) and
  the pod's cpu and memory.

Deltas are cached per (node, node version, pod class): a node's figure changes only when a
pod binds to or leaves it, or it is re-laid out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from migfit.simulate import workload, world

TOP_CLASSES = 24
Class = tuple[str, int, int, int, float]  # profile, k, cpu, memory, weight


def classes_of(pods: Sequence[workload.PodSpec], top: int = TOP_CLASSES) -> list[Class]:
    """The workload's typical GPU pod classes with their weights (module docstring)."""
    mix: Counter[tuple[str, int, int, int]] = Counter()
    for p in pods:
        if not p.gpu:
            continue
        names = p.explicit or ((p.expected,) * p.containers if p.expected else ())
        if names:
            mix[(names[0], len(names), p.cpu_milli, p.memory_mib)] += 1
    common = sorted(mix.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    total = sum(c for _, c in common)
    return [(prof, k, cpu, mem, c / total) for (prof, k, cpu, mem), c in common]


class Fgd:
    """FGD's score for one world and workload."""

    def __init__(self, state: world.World, classes: Sequence[Class]) -> None:
        self.world = state
        self.classes = list(classes)
        # node -> (its version, pod class -> delta): a node's entries go when it changes.
        self._cache: dict[str, tuple[int, dict[tuple[tuple[str, ...], int, int], float]]] = {}

    def fragmentation(self, n: world.Node, extra: frozenset[tuple[int, int]], cpu: int,
                      mem: int) -> float:
        """F(node) with the instances ``extra`` and ``cpu``/``mem`` held besides."""
        if not n.gpus:
            return 0.0
        model = n.model
        frees: list[int] = []
        idle: list[Counter[str]] = []
        for gi, g in enumerate(n.gpus):
            held = 0
            spare: Counter[str] = Counter()
            for ii, (inst, h) in enumerate(zip(g.instances, g.holders, strict=True)):
                if h is not None or (gi, ii) in extra:
                    held += model.profile(inst.profile).compute_slices
                else:
                    spare[inst.profile] += 1
            frees.append(model.compute_slices - held)
            idle.append(spare)
        total = sum(frees)
        if not total:
            return 0.0
        cpu_left = n.cpu_alloc - n.cpu_used - cpu
        mem_left = n.mem_alloc - n.mem_used - mem
        busy = n.busy_until is not None
        out = 0.0
        for prof, k, c_cpu, c_mem, w in self.classes:
            avail = sum(s[prof] for s in idle)
            if busy or avail < k or c_cpu > cpu_left or c_mem > mem_left:
                out += w * total
            else:
                out += w * sum(f for f, s in zip(frees, idle, strict=True) if not s[prof])
        return out

    def delta(self, pod: world.Pod, n: world.Node) -> float:
        entry = self._cache.get(n.name)
        if entry is None or entry[0] != n.version:
            entry = (n.version, {})
            self._cache[n.name] = entry
        known = entry[1]
        key = (pod.profiles, pod.spec.cpu_milli, pod.spec.memory_mib)
        hit = known.get(key)
        if hit is not None:
            return hit
        before = self.fragmentation(n, frozenset(), 0, 0)
        taken: set[tuple[int, int]] = set()
        for p in pod.profiles:
            got = self.world.choose(n, p, frozenset(taken))
            if got is not None:
                taken.add(got)
        after = self.fragmentation(n, frozenset(taken), pod.spec.cpu_milli,
                                   pod.spec.memory_mib)
        known[key] = after - before
        return after - before

    def deltas(self, pod: world.Pod, names: Sequence[str]) -> list[float]:
        nodes = self.world.nodes
        return [self.delta(pod, nodes[name]) for name in names]
