"""Wall time of one fill replay of the default trace: python bench/bench_simulate.py [POLICY...]."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from migfit import profiles
from migfit.simulate import cli, engine, initial, spec, workload

REPEAT = int(os.environ.get("BENCH_REPEAT", "3"))


def main() -> None:
    policies = sys.argv[1:] or ["default", "migfit", "migfit+advisor"]
    trace = cli.default_trace_dir()
    catalog = profiles.builtin()
    model = catalog.get("A100-80GB")
    nodes = spec.load_node_csv(trace / cli.NODE_CSV, model=model, layout="all-balanced")
    pods = workload.load_trace(trace / cli.POD_CSV, model=model, mapping="compute")
    gpus = sum(n.gpus for n in nodes)
    nodes = initial.spread(nodes, initial.demand_matched(model, initial.instance_mix(pods), gpus))
    machine = platform.processor() or platform.machine()
    print(f"input: {len(nodes)} nodes, {sum(n.gpus for n in nodes)} GPUs, {len(pods)} pods "
          f"(fill to 130 %, mapping=compute, demand-matched layouts); machine: {machine}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    for name in policies:
        times = []
        placed = 0.0
        for _ in range(REPEAT):
            started = time.perf_counter()
            r = engine.run(nodes, pods, policy=engine.Policy.parse(name), seed=0,
                           options=engine.Options(), catalog=catalog, keep_snapshot=False)
            times.append(time.perf_counter() - started)
            placed = r.figures["gpu_pods_placed"]
        print(f"{name:18} median {statistics.median(times):6.2f} s over {REPEAT} runs "
              f"({placed:.0f} GPU pods placed)")


if __name__ == "__main__":
    main()
