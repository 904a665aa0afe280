"""kube-scheduler's sample of feasible nodes in the simulator (``findNodesThatFitPod``): from
where the previous cycle stopped, in node-list order, until ``numFeasibleNodesToFind`` passed;
checked against that loop written out, for cpu-only and GPU pods. And the replay's GC
threshold: raised while a replay runs, as it was afterwards."""

from __future__ import annotations

import gc
import math
import random

from migfit import profiles
from migfit.simulate import engine, spec, workload, world

CATALOG = profiles.builtin()
A100 = CATALOG.get("A100-80GB")
NODES = 130  # 130 nodes: numFeasibleNodesToFind = 100


def _nodes() -> list[spec.NodeSpec]:
    lay, config = spec.resolve_layout(A100, "all-1g.10gb", where="test")
    return [spec.NodeSpec(name=f"n{i:03d}", model=A100, gpu_layouts=(lay,), cpu_milli=16000,
                          memory_mib=65536, config=config) for i in range(NODES)]


def _pod(uid: str, cpu: int, profile: str | None) -> world.Pod:
    s = workload.PodSpec(
        name=uid, cpu_milli=cpu, memory_mib=1024, num_gpu=1 if profile else 0,
        gpu_milli=140 if profile else 0, arrival=0.0, duration=math.inf, annotations={},
        containers=1 if profile else 0,
        expected=profiles.ProfileName(profile) if profile else None, gpu_memory_mib=0,
        explicit=(profile,) if profile else ())
    pod = world.Pod(s, uid, 0.0)
    pod.profiles = (profile,) if profile else ()
    return pod


def _loop(sim: engine.Simulation, pod: world.Pod, start: int) -> tuple[list[str], int]:
    """findNodesThatFitPod as written upstream: the nodes that fit and the next start."""
    order, want = sim.order, sim.kube.to_find
    free = sim.cluster.free_nodes(pod.profiles[0]) if pod.profiles else None
    out: list[str] = []
    for i in range(len(order)):
        n = sim.nodes[order[(start + i) % len(order)]]
        if (n.busy_until is None and n.cpu_used + pod.spec.cpu_milli <= n.cpu_alloc
                and n.mem_used + pod.spec.memory_mib <= n.mem_alloc
                and (free is None or free.get(n.name, 0) >= 1)):
            out.append(n.name)
            if len(out) == want:
                return out, (start + i + 1) % len(order)
    return out, start


def test_the_sample_is_upstreams_loop_for_cpu_only_and_gpu_pods() -> None:
    sim = engine.Simulation(_nodes(), policy=engine.Policy.parse("default"), seed=0,
                            options=engine.Options(), catalog=CATALOG)
    assert sim.kube.to_find == 100
    rng = random.Random(3)
    for round_ in range(40):
        for n in sim.nodes.values():  # a different set of nodes with room each round
            n.cpu_used = rng.choice((0, 0, 8000, 15000))
            n.busy_until = 1.0 if rng.random() < 0.05 else None
            sim.touch(n)  # as bind, depart and a re-layout do: kept filters read it
        pod = _pod(f"p{round_}", rng.choice((1000, 4000)),
                   "1g.10gb" if round_ % 2 else None)
        start = sim.kube.next_start
        expected, next_start = _loop(sim, pod, start)
        got = sim.kube.feasible(pod)
        # Fewer than 100 fit: every node was examined, in the order the filter met them.
        assert (got if len(expected) == 100 else sorted(got)) == (
            expected if len(expected) == 100 else sorted(expected)), round_
        assert sim.kube.next_start == next_start, round_


def test_a_replay_collects_young_objects_less_often_and_restores_the_threshold() -> None:
    before = gc.get_threshold()
    with engine._rarer_collections():
        assert gc.get_threshold() == (max(before[0], engine.REPLAY_GC_THRESHOLD), *before[1:])
    assert gc.get_threshold() == before
    pods = [workload.PodSpec(
        name=f"p{i}", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=140,
        arrival=float(i), duration=math.inf, annotations={}, containers=1,
        expected=profiles.ProfileName("1g.10gb"), gpu_memory_mib=0,
        explicit=("1g.10gb",)) for i in range(8)]
    r = engine.run(_nodes()[:4], pods, policy=engine.Policy.parse("migfit"), seed=0,
                   options=engine.Options(mode="events"), catalog=CATALOG)
    assert r.figures["gpu_pods_placed"] == 8
    assert gc.get_threshold() == before
    try:
        gc.set_threshold(0, *before[1:])
        with engine._rarer_collections():
            assert gc.get_threshold()[0] == 0  # a GC turned off stays off
    finally:
        gc.set_threshold(*before)
