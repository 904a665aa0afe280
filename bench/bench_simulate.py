"""Wall time of one fill replay of the default trace, with ``migfit simulate``'s defaults (the
trace's node list, history layouts): python bench/bench_simulate.py [POLICY...]."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from migfit import profiles
from migfit.simulate import cli, engine, policies

REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))


def main() -> None:
    names = sys.argv[1:] or ["default", "migfit", "migfit+advisor"]
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args([])
    catalog = profiles.builtin()
    nodes, pods, info = cli._inputs(args, catalog)
    machine = platform.processor() or platform.machine()
    print(f"input: {info['cluster']}; {len(pods)} pods (fill to 130 %, mapping=compute); "
          f"machine: {machine}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    for name in names:
        times = []
        placed = 0.0
        for _ in range(REPEAT):
            started = time.perf_counter()
            r = engine.run(nodes, pods, policy=policies.Policy.parse(name), seed=0,
                           options=policies.Options(), catalog=catalog, keep_snapshot=False)
            times.append(time.perf_counter() - started)
            placed = r.figures["gpu_pods_placed"]
        print(f"{name:18} median {statistics.median(times):6.2f} s over {REPEAT} runs "
              f"({placed:.0f} GPU pods placed)")


if __name__ == "__main__":
    main()
