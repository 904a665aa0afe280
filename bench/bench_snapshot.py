"""The file source's memory: python bench/bench_snapshot.py [--nodes 500 --pods 15000].

Writes a full-size synthetic snapshot (examples/generate_cluster.py's objects) as JSON and as
YAML, then in a fresh subprocess each loads it with ``snapshots.load`` and reports resident
memory after the load and the peak. The reference, measured the same way in the same run, is
a whole-tree parse of the same file (``json.loads``, the tree then dropped), the step the file
source took before it read item by item (it also kept the raw objects: 522 MiB after loading
an 88 MiB file, against about 20 MiB now).
Medians over --repeat subprocesses.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import gc, json, resource, sys
from migfit import snapshots
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
before = rss()
if sys.argv[2] == "floor":
    tree = json.loads(open(sys.argv[1], encoding="utf-8").read())
    del tree
    model = None
else:
    model = snapshots.load(sys.argv[1])
gc.collect()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"after": rss() - before, "peak": peak - before}))
"""


def _measure(path: Path, how: str, repeat: int) -> dict[str, float]:
    runs = []
    for _ in range(repeat):
        done = subprocess.run([sys.executable, "-c", PROBE, str(path), how], check=True,
                              capture_output=True, text=True, cwd=ROOT)
        runs.append(json.loads(done.stdout))
    return {k: statistics.median(r[k] for r in runs) for k in ("after", "peak")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=15000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}; {args.nodes} nodes, {args.pods} pods; medians of "
          f"{args.repeat}")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("json", "yaml"):
            path = Path(tmp) / f"cluster.{fmt}"
            subprocess.run([sys.executable, str(ROOT / "examples" / "generate_cluster.py"),
                            "--nodes", str(args.nodes), "--pods", str(args.pods),
                            "--format", fmt, "-o", str(path)], check=True,
                           capture_output=True, cwd=ROOT)
            size = path.stat().st_size / 2**20
            got = _measure(path, "load", args.repeat)
            line = (f"{fmt}: {size:.0f} MiB file; load: +{got['after']:.0f} MiB after, "
                    f"+{got['peak']:.0f} MiB peak")
            if fmt == "json":
                floor = _measure(path, "floor", args.repeat)
                line += (f"; whole-tree json.loads alone: +{floor['after']:.0f} MiB after, "
                         f"+{floor['peak']:.0f} MiB peak (peak: "
                         f"{got['peak'] / floor['peak']:.2f}x)")
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
