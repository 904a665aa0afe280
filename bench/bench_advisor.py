"""Re-layout advice for a 1,000-node cluster with 5,000 pending pods: python bench/bench_advisor.py.

Prints the median time of ``advisor.advise`` (cold: first call in the process, with the
layout enumeration and planner caches empty; warm: later calls), the peak memory it
allocates (tracemalloc), the time of ``advisor.demand`` alone, the input size and the
machine; three times: every pending pod asking for one instance, then one pod in five asking
for several (4 × 1g.10gb or 2 × 2g.20gb, all on one node: the planner takes a pod's
instances whole), then half of them asking for a profile whose free instances all sit on
nodes without cpu left (``advisor.demand`` checks each class of pod against those nodes
before counting it); then a mixed cluster, the full 1g.10gb nodes replaced by A30 nodes
(4 GPUs of 4g.24gb, all in use) and every fifth pending pod given the A30's 4g.24gb by the
webhook (its decision record says 20,000 MiB), so that the A100's demand mix counts those
pods as its own smallest profile that holds them (``advisor.demand_mix``, a pass over the
pods per model that lacks a profile). Every pod has a creation time (one every 7 s over the
day before), which the burst reserve reads.
"""

from __future__ import annotations

import datetime
import itertools
import os
import platform
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from migfit import advisor, cluster, keys

NODES = 1_000
PENDING = 5_000
GPUS = 8
NOW = 2_000_000_000.0
REPEAT = 5


def _node(name: str, alloc: dict[str, int], product: str = "NVIDIA-A100-SXM4-80GB",
          gpus: int = GPUS) -> dict[str, Any]:
    res = {f"nvidia.com/mig-{p}": str(n) for p, n in alloc.items()}
    res.update({"cpu": "128", "memory": "1Ti"})
    return {"kind": "Node", "metadata": {
        "name": name, "uid": name, "resourceVersion": "1",
        "labels": {"nvidia.com/gpu.product": product,
                   "nvidia.com/gpu.count": str(gpus), "nvidia.com/mig.strategy": "mixed",
                   "nvidia.com/mig.config.state": "success"}},
        "spec": {}, "status": {"capacity": res, "allocatable": res,
                               "conditions": [{"type": "Ready", "status": "True"}]}}


# Pods are created one every 7 s over the day before NOW, in the order they are built (the
# burst reserve, ``advisor.burst_reserve``, reads every pod's creation time).
_CREATED = (datetime.datetime.fromtimestamp(NOW - 86_400 + 7 * (i % 12_000), tz=datetime.UTC)
            .strftime("%Y-%m-%dT%H:%M:%SZ") for i in itertools.count())


def _pod(name: str, profile: str, node: str | None, count: int = 1, *, cpu: str | None = None,
         since: str = "2033-05-18T03:00:00Z", toleration: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running" if node else "Pending"}
    if node is None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable", "lastTransitionTime": since}]
    resources: dict[str, Any] = {"limits": {f"nvidia.com/mig-{profile}": str(count)}}
    if cpu is not None:
        resources["requests"] = {"cpu": cpu}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": resources}]}
    if node:
        spec["nodeName"] = node
    if toleration is not None:
        spec["tolerations"] = [{"key": toleration, "operator": "Exists"}]
    meta: dict[str, Any] = {"name": name, "namespace": "bench", "uid": name,
                            "resourceVersion": "1", "creationTimestamp": next(_CREATED)}
    if profile == "4g.24gb":  # as the webhook leaves it: the memory asked for, the choice
        meta["annotations"] = {keys.GPU_MEMORY: "20000Mi", keys.DECISION: keys.encode_decision(
            {"v": 1, "strategy": "mixed", "containers": [
                {"container": "c", "request_mib": 20000, "profile": profile,
                 "resource": f"nvidia.com/mig-{profile}", "models": []}]})}
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def objects(several: bool = False, host_bound: bool = False, mixed: bool = False
            ) -> list[dict[str, Any]]:
    """40 % idle nodes of 7g.80gb, 30 % of 3g.40gb half in use, 30 % full of busy 1g.10gb;
    5,000 pending pods for 1g.10gb (all in use), 2g.20gb and 1g.20gb (advertised nowhere);
    ``several``: every fifth pending pod asks for four 1g.10gb or two 2g.20gb;
    ``host_bound``: the 3g.40gb nodes' pods take all their cpu and every other pending pod
    asks for a 3g.40gb, unschedulable for 5 minutes, in 100 classes (tolerations) that the
    advisor checks against each of the 300 nodes with free 3g.40gb instances (demand)."""
    out: list[dict[str, Any]] = []
    for i in range(NODES):
        name = f"node-{i:04d}"
        if i % 10 < 4:
            out.append(_node(name, {"7g.80gb": GPUS}))
        elif i % 10 < 7:
            out.append(_node(name, {"3g.40gb": 2 * GPUS}))
            out.extend(_pod(f"{name}-r{j}", "3g.40gb", name, cpu="16" if host_bound else None)
                       for j in range(GPUS))
        elif mixed:
            out.append(_node(name, {"4g.24gb": 4}, product="NVIDIA-A30", gpus=4))
            out.extend(_pod(f"{name}-r{j}", "4g.24gb", name) for j in range(4))
        else:
            out.append(_node(name, {"1g.10gb": 7 * GPUS}))
            out.extend(_pod(f"{name}-r{j}", "1g.10gb", name) for j in range(7 * GPUS))
    mix = ["1g.10gb"] * 6 + ["2g.20gb"] * 3 + ["1g.20gb"]
    for k in range(PENDING):
        if mixed and k % 5 == 0:
            out.append(_pod(f"wait-{k:05d}", "4g.24gb", None))
            continue
        if host_bound and k % 2:
            out.append(_pod(f"wait-{k:05d}", "3g.40gb", None, cpu="1",
                            since="2033-05-18T03:28:20Z", toleration=f"team-{k % 100}"))
            continue
        profile = mix[k % len(mix)]
        count = (4 if profile == "1g.10gb" else 2) if several and k % 5 == 0 else 1
        out.append(_pod(f"wait-{k:05d}", profile, None, count))
    return out


def main() -> None:
    for several, host_bound, mixed in ((False, False, False), (True, False, False),
                                       (False, True, False), (False, False, True)):
        run(several, host_bound, mixed)


def run(several: bool, host_bound: bool, mixed: bool = False) -> None:
    state = cluster.Cluster()
    cluster.load_objects(state, objects(several, host_bound, mixed))
    pending = len(state.pending_pods())
    t0 = time.perf_counter()
    first = advisor.advise(state, now=NOW)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        advice = advisor.advise(state, now=NOW)
        warm.append(time.perf_counter() - t0)
    settings = advisor.Settings()
    part = []  # advisor.demand alone: which pending pods count (the free-instance check)
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        counted = advisor.demand(state, now=NOW, settings=settings)
        part.append(time.perf_counter() - t0)
    tracemalloc.start()
    advisor.advise(state, now=NOW)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    unblocked = sum(len(r.unblocks) for r in advice.recommendations)
    print(f"machine: {platform.machine()} {platform.processor() or ''} "
          f"{os.cpu_count()} cpus, Python {platform.python_version()}")
    kind = ("a fifth asking for several instances" if several
            else "half for 3g.40gb free only behind exhausted cpu" if host_bound
            else "a fifth given the A30's 4g.24gb" if mixed
            else "one instance each")
    models = ("700 x 8 GPUs (A100-80GB), 300 x 4 GPUs (A30-24GB)" if mixed
              else f"{len(state)} nodes x {GPUS} GPUs (A100-80GB)")
    print(f"input: {models}, {pending} pending pods ({kind})")
    print(f"advise: cold {cold * 1e3:.0f} ms, warm median {statistics.median(warm) * 1e3:.0f} ms"
          f" (of {REPEAT}); peak allocated {peak / 2**20:.1f} MiB; of which demand "
          f"{statistics.median(part) * 1e3:.0f} ms ({len(counted)} pods counted)")
    print(f"result: {len(first.recommendations)} nodes recommended "
          f"({sum(r.disruptive for r in advice.recommendations)} disruptive), "
          f"{unblocked} pods unblocked, {len(advice.unserved)} unserved")


if __name__ == "__main__":
    main()
