"""The webhook's ``--choice usable`` on a large cluster: python bench/bench_choice.py.

``usable`` counts a profile's free instances only on nodes with the pod's own cpu and memory
left (``webhook.view.SupplyTracker.fits``: each node's cpu and memory left is recomputed when
the cluster reports the node changed, and the nodes with a free instance of the offer are
scanned until one fits). Measured against ``free`` (the default: the supply's per-offer free
counts only) in the same run, alternating, on migfit.synthetic's cluster (default 5,000
nodes, 150,000 pods), deciding every admission (the server's memos are off under
``usable``; here off for both):

- ``steady``: nothing changed between two admissions (a burst of pods);
- ``changed``: a pod without GPU requests bound to a node and deleted again between two
  admissions (a busy cluster: both choices re-absorb the change, ``usable`` recomputes that
  node's room);
- ``crowded``: as ``changed``, for a pod whose cpu and memory requests fit on few of the
  nodes with a free instance of its smallest fitting profiles (``usable`` scans those nodes
  for larger profiles too);
- ``pinned``: as ``changed``, for a pod whose nodeSelector selects one zone's nodes (about a
  third): the decision reads those nodes' sums, kept current as nodes change
  (``SupplyTracker.within``), and is never memoised;
- ``several``: as ``changed``, for a pod of nine containers of 70Gi each: no node
  advertises nine ``7g.80gb`` (``SupplyTracker.hosts``: the nodes with all of them free are
  looked for in the cluster's index of free instances, then the most one node advertises
  is read from sums kept per node change), and the answer warns so;
- ``beside``: as ``pinned``, with three pending pods (``1g.10gb``, ``2g.20gb``,
  ``3g.40gb``) whose node affinity selects the same zone: another selection, whose claims
  the pinned pod is charged where its free instances outside the pod's nodes fall short
  (``view._Scope._shared_claims``); here none lie outside, so every free node of those
  profiles is read once per cluster change;
- ``waiting``: as ``changed``, with six more pending pods that each ask for several instances
  of one profile on one node (2, 4 or 7 × ``1g.10gb``, 2 × ``3g.40gb``, 3 × ``2g.20gb``,
  8 × ``7g.80gb``): every supply rebuilt after a change checks, per profile, whether some
  node has that many free (``Cluster.pending_claims``). Compare its ``free`` column with
  ``changed``'s.

Figures: the median and p99 time of ``decision.decide_pod`` (µs, medians over the runs), the
ratio of the medians usable / free, and usable's recorded reason. The webhook's own budget:
p99 admission latency ≤ 5 ms (bench/bench_webhook.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# the same synthetic cluster, loaded as the server does, and the same timing and percentile
from bench_extender import _load, _pct, _time

from migfit.webhook import choice, decision, view


def _pod(memory: str, cpu: str, mem: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "trainer", "namespace": "ml",
                         "annotations": {"migfit.io/gpu-memory": memory}},
            "spec": {"containers": [{"name": "main", "image": "trainer:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}}


def _pinned(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with a nodeSelector on one zone (about a third of the nodes)."""
    pod["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "us-east-1b"}
    return pod


def _zone_affine(name: str, profile: str) -> dict[str, Any]:
    """A pending pod asking for one ``profile``, pinned by node affinity to ``_pinned``'s
    zone: the same nodes, another claim key."""
    pod = _waiting(name, profile, 1)
    pod["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                   "values": ["us-east-1b"]}]}]}}}
    return pod


def _several(pod: dict[str, Any], n: int) -> dict[str, Any]:
    """``pod`` with ``n`` containers, each asking for the pod's GPU memory."""
    memory = pod["metadata"]["annotations"].pop("migfit.io/gpu-memory")
    main = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [dict(main, name=f"c{i}") for i in range(n)]
    pod["metadata"]["annotations"].update(
        {f"migfit.io/gpu-memory.c{i}": memory for i in range(n)})
    return pod


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--admissions", type=int, default=400, help="per case and choice")
    parser.add_argument("--runs", type=int, default=3, help="repetitions (medians reported)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    a = parser.parse_args()

    started = time.perf_counter()
    model, _pending = _load(a.nodes, a.pods, a.seed)
    load_s = time.perf_counter() - started
    tracker = view.SupplyTracker(model)
    policies = {c: choice.Policy(contention=c) for c in ("free", "usable")}
    flip = {"i": 0}

    names = sorted(model.node_names())

    def change() -> None:
        # A pod without GPU requests bound to a node and deleted again: two watch events,
        # the cluster's generation moves, and that node's room is recomputed (twice).
        i = flip["i"] = flip["i"] + 1
        obj = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"churn-{i}", "namespace": "bench", "uid": f"churn-{i}"},
               "spec": {"nodeName": names[i % len(names)], "containers": [
                   {"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
               "status": {"phase": "Running"}}
        model.apply("Pod", "ADDED", obj)
        model.apply("Pod", "DELETED", obj)

    cases: dict[str, tuple[dict[str, Any], Callable[[], None] | None]] = {
        "steady": (_pod("12Gi", "4", "16Gi"), None),
        "changed": (_pod("12Gi", "4", "16Gi"), change),
        "crowded": (_pod("12Gi", "48", "384Gi"), change),
        "pinned": (_pinned(_pod("12Gi", "4", "16Gi")), change),
        "several": (_several(_pod("70Gi", "4", "16Gi"), 9), change),
        "beside": (_pinned(_pod("12Gi", "4", "16Gi")), change),
        "waiting": (_pod("12Gi", "4", "16Gi"), change),
    }
    results: dict[str, dict[str, Any]] = {}
    for name, (pod, between) in cases.items():
        if name == "beside":
            for i, profile in enumerate(("1g.10gb", "2g.20gb", "3g.40gb")):
                model.apply("Pod", "ADDED", _zone_affine(f"beside-{i}", profile))
        if name == "waiting":  # last: the pods stay in the cluster
            for i, profile in enumerate(("1g.10gb", "2g.20gb", "3g.40gb")):
                model.apply("Pod", "DELETED", _zone_affine(f"beside-{i}", profile))
            for i, (profile, n) in enumerate(WAITING):
                model.apply("Pod", "ADDED", _waiting(f"waiting-{i}", profile, n))
        per: dict[str, list[list[float]]] = {c: [] for c in policies}
        verdicts = {}
        for _ in range(a.runs):
            for c, policy in policies.items():  # alternate the choices within a repetition

                def once(pod: dict[str, Any] = pod, policy: choice.Policy = policy) -> object:
                    return decision.decide_pod(pod, supply=tracker.supply(), policy=policy)

                per[c].append(_time(once, a.admissions, between))
                verdicts[c] = decision.decide_pod(pod, supply=tracker.supply(), policy=policy)
        row: dict[str, Any] = {}
        for c, runs in per.items():
            row[c] = {"median_us": statistics.median(statistics.median(r) for r in runs) * 1e6,
                      "p99_us": statistics.median(_pct(r, 0.99) for r in runs) * 1e6,
                      "outcome": verdicts[c].outcome,
                      "reason": _reason(verdicts[c])}
        row["ratio"] = row["usable"]["median_us"] / row["free"]["median_us"]
        results[name] = row

    print(f"{a.nodes:,} nodes, {a.pods:,} pods (migfit.synthetic, seed {a.seed}), loaded in "
          f"{load_s:.1f} s; {a.admissions} admissions per case and choice, {a.runs} runs; "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"{'case':8} {'free p50':>10} {'free p99':>10} {'usable p50':>11} "
          f"{'usable p99':>11} {'ratio':>6}  usable's reason")
    for name, row in results.items():
        f, u = row["free"], row["usable"]
        print(f"{name:8} {f['median_us']:8.0f}µs {f['p99_us']:8.0f}µs {u['median_us']:9.0f}µs "
              f"{u['p99_us']:9.0f}µs {row['ratio']:5.1f}×  {u['reason']}")
    if a.json is not None:
        a.json.write_text(json.dumps({"nodes": a.nodes, "pods": a.pods, "seed": a.seed,
                                      "admissions": a.admissions, "runs": a.runs,
                                      "cases": results}, indent=2) + "\n", encoding="utf-8")
    return 0


#: Pending pods of the ``waiting`` case: (profile, instances on one node).
WAITING = (("1g.10gb", 2), ("1g.10gb", 4), ("1g.10gb", 7), ("3g.40gb", 2), ("2g.20gb", 3),
           ("7g.80gb", 8))


def _waiting(name: str, profile: str, count: int) -> dict[str, Any]:
    resource = {f"nvidia.com/mig-{profile}": str(count)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "bench", "uid": name},
            "spec": {"containers": [{"name": "c", "resources": {"limits": resource,
                                                                "requests": resource}}]},
            "status": {"phase": "Pending"}}


def _reason(verdict: decision.Verdict) -> str:
    record = verdict.record
    if record is None:
        return verdict.outcome
    reasons = [f"{c['profile']}: {c.get('reason', '')}" for c in record["containers"]]
    return "; ".join(reasons) or verdict.outcome


if __name__ == "__main__":
    sys.exit(main())
