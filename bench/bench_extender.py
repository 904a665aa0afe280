"""Extender latency on a 5,000-node, 150,000-pod cluster: filter and prioritize, p50 and p99.

Server side (the pure ``filtering.filter_nodes`` / ``scoring.score_nodes`` with the pod
decoded per call) and end to end over loopback HTTP (a real aiohttp server and client, JSON
both ways), with all node names and with a 500-name sample (kube-scheduler samples nodes in
large clusters, WIRE.md 1.2). In the same run, a NAIVE implementation that recomputes free
instances from every pod on each call shows what the precomputed index buys. A third
scenario changes one pod between calls (a bind), so every call pays the index refresh and
the demand recount.

    python bench/bench_extender.py [--nodes 5000] [--pods 150000] [--iterations 200]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from aiohttp import web

from migfit import cluster, decoding, synthetic
from migfit.extender import figures, filtering, scoring, scoring_log, server


def _load(nodes: int, pods: int, seed: int) -> tuple[cluster.Cluster, list[dict[str, Any]]]:
    model = cluster.Cluster()
    pending: list[dict[str, Any]] = []
    for obj in synthetic.iter_objects(nodes, pods, seed, full=False):
        kind = obj.get("kind")
        if kind == "Node":
            model.apply("Node", "ADDED", obj)
        elif kind == "Pod":
            model.apply("Pod", "ADDED", obj)
            if not obj["spec"].get("nodeName") and len(pending) < 50:
                res = obj["spec"]["containers"][0].get("resources", {}).get("limits", {})
                if any(k.startswith("nvidia.com/mig-") for k in res):
                    pending.append(obj)
    model.mark_synced()
    # What the server does once the cache has synced (server.freeze_after_sync).
    gc.collect()
    gc.freeze()
    return model, pending


# ---------------------------------------------------------------- the naive baseline


def naive_free(model: cluster.Cluster) -> dict[str, Counter[str]]:
    """Free instances per node and resource, recomputed from every pod (no index)."""
    used: dict[str, Counter[str]] = {}
    for p in model.pods():
        if p.holds_instances and p.node is not None:
            c = used.setdefault(p.node, Counter())
            for res, n in p.requests.items():
                c[res] += n
    free: dict[str, Counter[str]] = {}
    for state in model.nodes():
        rec = state.node
        u = used.get(rec.name, Counter())
        free[rec.name] = Counter({rec.resource_for(p): a - u[rec.resource_for(p)]
                                  for p, a in rec.allocatable.items()})
    return free


def naive_filter(model: cluster.Cluster, pod: dict[str, Any], names: Sequence[str]) -> list[str]:
    gpu, _, _, _ = decoding.effective_requests(pod["spec"])
    free = naive_free(model)
    return [n for n in names if n in free and all(free[n][r] >= k for r, k in gpu.items())]


def naive_prioritize(model: cluster.Cluster, pod: dict[str, Any],
                     names: Sequence[str]) -> list[tuple[str, int]]:
    gpu, _, _, _ = decoding.effective_requests(pod["spec"])
    free = naive_free(model)
    out = []
    for n in names:
        state = model.node(n)
        f = free.get(n)
        if state is None or f is None or not all(f[r] >= k for r, k in gpu.items()):
            out.append((n, 0))
            continue
        total = max(1, state.alloc_total)
        out.append((n, round(10 * (total - sum(max(0, v) for v in f.values())) / total)))
    return out


# ---------------------------------------------------------------- timing


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _row(label: str, samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    return (f"  {label:<44} p50 {statistics.median(ms):8.2f} ms   p99 {_pct(ms, 0.99):8.2f} ms"
            f"   (n={len(ms)})")


def _time(fn: Callable[[], object], n: int, between: Callable[[], None] | None = None
          ) -> list[float]:
    out = []
    for _ in range(n):
        if between is not None:
            between()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


async def _http(model: cluster.Cluster, pods: list[dict[str, Any]],
                name_sets: dict[str, list[str]], iterations: int) -> list[str]:
    # As in production: the scoring log is on (both lines), written to /dev/null here.
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed below
    handler = logging.StreamHandler(devnull)
    scoring_log.logger.addHandler(handler)
    scoring_log.logger.setLevel(logging.INFO)
    scoring_log.logger.propagate = False
    app = server.make_app(settings=server.ExtenderSettings(log_format="both"), cluster=model)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    rows = []
    try:
        async with aiohttp.ClientSession() as session:
            for label, names in name_sets.items():
                for verb in ("filter", "prioritize"):
                    bodies = [json.dumps({"Pod": p, "Nodes": None, "NodeNames": names}).encode()
                              for p in pods]
                    samples = []
                    for i in range(iterations):
                        t = time.perf_counter()
                        async with session.post(f"http://127.0.0.1:{port}/{verb}",
                                                data=bodies[i % len(bodies)],
                                                headers={"Content-Type": "application/json"}
                                                ) as resp:
                            await resp.read()
                            assert resp.status == 200, resp.status
                        samples.append(time.perf_counter() - t)
                    rows.append(_row(f"HTTP {verb} {label}", samples))
    finally:
        await runner.cleanup()
        scoring_log.logger.removeHandler(handler)
        devnull.close()
    return rows


_WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = io.open(os.getenv("MIGFIT_BENCH_BODY")):read("*a")
"""


def _pin(cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 \
        else []


def _ms(text: str) -> float:
    value = float(text.rstrip("usm"))
    return value / 1000 if text.endswith("us") else value if text.endswith("ms") else value * 1e3


def _wrk_rows(a: argparse.Namespace, pod: dict[str, Any],
              name_sets: dict[str, list[str]]) -> list[str]:
    """The extender server in a subprocess on CPU 0 (same synthetic cluster), wrk on CPU 1."""
    tmp = Path(tempfile.mkdtemp(prefix="migfit-bench-ext-"))
    (tmp / "post.lua").write_text(_WRK_SCRIPT)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    proc = subprocess.Popen(
        [*_pin(0), sys.executable, __file__, "--serve", str(port), "--nodes", str(a.nodes),
         "--pods", str(a.pods), "--seed", str(a.seed)], stdout=subprocess.PIPE, text=True)
    rows: list[str] = []
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            return ["  (the server process did not start)"]
        for label, names in name_sets.items():
            body = tmp / "body.json"
            body.write_text(json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}))
            for verb in ("filter", "prioritize"):
                out = subprocess.run(
                    [*_pin(1), "wrk", "-t1", "-c1", f"-d{a.wrk_seconds:g}s", "--latency", "-s",
                     str(tmp / "post.lua"), f"http://127.0.0.1:{port}/{verb}"],
                    capture_output=True, text=True, check=True, timeout=a.wrk_seconds + 60,
                    env={**os.environ, "MIGFIT_BENCH_BODY": str(body)}).stdout
                got = {p[0]: p[1] for p in (line.split() for line in out.splitlines())
                       if len(p) == 2 and p[0] in ("50%", "99%")}
                if "Non-2xx" in out:
                    raise SystemExit(f"wrk saw errors on /{verb}:\n{out}")
                calls = next(line.split()[0] for line in out.splitlines() if "requests in" in line)
                rows.append(f"  wrk {verb} {label:<24} p50 {_ms(got['50%']):8.2f} ms   "
                            f"p99 {_ms(got['99%']):8.2f} ms   (n={calls})")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return rows


def _serve(a: argparse.Namespace) -> int:
    """``--serve PORT``: the extender server on the synthetic cluster, for ``_wrk_rows``."""
    model, _ = _load(a.nodes, a.pods, a.seed)
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    scoring_log.logger.addHandler(logging.StreamHandler(devnull))
    scoring_log.logger.setLevel(logging.INFO)
    scoring_log.logger.propagate = False
    settings = server.ExtenderSettings(host="127.0.0.1", port=a.serve, log_format="both")
    asyncio.run(server.serve(settings, model, on_started=lambda _: print("ready", flush=True)))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--naive-iterations", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--wrk-seconds", type=float, default=5.0)
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.serve:
        return _serve(a)

    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()} ({platform.system()})")
    t0 = time.perf_counter()
    model, pending = _load(a.nodes, a.pods, a.seed)
    print(f"cluster: {len(model)} nodes, {sum(1 for _ in model.pods())} GPU-relevant pods of "
          f"{a.pods}, {len(model.pending_pods())} pending; loaded in "
          f"{time.perf_counter() - t0:.1f} s")
    pods = pending[:8] or [synthetic.pod_object(  # pragma: no cover - tiny clusters
        namespace="default", name="x", node=None, phase="Pending",
        containers=[synthetic.Container(name="m", image="i", gpu={"nvidia.com/mig-1g.10gb": 1})],
        rng=random.Random(1), owner=("Job", "x"), full=False)]
    print("pods asked about: " + ", ".join(filtering.decode_pod(p).describe() for p in pods))
    names_all = model.node_names()
    names_500 = random.Random(a.seed).sample(names_all, min(500, len(names_all)))
    name_sets = {f"{len(names_all)} names": names_all, f"{len(names_500)} names": names_500}

    # First call builds the index (once, then incremental).
    index = figures.Index(model)
    t = time.perf_counter()
    filtering.filter_nodes(index, filtering.decode_pod(pods[0]), names_all)
    print(f"index build on first call: {(time.perf_counter() - t) * 1000:.0f} ms")

    print("\nserver side (pure functions, pod decoded per call):")
    ratios: list[str] = []
    for label, names in name_sets.items():
        counter = iter(range(10**9))

        def f(names: list[str] = names, counter: Any = counter) -> object:
            pod = pods[next(counter) % len(pods)]
            return filtering.filter_nodes(index, filtering.decode_pod(pod), names)

        def s(names: list[str] = names, counter: Any = counter) -> object:
            pod = pods[next(counter) % len(pods)]
            return scoring.score_nodes(index, filtering.decode_pod(pod), names)

        fs, ss = _time(f, a.iterations), _time(s, a.iterations)
        print(_row(f"filter {label}", fs))
        print(_row(f"prioritize {label}", ss))
        nf = _time(lambda names=names: naive_filter(model, pods[0], names), a.naive_iterations)
        ns = _time(lambda names=names: naive_prioritize(model, pods[0], names),
                   a.naive_iterations)
        print(_row(f"NAIVE filter {label}", nf))
        print(_row(f"NAIVE prioritize {label}", ns))
        ratios.append(f"  {label}: naive/indexed p50 filter "
                      f"{statistics.median(nf) / statistics.median(fs):.0f}×, prioritize "
                      f"{statistics.median(ns) / statistics.median(ss):.0f}×")

    # A bind between calls: one pod changes, so each call refreshes one node and recounts demand.
    bound = [p for p in model.pods() if p.node is not None][:1]
    flip = iter(range(10**9))
    victim = None
    if bound:
        victim = {"kind": "Pod", "metadata": {"name": bound[0].name, "namespace":
                  bound[0].namespace, "uid": bound[0].uid}, "spec": {"nodeName": bound[0].node,
                  "containers": [{"name": "m", "resources": {"limits": dict(bound[0].requests)}}]},
                  "status": {"phase": "Running"}}

    def churn() -> None:
        if victim is not None:
            victim["status"]["phase"] = "Running" if next(flip) % 2 else "Succeeded"
            model.apply("Pod", "MODIFIED", victim)

    print("\nserver side, one pod changing between calls (index refresh + demand recount):")
    for label, names in name_sets.items():
        fs = _time(lambda names=names: filtering.filter_nodes(
            index, filtering.decode_pod(pods[0]), names), a.iterations, churn)
        ss = _time(lambda names=names: scoring.score_nodes(
            index, filtering.decode_pod(pods[0]), names), a.iterations, churn)
        print(_row(f"filter {label}", fs))
        print(_row(f"prioritize {label}", ss))

    print("\nend to end over loopback HTTP, client and server in this one process "
          "(aiohttp both sides, JSON both ways, scoring log on):")
    for row in asyncio.run(_http(model, pods, name_sets, a.iterations)):
        print(row)
    if shutil.which("wrk"):
        print("\nend to end over loopback HTTP, `migfit extender`'s server in its own process "
              "(CPU 0) and wrk -c1 (CPU 1), one call at a time as kube-scheduler makes them:")
        for row in _wrk_rows(a, pods[0], name_sets):
            print(row)
    print("\nratios:")
    for r in ratios:
        print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
