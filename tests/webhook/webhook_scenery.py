"""Builders for the webhook tests: MIG nodes, pods and AdmissionReviews as the API sends them."""

from __future__ import annotations

import base64
import copy
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from migfit import builders, cluster, profiles
from migfit.webhook import decision, view

A100_PRODUCT = "NVIDIA-A100-SXM4-80GB"
H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"
MEMORY = {"1g.10gb": 9728, "2g.20gb": 19968, "3g.40gb": 40192}


def mig_node(
    name: str,
    *,
    product: str = A100_PRODUCT,
    allocatable: dict[str, int] | None = None,
    memory: dict[str, int] | None = None,
    strategy: str = "mixed",
    unschedulable: bool = False,
    gpus: int = 1,
) -> dict[str, Any]:
    """A GPU node as GFD and the device plugin label it (migfit.builders); ``gpus``: its
    nvidia.com/gpu.count label."""
    alloc = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1} if allocatable is None else allocatable
    mem = MEMORY if memory is None else memory
    if strategy == "single":
        ((prof, _count),) = alloc.items()
        labels = builders.mig_labels(product=product, instances=alloc, strategy="single",
                                     gpu_memory_mib=mem.get(prof, 0), gpus=gpus)
    else:
        labels = builders.mig_labels(product=product, instances=alloc, count_labels=False,
                                     memory_mib={p: mem[p] for p in alloc if p in mem},
                                     gpus=gpus)
    return builders.node(name, labels=labels, cpu="32", memory="256Gi",
                         resources=builders.mig_resources(alloc, strategy=strategy,
                                                          whole_gpus=None),
                         unschedulable=unschedulable)


def make_cluster(*nodes: dict[str, Any]) -> cluster.Cluster:
    c = cluster.Cluster(profiles.builtin())
    cluster.load_objects(c, list(nodes) or [mig_node("gpu-a"), mig_node("gpu-b")])
    return c


def supply_of(c: cluster.Cluster) -> view.Supply:
    return view.SupplyTracker(c).supply()


def bound_pod(node: str, *, uid: str, profile: str | None = None,
              cpu: str | None = None) -> dict[str, Any]:
    """A Running pod on ``node`` holding one ``profile`` instance, or ``cpu`` cores."""
    requests_ = {"limits": {f"nvidia.com/mig-{profile}": "1"}} if profile else {
        "requests": {"cpu": cpu or "1"}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"bound-{uid}", "namespace": "ml", "uid": uid},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": requests_}]},
            "status": {"phase": "Running"}}


def pod(
    annotations: dict[str, str] | None = None,
    *,
    containers: list[Any] | None = None,
    affinity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": containers if containers is not None
        else [{"name": "main", "image": "registry.example/train:1"}],
    }
    if affinity is not None:
        spec["affinity"] = affinity
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml",
                     "annotations": dict(annotations or {})},
        "spec": spec,
    }


def review(obj: dict[str, Any], *, operation: str = "CREATE",
           dry_run: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": obj.get("metadata", {}).get("name", ""),
            "namespace": "ml",
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": copy.deepcopy(obj),
            "oldObject": copy.deepcopy(obj) if operation in ("UPDATE", "DELETE") else None,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


# The smallest-fitting rule these tests describe; the contended choice (the default ``free``)
# is tested in test_choice_contention.py.
POLICY = decision.Policy(fallback_models=(profiles.builtin().get("A100-80GB"),),
                         contention="smallest")


Client = TestClient[Any, Any]
MakeClient = Callable[..., Awaitable[Client]]


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The decoded JSON Patch of an AdmissionReview response ([] when there is none)."""
    body = response["response"]
    if "patch" not in body:
        assert "patchType" not in body
        return []
    assert body["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(body["patch"]))
    return ops
