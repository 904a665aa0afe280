"""Per-GPU initial layouts: the ';' cycle over the cluster's GPUs and the demand-matched mix."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from migfit import errors, layouts, profiles
from migfit.simulate import initial, spec, workload

CATALOG = profiles.builtin()
A100 = CATALOG.get("A100-80GB")


def nodes(*gpus: int) -> list[spec.NodeSpec]:
    lay, config = spec.resolve_layout(A100, "all-balanced", where="test")
    return [spec.NodeSpec(name=f"n{i}", model=A100, gpu_layouts=(lay,) * g, cpu_milli=8000,
                          memory_mib=32768, config=config) for i, g in enumerate(gpus)]


def test_cycle_runs_on_across_nodes() -> None:
    entries = initial.parse_option("7g.80gb;7g.80gb;4g.40gb,3g.40gb;all-balanced")
    assert entries == [["7g.80gb"], ["7g.80gb"], ["4g.40gb", "3g.40gb"], "all-balanced"]
    cycle = initial.resolve(A100, entries, where="test")
    out = initial.assign(nodes(3, 2, 1, 2), cycle)
    got = [[",".join(g) for g in n.gpu_layouts] for n in out]
    assert got == [
        ["7g.80gb", "7g.80gb", "3g.40gb,4g.40gb"],
        ["1g.10gb,1g.10gb,2g.20gb,3g.40gb", "7g.80gb"],
        ["7g.80gb"],
        ["3g.40gb,4g.40gb", "1g.10gb,1g.10gb,2g.20gb,3g.40gb"],
    ]
    assert out[2].config == "migfit-7g.80gb"
    assert out[0].config.startswith("migfit-") and out[0].config != out[1].config


def test_bad_cycles_are_usage_errors() -> None:
    with pytest.raises(errors.UsageError):
        initial.parse_option("7g.80gb;;3g.40gb")
    with pytest.raises(errors.UsageError, match="does not fit"):
        initial.resolve(A100, initial.parse_option("7g.80gb,1g.10gb"), where="--layout")


def pod(profile: str, containers: int = 1) -> workload.PodSpec:
    return workload.PodSpec(name=profile, cpu_milli=1000, memory_mib=1024, num_gpu=containers,
                            gpu_milli=500, arrival=0.0, duration=math.inf, annotations={},
                            containers=containers, expected=profiles.ProfileName(profile),
                            gpu_memory_mib=1024)


def test_demand_matched_follows_the_mix_and_whole_nodes_share_a_layout() -> None:
    pods = [pod("7g.80gb")] * 6 + [pod("7g.80gb", 2)] + [pod("4g.40gb")] * 2 \
        + [pod("3g.40gb")] * 2
    mix = initial.instance_mix(pods)
    assert mix == Counter({"7g.80gb": 8, "4g.40gb": 2, "3g.40gb": 2})
    counts = initial.demand_matched(A100, mix, 20)
    assert sum(counts.values()) == 20
    assert all(layouts.check(A100, list(k)).valid for k in counts)
    # 8 × 7 + 2 × 4 + 2 × 3 = 70 slices of demand for 140 of capacity: doubled exactly.
    assert counts == Counter({("7g.80gb",): 16, ("3g.40gb", "4g.40gb"): 4})
    out = initial.spread(nodes(*[2] * 10), counts)
    assert all(len(set(n.gpu_layouts)) == 1 for n in out)
    per_kind = Counter(lay for n in out for lay in n.gpu_layouts)
    assert per_kind == counts
    assert initial.demand_matched(A100, mix, 20) == counts  # deterministic
