"""Realistic clusters and schedulers: gpu_spec, cpu-only nodes, named configs in proportions,
layouts from an earlier slice of the trace, percentageOfNodesToScore, in-node allocation."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from migfit import cli, profiles
from migfit.simulate import engine, initial, policies, scheduler, spec, workload

CATALOG = profiles.builtin()
A100 = CATALOG.get("A100-80GB")
EVENTS = policies.Options(mode="events")


def node(name: str, layout: str, *, gpus: int = 1, trace: str = "A100-80GB",
         cpu: int = 8000) -> spec.NodeSpec:
    if gpus == 0:
        return spec.NodeSpec(name=name, model=A100, gpu_layouts=(), cpu_milli=cpu,
                             memory_mib=32768, config="")
    lay, config = spec.resolve_layout(A100, layout, where="test")
    return spec.NodeSpec(name=name, model=A100, gpu_layouts=(lay,) * gpus, cpu_milli=cpu,
                         memory_mib=32768, config=config, trace_model=trace)


def gpu_pod(name: str, arrival: float, gpu_spec: frozenset[str] = frozenset()
            ) -> workload.PodSpec:
    return workload.PodSpec(name=name, cpu_milli=1000, memory_mib=1024, num_gpu=1,
                            gpu_milli=1000, arrival=arrival, duration=math.inf,
                            annotations={}, containers=1, expected=None, gpu_memory_mib=1,
                            explicit=("7g.80gb",), gpu_spec=gpu_spec)


def cpu_pod(name: str, arrival: float) -> workload.PodSpec:
    return workload.make_pod(A100, name=name, cpu_milli=2000, memory_mib=2048, num_gpu=0,
                             gpu_milli=0, arrival=arrival, duration=math.inf,
                             mapping="compute")


def placed_on(policy: str, nodes: list[spec.NodeSpec], pods: list[workload.PodSpec]
              ) -> dict[str, str | None]:
    sim = engine.Simulation(nodes, policy=policies.Policy.parse(policy), seed=0,
                            options=EVENTS, catalog=CATALOG)
    sim.run_events(pods)
    return {p.spec.name: p.node for p in sim.pods.values()}


@pytest.mark.parametrize("policy", ["default", "binpack", "random", "fgd", "migfit",
                                    "upper-bound"])
def test_gpu_spec_places_only_on_that_model(policy: str) -> None:
    nodes = [node("v100", "all-7g.80gb", gpus=4, trace="V100M32"),
             node("t4", "all-7g.80gb", gpus=4, trace="T4")]
    pods = [gpu_pod(f"p{i}", float(i), frozenset({"T4"})) for i in range(6)]
    where = placed_on(policy, nodes, pods)
    assert [where[f"p{i}"] for i in range(4)] == ["t4"] * 4
    assert where["p4"] is None and where["p5"] is None  # the V100M32 node stays free


def test_trace_gpu_spec_and_node_model_are_read(tmp_path: Path) -> None:
    pods_csv = tmp_path / "pods.csv"
    pods_csv.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "a,1000,1024,1,1000,V100M16|V100M32,LS,Running,0,100,0\n"
        "b,1000,1024,0,0,,LS,Running,1,100,1\n")
    (a, b) = workload.load_trace(pods_csv, model=A100, mapping="compute")
    assert a.gpu_spec == frozenset({"V100M16", "V100M32"})
    assert b.gpu_spec == frozenset()
    nodes_csv = tmp_path / "nodes.csv"
    nodes_csv.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                         "g,64000,262144,2,V100M32\nc,96000,262144,0,\nh,64000,262144,8,T4\n")
    mapping = spec.parse_model_map("T4=A30-24GB", CATALOG)
    g, c, h = spec.load_node_csv(nodes_csv, model=A100, layout="all-balanced",
                                 model_map=mapping)
    assert (g.trace_model, g.model.id, g.gpus) == ("V100M32", "A100-80GB", 2)
    assert (c.gpus, c.trace_model) == (0, "")  # a cpu-only node is kept
    assert (h.trace_model, h.model.id) == ("T4", "A30-24GB")


def test_cpu_only_nodes_take_cpu_only_pods() -> None:
    nodes = [node("gpu", "all-7g.80gb", gpus=1, cpu=4000), node("cpu", "", gpus=0, cpu=64000)]
    pods = [cpu_pod(f"c{i}", float(i)) for i in range(6)] + [gpu_pod("g0", 10.0),
                                                               gpu_pod("g1", 11.0)]
    where = placed_on("default", nodes, pods)
    assert where["g0"] == "gpu" and where["g1"] is None  # never on the cpu-only node
    assert Counter(where[f"c{i}"] for i in range(6))["cpu"] >= 4


def test_named_configs_in_proportions_per_whole_node() -> None:
    nodes = [node(f"n{i}", "all-balanced", gpus=8) for i in range(8)]
    shares = initial.parse_proportions("all-balanced=50%,all-1g.10gb=25%,all-7g.80gb=25%")
    assert shares == [("all-balanced", 50.0), ("all-1g.10gb", 25.0), ("all-7g.80gb", 25.0)]
    out = initial.proportions(nodes, shares)
    assert Counter(n.config for n in out) == {"all-balanced": 4, "all-1g.10gb": 2,
                                              "all-7g.80gb": 2}
    assert all(len(set(n.gpu_layouts)) == 1 for n in out)
    with pytest.raises(Exception, match="CONFIG=SHARE"):
        initial.parse_proportions("all-balanced=half")


def test_history_sizes_layouts_on_pods_that_are_not_replayed() -> None:
    old = [workload.explicit_pod(A100, name=f"old{i}", profile="7g.80gb") for i in range(10)]
    new = [workload.explicit_pod(A100, name=f"new{i}", profile="1g.10gb") for i in range(10)]
    sizing, replayed = initial.history_split(old + new, 0.5)
    assert [p.name for p in sizing] == [p.name for p in old]
    assert [p.name for p in replayed] == [p.name for p in new]
    counts = initial.demand_matched(A100, initial.instance_mix(sizing), 4)
    assert counts == Counter({("7g.80gb",): 4})  # the past's mix, not the replayed one


def test_nodes_to_find_follows_kube_scheduler() -> None:
    assert scheduler.nodes_to_find(None, 50) == 50  # under 100 nodes: all
    assert scheduler.nodes_to_find(None, 1213) == 1213 * 41 // 100  # adaptive 41 %
    assert scheduler.nodes_to_find(0, 10_000) == 10_000 * 5 // 100  # at least 5 %
    assert scheduler.nodes_to_find(None, 150) == 100  # 49 % of 150 is under 100
    assert scheduler.nodes_to_find(10, 500) == 100  # at least 100 nodes
    assert scheduler.nodes_to_find(30, 1000) == 300
    assert scheduler.nodes_to_find(100, 1213) == 1213


def test_sampling_starts_where_the_last_cycle_stopped() -> None:
    """With 200 nodes and 50 %, a cycle finds 100 feasible nodes from the rotating start, so
    two pods that would tie under spreading land in different halves of the node list."""
    nodes = [node(f"n{i:03d}", "all-7g.80gb", gpus=1) for i in range(200)]
    options = policies.Options(mode="events", percentage_of_nodes_to_score=50)
    sim = engine.Simulation(nodes, policy=policies.Policy("default"), seed=0, options=options,
                            catalog=CATALOG)
    sim.run_events([gpu_pod("a", 0.0), gpu_pod("b", 1.0)])
    where = {p.spec.name: p.node for p in sim.pods.values()}
    assert where["a"] is not None and where["b"] is not None
    assert int(where["a"][1:]) < 100 <= int(where["b"][1:])
    assert sim.kube.next_start == 0  # 100 examined twice


@pytest.mark.parametrize(("allocation", "gpus"), [("distributed", {0, 1}), ("packed", {0})])
def test_device_plugin_allocation_inside_a_node(allocation: policies.Allocation,
                                                gpus: set[int]) -> None:
    nodes = [node("n", "all-1g.10gb", gpus=2)]
    pods = [workload.explicit_pod(A100, name=f"p{i}", profile="1g.10gb", arrival=float(i))
            for i in range(2)]
    options = policies.Options(mode="events", allocation=allocation)
    sim = engine.Simulation(nodes, policy=policies.Policy("default"), seed=0, options=options,
                            catalog=CATALOG)
    sim.run_events(pods)
    assert {gi for p in sim.pods.values() for gi, _ in p.held} == gpus


def test_example_runs_without_the_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MIGFIT_TRACE_DIR", str(tmp_path / "nowhere"))
    out_json = tmp_path / "r.json"
    rc = cli.main(["simulate", "--example", "--synthetic", "120", "--policies",
                   "default,fgd,migfit+advisor,bound", "--json", str(out_json)])
    assert rc == 0, capsys.readouterr().err
    summary = json.loads(out_json.read_text())["summary"]
    for figure in ("unallocated_share", "unallocated_share_time_avg",
                   "idle_while_pending_slice_hours", "gpu_pending_p50_s", "gpu_pending_p95_s",
                   "relayouts", "gpus_relaid", "pods_disrupted"):
        for policy in summary:
            assert isinstance(summary[policy][figure]["mean"], float), (policy, figure)


def test_missing_trace_says_where_it_comes_from(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--trace-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "alibaba/clusterdata" in err and "--example" in err


def test_output_paths_are_checked_before_running(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "missing" / "r.html"
    assert cli.main(["simulate", "--example", "--report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "no folder" in err and "Traceback" not in err


def test_mixed_models_and_cpu_only_nodes_in_one_spec(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_file = tmp_path / "mixed.yaml"
    spec_file.write_text(
        "version: v1\nnodes:\n"
        "- {name: a100, count: 3, model: A100-80GB, gpus: 4, cpu: '64', memory: 512Gi, "
        "layout: all-balanced}\n"
        "- {name: h100, count: 2, model: H100-80GB, gpus: 4, cpu: '64', memory: 512Gi, "
        "layout: all-7g.80gb}\n"
        "- {name: a30, count: 2, model: A30-24GB, gpus: 4, cpu: '32', memory: 256Gi, "
        "layout: all-balanced}\n"
        "- {name: cpu, count: 1, model: A100-80GB, gpus: 0, cpu: '64', memory: 256Gi}\n")
    out_json = tmp_path / "r.json"
    rc = cli.main(["simulate", "--cluster", str(spec_file), "--synthetic", "150",
                   "--policies", "default,migfit+advisor,bound,bound-static",
                   "--json", str(out_json)])
    assert rc == 0, capsys.readouterr().err
    summary = json.loads(out_json.read_text())["summary"]
    bound = summary["bound"]["unallocated_share"]["mean"]
    for policy in ("default", "migfit+advisor", "bound-static"):
        assert bound <= summary[policy]["unallocated_share"]["mean"] + 1e-9


@pytest.mark.parametrize("mapping", ["compute", "memory"])
def test_a_whole_trace_gpu_is_a_whole_gpu_on_every_model(
        mapping: workload.Mapping_) -> None:
    """Whole GPUs were asked for by memory alone, one MiB more than the A100's 4g.40gb,
    which an H100's 3g.40gb (40,448 MiB) holds: on a mixed A100/H100 cluster whole-GPU pods
    took half an H100 and every policy beat the bound. Now they ask for all of the
    reference model's compute slices, as many as each of these models has."""
    pod = workload.make_pod(A100, name="whole", cpu_milli=1000, memory_mib=1024, num_gpu=2,
                            gpu_milli=1000, arrival=0.0, duration=1.0, mapping=mapping)
    reqs = workload.gpu_requests(pod)
    assert len(reqs) == 2
    for model_id in ("A100-80GB", "H100-80GB", "H200-141GB", "A100-40GB"):
        model = CATALOG.get(model_id)
        fit = [workload.smallest_fit(model, r) for r in reqs]
        assert all(p is not None and p.compute_slices == model.compute_slices for p in fit)
        assert all(p is not None and p.memory_slices == model.memory_slices for p in fit), \
            (model_id, fit)
