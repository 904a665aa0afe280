"""What the simulator measures, and how; figures across seeds as mean and spread.

Definitions (capacity = 7 compute slices per A100/H100 GPU; a GPU slice is one compute slice):

- **allocated share**: compute slices of the MIG instances held by pods / capacity. An
  instance counts whole (a 0.46-GPU pod mapped to 4g.40gb holds 4 slices), as a device
  plugin hands it out whole.
- **unallocated share at the end** (FGD's figure carried over): 1 − allocated share when
  arrivals stop (``fill``: after the last arrival and the re-layouts already in flight;
  ``events``: at the last arrival). FGD reports the unallocated share of GPU capacity when
  130 % of it has been requested; here "requested" counts the trace's GPUs (gpu_milli).
- **fragmentation** (FGD's measure on MIG slices): for each class c = (profile, instances per
  pod) of the arrived GPU pods, with weight w_c its share of those pods, a node's free
  compute slices are a fragment for c when the node cannot take c now (not enough free
  instances of the profile — or, for the upper bound, instances cannot be created — or a
  re-layout is in progress); when it can, the free slices of its GPUs that cannot host one
  instance of c's profile are. Fragmentation = Σ_c w_c Σ_nodes fragment_c / capacity: the
  expected share of capacity free but unusable by the next pod drawn from the mix. Free
  slices of a GPU = its compute slices − those of instances held by pods (idle instances of
  another profile and stranded slices are free but unusable for c).
- **pending time**: start − arrival of every pod; p50 and p99 (nearest rank). **GPU
  pending** p50/p95: the same for GPU pods only. Every policy's waits are read over the same
  time: in ``fill`` mode when arrivals stop (a pod still waiting counts the time it waited
  until then; an advisor's re-layouts in flight and its last queued call no longer run its
  clock on), in ``events`` mode once the replay is over, when a pod still waiting was never
  placed and waits for ever (``math.inf``: "never" in the tables, ``null`` in the JSON;
  ``gpu_pods_pending`` counts them). Before, such a pod's wait ended with its own run, and a
  policy that placed none of them showed a lower p95 than one that placed them late, and
  than the bound. **GPU waits by class** (``--waits-by-class``, the
  runs' ``waits_by_class`` in ``--json``): the same per class of GPU pod (the instances
  the decision gave it, ``8 × 7g.80gb``), with how many of its pods waited at least the
  run's GPU wait p95: which classes make that figure.
- **time-averaged unallocated share**: 1 − allocated compute slices integrated exactly over
  [first arrival, last arrival] / (capacity × that span).
  ``unallocated_share_at_last_arrival`` is the share at the last arrival (in fill mode
  ``unallocated_share`` is taken once the re-layouts
  in flight have finished). The parts below are taken at the same moment as
  ``unallocated_share``: at the end in fill mode, at the last arrival in events mode.
- **idle while pending** (slice-hours): compute slices idle (free instances or
  unpartitioned) on GPUs that could serve a pod pending at that moment, as they are (a free
  instance of one of its profiles, on a node with its cpu and memory free and not being
  re-laid out) or after a re-layout of the idle GPU (no instance of it held) — on a node
  that could hold all of the pod's instances (free ones plus what its idle GPUs could be
  re-laid out to: a pod of eight whole GPUs is served by no node with fewer), integrated over
  [first, last arrival] as a step function of ``--samples`` evenly spaced samples: the seed's
  "the GPU is empty but the pod is Pending".
- **unallocated in FGD's unit** (``unallocated_trace_gpus_share``): 1 − the trace's GPUs
  (num_gpu × gpu_milli / 1000) of the placed pods / the cluster's GPUs — what FGD reports,
  where a 0.46-GPU pod counts 0.46 whatever instance it was given.
- **blocked by fragmentation**: GPU pods that found no node on arrival although, at that
  moment, some node not being re-laid out had at least as many free compute slices as the
  pod's instances hold in total (counted once per pod, at its arrival; later retries are not
  counted again).
- **re-layouts**: nodes re-partitioned; **GPUs re-laid out** (``gpus_relaid``): GPUs whose
  layout changed; **disrupted**: GPU pods on a node when its re-layout starts (the advisor is
  asked for safe changes only, so it must stay 0).
- **where the unallocated slices are** (``unallocated_host_bound_share``,
  ``unallocated_partial_gpus_share``, ``unallocated_idle_gpus_share``; they sum to the
  unallocated share, taken at the same moment): free slices on GPU nodes whose free cpu and
  memory no pending GPU pod fits (0 when none waits); else on GPUs with an instance held
  (the MIG Manager cannot re-partition those); else on GPUs holding none.
- **unallocated memory share**: the same as the unallocated share, on memory slices (8 per
  A100/H100 GPU) instead of compute slices.
- **requested GPUs share**: the trace's GPUs (num_gpu × gpu_milli / 1000) of the arrived
  pods / the cluster's GPUs; **arrived slices**: compute slices of the instances the arrived
  GPU pods were given by the decision; **allocated of arrived**: allocated / arrived slices.
- **decision differs from mapping**: GPU pods whose profile from the webhook's decision is
  not the one the trace mapping names (0 when the annotations ask for what the mapping means).
- **memory wasted by rounding**: Σ over placed GPU pods of (usable memory of its instances −
  the memory it needs, gpu_milli × the GPU's memory), and its share of the usable memory.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence

from migfit.simulate import world


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted ``values``; 0 for none."""
    if not values:
        return 0.0
    k = max(0, min(len(values) - 1, math.ceil(q / 100 * len(values)) - 1))
    return float(values[k])


def class_name(profiles: Sequence[str]) -> str:
    """A GPU pod's class for the waits by class: its instances, ``8 × 7g.80gb`` or
    ``1 × 1g.10gb + 1 × 3g.40gb``."""
    return " + ".join(f"{k} × {p}" for p, k in sorted(Counter(profiles).items()))


def waits_by_class(done: Mapping[str, Sequence[float]],
                   waiting: Sequence[tuple[str, float]]) -> dict[str, dict[str, float]]:
    """Per pod class, how long its GPU pods waited: the placed pods' waits (``done``) and the
    pods still waiting with the time waited so far (``waiting``: class, seconds), as the GPU
    wait p95 counts them. Per class: ``pods``, ``waiting`` (still), ``p50_s``, ``p95_s``,
    ``max_s`` and ``in_run_p95_tail``: how many of its pods waited at least the run's GPU
    wait p95 (> 0), i.e. which classes make that figure."""
    by: dict[str, list[float]] = {k: list(v) for k, v in done.items()}
    still: Counter[str] = Counter()
    for name, wait in waiting:
        by.setdefault(name, []).append(wait)
        still[name] += 1
    every = sorted(w for v in by.values() for w in v)
    p95 = percentile(every, 95)
    out: dict[str, dict[str, float]] = {}
    for name in sorted(by):
        waits = sorted(by[name])
        tail = len(waits) - bisect.bisect_left(waits, p95) if p95 > 0 else 0
        out[name] = {"pods": len(waits), "waiting": still[name],
                     "p50_s": percentile(waits, 50), "p95_s": percentile(waits, 95),
                     "max_s": waits[-1] if waits else 0.0, "in_run_p95_tail": tail}
    return out


def fragmentation(sim: world.World) -> float:
    """FGD's fragmentation measure on MIG compute slices (module docstring), 0..1."""
    total = sum(sim.classes.values())
    if not total or not sim.capacity_slices:
        return 0.0
    frag = 0.0
    for (profile, k), count in sim.classes.items():
        w = count / total
        amount = 0
        for n in sim.nodes.values():
            free = n.free_compute
            if free <= 0 or not n.gpus:
                continue
            if n.busy_until is not None or not n.model.has_profile(profile):
                amount += free
                continue
            per_gpu: list[tuple[int, bool]] = []
            avail = 0
            for g in n.gpus:
                held = sum(n.model.profile(i.profile).compute_slices
                           for i, h in zip(g.instances, g.holders, strict=True)
                           if h is not None)
                if sim.on_demand:
                    ok = sim.add_on(n, g, profile) is not None
                    avail += ok
                else:
                    c = sum(1 for i, h in zip(g.instances, g.holders, strict=True)
                            if h is None and i.profile == profile)
                    ok = c > 0
                    avail += c
                per_gpu.append((n.model.compute_slices - held, ok))
            if avail < k:
                amount += free
            else:
                amount += sum(f for f, ok in per_gpu if not ok)
        frag += w * amount
    return frag / sim.capacity_slices


def unallocated_parts(sim: world.World, pending: Sequence[world.Pod]) -> dict[str, float]:
    """Where the unallocated compute slices are, as shares of capacity (they sum to the
    unallocated share): ``host_bound`` behind exhausted host room (free slices of a GPU node
    whose free cpu and memory no pending GPU pod fits; 0 when none waits), and of the other
    nodes' free slices, those on ``partial`` GPUs (an instance held) and on ``idle`` GPUs
    (none held: the re-layout reserve).

    It tells which lever a policy lacks: host-bound slices need cpu and memory kept next to
    the GPUs (the score's host terms), partial ones need instances of the demand's profiles
    on GPUs already in use (the MIG Manager cannot re-partition them), idle ones a re-layout.
    """
    cpus, mems = _frontier([(p.spec.cpu_milli, p.spec.memory_mib) for p in pending
                            if p.spec.gpu])
    host = partial = idle = 0
    for n in sim.nodes.values():
        if not n.gpus or n.free_compute <= 0:
            continue
        if cpus:
            i = bisect.bisect_right(cpus, n.cpu_alloc - n.cpu_used)
            if not i or mems[i - 1] > n.mem_alloc - n.mem_used:
                host += n.free_compute
                continue
        for g in n.gpus:
            held = sum(n.model.profile(i.profile).compute_slices for i in g.held())
            if held:
                partial += n.model.compute_slices - held
            else:
                idle += n.model.compute_slices
    cap = sim.capacity_slices
    return {"unallocated_host_bound_share": host / cap,
            "unallocated_partial_gpus_share": partial / cap,
            "unallocated_idle_gpus_share": idle / cap}


def idle_for_pending(sim: world.World, pending: Sequence[world.Pod]) -> int:
    """Compute slices idle (free instances or unpartitioned) on GPUs that could serve a
    pending GPU pod now: the node is not being re-laid out, has the pod's cpu and memory
    free, could hold all of the pod's instances of the profile (its free instances on GPUs in
    use, plus as many as its idle GPUs could be re-laid out to hold: a pod of eight whole GPUs
    is served by no node with fewer than eight), and the GPU has a free instance of one of the
    pod's profiles or holds no pod at all (a re-layout of the idle GPU could make one)."""
    wanted: dict[str, dict[int, list[tuple[int, int]]]] = {}
    for pod in pending:
        if pod.spec.gpu:
            for p, k in Counter(pod.profiles).items():
                wanted.setdefault(p, {}).setdefault(k, []).append(
                    (pod.spec.cpu_milli, pod.spec.memory_mib))
    if not wanted:
        return 0
    # per profile: (instances, the (cpu, memory) frontier of the pods needing that many),
    # fewest instances first
    least = {p: sorted((k, _frontier(v)) for k, v in ks.items()) for p, ks in wanted.items()}
    total = 0
    summaries = sim.idle_summaries
    for n in sim.nodes.values():
        if n.busy_until is not None or not n.gpus or n.free_compute <= 0:
            continue
        cpu_left, mem_left = n.cpu_alloc - n.cpu_used, n.mem_alloc - n.mem_used
        got = summaries.get(n.name)
        if got is None or got[0] != n.version:
            got = summaries[n.name] = (n.version, *_gpu_summary(n))
        _, idle_gpus, spare, partial = got
        model = n.model
        usable: set[str] = set()
        for p, rows in least.items():
            if not model.has_profile(p):
                continue
            room = spare.get(p, 0) + idle_gpus * model.profile(p).max_instances
            for k, (cpus, mems) in rows:
                if k > room:
                    break
                # Some pod's needs fit the node's room: the frontier's last pair within its
                # cpu has the least memory of all pairs within its cpu.
                i = bisect.bisect_right(cpus, cpu_left)
                if i and mems[i - 1] <= mem_left:
                    usable.add(p)
                    break
        if not usable:
            continue
        total += idle_gpus * model.compute_slices  # a GPU that holds no pod
        for free_slices, free_profiles in partial:
            if not usable.isdisjoint(free_profiles):
                total += free_slices
    return total


def _gpu_summary(n: world.Node) -> tuple[int, dict[str, int], list[tuple[int, frozenset[str]]]]:
    """What ``idle_for_pending`` reads of a node's GPUs: how many hold no pod, the free
    instances per profile on the others, and per other GPU its free compute slices and the
    profiles of its free instances."""
    idle_gpus = 0
    spare: dict[str, int] = {}
    partial: list[tuple[int, frozenset[str]]] = []
    model = n.model
    for g in n.gpus:
        holders = g.holders
        if holders.count(None) == len(holders):
            idle_gpus += 1
            continue
        held = 0
        free: list[str] = []
        for inst, h in zip(g.instances, holders, strict=True):
            if h is None:
                free.append(inst.profile)
                spare[inst.profile] = spare.get(inst.profile, 0) + 1
            else:
                held += model.profile(inst.profile).compute_slices
        if free:
            partial.append((model.compute_slices - held, frozenset(free)))
    return idle_gpus, spare, partial


def _frontier(needs: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """The (cpu, memory) pairs of ``needs`` that no other pair is at most on both, as cpus
    (ascending) and memories (descending)."""
    cpus: list[int] = []
    mems: list[int] = []
    for c, m in sorted(set(needs)):
        if not mems or m < mems[-1]:
            cpus.append(c)
            mems.append(m)
    return cpus, mems


def summarise(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample standard deviation, min and max. A wait that is ``math.inf`` (pods never
    placed) makes the mean infinite; the deviation is then 0 where every seed's is, and NaN
    (``null`` in the JSON) where the seeds disagree."""
    vals = [float(v) for v in values]
    finite = all(math.isfinite(v) for v in vals)
    agree = finite or all(v == vals[0] for v in vals)
    return {
        "mean": statistics.fmean(vals) if vals else 0.0,
        "stdev": (statistics.stdev(vals) if len(vals) > 1 and finite
                  else 0.0 if agree else math.nan),
        "min": min(vals) if vals else 0.0,
        "max": max(vals) if vals else 0.0,
    }


def aggregate(runs: Sequence[Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Per figure, its summary over the runs (seeds) of one policy."""
    keys = list(runs[0]) if runs else []
    return {k: summarise([r[k] for r in runs]) for k in keys}
