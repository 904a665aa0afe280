"""Pods without GPU requests still take a GPU node's cpu and memory; the cache sums them per
node (``NodeState.other_*``), and the demand mix counts the GPU pods by class."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from migfit import cluster, errors, snapshots
from tests.migfit.test_cluster import container, mig, node, pod


def cpu_pod(name: str, cpu: str = "4", memory: str = "8Gi", *, node_name: str | None = "n1",
            phase: str = "Running") -> dict[str, Any]:
    return pod(name, node_name=node_name, phase=phase,
               containers=[container(requests={"cpu": cpu, "memory": memory})])


def state(model: cluster.Cluster, name: str = "n1") -> tuple[int, int]:
    s = model.node(name)
    assert s is not None
    return s.other_cpu_milli, s.other_memory_bytes


def test_cpu_only_pods_are_summed_per_node_and_leave_when_they_end() -> None:
    model = cluster.Cluster()
    model.apply("Node", "ADDED", node("n1"))
    seen: list[str] = []
    model.add_listener(seen.append)
    model.apply("Pod", "ADDED", cpu_pod("a", "4", "8Gi"))
    model.apply("Pod", "ADDED", cpu_pod("b", "500m", "1Gi"))
    assert state(model) == (4500, 9 * 2**30)
    assert seen == ["n1", "n1"]  # the node's figures are rebuilt: the extender re-reads it
    assert model.pod("uid-a") is None  # no PodRecord: only the sums are kept
    model.apply("Pod", "MODIFIED", cpu_pod("a", "4", "8Gi", phase="Succeeded"))
    assert state(model) == (500, 2**30)
    model.apply("Pod", "DELETED", cpu_pod("b"))
    assert state(model) == (0, 0)


def test_pending_pods_take_no_room_and_pods_listed_before_their_node_count() -> None:
    model = cluster.Cluster()
    model.apply("Pod", "ADDED", cpu_pod("early", node_name="n2"))  # its node is listed later
    model.apply("Node", "ADDED", node("n1"))
    model.apply("Pod", "ADDED", cpu_pod("p", node_name=None, phase="Pending"))
    assert state(model) == (0, 0)
    model.apply("Pod", "MODIFIED", cpu_pod("p", node_name="n1"))  # bound now
    assert state(model) == (4000, 8 * 2**30)
    model.apply("Node", "ADDED", node("n2"))
    assert state(model, "n2") == (4000, 8 * 2**30)


def test_a_full_list_drops_cpu_pods_it_no_longer_has_and_gpu_pods_are_not_counted_twice() -> None:
    model = cluster.Cluster()
    model.replace("Node", [node("n1")])
    model.replace("Pod", [cpu_pod("a"), cpu_pod("b"), pod("g")])
    assert state(model) == (8000, 16 * 2**30)
    model.replace("Pod", [cpu_pod("b"), pod("g")])
    assert state(model) == (4000, 8 * 2**30)
    model.replace("Pod", [pod("g")])
    assert state(model) == (0, 0)


def test_the_demand_mix_counts_pending_and_bound_gpu_pods_by_class() -> None:
    model = cluster.Cluster()
    model.apply("Node", "ADDED", node("n1", alloc={"1g.10gb": 7}))
    small = [container(requests={"cpu": "2", **mig("1g.10gb")}, limits=mig("1g.10gb"))]
    model.apply("Pod", "ADDED", pod("a", containers=small))
    model.apply("Pod", "ADDED", pod("b", node_name=None, phase="Pending", containers=small))
    model.apply("Pod", "ADDED", pod("c"))  # 3g.40gb, bound
    model.apply("Pod", "ADDED", cpu_pod("x"))
    classes = dict(model.pod_classes())
    assert classes == {((("nvidia.com/mig-1g.10gb", 1),), None, 2000, 0): 2,
                       ((("nvidia.com/mig-3g.40gb", 1),), None, 0, 0): 1}
    before = model.classes_generation
    model.apply("Pod", "MODIFIED", pod("c", phase="Succeeded"))
    assert model.classes_generation != before
    assert sum(model.pod_classes().values()) == 2


def _file(tmp_path: Path, objects: list[dict[str, Any]]) -> Path:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return path


def test_a_cluster_file_counts_cpu_pods_as_the_watch_does(tmp_path: Path) -> None:
    # The file source (--cluster FILE: advise, explain, serve) kept only the GPU pods: a node
    # filled by ordinary pods looked empty, and re-layouts were advised for pods it could not
    # hold. The same objects now give the same sums either way, and a reload drops a pod.
    objects = [node("n1"), cpu_pod("a", "4", "8Gi"), cpu_pod("b", "500m", "1Gi"), pod("g"),
               cpu_pod("done", phase="Succeeded"), cpu_pod("p", node_name=None)]
    watched = cluster.Cluster()
    watched.replace("Node", [node("n1")])
    watched.replace("Pod", objects[1:])
    loaded = snapshots.load(_file(tmp_path, objects))
    assert state(loaded) == state(watched) == (4500, 9 * 2**30)
    snapshots.install(loaded, snapshots.read(_file(tmp_path, objects[:2] + objects[3:])))
    assert state(loaded) == (4000, 8 * 2**30)


@pytest.mark.parametrize(("where", "value"), [("pod", "63 cores"), ("pod", "-1"),
                                              ("node", "lots")])
def test_a_cluster_file_with_a_cpu_that_is_no_quantity_is_refused(
        tmp_path: Path, where: str, value: str) -> None:
    # Read as 0 before: a node full of "63 cores" of pods took re-layouts it had no room for.
    objects = [node("n1"), cpu_pod("a", "4")]
    if where == "pod":
        objects[1] = cpu_pod("a", value)
    else:
        objects[0]["status"]["allocatable"]["cpu"] = value
    with pytest.raises(errors.ConfigError, match=r"\['cpu'\]"):
        snapshots.read(_file(tmp_path, objects))
