"""A small cluster for the defragmentation tests: two busy A100 nodes and a pod needing a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from migfit import builders, profiles

T0 = 1_700_000_000.0
STAMP = "2023-11-14T22:13:20Z"  # T0
NOW = T0 + 3600


def node(name: str, alloc: dict[str, int], gpus: int = 2) -> dict[str, Any]:
    labels = builders.mig_labels(product="NVIDIA-A100-SXM4-80GB", instances=alloc, gpus=gpus,
                                 config_state="success", count_labels=False)
    return builders.node(name, labels=labels,
                         resources=builders.mig_resources(alloc, whole_gpus=None))


def pod(name: str, profile: str, *, node: str | None = None, namespace: str = "ml",
        owner: tuple[str, str] | None = ("ReplicaSet", "train-5d8f"),
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    obj = builders.pod(name, [{profiles.resource_name(profile): "1"}], namespace=namespace,
                       node_name=node, unschedulable_since=STAMP if node is None else None,
                       image="x", container_names=["main"])
    obj["metadata"]["labels"] = dict(labels or {"app": "train"})
    if owner is not None:
        obj["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "u-" + owner[1],
             "controller": True, "blockOwnerDeletion": True}]
    return obj


def pdb(name: str, *, allowed: int, labels: dict[str, str], namespace: str = "ml"
        ) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1 + allowed,
                       "desiredHealthy": 1, "expectedPods": 1 + allowed,
                       "observedGeneration": 1}}


def objects(*, train_owner: tuple[str, str] | None = ("ReplicaSet", "train-5d8f"),
            train_allowed: int = 2) -> list[dict[str, Any]]:
    """gpu-a: two GPUs of 2 × 3g.40gb, one in use on each (ml/train-a, ml/train-b);
    gpu-b: the same with one in use (ml/db-0, a StatefulSet's, PDB allows 0);
    ml/big waits for a 7g.80gb (a whole GPU)."""
    return [
        node("gpu-a", {"3g.40gb": 4}),
        node("gpu-b", {"3g.40gb": 4}),
        pod("train-a", "3g.40gb", node="gpu-a", owner=train_owner),
        pod("train-b", "3g.40gb", node="gpu-a", owner=train_owner),
        pod("db-0", "3g.40gb", node="gpu-b", owner=("StatefulSet", "db"),
            labels={"app": "db"}),
        pod("big", "7g.80gb", labels={"app": "big"}),
        pdb("train", allowed=train_allowed, labels={"app": "train"}),
        pdb("db", allowed=0, labels={"app": "db"}),
    ]


def write(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items},
                                   sort_keys=False), encoding="utf-8")
    return path
