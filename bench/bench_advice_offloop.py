"""Filter latency while the extender computes re-layout advice, against its floor.

The advice is computed in a forked child (``extender/forked.py``); the event loop only forks
and unpickles the result. This starts ``migfit extender --cluster FILE`` on a generated
cluster (``examples/generate_cluster.py``) and, each round: sends back-to-back /filter calls
with nothing else running (the floor), then sends GET /advice at the start of a new
10-second bucket (so it computes afresh) and back-to-back /filter calls until it answers.
Reported: per round, the floor's median and worst, the worst /filter while the advice
computed, and how long /advice took; then the medians over the rounds. Last, what the server
says of its event loop on /metrics (``migfit_extender_advice_loop_blocked_duration_seconds``):
per computation of the advice (the rounds' and the first, warm one), the mean time of the fork
and of unpickling the result, and the histogram bucket that holds the slowest.

Before (the advisor on the event loop), on the 2-core machine at 5,000 nodes / 50,000 pods
(3,043 pending), a /filter sent during the computation waited 8.3 s.

    python bench/bench_advice_offloop.py [--nodes 5000] [--pods 50000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as resp:
        body: bytes = resp.read()
        return body


def _filter(url: str, body: bytes) -> float:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as resp:
        resp.read()
    return time.perf_counter() - start


def _body(path: Path) -> bytes:
    items: list[dict[str, Any]] = json.loads(path.read_text())["items"]
    names = [o["metadata"]["name"] for o in items if o["kind"] == "Node"]
    pod = next(o for o in items if o["kind"] == "Pod" and not o["spec"].get("nodeName"))
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()


LOOP_BLOCKED = "migfit_extender_advice_loop_blocked_duration_seconds"


def _loop_blocked(text: str) -> dict[str, tuple[int, float, str]]:
    """Per step (fork, unpickle) of the /metrics histogram: count, sum, and the smallest
    bucket bound that holds every observation."""
    out: dict[str, tuple[int, float, str]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != LOOP_BLOCKED:
            continue
        steps: dict[str, dict[str, Any]] = {}
        for sample in family.samples:
            row = steps.setdefault(sample.labels["step"], {"buckets": []})
            if sample.name.endswith("_bucket"):
                row["buckets"].append((float(sample.labels["le"]), sample.value))
            else:
                row[sample.name.rpartition("_")[2]] = sample.value
        for step, row in steps.items():
            count = int(row["count"])
            bound = min((le for le, n in row["buckets"] if n >= count), default=float("inf"))
            out[step] = (count, float(row["sum"]), f"{bound * 1e3:g} ms")
    return out


def _round(base: str, body: bytes, floor_calls: int) -> tuple[float, float, float, float, int]:
    floor = [_filter(f"{base}/filter", body) for _ in range(floor_calls)]
    time.sleep(10.0 - time.time() % 10.0 + 0.05)  # a new bucket: /advice computes afresh
    took: list[float] = []

    def get_advice() -> None:
        start = time.perf_counter()
        _get(f"{base}/advice")
        took.append(time.perf_counter() - start)

    thread = threading.Thread(target=get_advice)
    thread.start()
    during: list[float] = []
    while thread.is_alive():
        during.append(_filter(f"{base}/filter", body))
    thread.join()
    return statistics.median(floor), max(floor), max(during), took[0], len(during)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--floor-calls", type=int, default=50)
    parser.add_argument("--cluster", type=Path, help="a cluster file instead of generating one")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = a.cluster
        if path is None:
            path = Path(tmp) / "cluster.json"
            subprocess.run([sys.executable, str(ROOT / "examples" / "generate_cluster.py"),
                            "--nodes", str(a.nodes), "--pods", str(a.pods), "--format", "json",
                            "-o", str(path)], check=True, capture_output=True)
        body = _body(path)
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from migfit.cli import main; sys.exit(main())",
             "extender", "--cluster", str(path), "--host", "127.0.0.1", "--port", str(port),
             "--drain-delay", "0", "--log-level", "warning"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 300
            while True:
                try:
                    if json.loads(_get(f"{base}/readyz")).get("ready"):
                        break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the extender did not get ready")
                time.sleep(0.2)
            for _ in range(5):
                _filter(f"{base}/filter", body)  # warm
            advice = json.loads(_get(f"{base}/advice"))
            pending = len(advice["waiting"])
            print(f"{path.name}: {a.nodes} nodes, {a.pods} pods; advice: "
                  f"{len(advice['recommendations'])} recommendations, {pending} waiting pods; "
                  f"{os.cpu_count()} CPUs, Python {platform.python_version()}; load "
                  f"average {os.getloadavg()[0]:.1f}")
            print("round  floor p50 ms  floor max ms  worst filter during /advice ms  "
                  "/advice s  filters during")
            rows = []
            for i in range(a.rounds):
                row = _round(base, body, a.floor_calls)
                rows.append(row)
                print(f"{i + 1:>5}  {row[0] * 1e3:>12.1f}  {row[1] * 1e3:>12.1f}  "
                      f"{row[2] * 1e3:>31.1f}  {row[3]:>9.2f}  {row[4]:>14}")
            med = [statistics.median(r[k] for r in rows) for k in range(4)]
            print(f"median {med[0] * 1e3:>12.1f}  {med[1] * 1e3:>12.1f}  "
                  f"{med[2] * 1e3:>31.1f}  {med[3]:>9.2f}")
            # After the rounds: every computation so far has ended (a stale scrape may start
            # one; it is observed only when it ends, so not in these figures).
            blocked = _loop_blocked(_get(f"{base}/metrics").decode())
            print(f"load average {os.getloadavg()[0]:.1f} (others' processes share the CPUs: "
                  f"a load above {os.cpu_count()} slows every figure)")
            if not blocked:
                print(f"/metrics has no {LOOP_BLOCKED} (a server before it)")
            for step in ("fork", "unpickle"):
                if step in blocked:
                    count, total, bound = blocked[step]
                    mean = f"{total / count * 1e3:.1f} ms" if count else "-"
                    print(f"on the event loop, {step:>8}: {count} computations, mean {mean}, "
                          f"each at most {bound} (/metrics {LOOP_BLOCKED})")
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
