"""Node and Pod objects as the API server returns them (plain JSON dicts), built from a few facts.

One home for the builders that tests, benchmarks, the synthetic cluster generator and the
simulator need: a MIG node as GPU Feature Discovery and the device plugin label it
(reference/MIG.md 4: ``nvidia.com/gpu.product``/``gpu.memory``/``gpu.count``,
``nvidia.com/mig.strategy``, ``nvidia.com/mig.config`` and its ``.state``, per profile
``nvidia.com/mig-<p>.count`` and ``.memory``; allocatable ``nvidia.com/mig-<p>`` under
``mixed``, ``nvidia.com/gpu`` with a ``-MIG-<p>`` product under ``single``), and a pod whose
containers ask for extended resources. What the objects carry beyond that (the synthetic
generator's realistic noise) stays with their callers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from migfit import keys, profiles

READY = ({"type": "Ready", "status": "True"},)


def mig_labels(
    *,
    product: str,
    instances: Mapping[str, int],
    strategy: str = "mixed",
    gpus: int = 1,
    gpu_memory_mib: int | None = None,
    memory_mib: Mapping[str, int] | None = None,
    config: str | None = None,
    config_state: str | None = None,
    count_labels: bool = True,
) -> dict[str, str]:
    """GFD's and the MIG Manager's labels of a node advertising ``instances`` per profile.

    Under ``single`` (one profile) the product label gets GFD's ``-MIG-<profile>`` suffix.
    ``count_labels``: write ``nvidia.com/mig-<p>.count`` (mixed).
    """
    labels = {keys.LABEL_PRODUCT: product, keys.LABEL_GPU_COUNT: str(gpus),
              keys.LABEL_STRATEGY: strategy}
    if gpu_memory_mib is not None:
        labels[keys.LABEL_GPU_MEMORY] = str(gpu_memory_mib)
    if config is not None:
        labels[keys.LABEL_CONFIG] = config
    if config_state is not None:
        labels[keys.LABEL_CONFIG_STATE] = config_state
    if strategy == "single" and instances:
        ((only, _count),) = instances.items()
        labels[keys.LABEL_PRODUCT] = f"{product}-MIG-{keys.device_name(only)}"
    elif count_labels:
        for p, n in instances.items():
            labels[f"{profiles.resource_name(p)}.count"] = str(n)
    for p, mib in (memory_mib or {}).items():
        labels[keys.mig_memory_label(p)] = str(mib)
    return labels


def mig_resources(instances: Mapping[str, int], *, strategy: str = "mixed",
                  whole_gpus: int | None = 0) -> dict[str, str]:
    """The node's extended resources: ``nvidia.com/mig-<p>`` (mixed) or ``nvidia.com/gpu``
    (single). ``whole_gpus`` (mixed): the ``nvidia.com/gpu`` count, None for none at all."""
    if strategy == "single":
        return {profiles.GPU_RESOURCE: str(sum(instances.values()))}
    out = {} if whole_gpus is None else {profiles.GPU_RESOURCE: str(whole_gpus)}
    for p, n in instances.items():
        out[profiles.resource_name(p)] = str(n)
    return out


def node(
    name: str,
    *,
    labels: Mapping[str, str],
    resources: Mapping[str, str],
    cpu: str = "64",
    memory: str = "512Gi",
    taints: Sequence[Mapping[str, str]] = (),
    annotations: Mapping[str, str] | None = None,
    unschedulable: bool = False,
    uid: str | None = None,
    resource_version: str = "1",
) -> dict[str, Any]:
    """A Ready Node with ``labels`` (plus ``kubernetes.io/hostname``) and ``resources`` as both
    capacity and allocatable."""
    res = {"cpu": cpu, "memory": memory, "pods": "110", **resources}
    spec: dict[str, Any] = {"taints": [dict(t) for t in taints]}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": uid or f"uid-{name}",
                     "resourceVersion": resource_version,
                     "labels": {keys.LABEL_HOSTNAME: name, **labels},
                     "annotations": dict(annotations or {})},
        "spec": spec,
        "status": {"capacity": dict(res), "allocatable": dict(res),
                   "conditions": [dict(c) for c in READY]},
    }


def pod(
    name: str,
    containers: Sequence[Mapping[str, str]] = (),
    *,
    namespace: str = "default",
    node_name: str | None = None,
    phase: str | None = None,
    annotations: Mapping[str, str] | None = None,
    requests: Sequence[Mapping[str, str]] = (),
    unschedulable_since: str | None = None,
    scheduler: str = "default-scheduler",
    image: str = "nvcr.io/nvidia/pytorch:24.05-py3",
    container_names: Sequence[str] = (),
    uid: str | None = None,
) -> dict[str, Any]:
    """A Pod with one container per entry of ``containers`` (its resource limits) and
    ``requests`` (its requests, by position); Running when bound, else Pending.

    ``unschedulable_since`` (RFC 3339) adds the scheduler's PodScheduled=False condition.
    """
    specs = []
    for i in range(max(len(containers), len(requests), 1)):
        resources: dict[str, Any] = {}
        if i < len(containers):
            resources["limits"] = dict(containers[i])
        if i < len(requests):
            resources["requests"] = dict(requests[i])
        specs.append({"name": container_names[i] if i < len(container_names) else f"c{i}",
                      "image": image, "resources": resources})
    spec: dict[str, Any] = {"containers": specs, "schedulerName": scheduler}
    if node_name is not None:
        spec["nodeName"] = node_name
    status: dict[str, Any] = {"phase": phase or ("Running" if node_name else "Pending")}
    if unschedulable_since is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable",
                                 "lastTransitionTime": unschedulable_since}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "uid": uid or f"uid-{namespace}-{name}", "resourceVersion": "1",
                     "annotations": dict(annotations or {})},
        "spec": spec,
        "status": status,
    }
