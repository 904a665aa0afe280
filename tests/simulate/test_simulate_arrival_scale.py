"""--arrival-scale: the same pods arriving faster in events mode, a loaded variant of a trace."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from migfit import cli, profiles
from migfit.simulate import cli as simulate_cli
from migfit.simulate import engine, spec, workload

CATALOG = profiles.builtin()
A100 = CATALOG.get("A100-80GB")


def pod(name: str, arrival: float, duration: float) -> workload.PodSpec:
    return workload.PodSpec(
        name=name, cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=1000,
        arrival=arrival, duration=duration, annotations={}, containers=1,
        expected=profiles.ProfileName("7g.80gb"), gpu_memory_mib=0, explicit=("7g.80gb",))


PODS = [pod("a", 100.0, 50.0), pod("b", 200.0, 50.0), pod("c", 300.0, math.inf)]


def test_arrival_times_are_scaled_from_the_first_and_run_times_kept() -> None:
    got = workload.arrivals(PODS, mode="events", order="trace", target=1.3, seed=0, gpus=1,
                            arrival_scale=0.1)
    assert [(p.name, p.arrival, p.duration) for p in got] == [
        ("a", 100.0, 50.0), ("b", 110.0, 50.0), ("c", 120.0, math.inf)]
    assert workload.arrivals(PODS, mode="events", order="trace", target=1.3, seed=0,
                             gpus=1) == PODS


def test_faster_arrivals_make_pods_wait_for_the_one_gpu() -> None:
    lay, config = spec.resolve_layout(A100, "all-7g.80gb", where="test")
    nodes = [spec.NodeSpec(name="n", model=A100, gpu_layouts=(lay,), cpu_milli=8000,
                           memory_mib=32768, config=config)]

    def figures(scale: float) -> dict[str, float]:
        options = engine.Options(mode="events", arrival_scale=scale)
        return engine.run(nodes, PODS, policy=engine.Policy.parse("default"), seed=0,
                          options=options, catalog=CATALOG).figures

    # In trace time each pod ends before the next arrives; ten times as fast, b waits for a
    # (40 s) and c for b.
    assert figures(1.0)["gpu_pending_p95_s"] == 0
    assert figures(0.1)["gpu_pending_p95_s"] > 0


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_non_positive_scale_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    assert cli.main(["simulate", "--example", "--mode", "events", "--arrival-scale", value]) == 2
    err = capsys.readouterr().err
    assert "--arrival-scale" in err and "Traceback" not in err


def _node(name: str, gpus: int, cpu: int) -> spec.NodeSpec:
    lay, config = spec.resolve_layout(A100, "all-7g.80gb", where="test")
    return spec.NodeSpec(name=name, model=A100, gpu_layouts=(lay,) * gpus, cpu_milli=cpu,
                         memory_mib=32768, config=config)


def test_node_share_keeps_the_same_share_of_every_shape_in_list_order() -> None:
    nodes = [_node(f"big-{i}", 8, 96000) for i in range(8)] + [
        _node(f"small-{i}", 2, 16000) for i in range(4)] + [_node("odd", 1, 8000)]
    nodes = nodes[::2] + nodes[1::2]  # shapes interleaved: order is kept, not regrouped
    got = [n.name for n in simulate_cli.share_of_nodes(nodes, 0.25)]
    assert got == ["big-0", "big-2", "small-0", "odd"]
    assert simulate_cli.share_of_nodes(nodes, 1.0) == nodes


def test_node_share_on_the_command_line_shrinks_the_cluster(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert cli.main(["simulate", "--example", "--synthetic", "60", "--policies", "default",
                     "--json", str(out)]) == 0
    whole = json.loads(out.read_text())["setup"]
    assert cli.main(["simulate", "--example", "--synthetic", "60", "--policies", "default",
                     "--node-share", "0.5", "--json", str(out)]) == 0
    half = json.loads(out.read_text())["setup"]
    assert half["node_share"] == 0.5 and whole["node_share"] == 1.0
    assert 0 < half["nodes"] < whole["nodes"]
    assert half["cluster"].endswith(", 0.5 of its nodes per shape")


@pytest.mark.parametrize("value", ["0", "1.5"])
def test_a_node_share_outside_0_1_is_a_usage_error(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--example", "--node-share", value]) == 2
    err = capsys.readouterr().err
    assert "--node-share" in err and "Traceback" not in err


def test_events_on_a_list_without_times_says_to_use_fill(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # The trace's multigpu lists have no creation_time or deletion_time: replayed as events
    # every pod would arrive at 0 and never leave.
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                    "p0,12000,16384,1,1000\np1,6000,12288,1,460\np2,4000,8192,2,1000\n",
                    encoding="utf-8")
    assert cli.main(["simulate", "--cluster", str(simulate_cli.EXAMPLE_CLUSTER),
                     "--pods", str(pods), "--mode", "events"]) == 2
    err = capsys.readouterr().err
    assert "no arrival times (creation_time)" in err and "--mode fill" in err
    assert "never leave" in err
    assert "Traceback" not in err
    # The same list fills.
    assert cli.main(["simulate", "--cluster", str(simulate_cli.EXAMPLE_CLUSTER),
                     "--pods", str(pods), "--mode", "fill", "--policies", "default"]) == 0
