"""Waits are compared over the same time for every policy: in events mode a GPU pod still
pending when the replay ends was never placed, and waits for ever (``never`` in the tables,
``null`` in the JSON); in fill mode waits are read when arrivals stop, before an advisor's
re-layouts in flight and its last queued call run its clock on."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from migfit import cli, profiles
from migfit.simulate import engine, policies, spec, workload

CATALOG = profiles.builtin()
A100 = CATALOG.get("A100-80GB")
WAITS = ("gpu_pending_p50_s", "gpu_pending_p95_s", "pending_p50_s", "pending_p99_s")


def _node(layout: str, gpus: int) -> spec.NodeSpec:
    lay, config = spec.resolve_layout(A100, layout, where="test")
    return spec.NodeSpec(name="solo", model=A100, gpu_layouts=(lay,) * gpus, cpu_milli=96000,
                         memory_mib=768 * 1024, config=config, trace_model=A100.id)


def _whole_gpu_pods(n: int) -> list[workload.PodSpec]:
    """A whole-GPU pod every 10 s, each running 600 s."""
    return [workload.explicit_pod(A100, name=f"p-{i}", profile="7g.80gb", arrival=10.0 * i,
                                  duration=600.0) for i in range(n)]


def _run(policy: str, nodes: list[spec.NodeSpec], pods: list[workload.PodSpec],
         mode: policies.Mode) -> engine.RunResult:
    return engine.run(nodes, pods, policy=policies.Policy.parse(policy), seed=0,
                      options=policies.Options(mode=mode), catalog=CATALOG,
                      keep_snapshot=False)


def test_events_pods_never_placed_wait_for_ever() -> None:
    # No 7g.80gb on the node and no advisor: none of the pods can ever start. Their waits
    # used to end with the run, at the last arrival (p95 170 s), below the policy that
    # re-lays a GPU out and places every pod, and below the bound.
    nodes, pods = [_node("all-balanced", 8)], _whole_gpu_pods(18)
    stuck = _run("default", nodes, pods, "events")
    assert stuck.figures["gpu_pods_placed"] == 0
    assert stuck.figures["gpu_pods_pending"] == 18
    assert all(math.isinf(stuck.figures[k]) for k in WAITS)
    assert {c["max_s"] for c in stuck.waits_by_class.values()} == {math.inf}
    served = _run("default+advisor", nodes, pods, "events")
    assert served.figures["gpu_pods_pending"] == 0
    assert math.isfinite(served.figures["gpu_pending_p95_s"])
    assert served.figures["gpu_pending_p95_s"] < stuck.figures["gpu_pending_p95_s"]


def test_events_a_few_never_placed_leave_the_p95_finite() -> None:
    # One pod of 40 can never start (a 7g.80gb where every GPU is 1g.10gb and no advisor):
    # it is over the p95's rank only when more than 5 % are.
    nodes = [_node("all-1g.10gb", 1)]
    pods = [workload.explicit_pod(A100, name=f"s-{i}", profile="1g.10gb", arrival=float(i),
                                  duration=30.0) for i in range(39)]
    pods.append(workload.explicit_pod(A100, name="big", profile="7g.80gb", arrival=5.0,
                                      duration=30.0))
    figures = _run("default", nodes, pods, "events").figures
    assert figures["gpu_pods_pending"] == 1
    assert math.isfinite(figures["gpu_pending_p95_s"])
    assert math.isinf(figures["pending_p99_s"])


def test_fill_waits_are_read_when_arrivals_stop() -> None:
    # The advisor's re-layouts still in flight at the last arrival ran its clock on: its
    # pods' waits were read up to 16 s later than the default scheduler's, and its GPU wait
    # p95 was 27 s against 11 s with the same placements.
    nodes = [_node("all-balanced", 8)]
    pods = workload.synthetic(300, model=A100, mapping="compute", seed=0)
    for policy in ("default", "migfit+advisor", "default+advisor"):
        result = _run(policy, nodes, pods, "fill")
        end = result.figures["arrivals_end_s"]
        assert all(result.figures[k] <= end for k in WAITS), policy
        assert all(c["max_s"] <= end for c in result.waits_by_class.values()), policy


CLUSTER = """version: v1
nodes:
- name: solo
  count: 1
  model: A100-80GB
  gpus: 8
  cpu: "96"
  memory: 768Gi
  layout: all-balanced
"""
HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
          "deletion_time,scheduled_time")


def test_the_tables_say_never_and_the_json_null(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    rows = [f"p-{i},4000,8192,1,1000,,LS,Running,{10 * i},{10 * i + 600},{10 * i}"
            for i in range(18)]
    (tmp_path / "pods.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    out = tmp_path / "out.json"
    assert cli.main(["simulate", "--cluster", str(tmp_path / "cluster.yaml"),
                     "--pods", str(tmp_path / "pods.csv"), "--mode", "events",
                     "--webhook-choice", "smallest", "--policies", "default,default+advisor",
                     "--markdown", "--waits-by-class", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("default "))
    assert row.split()[7:9] == ["never", "never"]  # GPU wait p50 s, p95 s
    never = "default: 18 GPU pods never placed (per run); their waits count as never"
    assert printed.count(never) == 2  # under the table and under its Markdown
    assert "default+advisor: " not in printed
    assert "| default | 0 |" in printed and "| never | never |" in printed

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    document = json.loads(out.read_text(), parse_constant=no_constants)
    stuck = next(r for r in document["runs"] if r["policy"] == "default")
    assert stuck["figures"]["gpu_pending_p95_s"] is None
    assert stuck["figures"]["gpu_pods_pending"] == 18
    assert document["summary"]["default"]["gpu_pending_p95_s"]["mean"] is None
    served = next(r for r in document["runs"] if r["policy"] == "default+advisor")
    assert served["figures"]["gpu_pending_p95_s"] > 0


def test_seeds_that_disagree_on_never_have_no_deviation() -> None:
    from migfit.simulate import metrics

    assert metrics.summarise([math.inf, math.inf])["stdev"] == 0.0
    mixed = metrics.summarise([math.inf, 100.0, 120.0])
    assert mixed["mean"] == math.inf and math.isnan(mixed["stdev"])
