"""The watch source feeding a real Cluster: after each change its counts equal a fresh list's."""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
from typing import Any

import kmock
import pytest

from migfit import cluster, errors, sources, watching
from migfit.commands import status

from .scenery import Start, fresh, store, until, watching_live

A100 = "NVIDIA-A100-SXM4-80GB"


@pytest.fixture()
def sink() -> cluster.Cluster:
    # Overrides the recording sink of conftest.py: the source feeds the real model.
    return cluster.Cluster()


def gpu_node(name: str, rv: str, **alloc: int) -> dict[str, Any]:
    resources = {f"nvidia.com/mig-{p.replace('_', '.')}": str(n) for p, n in alloc.items()}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-node-{name}", "resourceVersion": rv,
                     "labels": {"nvidia.com/gpu.product": A100,
                                "nvidia.com/mig.strategy": "mixed"}},
        "spec": {},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def gpu_pod(name: str, rv: str, *, node: str | None, profile: str = "1g.10gb",
            phase: str = "Running", namespace: str = "ml") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x", "resources": {
        "limits": {f"nvidia.com/mig-{profile}": "1"}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                     "resourceVersion": rv},
        "spec": spec,
        "status": {"phase": phase},
    }


def counts(model: cluster.Cluster) -> dict[str, Any]:
    return {
        "nodes": {s.name: (dict(s.node.allocatable), dict(s.used), dict(s.free),
                           dict(s.overcommit)) for s in model.nodes()},
        "free": {p: dict(model.free_nodes(p)) for p in ("1g.10gb", "3g.40gb")},
        "pending": sorted(p.key for p in model.pending_pods()),
        "pods": sorted(p.key for p in model.pods()),
        "stats": {k: (v.nodes, v.allocatable, v.free)
                  for k, v in model.profile_stats().items()},
    }


async def fresh_counts(server: kmock.KubernetesEmulator) -> dict[str, Any]:
    model = cluster.Cluster()
    model.replace("Node", list((await fresh(server, "Node")).values()))
    model.replace("Pod", list((await fresh(server, "Pod")).values()))
    return counts(model)


async def test_cluster_counts_follow_adds_modifies_and_deletes(
    server: kmock.KubernetesEmulator,
    sink: cluster.Cluster,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, gpu_node("n1", "3", **{"1g_10gb": 3}))
    store(server, gpu_pod("a", "4", node="n1"))
    store(server, gpu_pod("waiting", "5", node=None, phase="Pending"))
    start()
    await source.synced.wait()
    assert sink.synced
    assert counts(sink) == await fresh_counts(server)
    assert sink.free_nodes("1g.10gb") == {"n1": 2}
    await watching_live(source, replayed=3)

    # A new node and pods on it; the waiting pod gets bound; one pod finishes.
    await server.post("/api/v1/nodes", json=gpu_node("n2", "10", **{"3g_40gb": 2}))
    await server.post("/api/v1/namespaces/ml/pods",
                      json=gpu_pod("big", "11", node="n2", profile="3g.40gb"))
    await server.patch("/api/v1/namespaces/ml/pods/waiting",
                       json={"metadata": {"resourceVersion": "12"}, "spec": {"nodeName": "n1"},
                             "status": {"phase": "Running"}})
    await server.patch("/api/v1/namespaces/ml/pods/a",
                       json={"metadata": {"resourceVersion": "13"},
                             "status": {"phase": "Succeeded"}})
    expected = await fresh_counts(server)
    await until(lambda: counts(sink) == expected)
    assert sink.free_nodes("1g.10gb") == {"n1": 2}
    assert sink.free_nodes("3g.40gb") == {"n2": 1}
    assert sink.pending_pods() == []

    # The node shrinks below its use (re-layout), then pods and a node go away.
    await server.patch("/api/v1/nodes/n2", json={
        "metadata": {"resourceVersion": "14"},
        "status": {"allocatable": {"nvidia.com/mig-3g.40gb": "0"}}})
    expected = await fresh_counts(server)
    await until(lambda: counts(sink) == expected)
    n2 = sink.node("n2")
    assert n2 is not None
    assert n2.overcommit == {"3g.40gb": 1}

    await server.delete("/api/v1/namespaces/ml/pods/big")
    await server.delete("/api/v1/namespaces/ml/pods/a")
    await server.delete("/api/v1/nodes/n1")
    expected = await fresh_counts(server)
    await until(lambda: counts(sink) == expected)
    assert sink.node("n1") is None
    assert sorted(p.key for p in sink.pods()) == ["ml/waiting"]
    assert sink.overcommitted() == []


async def test_status_with_kubeconfig_lists_once_and_stops(
    server: kmock.KubernetesEmulator,
    kubeconfig: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store(server, gpu_node("n1", "3", **{"3g_40gb": 2}))
    store(server, gpu_pod("a", "4", node="n1", profile="3g.40gb"))
    parser = argparse.ArgumentParser()
    status.add_arguments(parser)
    args = parser.parse_args(["--kubeconfig", str(kubeconfig), "--json",
                              "--request-timeout", "10s"])
    # status.run drives its own event loop, as the CLI does: give it a thread.
    assert await asyncio.to_thread(status.run, args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nodes"] == [{
        "name": "n1", "model": "A100-80GB", "strategy": "mixed", "config": None,
        "config_state": None, "profiles": {"3g.40gb": {"allocatable": 2, "used": 1, "free": 1}},
        "cordoned": False, "ready": True, "model_error": None, "overcommitted": {}, "notes": [],
    }]
    assert doc["summary"] == {"nodes": 1, "mig_nodes": 1, "free_on_schedulable_nodes": 1,
                              "pending_pods": 0, "unschedulable_pods": 0,
                              "waiting_beside_free": []}


async def test_an_unreadable_kubeconfig_is_reported_before_any_list(tmp_path: pathlib.Path
                                                                     ) -> None:
    model = cluster.Cluster()
    with pytest.raises(errors.ConfigError, match="cannot load kubeconfig"):
        sources.open_source(model, cluster_file=None, kubeconfig=tmp_path / "none",
                            in_cluster=False)
    assert not model.synced
