"""Node and Pod objects as the API server would show them, so the cluster model decodes them.

Nodes carry what GPU Feature Discovery and the device plugin (mixed strategy) write: the
``nvidia.com/gpu.product``/``gpu.memory``/``gpu.count`` labels, ``nvidia.com/mig.strategy``,
``nvidia.com/mig.config`` and its ``.state``, ``nvidia.com/mig-<p>.memory`` per profile, and
allocatable ``nvidia.com/mig-<p>`` counts from the node's current layouts (reference/MIG.md 4).
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from migfit import errors, keys, profiles

NAMESPACE = "sim"
SCHEDULER = "default-scheduler"
# The trace's own GPU model of a node (its node list's ``model`` column), for ``gpu_spec``.
LABEL_TRACE_MODEL = "sim.migfit.io/trace-model"
PRODUCTS: dict[str, str] = {
    "A100-40GB": "NVIDIA-A100-SXM4-40GB",
    "A100-80GB": "NVIDIA-A100-SXM4-80GB",
    "A30-24GB": "NVIDIA-A30",
    "H100-80GB": "NVIDIA-H100-80GB-HBM3",
}


def timestamp(epoch: float) -> str:
    """RFC 3339 UTC, as the API server writes times; a UsageError past the year 9999 (the
    inputs' checks keep a replay well before it: ``cli.CLOCK_LIMIT_S``)."""
    try:
        when = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    except (ValueError, OverflowError, OSError):
        raise errors.UsageError(
            f"the simulated clock reached {epoch:.4g} s after 1970, past the last time a "
            f"Kubernetes timestamp holds (year 9999): use shorter times (--arrival-scale, "
            f"--fill-interval, the seconds flags, the pod list's times)") from None
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def product_label(model: profiles.GpuModel) -> str:
    """A ``nvidia.com/gpu.product`` value that resolves to ``model`` in the catalog."""
    known = PRODUCTS.get(model.id)
    if known is not None:
        return known
    return "NVIDIA-" + model.id


def node_object(
    *,
    name: str,
    model: profiles.GpuModel | None,
    gpu_layouts: Sequence[Iterable[str]],
    cpu_milli: int,
    memory_mib: int,
    config: str,
    config_state: str = "success",
    taints: Sequence[Mapping[str, str]] = (),
    trace_model: str = "",
) -> dict[str, Any]:
    """A Node; ``model`` None (or no GPU) is a cpu-only node, with no NVIDIA label at all."""
    counts: Counter[str] = Counter()
    for lay in gpu_layouts:
        counts.update(lay)
    labels = {keys.LABEL_HOSTNAME: name}
    if trace_model:
        labels[LABEL_TRACE_MODEL] = trace_model
    resources: dict[str, str] = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi",
                                 "pods": "110"}
    if model is None or not gpu_layouts:
        return _node(name, labels, resources, taints)
    labels.update({
        keys.LABEL_PRODUCT: product_label(model),
        keys.LABEL_GPU_MEMORY: str(model.memory_mib),
        keys.LABEL_GPU_COUNT: str(len(gpu_layouts)),
        keys.LABEL_STRATEGY: "mixed",
        keys.LABEL_CONFIG: config,
        keys.LABEL_CONFIG_STATE: config_state,
    })
    for p, n in sorted(counts.items()):
        # GFD's labels and the device plugin's resource share one spelling (`.me` for `+me`).
        resource = profiles.resource_name(p)
        labels[f"{resource}.count"] = str(n)
        labels[resource + keys.MIG_MEMORY_LABEL_SUFFIX] = str(model.profile(p).memory_mib)
        resources[resource] = str(n)
    return _node(name, labels, resources, taints)


def _node(name: str, labels: dict[str, str], resources: dict[str, str],
          taints: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {
            "capacity": dict(resources),
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def container_names(containers: int) -> list[str]:
    """The names of a simulated pod's containers: ``main``, or ``gpu0``… when it has several
    (each holds one instance; the per-container annotation keys name them)."""
    n = max(1, containers)
    return [f"gpu{i}" for i in range(n)] if n > 1 else ["main"]


def pod_object(
    *,
    name: str,
    cpu_milli: int,
    memory_mib: int,
    annotations: Mapping[str, str],
    containers: int,
    profile_per_container: Sequence[str] = (),
    node: str | None = None,
    decision: Mapping[str, Any] | None = None,
    created: float | None = None,
) -> dict[str, Any]:
    """A pod; with ``profile_per_container`` it is the webhook's mutated pod."""
    conts: list[dict[str, Any]] = []
    for i, cname in enumerate(container_names(containers)):
        req: dict[str, str] = {}
        if i == 0:
            req = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi"}
        if i < len(profile_per_container):
            req[profiles.resource_name(profile_per_container[i])] = "1"
        lim = {k: v for k, v in req.items() if k.startswith(profiles.RESOURCE_PREFIX)}
        conts.append({"name": cname, "image": "sim",
                      "resources": {"requests": req, "limits": lim}})
    ann = dict(annotations)
    if profile_per_container:
        ann[keys.PROFILE] = profile_per_container[0]
    if decision is not None:
        ann[keys.DECISION] = json.dumps(decision, sort_keys=True)
    spec: dict[str, Any] = {"schedulerName": SCHEDULER, "containers": conts}
    if node is not None:
        spec["nodeName"] = node
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}",
                            "annotations": ann}
    if created is not None:
        meta["creationTimestamp"] = timestamp(created)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }
