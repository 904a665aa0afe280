"""``--waits-by-class``: how long the GPU pods of each class (their instances) waited, and
which classes make the run's GPU wait p95."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from migfit import cli, profiles
from migfit.simulate import engine, metrics, report, spec, workload

CATALOG = profiles.builtin()
A100 = CATALOG.get("A100-80GB")


def pod(name: str, arrival: float, duration: float, profile: str = "7g.80gb",
        cpu_milli: int = 1000) -> workload.PodSpec:
    return workload.PodSpec(
        name=name, cpu_milli=cpu_milli, memory_mib=1024, num_gpu=1, gpu_milli=1000,
        arrival=arrival, duration=duration, annotations={}, containers=1,
        expected=profiles.ProfileName(profile), gpu_memory_mib=0, explicit=(profile,))


def test_class_names_count_the_instances_of_each_profile() -> None:
    assert metrics.class_name(("7g.80gb",) * 8) == "8 × 7g.80gb"
    assert metrics.class_name(("3g.40gb", "1g.10gb")) == "1 × 1g.10gb + 1 × 3g.40gb"


def test_one_gpu_three_pods_and_one_that_never_fits() -> None:
    # One GPU laid out 7g.80gb. Arriving ten times as fast (100, 110, 120 s), b waits 40 s
    # for a and c 80 s for b; the 3g.40gb pod (130 s) has no instance: it is never placed.
    lay, config = spec.resolve_layout(A100, "all-7g.80gb", where="test")
    nodes = [spec.NodeSpec(name="n", model=A100, gpu_layouts=(lay,), cpu_milli=8000,
                           memory_mib=32768, config=config)]
    pods = [pod("a", 100.0, 50.0), pod("b", 200.0, 50.0), pod("c", 300.0, math.inf),
            pod("d", 400.0, 10.0, profile="3g.40gb")]
    result = engine.run(nodes, pods, policy=engine.Policy.parse("default"), seed=0,
                        options=engine.Options(mode="events", arrival_scale=0.1),
                        catalog=CATALOG)
    seven, three = result.waits_by_class["1 × 7g.80gb"], result.waits_by_class["1 × 3g.40gb"]
    assert (seven["pods"], seven["waiting"]) == (3, 0)
    assert (seven["p50_s"], seven["p95_s"], seven["max_s"]) == (40.0, 80.0, 80.0)
    # The 3g.40gb pod still waits when the replay is over: it waits for ever (before, with
    # the 70 s it had waited when its run ended, at 200 s).
    assert (three["pods"], three["waiting"], three["max_s"]) == (1, 1, math.inf)
    # The run's GPU wait p95 (nearest rank over 4 pods: the longest) is that pod's.
    assert result.figures["gpu_pending_p95_s"] == math.inf
    assert seven["in_run_p95_tail"] == 0 and three["in_run_p95_tail"] == 1
    text = report.waits_table([(result.policy, result.waits_by_class)])
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["policy", "pod", "class"]
    assert lines[2].split()[1:4] == ["1", "×", "3g.40gb"] and "100%" in lines[2]
    assert lines[2].split()[-4:] == ["never", "never", "never", "100%"]


def test_the_command_prints_and_writes_the_waits_by_class(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.json"
    assert cli.main(["simulate", "--example", "--mode", "events", "--arrival-scale", "0.05",
                     "--policies", "default", "--seeds", "1", "--waits-by-class",
                     "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "of the p95 tail" in text
    (run,) = json.loads(out.read_text())["runs"]
    classes, figures = run["waits_by_class"], run["figures"]
    assert classes and all(" × " in k for k in classes)
    # Every GPU pod counts once: placed, or still waiting.
    assert sum(c["pods"] for c in classes.values()) == (
        figures["gpu_pods_placed"] + sum(c["waiting"] for c in classes.values()))
    assert max(c["max_s"] for c in classes.values()) >= figures["gpu_pending_p95_s"]
    assert figures["gpu_pending_p95_s"] > 0  # arrivals 20 times as fast: pods wait
    assert sum(c["in_run_p95_tail"] for c in classes.values()) >= 1
    rows = [line for line in text.splitlines() if line.startswith("default ")]
    assert {name for name in classes if any(f" {name} " in r for r in rows)} == set(classes)


def test_the_table_averages_a_class_over_the_seeds_that_had_it() -> None:
    def figs(pods: int, p95: float, tail: int) -> dict[str, float]:
        return {"pods": pods, "waiting": 0, "p50_s": 0.0, "p95_s": p95, "max_s": p95,
                "in_run_p95_tail": tail}

    # Two seeds; only the second had a pod of eight GPUs (it waited 900 s, the whole tail).
    text = report.waits_table([
        ("migfit", {"1 × 7g.80gb": figs(10, 100.0, 1)}),
        ("migfit", {"1 × 7g.80gb": figs(12, 300.0, 0), "8 × 7g.80gb": figs(1, 900.0, 1)}),
    ])
    rows = [line.split("  ") for line in text.splitlines()[2:]]
    cells = [[c.strip() for c in r if c.strip()] for r in rows]
    assert cells == [["migfit", "1 × 7g.80gb", "11", "0", "0", "200", "300", "50%"],
                     ["migfit", "8 × 7g.80gb", "0.5", "0", "0", "900", "900", "50%"]]
