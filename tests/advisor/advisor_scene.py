"""Node and Pod objects for the advisor tests (plain API dicts, as a source delivers them)."""

from __future__ import annotations

from typing import Any

from migfit import builders, cluster, profiles

T0 = 1_700_000_000.0
STAMP = "2023-11-14T22:13:20Z"  # T0


def node(name: str, *, product: str = "NVIDIA-A100-SXM4-80GB", gpus: int = 1,
         alloc: dict[str, int], config: str | None = None, state: str = "success",
         taints: list[dict[str, str]] | None = None, annotations: dict[str, str] | None = None,
         unschedulable: bool = False, labels: dict[str, str] | None = None,
         cpu: str = "64", memory: str = "512Gi") -> dict[str, Any]:
    gpu_labels = builders.mig_labels(product=product, instances=alloc, gpus=gpus,
                                     config=config, config_state=state, count_labels=False)
    return builders.node(name, labels={**gpu_labels, **(labels or {})},
                         resources=builders.mig_resources(alloc, whole_gpus=None),
                         taints=taints or (), annotations=annotations,
                         unschedulable=unschedulable, cpu=cpu, memory=memory)


def pod(name: str, profile: str, *, namespace: str = "default", node: str | None = None,
        count: int = 1, since: str | None = STAMP, phase: str | None = None,
        spec: dict[str, Any] | None = None, cpu: str | None = None) -> dict[str, Any]:
    """A pod asking for ``count`` × ``profile``; ``spec`` adds to its spec (nodeSelector,
    affinity, tolerations), ``cpu`` is its cpu request."""
    obj = builders.pod(name, [{profiles.resource_name(profile): str(count)}],
                       namespace=namespace, node_name=node, phase=phase,
                       unschedulable_since=since if node is None else None, image="x",
                       container_names=["main"])
    if cpu is not None:
        obj["spec"]["containers"][0].setdefault("resources", {}).setdefault(
            "requests", {})["cpu"] = cpu
    obj["spec"].update(spec or {})
    return obj


def build(*objects: dict[str, Any]) -> cluster.Cluster:
    c = cluster.Cluster()
    cluster.load_objects(c, objects)
    return c
