"""Layout enumeration (cold) and layout checks (warm): python bench/bench_layouts.py."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from migfit import layouts, placements, profiles

ROOT = Path(__file__).resolve().parent.parent

COLD_RUNS = 7
NUMBER = 20_000
REPEAT = 7

# Run in a fresh interpreter: import, load the catalog, enumerate every model, nothing cached.
_COLD = """
import time
t0 = time.perf_counter()
from migfit import layouts, profiles
cat = profiles.builtin()
t1 = time.perf_counter()
n = sum(len(layouts.of(m).all) for m in cat.models)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, n)
"""


def _cold() -> tuple[float, float, int]:
    loads: list[float] = []
    enums: list[float] = []
    count = 0
    for _ in range(COLD_RUNS):
        out = subprocess.run([sys.executable, "-c", _COLD], capture_output=True, text=True,
                             check=True, cwd=ROOT).stdout.split()
        loads.append(float(out[0]))
        enums.append(float(out[1]))
        count = int(out[2])
    return statistics.median(loads), statistics.median(enums), count


def _median_us(call: Callable[[], object]) -> float:
    times = timeit.repeat(call, number=NUMBER, repeat=REPEAT)
    return statistics.median(times) / NUMBER * 1e6


def main() -> None:
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    load_s, enum_s, count = _cold()
    print(f"cold, fresh process, median of {COLD_RUNS}: import + catalog load "
          f"{load_s * 1e3:.1f} ms; enumerate all layouts of "
          f"{len(profiles.builtin().models)} models ({count} layouts) {enum_s * 1e3:.1f} ms")

    a100 = profiles.builtin().get("A100-80GB")
    layouts.of(a100)  # warm the cache: check() is then a dict lookup when valid
    valid = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    invalid = ["3g.40gb", "3g.40gb", "1g.10gb"]
    positions = ["3g.40gb", "2g.20gb", "2g.20gb"]
    fixed = [placements.parse_instance(a100, "3g.40gb@0")]
    print(f"warm, {REPEAT} repeats x {NUMBER} calls, median per call (A100-80GB):")
    rows: list[tuple[str, Callable[[], object]]] = [
        (f"layouts.check valid   {' '.join(valid)}", lambda: layouts.check(a100, valid)),
        (f"layouts.check invalid {' '.join(invalid)}", lambda: layouts.check(a100, invalid)),
        (f"placements.fit        {' '.join(positions)}",
         lambda: placements.fit(a100, positions)),
        ("placements.fit        2g.20gb around fixed 3g.40gb@0",
         lambda: placements.fit(a100, ["2g.20gb"], fixed=fixed)),
        ("placements.fit        2g.20gb 2g.20gb around fixed 3g.40gb@0 (no fit)",
         lambda: placements.fit(a100, ["2g.20gb", "2g.20gb"], fixed=fixed)),
        ("placements.addable    around fixed 3g.40gb@0",
         lambda: placements.addable(a100, fixed)),
    ]
    for label, call in rows:
        print(f"  {label:<72} {_median_us(call):8.2f} us")
    assert layouts.check(a100, valid).valid and not layouts.check(a100, invalid).valid


if __name__ == "__main__":
    main()
