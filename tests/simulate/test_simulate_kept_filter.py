"""kube-scheduler's filter keeps the nodes that pass per pod shape across cycles: after any
sequence of binds and departures it samples exactly what filtering every node afresh does."""

from __future__ import annotations

import math
import random

from migfit import profiles
from migfit.simulate import engine, policies, scheduler, spec, workload, world

CATALOG = profiles.builtin()
A100 = CATALOG.get("A100-80GB")


def nodes(count: int) -> list[spec.NodeSpec]:
    lay, config = spec.resolve_layout(A100, "all-1g.10gb", where="test")
    return [spec.NodeSpec(name=f"n{i:03}", model=A100, gpu_layouts=(lay,),
                          cpu_milli=4000 + 1000 * (i % 5), memory_mib=32768, config=config)
            for i in range(count)]


def pod_spec(name: str, cpu: int, gpu: bool) -> workload.PodSpec:
    return workload.PodSpec(name=name, cpu_milli=cpu, memory_mib=1024,
                            num_gpu=1 if gpu else 0, gpu_milli=1000 if gpu else 0,
                            arrival=0.0, duration=math.inf, annotations={}, containers=1,
                            expected=None, gpu_memory_mib=1,
                            explicit=("1g.10gb",) if gpu else ())


def fresh(kube: scheduler.KubeScheduler, pod: world.Pod) -> tuple[list[str], int] | None:
    """The sample and the next start, filtering every node now (None: another branch)."""
    state = kube.world
    cpu, mem = pod.spec.cpu_milli, pod.spec.memory_mib
    if pod.spec.gpu:
        free = state.cluster.free_nodes(pod.profiles[0])
        if not kube.to_find <= len(free) <= 2 * kube.to_find:
            return None
        positions = [n.position for name in free if (n := state.nodes[name]).busy_until is None
                     and n.cpu_used + cpu <= n.cpu_alloc and n.mem_used + mem <= n.mem_alloc]
    else:
        positions = [n.position for n in state.nodes.values() if n.busy_until is None
                     and n.cpu_used + cpu <= n.cpu_alloc and n.mem_used + mem <= n.mem_alloc]
    if len(positions) < kube.to_find:
        return [state.order[p] for p in positions], kube.next_start
    ranked = sorted(positions)
    total = len(state.order)
    cut = next((i for i, p in enumerate(ranked) if p >= kube.next_start), len(ranked))
    chosen = (ranked[cut:] + ranked[:cut])[:kube.to_find]
    start = (kube.next_start + (chosen[-1] - kube.next_start) % total + 1) % total
    return [state.order[p] for p in chosen], start


def test_kept_filter_samples_as_a_fresh_filter() -> None:
    sim = engine.Simulation(nodes(180), policy=policies.Policy.parse("default"), seed=0,
                            options=policies.Options(mode="events"), catalog=CATALOG)
    rng = random.Random(7)
    probes = []
    for i, (cpu, gpu) in enumerate([(500, True), (2500, True), (1000, False), (3000, False)]):
        probe = world.Pod(pod_spec(f"probe{i}", cpu, gpu), f"probe{i}", 0.0)
        probe.profiles = ("1g.10gb",) if gpu else ()
        probes.append(probe)
    compared = 0
    for step in range(1500):
        if sim.pods and rng.random() < 0.4:
            sim.depart(rng.choice(sorted(sim.pods)))
        else:
            sim.arrive(pod_spec(f"p{step}", rng.choice([250, 1000, 2000, 3500]),
                                rng.random() < 0.8))
        for probe in probes:
            want = fresh(sim.kube, probe)
            got = sim.kube.feasible(probe)
            if want is not None:
                assert (got, sim.kube.next_start) == want
                compared += 1
    assert compared > 1000
