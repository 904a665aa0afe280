"""Builders for the extender tests: Node and Pod objects as the API server returns them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from migfit import cluster

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
) -> dict[str, Any]:
    """A GPU node advertising ``alloc`` (profile -> instances) under ``strategy``."""
    product = PRODUCTS[model]
    labels = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": str(GPU_MEMORY[model]),
        "nvidia.com/mig.strategy": strategy,
        "nvidia.com/mig.config": "custom",
        "nvidia.com/mig.config.state": state,
    }
    resources: dict[str, str] = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if strategy == "single":
        ((profile, count),) = alloc.items()
        labels["nvidia.com/gpu.product"] = f"{product}-MIG-{profile}"
        resources["nvidia.com/gpu"] = str(count)
    else:
        resources["nvidia.com/gpu"] = "0"
        for p, n in alloc.items():
            resources["nvidia.com/mig-" + p.replace("+", ".")] = str(n)
            labels[f"nvidia.com/mig-{p}.count"] = str(n)
    for p, mib in (memory or {}).items():
        labels[f"nvidia.com/mig-{p}.memory"] = str(mib)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1",
                     "labels": labels, "annotations": dict(annotations or {})},
        "spec": {"taints": [dict(t) for t in taints]},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


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
    specs = []
    for i, wants in enumerate(containers):
        limits = {"nvidia.com/mig-" + p.replace("+", "."): str(n) for p, n in wants.items()}
        if gpu and i == 0:
            limits["nvidia.com/gpu"] = str(gpu)
        specs.append({"name": f"c{i}", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                      "resources": {"limits": limits}})
    spec: dict[str, Any] = {"containers": specs, "schedulerName": "default-scheduler"}
    if node_name is not None:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                     "resourceVersion": "1", "annotations": dict(annotations or {})},
        "spec": spec,
        "status": {"phase": phase or ("Running" if node_name else "Pending")},
    }


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
