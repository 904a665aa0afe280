"""Builders for the extender tests: Node and Pod objects as the API server returns them
(through ``migfit.builders``, the one home of Node and Pod builders)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from migfit import builders, cluster, profiles

PRODUCTS = {
    "A100-80GB": "NVIDIA-A100-SXM4-80GB",
    "H100-80GB": "NVIDIA-H100-80GB-HBM3",
    "A30-24GB": "NVIDIA-A30",
    "A100-40GB": "NVIDIA-A100-SXM4-40GB",
}
GPU_MEMORY = {"A100-80GB": 81920, "H100-80GB": 81559, "A30-24GB": 24576, "A100-40GB": 40960}


def node(
    name: str,
    alloc: Mapping[str, int],
    *,
    model: str = "A100-80GB",
    gpus: int = 1,
    memory: Mapping[str, int] | None = None,
    strategy: str = "mixed",
    state: str = "success",
    taints: Sequence[Mapping[str, str]] = (),
    annotations: Mapping[str, str] | None = None,
    cpu: str = "64",
) -> dict[str, Any]:
    """A GPU node advertising ``alloc`` (profile -> instances) under ``strategy``."""
    labels = builders.mig_labels(product=PRODUCTS[model], instances=alloc, strategy=strategy,
                                 gpus=gpus, gpu_memory_mib=GPU_MEMORY[model],
                                 memory_mib=memory, config="custom", config_state=state)
    return builders.node(name, labels=labels,
                         resources=builders.mig_resources(alloc, strategy=strategy),
                         taints=taints, annotations=annotations, cpu=cpu)


def decision(
    containers: Sequence[tuple[str, str, int, Sequence[str]]], *, strategy: str = "mixed"
) -> str:
    """A ``migfit.io/decision`` value from (container, profile, request_mib, models)."""
    return json.dumps({"v": 1, "strategy": strategy, "containers": [
        {"container": c, "request_mib": mib, "profile": p,
         "resource": "nvidia.com/gpu" if strategy == "single" else "nvidia.com/mig-" + p,
         "models": list(models)}
        for c, p, mib, models in containers]})


def pod(
    name: str,
    containers: Sequence[Mapping[str, int]] = ({"1g.10gb": 1},),
    *,
    namespace: str = "default",
    node_name: str | None = None,
    phase: str | None = None,
    annotations: Mapping[str, str] | None = None,
    gpu: int = 0,
) -> dict[str, Any]:
    """A pod whose containers each request the given MIG profiles (or ``gpu`` nvidia.com/gpu)."""
    limits = []
    for i, wants in enumerate(containers):
        one = {profiles.resource_name(p): str(n) for p, n in wants.items()}
        if gpu and i == 0:
            one[profiles.GPU_RESOURCE] = str(gpu)
        limits.append(one)
    return builders.pod(name, limits, namespace=namespace, node_name=node_name, phase=phase,
                        annotations=annotations)


def mig_pod(name: str, profile: str = "1g.10gb", *, cpu: str = "4", count: int = 1,
            node_name: str | None = None) -> dict[str, Any]:
    """A one-container pod requesting ``count`` instances of ``profile`` and ``cpu`` cores."""
    res = {profiles.resource_name(profile): str(count)}
    return builders.pod(name, [res], node_name=node_name, requests=[{"cpu": cpu, **res}])


def build(objects: Sequence[Mapping[str, Any]]) -> cluster.Cluster:
    """A synced cluster model holding ``objects``."""
    model = cluster.Cluster()
    cluster.load_objects(model, objects)
    return model


def args(pod_obj: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """ExtenderArgs exactly as kube-scheduler sends them with nodeCacheCapable: true."""
    return {"Pod": dict(pod_obj), "Nodes": None, "NodeNames": list(names)}


def args_nodes(pod_obj: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """ExtenderArgs with a full NodeList (nodeCacheCapable: false)."""
    return {"Pod": dict(pod_obj),
            "Nodes": {"kind": "NodeList", "apiVersion": "v1",
                      "metadata": {"resourceVersion": "42"}, "items": [dict(n) for n in nodes]},
            "NodeNames": None}
