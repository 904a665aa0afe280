"""The GPU wait bound of ``bound`` in events mode: exact where sequencing forces the wait,
below every policy's percentile on loaded replays, 0 where nothing must wait."""

from __future__ import annotations

import dataclasses
import math

import pytest

from migfit import profiles, requests
from migfit.simulate import bound, engine, policies, spec, waitbound, workload

CATALOG = profiles.builtin()
A100 = CATALOG.get("A100-80GB")
A30 = CATALOG.get("A30-24GB")


def node(layout: str, *, gpus: int, cpu: int = 48000, model: profiles.GpuModel = A100,
         name: str = "n0") -> spec.NodeSpec:
    lay, config = spec.resolve_layout(model, layout, where="test")
    return spec.NodeSpec(name=name, model=model, gpu_layouts=(lay,) * gpus, cpu_milli=cpu,
                         memory_mib=196608, config=config, trace_model=model.id)


def events(cluster: list[spec.NodeSpec], pods: list[workload.PodSpec]) -> dict[str, float]:
    return bound.figures(cluster, pods, options=policies.Options(mode="events"),
                         catalog=CATALOG, static=False)


def test_a_second_whole_gpu_pod_waits_for_the_first_to_leave() -> None:
    """One GPU; a whole-GPU pod runs 0–1000 s, another arrives at 10: every policy makes it
    wait 990 s, and the nearest-rank p95 of two waits is the larger. The bound proves 989
    (to the second below), and the p50 (the smaller wait, 0) nothing."""
    cluster = [node("all-7g.80gb", gpus=1)]
    pods = [workload.explicit_pod(A100, name="a", profile="7g.80gb", arrival=0.0,
                                  duration=1000.0),
            workload.explicit_pod(A100, name="b", profile="7g.80gb", arrival=10.0,
                                  duration=1000.0)]
    f = events(cluster, pods)
    assert f["gpu_pending_p95_s"] == 989.0
    assert f["gpu_pending_p50_s"] == 0.0
    run = engine.run(cluster, pods, policy=policies.Policy("default"), seed=0,
                     options=policies.Options(mode="events"), catalog=CATALOG,
                     keep_snapshot=False).figures
    assert run["gpu_pending_p95_s"] == pytest.approx(990.0)


def test_instances_share_a_gpu_by_slices_and_two_big_ones_never_do() -> None:
    """A 3g.40gb and a 4g.40gb fit one GPU together (no wait); two 4g.40gb do not: each is
    more than half the GPU's compute slices, whatever the layout."""
    cluster = [node("all-balanced", gpus=1)]
    fits = [workload.explicit_pod(A100, name="a", profile="4g.40gb", duration=500.0),
            workload.explicit_pod(A100, name="b", profile="3g.40gb", duration=500.0)]
    assert events(cluster, fits)["gpu_pending_p95_s"] == 0.0
    big = [workload.explicit_pod(A100, name="a", profile="4g.40gb", duration=500.0),
           workload.explicit_pod(A100, name="b", profile="4g.40gb", duration=500.0)]
    assert events(cluster, big)["gpu_pending_p95_s"] == 499.0


def test_the_gpu_nodes_cpu_counts() -> None:
    """Whole-GPU pods of 30 cores on a 4-GPU node of 48: the GPUs are free, the cpu makes
    the second wait until the first leaves at 500 s."""
    cluster = [node("all-7g.80gb", gpus=4, cpu=48000)]
    pods = [workload.explicit_pod(A100, name=f"p{i}", profile="7g.80gb", cpu_milli=30000,
                                  duration=500.0) for i in range(2)]
    assert events(cluster, pods)["gpu_pending_p95_s"] == 499.0
    light = [workload.explicit_pod(A100, name=f"p{i}", profile="7g.80gb", cpu_milli=20000,
                                   duration=500.0) for i in range(2)]
    assert events(cluster, light)["gpu_pending_p95_s"] == 0.0


def test_a_pod_counts_its_least_footprint_over_the_models() -> None:
    """A pod asking for 10 GiB: a 1g.20gb on an A100-80GB (1 of 7 compute slices, 2 of 8
    memory slices; 1g.10gb's 9728 MiB is too small), a 2g.12gb on an A30 (2 of 4 and 2 of
    4). Each share is the least over the models: 1/7 and 1/4."""
    cluster = [node("all-balanced", gpus=1, name="a100"),
               node("all-balanced", gpus=1, model=A30, name="a30")]
    pod = dataclasses.replace(
        workload.explicit_pod(A100, name="p", profile="1g.10gb"), explicit=(),
        annotations={requests.GPU_MEMORY: "10Gi"})
    (fp,) = waitbound.footprints(cluster, [pod])
    assert fp.use[:3] == pytest.approx((1 / 7, 2 / 8, 0.0))
    (on_a30,) = waitbound.footprints(cluster[1:], [pod])
    assert on_a30.use[:3] == pytest.approx((2 / 4, 2 / 4, 0.0))


def test_fill_mode_keeps_the_trivial_bound() -> None:
    cluster = [node("all-7g.80gb", gpus=1)]
    pods = [workload.explicit_pod(A100, name=f"p{i}", profile="7g.80gb") for i in range(3)]
    f = bound.figures(cluster, pods, options=policies.Options(mode="fill", target=10.0),
                      catalog=CATALOG, static=False)
    assert f["gpu_pending_p95_s"] == 0.0


@pytest.mark.parametrize("seed", [0, 1])
def test_no_policy_waits_less_than_the_bound(seed: int) -> None:
    """A loaded replay (pods every 20 s on average, 2 h runs, on 3 nodes of 4 GPUs): the
    bound is above 0 and at or below every policy's GPU wait p50 and p95."""
    cluster = [node(layout, gpus=4, name=f"n{i}")
               for i, layout in enumerate(["all-balanced", "all-7g.80gb", "all-3g.40gb"])]
    pods = workload.synthetic(120, model=A100, mapping="compute", seed=seed,
                              mean_interval=20.0, mean_duration=2 * 3600.0)
    options = policies.Options(mode="events", advisor_grace=0.0)
    lower = engine.run(cluster, pods, policy=policies.Policy("bound"), seed=seed,
                       options=options, catalog=CATALOG, keep_snapshot=False).figures
    assert lower["gpu_pending_p95_s"] > 0
    for policy in policies.ALL_POLICIES:
        if policy.is_bound:
            continue
        f = engine.run(cluster, pods, policy=policy, seed=seed, options=options,
                       catalog=CATALOG, keep_snapshot=False).figures
        for figure in ("gpu_pending_p50_s", "gpu_pending_p95_s"):
            assert lower[figure] <= f[figure], (policy.name, figure)


def test_the_percentile_bound_is_monotone_in_what_may_wait() -> None:
    """More pods allowed late (a lower percentile) never gives a higher bound."""
    cluster = [node("all-7g.80gb", gpus=2)]
    pods = [workload.explicit_pod(A100, name=f"p{i}", profile="7g.80gb", arrival=5.0 * i,
                                  duration=300.0) for i in range(10)]
    fp = waitbound.footprints(cluster, pods)
    cap = waitbound.capacity(cluster)
    bounds = [waitbound.percentile_bound(fp, cap, q) for q in (50, 80, 95, 100)]
    assert bounds == sorted(bounds)
    assert bounds[-1] > 0
    assert all(math.isfinite(b) for b in bounds)
