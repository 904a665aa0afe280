"""Cluster model at scale: memory, initial load and event rate: python bench/bench_cluster.py.

Input: migfit.synthetic's full-size objects (default 5,000 nodes, 150,000 pods, 90 % of the
pods requesting a MIG instance; CPU pods are dropped at decode, so --gpu-share 1.0 is the
worst case). Figures:

- resident memory of the loaded model: a fresh subprocess streams the objects into a Cluster
  one at a time (no list kept) and reports RSS before/after; a second one reports what
  tracemalloc sees retained (no RSS: tracemalloc's own bookkeeping would inflate it);
- initial load: ``Cluster.replace`` of the whole Node list, then the whole Pod list
  (decode + accounting + indexes), as the watch source and the file source do;
- events per second: MODIFIED pod events, pod ADDED then DELETED, MODIFIED node events.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from migfit import cluster, synthetic


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _stream_into(model: cluster.Cluster, args: argparse.Namespace) -> int:
    n = 0
    for obj in synthetic.iter_objects(args.nodes, args.pods, args.seed,
                                      gpu_share=args.gpu_share):
        model.apply(obj["kind"], "ADDED", obj)
        n += 1
    return n


def child(args: argparse.Namespace) -> None:
    """Runs in a fresh interpreter: one memory figure as JSON on stdout."""
    import migfit.profiles

    migfit.profiles.builtin()  # the catalog is not the model's cost
    model = cluster.Cluster()
    gc.collect()
    if args.child == "tracemalloc":
        tracemalloc.start()
        _stream_into(model, args)
        gc.collect()
        current, _ = tracemalloc.get_traced_memory()
        print(json.dumps({"retained": current, "pods": sum(1 for _ in model.pods())}))
        return
    before = _rss_bytes()
    _stream_into(model, args)
    gc.collect()
    print(json.dumps({"rss_before": before, "rss_after": _rss_bytes(),
                      "pods": sum(1 for _ in model.pods()), "nodes": len(model)}))


def _memory(args: argparse.Namespace, mode: str) -> dict[str, int]:
    cmd = [sys.executable, __file__, "--child", mode, "--nodes", str(args.nodes),
           "--pods", str(args.pods), "--seed", str(args.seed), "--gpu-share",
           str(args.gpu_share)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result: dict[str, int] = json.loads(out)
    return result


def _bumped(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    new = copy.copy(obj)
    new["metadata"] = dict(obj["metadata"], resourceVersion=str(rv))
    return new


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gpu-share", type=float, default=0.9)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--child", choices=("rss", "tracemalloc"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    print(f"machine: {platform.machine()} {platform.processor() or ''}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"input: {args.nodes} nodes, {args.pods} pods, {args.gpu_share:.0%} GPU pods, "
          f"seed {args.seed}")

    rss = _memory(args, "rss")
    traced = _memory(args, "tracemalloc")
    print(f"memory: model holds {rss['nodes']} nodes, {rss['pods']} pod records; "
          f"RSS +{(rss['rss_after'] - rss['rss_before']) / 2**20:.0f} MiB "
          f"(total {rss['rss_after'] / 2**20:.0f} MiB); "
          f"tracemalloc retained {traced['retained'] / 2**20:.0f} MiB")

    t0 = time.perf_counter()
    objects = synthetic.generate(args.nodes, args.pods, args.seed) if args.gpu_share == 0.9 \
        else list(synthetic.iter_objects(args.nodes, args.pods, args.seed,
                                         gpu_share=args.gpu_share))
    nodes = [o for o in objects if o["kind"] == "Node"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    del objects
    size = sum(len(json.dumps(o, separators=(",", ":"))) for o in nodes[:200] + pods[:2000])
    avg_node = sum(len(json.dumps(o)) for o in nodes[:200]) / min(200, len(nodes))
    avg_pod = sum(len(json.dumps(o)) for o in pods[:2000]) / min(2000, len(pods))
    print(f"objects: generated in {time.perf_counter() - t0:.1f} s; average JSON size "
          f"node {avg_node / 1024:.1f} KiB, pod {avg_pod / 1024:.1f} KiB; whole list about "
          f"{(avg_node * len(nodes) + avg_pod * len(pods)) / 2**20:.0f} MiB as JSON"
          if size else "")

    loads: list[float] = []
    model = cluster.Cluster()
    for _ in range(args.repeat):
        model = cluster.Cluster()
        gc.collect()
        t0 = time.perf_counter()
        model.replace("Node", nodes)
        model.replace("Pod", pods)
        loads.append(time.perf_counter() - t0)
    print(f"initial load (replace Nodes then Pods): median {statistics.median(loads):.2f} s "
          f"over {args.repeat} ({len(pods) / statistics.median(loads):,.0f} pods/s)")

    bound = [p for p in pods if p["spec"].get("nodeName")
             and p["status"]["phase"] == "Running"][: args.events]
    rates: dict[str, list[float]] = {"pod MODIFIED": [], "pod ADDED+DELETED": [],
                                     "node MODIFIED": []}
    extra = [o for o in synthetic.iter_objects(args.nodes, args.events, args.seed + 1)
             if o["kind"] == "Pod"]
    rv = 100_000_000
    for _ in range(args.repeat):
        rv += 1
        modified = [_bumped(p, rv) for p in bound]
        t0 = time.perf_counter()
        for p in modified:
            model.apply("Pod", "MODIFIED", p)
        rates["pod MODIFIED"].append(len(modified) / (time.perf_counter() - t0))

        t0 = time.perf_counter()
        for p in extra:
            model.apply("Pod", "ADDED", p)
        for p in extra:
            model.apply("Pod", "DELETED", p)
        rates["pod ADDED+DELETED"].append(2 * len(extra) / (time.perf_counter() - t0))

        changed = [_bumped(n, rv) for n in nodes]
        t0 = time.perf_counter()
        for n in changed:
            model.apply("Node", "MODIFIED", n)
        rates["node MODIFIED"].append(len(changed) / (time.perf_counter() - t0))
    for name, values in rates.items():
        print(f"events: {name}: median {statistics.median(values):,.0f} events/s "
              f"over {args.repeat}")


if __name__ == "__main__":
    main()
