"""A lower bound on the GPU wait percentiles of an events replay, for the ``bound`` policies.

**The relaxation.** A GPU pod i that arrives at a_i, runs for d_i once started and waits at
most W starts in [a_i, a_i + W], so it runs during all of [a_i + W, a_i + d_i) whatever the
policy (nothing when d_i ≤ W). Give each pod its smallest possible footprint: per GPU model
where it fits, the least share of one GPU's compute slices and of its memory slices, and
the least count of *big* instances (more than half a GPU's compute slices: no GPU holds
two), each over the model's profiles that hold its requests (any profile: a re-layout may
create it), summed over its requests; the least of each over the models; its cpu and
memory. Every GPU of the cluster holds instances whose shares sum to at most
1 and at most one big instance, and GPU pods run on GPU nodes only, so at every moment t the
pods running use at most R = (GPUs, GPUs, GPUs, the GPU nodes' cpu, their memory) of the five.

The GPU wait p95 is the nearest-rank percentile over the N GPU pods not denied: it is at most
W only if all but L = N − ⌈0.95 N⌉ pods wait at most W. So if no set of L pods (the late ones)
can be left out such that, at every t, the other pods whose [a_i + W, a_i + d_i) holds t fit
in R, every policy's p95 exceeds W. The check is a covering LP: x_i ∈ [0, 1] (pod i late),
minimise Σ x_i subject to, for every moment and resource r, Σ_{i running} r_i x_i ≥
Σ_{i running} r_i − R_r. Its optimum, a fraction, is at most the least number of late pods
any schedule needs; above L, W is out of reach. Only moments just before a pod's interval
ends need a row (between two ends the set of running pods only grows, and a larger set's row
implies a smaller one's). The optimum falls as W grows (every interval shrinks), so a
bisection finds, to a second, the largest W proved out of reach: every policy's p95 is above
it. The same for the p50 (L = N − ⌈0.5 N⌉).

It relaxes which node and which GPU holds an instance (placements, a pod's instances on one
node, per-node cpu), re-layout time and integrality, so the bound may be out of reach; it is
0 where leaving the percentile's share of the pods late lets every other pod start at once.
Fill mode has no departures and its waits end with the run, which each policy sets: there
the bound stays the trivial 0. Needs SciPy, like the LP of ``bound``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from migfit import errors, profiles, requests
from migfit.simulate import spec, workload

# Seconds: the bisection stops when the interval is this narrow (the bound is its low end).
RESOLUTION_S = 1.0
# Relative: how far the LP's optimum must exceed the pods allowed late to count as a proof
# (HiGHS's feasibility tolerances are 1e-7; this is a thousand times that).
LP_MARGIN = 1e-4

# How to get the bounds' LP solver (an optional extra); bound and simulate's CLI say it too.
SCIPY_HINT = "pip install 'migfit[sim]', or in a checkout pip install -e '.[sim]'"


@dataclasses.dataclass(frozen=True, slots=True)
class Footprint:
    """One GPU pod's least use of the five resources and its interval's ends."""

    arrival: float
    duration: float
    use: tuple[float, float, float, float, float]  # compute, memory, big, cpu, memory MiB


Shares = tuple[float, float, float]  # of one GPU: compute, memory, big instances


def _shares(model: profiles.GpuModel, p: profiles.Profile) -> Shares:
    return (p.compute_slices / model.compute_slices, p.memory_slices / model.memory_slices,
            float(2 * p.compute_slices > model.compute_slices))


def _least_each(each: Sequence[Shares]) -> Shares | None:
    """The least of each share over ``each`` (each on its own); None for none."""
    if not each:
        return None
    return (min(e[0] for e in each), min(e[1] for e in each), min(e[2] for e in each))


def _least(model: profiles.GpuModel, req: requests.GpuRequest) -> Shares | None:
    """The least of each share over the model's profiles that hold ``req`` (None when none
    does). Every profile counts, not only those some node offers now: a re-layout may
    create any of them."""
    return _least_each([_shares(model, p) for p in workload.fitting(model, req)])


def _on_model(model: profiles.GpuModel, s: workload.PodSpec,
              asks: Sequence[requests.GpuRequest]) -> Shares | None:
    """The pod's least shares on ``model``, summed over its instances (explicit profiles, or
    its requests ``asks``); None when the model cannot hold one of them."""
    if s.explicit:
        if not all(model.has_profile(q) for q in s.explicit):
            return None
        parts: list[Shares | None] = [_shares(model, model.profile(q)) for q in s.explicit]
    else:
        parts = [_least(model, r) for r in asks]
    if not parts or any(x is None for x in parts):
        return None
    got = [x for x in parts if x is not None]
    return (sum(x[0] for x in got), sum(x[1] for x in got), sum(x[2] for x in got))


def _smallest(nodes: Sequence[spec.NodeSpec], pods: Sequence[workload.PodSpec]
              ) -> list[Shares | None]:
    """Per pod, the least shares over the GPU models of ``nodes`` that can hold every one of
    its instances; None where none can (denied) and for cpu-only pods."""
    models = list({n.model.id: n.model for n in nodes if n.gpus}.values())
    out: list[Shares | None] = []
    for s in pods:
        if not s.gpu:
            out.append(None)
            continue
        asks = () if s.explicit else workload.gpu_requests(s)
        out.append(_least_each([x for m in models
                                if (x := _on_model(m, s, asks)) is not None]))
    return out


def footprints(nodes: Sequence[spec.NodeSpec], arrivals: Sequence[workload.PodSpec]
               ) -> list[Footprint]:
    """The GPU pods of ``arrivals`` that some model can serve, with their least use."""
    out: list[Footprint] = []
    for s, gpu in zip(arrivals, _smallest(nodes, arrivals), strict=True):
        if gpu is not None:
            out.append(Footprint(arrival=s.arrival, duration=s.duration,
                                 use=(*gpu, float(s.cpu_milli), float(s.memory_mib))))
    return out


def capacity(nodes: Sequence[spec.NodeSpec]) -> tuple[float, float, float, float, float]:
    """R: the GPUs (for each of the three GPU shares) and the GPU nodes' cpu and memory."""
    gpus = float(sum(n.gpus for n in nodes))
    return (gpus, gpus, gpus, float(sum(n.cpu_milli for n in nodes if n.gpus)),
            float(sum(n.memory_mib for n in nodes if n.gpus)))


def least_late(pods: Sequence[Footprint], cap: Sequence[float], wait: float) -> float:
    """The covering LP's optimum: how many pods (fractionally) must wait longer than
    ``wait`` for the others to fit ``cap`` at every moment (module docstring)."""
    ends: list[tuple[float, int, int]] = []  # (time, 0 = interval ends / 1 = starts, pod)
    for i, p in enumerate(pods):
        if p.duration > wait:
            ends.append((p.arrival + wait, 1, i))
            if math.isfinite(p.duration):
                ends.append((p.arrival + p.duration, 0, i))
    # At equal times an interval that ends does so before one that starts (half-open).
    ends.sort(key=lambda e: (e[0], e[1]))
    running: set[int] = set()
    load = [0.0] * len(cap)
    rows: list[tuple[int, list[int], float]] = []  # (resource, pods running, excess)
    grew = False

    def close() -> None:
        for r, (have, room) in enumerate(zip(load, cap, strict=True)):
            excess = have - room
            if excess > 1e-9:
                rows.append((r, sorted(running), excess))

    for _, starts, i in ends:
        use = pods[i].use
        if starts:
            running.add(i)
            for r in range(len(cap)):
                load[r] += use[r]
            grew = True
            continue
        if grew:
            close()
            grew = False
        running.discard(i)
        for r in range(len(cap)):
            load[r] -= use[r]
    if grew:
        close()
    if not rows:
        return 0.0
    try:
        from scipy import optimize, sparse
    except ImportError:
        raise errors.UsageError(f"the bound needs SciPy: {SCIPY_HINT}") from None
    data: list[float] = []
    ri: list[int] = []
    ci: list[int] = []
    for k, (r, members, _) in enumerate(rows):
        for j in members:
            a = pods[j].use[r]
            if a:
                data.append(-a)
                ri.append(k)
                ci.append(j)
    matrix = sparse.csr_array((data, (ri, ci)), shape=(len(rows), len(pods)))
    res = optimize.linprog(c=[1.0] * len(pods), A_ub=matrix,
                           b_ub=[-excess for _, _, excess in rows], bounds=(0, 1),
                           method="highs")
    if res.status == 2:  # infeasible: even every pod late leaves a moment over (cannot be)
        return float(len(pods))
    if res.status != 0:
        raise errors.UsageError(f"the wait bound's LP failed: {res.message}")
    return float(res.fun)


def percentile_bound(pods: Sequence[Footprint], cap: Sequence[float], q: float,
                     solved: dict[float, float] | None = None) -> float:
    """The largest wait W (to ``RESOLUTION_S``) that every policy's nearest-rank q-th
    percentile GPU wait exceeds; 0 when none is proved. ``solved``: ``least_late`` by W,
    shared between percentiles of the same pods (the LP does not depend on q)."""
    memo = {} if solved is None else solved

    def late(wait: float) -> float:
        if wait not in memo:
            memo[wait] = least_late(pods, cap, wait)
        return memo[wait]

    n = len(pods)
    if not n:
        return 0.0
    allowed = n - max(1, math.ceil(q / 100 * n))  # pods that may wait longer than W
    # The solver's optimum is within its tolerances of the true one: a proof needs a clear
    # excess over ``allowed`` (the bound errs low, never high).
    proof = allowed + LP_MARGIN * (1 + allowed)
    if late(0.0) <= proof:
        return 0.0
    lo = 0.0  # proved: the percentile exceeds lo
    hi = max((p.duration for p in pods if math.isfinite(p.duration)), default=0.0)
    if late(hi) > proof:
        # Pods that never leave keep the excess whatever the wait: no finite bound found
        # below the longest run; report that (still a proof).
        return hi
    while hi - lo > RESOLUTION_S:
        mid = (lo + hi) / 2
        if late(mid) > proof:
            lo = mid
        else:
            hi = mid
    return float(math.floor(lo))


def figures(nodes: Sequence[spec.NodeSpec], arrivals: Sequence[workload.PodSpec]
            ) -> dict[str, float]:
    """``gpu_pending_p50_s`` and ``gpu_pending_p95_s`` bounds of an events replay."""
    pods = footprints(nodes, arrivals)
    cap = capacity(nodes)
    solved: dict[float, float] = {}
    return {"gpu_pending_p50_s": percentile_bound(pods, cap, 50, solved),
            "gpu_pending_p95_s": percentile_bound(pods, cap, 95, solved)}
