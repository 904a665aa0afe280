"""The webhook's matchCondition, evaluated as CEL: only pods that carry a migfit gpu-memory
annotation (pod-wide or per container, DESIGN §3) reach the webhook."""

from __future__ import annotations

from typing import Any

import pytest
from deploy_manifests import find, needs_kubectl, render

celpy = pytest.importorskip(
    "celpy", reason="cel-python (import celpy) is not installed: the matchCondition expression "
    "is not evaluated; install it with `pip install cel-python`")

pytestmark = needs_kubectl


def _pod(annotations: dict[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "team"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [{"name": "main", "image": "x"}]}}


@pytest.mark.parametrize(("annotations", "reaches"), [
    ({"migfit.io/gpu-memory": "12Gi"}, True),
    ({"migfit.io/gpu-memory.main": "20Gi"}, True),
    ({"migfit.io/gpu-memory.main": "20Gi", "migfit.io/gpu-compute": "2"}, True),
    ({"other.io/x": "y", "migfit.io/gpu-memory": "1Gi"}, True),
    (None, False),
    ({}, False),
    ({"other.io/x": "y"}, False),
    ({"migfit.io/gpu-compute": "2"}, False),
    ({"migfit.io/gpu-media": "true"}, False),
    ({"migfit.io/gpu-memoryx": "1Gi"}, False),
    ({"migfit.io/profile": "1g.10gb"}, False),
])
def test_match_condition(annotations: dict[str, str] | None, reaches: bool) -> None:
    config = find(render("base"), "MutatingWebhookConfiguration", "migfit")
    (condition,) = config["webhooks"][0]["matchConditions"]
    env = celpy.Environment()
    program = env.program(env.compile(condition["expression"]))
    activation = celpy.json_to_cel({"object": _pod(annotations), "oldObject": None})
    assert bool(program.evaluate(activation)) is reaches
