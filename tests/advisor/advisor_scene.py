"""Node and Pod objects for the advisor tests (plain API dicts, as a source delivers them)."""

from __future__ import annotations

from typing import Any

from migfit import cluster

T0 = 1_700_000_000.0
STAMP = "2023-11-14T22:13:20Z"  # T0


def node(name: str, *, product: str = "NVIDIA-A100-SXM4-80GB", gpus: int = 1,
         alloc: dict[str, int], config: str | None = None, state: str = "success",
         taints: list[dict[str, str]] | None = None, annotations: dict[str, str] | None = None,
         unschedulable: bool = False) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus),
              "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config.state": state}
    if config:
        labels["nvidia.com/mig.config"] = config
    res = {f"nvidia.com/mig-{p}": str(n) for p, n in alloc.items()}
    res.update({"cpu": "64", "memory": "512Gi"})
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1",
                     "labels": labels, "annotations": annotations or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"capacity": dict(res), "allocatable": dict(res),
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(name: str, profile: str, *, namespace: str = "default", node: str | None = None,
        count: int = 1, since: str | None = STAMP, phase: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase or ("Running" if node else "Pending")}
    if node is None and since is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable", "lastTransitionTime": since}]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x", "resources": {
        "limits": {f"nvidia.com/mig-{profile}": str(count)}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                         "resourceVersion": "1"},
            "spec": spec, "status": status}


def build(*objects: dict[str, Any]) -> cluster.Cluster:
    c = cluster.Cluster()
    cluster.load_objects(c, objects)
    return c
