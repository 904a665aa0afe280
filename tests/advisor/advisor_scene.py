"""Node and Pod objects for the advisor tests (plain API dicts, as a source delivers them)."""

from __future__ import annotations

from typing import Any

from migfit import builders, cluster, profiles

T0 = 1_700_000_000.0
STAMP = "2023-11-14T22:13:20Z"  # T0


def node(name: str, *, product: str = "NVIDIA-A100-SXM4-80GB", gpus: int = 1,
         alloc: dict[str, int], config: str | None = None, state: str = "success",
         taints: list[dict[str, str]] | None = None, annotations: dict[str, str] | None = None,
         unschedulable: bool = False) -> dict[str, Any]:
    labels = builders.mig_labels(product=product, instances=alloc, gpus=gpus, config=config,
                                 config_state=state, count_labels=False)
    return builders.node(name, labels=labels,
                         resources=builders.mig_resources(alloc, whole_gpus=None),
                         taints=taints or (), annotations=annotations,
                         unschedulable=unschedulable)


def pod(name: str, profile: str, *, namespace: str = "default", node: str | None = None,
        count: int = 1, since: str | None = STAMP, phase: str | None = None) -> dict[str, Any]:
    return builders.pod(name, [{profiles.resource_name(profile): str(count)}],
                        namespace=namespace, node_name=node, phase=phase,
                        unschedulable_since=since if node is None else None, image="x",
                        container_names=["main"])


def build(*objects: dict[str, Any]) -> cluster.Cluster:
    c = cluster.Cluster()
    cluster.load_objects(c, objects)
    return c
