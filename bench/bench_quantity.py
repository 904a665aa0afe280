"""Median time per Quantity parse for typical gpu-memory inputs: python bench/bench_quantity.py."""

from __future__ import annotations

import functools
import os
import platform
import statistics
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from migfit import errors, quantity

INPUTS = ["12Gi", "12G", "12e9", "12884901888", "0.5Gi", "1.5Ti", "100m", "8Ei", "1e-100"]
REJECTED = ["12GB", "1e1000000", "Gi", "1" * 100 + "Ei"]
NUMBER = 20_000
REPEAT = 7


def _median_us(call: Callable[[], object]) -> float:
    times = timeit.repeat(call, number=NUMBER, repeat=REPEAT)
    return statistics.median(times) / NUMBER * 1e6


def _rejecting(text: str) -> Callable[[], object]:
    def call() -> object:
        try:
            return quantity.parse_bytes(text)
        except errors.QuantityError:
            return None

    return call


def main() -> None:
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; {REPEAT} repeats x {NUMBER} calls, median per call"
    )
    print(f"{'input':>16}  {'parse_bytes':>12}  {'parse':>10}  {'parse_mib':>10}")
    for text in INPUTS:
        by = _median_us(functools.partial(quantity.parse_bytes, text))
        ex = _median_us(functools.partial(quantity.parse, text))
        mib = _median_us(functools.partial(quantity.parse_mib, text))
        print(f"{text:>16}  {by:>10.2f}us  {ex:>8.2f}us  {mib:>8.2f}us")
    print("rejections (parse_bytes raising QuantityError, caught):")
    for text in REJECTED:
        shown = text if len(text) <= 16 else text[:12] + "..."
        print(f"{shown:>16}  {_median_us(_rejecting(text)):>10.2f}us")
    print("format_mib(9728):", f"{_median_us(lambda: quantity.format_mib(9728)):.2f}us")
    print(
        "format_bytes(12884901888):",
        f"{_median_us(lambda: quantity.format_bytes(12884901888)):.2f}us",
    )


if __name__ == "__main__":
    main()
