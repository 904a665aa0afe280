"""``bound`` and ``bound-static``: an LP relaxation that no scheduling policy can beat.

For the same arrivals as the policies (same seed, same mode), the LP asks: how many compute
slices could the cluster's pods hold at most? Nodes are grouped into **types** t (GPU model,
GPUs, cpu, memory, trace GPU model; for ``bound-static`` also the initial per-GPU layouts),
N_t nodes each; pods into **classes** c (the instances the webhook's decision gives them on
the initial cluster, cpu, memory, allowed trace models), n_c pods each. Variables
x_{c,t} ≥ 0: pods of class c on nodes of type t (fractional). Maximise Σ x_{c,t} × s_c
(s_c = compute slices of c's instances) subject to, for every type t,

- compute slices: Σ_c x_{c,t} s_c ≤ N_t × GPUs_t × slices per GPU;
- memory slices: Σ_c x_{c,t} m_c ≤ N_t × GPUs_t × memory slices per GPU;
- cpu and memory: Σ_c x_{c,t} cpu_c ≤ N_t cpu_t, the same for memory;
- ``bound-static`` only: for every profile p, Σ_c x_{c,t} × (instances of p in c) ≤ N_t ×
  (instances of p in t's initial layouts): no re-layout;

and for every class Σ_t x_{c,t} ≤ n_c; x_{c,t} = 0 where a pod of c cannot fit one node of t
alone (its profiles are not the model's, its cpu or memory exceed the node's, its
``gpu_spec`` excludes the trace model).

**Why no policy beats it.** Any state a policy reaches — with any scoring, any re-layout
(``bound``), any order or delay — places a subset of the pods that have arrived, each on one
node, and each node's instances fit its GPUs (so their compute and memory slices fit the
GPUs' slices) and its pods' cpu and memory fit the node. Counting, per type and class, the
pods placed gives an integral point of the LP's feasible set with the same objective; so the
LP optimum is at least what any policy allocates: its ``unallocated_share`` is at most any
policy's. ``bound-static`` drops the re-layouts: it bounds the policies without ``+advisor``.
Per-GPU packing (which instances fit together on one GPU beyond slice counts), integrality,
order and timing are relaxed away, so the bound may be out of reach.

Over time: at any moment t the pods present are a subset of those arrived by then (a pod can
be delayed until t whatever its duration), so LP(arrived ≤ t) bounds the allocation at t;
it grows with t, so the time average over [first, last arrival] is bounded by the right-endpoint
sum Σ_k LP(t_k) (t_k − t_{k−1}) over ``TIME_POINTS`` even steps. In events mode this allows
any delay, so it is loose once more has arrived than fits.

Figures: ``unallocated_share`` (at the last arrival, and at the end in fill mode: the same
arrivals), ``unallocated_share_time_avg`` and ``allocated_*`` are the bound; in events mode
the GPU wait p50 and p95 are bounds of their own (``waitbound``: a covering LP over the
pods' runs); figures that must be low (the other waits, idle while pending, re-layouts,
disrupted pods, fragmentation, the unallocated memory share, FGD's unit and the unallocated
share's parts) are 0, their trivial bound; pod counts are those of the LP's optimal solution
(fractional, not a bound). Needs SciPy (``pip install 'migfit[sim]'``):
``scipy.optimize.linprog`` (HiGHS).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from migfit import errors, profiles
from migfit.simulate import adapters, objects, policies, spec, waitbound, workload, world

TIME_POINTS = 40


@dataclasses.dataclass(frozen=True, slots=True)
class NodeType:
    model: profiles.GpuModel
    gpus: int
    cpu: int
    memory: int
    trace_model: str
    instances: tuple[tuple[str, int], ...]  # static: instances per profile of one node
    count: int


@dataclasses.dataclass(frozen=True, slots=True)
class PodClass:
    profiles: tuple[str, ...]  # one per instance; () for a cpu-only pod
    cpu: int
    memory: int
    gpu_spec: frozenset[str]


def node_types(nodes: Sequence[spec.NodeSpec], *, static: bool) -> list[NodeType]:
    groups: Counter[tuple[Any, ...]] = Counter()
    models: dict[str, profiles.GpuModel] = {}
    for n in nodes:
        inst: Counter[str] = Counter()
        if static:
            for lay in n.gpu_layouts:
                inst.update(lay)
        models[n.model.id] = n.model
        groups[(n.model.id, n.gpus, n.cpu_milli, n.memory_mib, n.trace_model,
                tuple(sorted(inst.items())))] += 1
    return [NodeType(model=models[m], gpus=g, cpu=c, memory=mem, trace_model=tm,
                     instances=inst, count=k)
            for (m, g, c, mem, tm, inst), k in sorted(groups.items(), key=lambda kv: kv[0])]


def decided_profiles(nodes: Sequence[spec.NodeSpec], pods: Sequence[workload.PodSpec],
                     catalog: profiles.Catalog) -> list[tuple[str, ...] | None]:
    """Per pod, the instances the webhook's decision gives it on the initial cluster
    (``()`` for a cpu-only pod, None when denied), as the policies' runs decide."""
    state = world.World(nodes, catalog=catalog, on_demand=False, allocation="distributed")
    decider = adapters.Decider(state.cluster)
    out: list[tuple[str, ...] | None] = []
    for i, s in enumerate(pods):
        if not s.gpu:
            out.append(())
        elif s.explicit:
            out.append(tuple(s.explicit))
        else:
            obj = objects.pod_object(name=f"bound-{i}", cpu_milli=s.cpu_milli,
                                     memory_mib=s.memory_mib, annotations=s.annotations,
                                     containers=s.containers)
            profs, _, denial = decider.decide(obj)
            out.append(None if denial else tuple(profs))
    return out


def _fits(c: PodClass, t: NodeType) -> bool:
    if c.cpu > t.cpu or c.memory > t.memory:
        return False
    if not c.profiles:
        return True
    if not t.gpus or (c.gpu_spec and t.trace_model not in c.gpu_spec):
        return False
    if not all(t.model.has_profile(p) for p in c.profiles):
        return False
    slices = sum(t.model.profile(p).compute_slices for p in c.profiles)
    return slices <= t.gpus * t.model.compute_slices


class Relaxation:
    """The LP for one cluster and one arrival sequence; solved for prefixes of it."""

    def __init__(self, nodes: Sequence[spec.NodeSpec], pods: Sequence[workload.PodSpec], *,
                 catalog: profiles.Catalog, static: bool) -> None:
        self.types = node_types(nodes, static=static)
        self.static = static
        decided = decided_profiles(nodes, pods, catalog)
        self.denied = sum(1 for d in decided if d is None)
        index: dict[PodClass, int] = {}
        self.pod_class: list[int] = []  # per pod, its class (-1: denied)
        for s, profs in zip(pods, decided, strict=True):
            if profs is None:
                self.pod_class.append(-1)
                continue
            c = PodClass(profiles=profs, cpu=s.cpu_milli, memory=s.memory_mib,
                         gpu_spec=s.gpu_spec if profs else frozenset())
            self.pod_class.append(index.setdefault(c, len(index)))
        self.classes = list(index)
        models = [t.model for t in self.types if t.gpus]
        self.arrived_slices = float(sum(
            next((m.profile(p).compute_slices for m in models if m.has_profile(p)), 0)
            for ci in self.pod_class if ci >= 0 for p in self.classes[ci].profiles))
        self.capacity = max(1, sum(t.count * t.gpus * t.model.compute_slices
                                   for t in self.types))
        self._build()

    def _build(self) -> None:
        self.pairs: list[tuple[int, int]] = [
            (ci, ti) for ci, c in enumerate(self.classes) for ti, t in enumerate(self.types)
            if _fits(c, t)]
        rows: list[list[tuple[int, float]]] = []
        caps: list[float] = []
        by_type: dict[int, list[tuple[int, int]]] = {}
        for v, (ci, ti) in enumerate(self.pairs):
            by_type.setdefault(ti, []).append((v, ci))
        self.gain: list[float] = []
        for ci, ti in self.pairs:
            t, c = self.types[ti], self.classes[ci]
            self.gain.append(float(sum(t.model.profile(p).compute_slices for p in c.profiles)))
        for ti, members in sorted(by_type.items()):
            t = self.types[ti]
            m = t.model
            n = t.count
            terms: list[tuple[list[tuple[int, float]], float]] = [
                ([(v, float(sum(m.profile(p).compute_slices
                                for p in self.classes[ci].profiles))) for v, ci in members],
                 float(n * t.gpus * m.compute_slices)),
                ([(v, float(sum(m.profile(p).memory_slices
                                for p in self.classes[ci].profiles))) for v, ci in members],
                 float(n * t.gpus * m.memory_slices)),
                ([(v, float(self.classes[ci].cpu)) for v, ci in members], float(n * t.cpu)),
                ([(v, float(self.classes[ci].memory)) for v, ci in members],
                 float(n * t.memory)),
            ]
            if self.static:
                have = dict(t.instances)
                wanted = {p for _, ci in members for p in self.classes[ci].profiles}
                for p in sorted(wanted):
                    terms.append(([(v, float(self.classes[ci].profiles.count(p)))
                                   for v, ci in members], float(n * have.get(p, 0))))
            for row, cap in terms:
                row = [(v, a) for v, a in row if a]
                if row:
                    rows.append(row)
                    caps.append(cap)
        self.class_rows_from = len(rows)
        per_class: dict[int, list[int]] = {}
        for v, (ci, _) in enumerate(self.pairs):
            per_class.setdefault(ci, []).append(v)
        self.class_of_row: list[int] = []
        for ci, vs in sorted(per_class.items()):
            rows.append([(v, 1.0) for v in vs])
            caps.append(0.0)
            self.class_of_row.append(ci)
        self.rows = rows
        self.caps = caps
        self._matrix: Any = None

    def solve(self, arrived: int) -> tuple[float, float, float]:
        """(allocated compute slices, pods, GPU pods) at the optimum, for the first
        ``arrived`` pods of the sequence."""
        try:
            from scipy import optimize, sparse
        except ImportError:
            raise errors.UsageError(f"the bound needs SciPy: {waitbound.SCIPY_HINT}") from None
        counts = Counter(c for c in self.pod_class[:arrived] if c >= 0)
        caps = list(self.caps)
        for k, ci in enumerate(self.class_of_row):
            caps[self.class_rows_from + k] = float(counts.get(ci, 0))
        if not self.pairs or not counts:
            return 0.0, 0.0, 0.0
        if self._matrix is None:
            data, ri, vi = [], [], []
            for r, row in enumerate(self.rows):
                for v, a in row:
                    data.append(a)
                    ri.append(r)
                    vi.append(v)
            self._matrix = sparse.csr_array((data, (ri, vi)),
                                            shape=(len(self.rows), len(self.pairs)))
        res = optimize.linprog(c=[-g for g in self.gain], A_ub=self._matrix, b_ub=caps,
                               bounds=(0, None), method="highs")
        if res.status != 0:
            raise errors.UsageError(f"the bound's LP failed: {res.message}")
        x = list(res.x)
        slices = float(sum(g * v for g, v in zip(self.gain, x, strict=True)))
        pods = float(sum(x))
        gpu = float(sum(v for v, (c, _) in zip(x, self.pairs, strict=True)
                        if self.classes[c].profiles))
        return slices, pods, gpu


def figures(nodes: Sequence[spec.NodeSpec], arrivals: Sequence[workload.PodSpec], *,
            options: policies.Options, catalog: profiles.Catalog, static: bool
            ) -> dict[str, float]:
    """The bound's figures (module docstring) for one arrival sequence."""
    lp = Relaxation(nodes, arrivals, catalog=catalog, static=static)
    n = len(arrivals)
    slices, pods, gpu_pods = lp.solve(n)
    cap = lp.capacity
    # Time points: arrival times (fill: one every fill_interval); right-endpoint sum.
    times = ([s.arrival for s in arrivals] if options.mode == "events"
             else [i * options.fill_interval for i in range(n)])
    first = times[0] if times else 0.0
    last = times[-1] if times else 0.0
    avg = slices
    if last > first:
        area = 0.0
        prev = first
        for k in range(1, TIME_POINTS + 1):
            t = first + (last - first) * k / TIME_POINTS
            arrived = bisect.bisect_right(times, t)  # times are sorted
            area += lp.solve(arrived)[0] * (t - prev)
            prev = t
        avg = area / (last - first)
    gpu_arrived = sum(1 for s in arrivals if s.gpu)
    zero = ("pods_pending", "gpu_pods_pending", "fragmentation_share", "pending_p50_s",
            "pending_p99_s",
            "gpu_pending_p50_s", "gpu_pending_p95_s", "idle_while_pending_slice_hours",
            "blocked_by_fragmentation", "relayouts", "gpus_relaid", "pods_disrupted",
            "decision_differs_from_mapping", "memory_wasted_gib", "memory_wasted_share",
            # where the unallocated slices are: each part's trivial bound (module docstring)
            "unallocated_host_bound_share", "unallocated_partial_gpus_share",
            "unallocated_idle_gpus_share")
    out: dict[str, float] = dict.fromkeys(zero, 0.0)
    if options.mode == "events":
        # The GPU wait percentiles: a bound of their own (``waitbound``), not the trivial 0.
        out.update(waitbound.figures(nodes, arrivals))
    out.update({
        "pods_arrived": float(n),
        "gpu_pods_arrived": float(gpu_arrived),
        "pods_placed": pods,
        "gpu_pods_placed": gpu_pods,
        "pods_denied": float(lp.denied),
        "requested_gpus_share": sum(s.trace_gpus for s in arrivals)
        / max(1, sum(x.gpus for x in nodes)),
        "arrived_slices": lp.arrived_slices,
        "arrived_slices_share": lp.arrived_slices / cap,
        "allocated_slices": slices,
        "allocated_share": slices / cap,
        "allocated_of_arrived": slices / max(1.0, lp.arrived_slices),
        "unallocated_share": max(0.0, 1 - slices / cap),
        "unallocated_share_at_last_arrival": max(0.0, 1 - slices / cap),
        "unallocated_share_time_avg": max(0.0, 1 - avg / cap),
        "unallocated_memory_share": 0.0,
        "unallocated_trace_gpus_share": 0.0,
        "arrivals_end_s": last,
    })
    return out
