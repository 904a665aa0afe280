"""--score-all-pods in the simulator: a cpu-only pod scored by the extender goes where its cpu
strands no instance, so the GPU pod after it can run; without it, spreading strands it."""

from __future__ import annotations

import math

from migfit import profiles
from migfit.simulate import engine, spec, workload

CATALOG = profiles.builtin()
A100 = CATALOG.get("A100-80GB")


def node(name: str, layout: str) -> spec.NodeSpec:
    lay, config = spec.resolve_layout(A100, layout, where="test")
    return spec.NodeSpec(name=name, model=A100, gpu_layouts=(lay,), cpu_milli=16000,
                         memory_mib=65536, config=config)


def pod(name: str, arrival: float, cpu: int, profile: str | None) -> workload.PodSpec:
    return workload.PodSpec(
        name=name, cpu_milli=cpu, memory_mib=1024, num_gpu=1 if profile else 0,
        gpu_milli=1000 if profile == "7g.80gb" else (140 if profile else 0), arrival=arrival,
        duration=math.inf, annotations={}, containers=1 if profile else 0,
        expected=profiles.ProfileName(profile) if profile else None, gpu_memory_mib=0,
        explicit=(profile,) if profile else ())


# n1's one 7g.80gb goes to the first pod; n2 has seven free 1g.10gb. The cpu-only pod fits
# both nodes; kube-scheduler's spreading puts it on n2 (more cpu free), leaving 6 cores there,
# too few for the 1g.10gb pod with 8 that comes next. Scored by the extender, it goes to n1,
# whose instances are all taken: nothing is stranded and the 1g.10gb pod runs on n2.
NODES = [node("n1", "all-7g.80gb"), node("n2", "all-1g.10gb")]
PODS = [pod("whole", 0, 4000, "7g.80gb"), pod("batch", 1, 10000, None),
        pod("small", 2, 8000, "1g.10gb")]


def run(score_all_pods: bool) -> dict[str, float]:
    options = engine.Options(mode="events", score_all_pods=score_all_pods)
    return engine.run(NODES, PODS, policy=engine.Policy.parse("migfit"), seed=0,
                      options=options, catalog=CATALOG).figures


def test_a_cpu_only_pod_scored_by_the_extender_strands_nothing() -> None:
    without, scored = run(False), run(True)
    assert (without["gpu_pods_placed"], without["pods_pending"]) == (1, 1)
    assert (scored["gpu_pods_placed"], scored["pods_pending"]) == (2, 0)
    assert scored["pods_disrupted"] == 0
