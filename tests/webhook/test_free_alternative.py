"""When every instance of the chosen profile is in use, the warning names a free profile that
also fits and how to ask for it (issue 16 item 11); the choice itself does not change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import webhook_scenery as s
from webhook_scenery import MakeClient

from migfit import requests, sources
from migfit.webhook import decision

ROOT = Path(__file__).resolve().parents[2]


def running_pod(name: str, node: str, resource: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                "limits": {resource: "1"}, "requests": {resource: "1"}}}]},
            "status": {"phase": "Running"}}


async def test_the_example_names_the_free_1g18gb_and_the_request_that_gets_it(
        make_client: MakeClient) -> None:
    client = await make_client(sources.load_snapshot(ROOT / "examples" / "cluster.yaml"))
    review = json.loads((ROOT / "examples/requests/create-8gi-in-use.json").read_text())
    body = await (await client.post("/mutate", json=review)).json()
    warning = " ".join(body["response"]["warnings"])
    assert "every 1g.10gb instance is in use" in warning
    assert "1g.18gb (16Gi) also fits and has 5 free" in warning
    assert "ask for it with migfit.io/gpu-memory: 10Gi" in warning
    assert s.patch_of(body)[-2]["value"] == "1g.10gb"  # still the smallest that fits

    # Following the advice gets the free profile.
    pod = review["request"]["object"]
    pod["metadata"]["annotations"][requests.GPU_MEMORY] = "10Gi"
    body = await (await client.post("/mutate", json=review)).json()
    assert s.patch_of(body)[-2]["value"] == "1g.18gb"
    assert not any("in use" in w for w in body["response"].get("warnings", []))


def test_a_compute_hint_when_the_free_profile_has_more_slices() -> None:
    view = s.make_cluster(s.mig_node("gpu-a", allocatable={"1g.10gb": 1, "2g.20gb": 1}),
                          running_pod("busy", "gpu-a", "nvidia.com/mig-1g.10gb"))
    verdict = decision.decide_pod(s.pod({requests.GPU_MEMORY: "8Gi"}),
                                  supply=s.supply_of(view), policy=s.POLICY)
    assert verdict.profiles == ("1g.10gb",)
    (warning,) = [w for w in verdict.warnings if "in use" in w]
    assert 'ask for it with migfit.io/gpu-compute: "2"' in warning
    hinted = decision.decide_pod(
        s.pod({requests.GPU_MEMORY: "8Gi", requests.GPU_COMPUTE: "2"}),
        supply=s.supply_of(view), policy=s.POLICY)
    assert hinted.profiles == ("2g.20gb",)


def test_no_alternative_is_named_when_none_is_free() -> None:
    view = s.make_cluster(s.mig_node("gpu-a", allocatable={"1g.10gb": 1}),
                          running_pod("busy", "gpu-a", "nvidia.com/mig-1g.10gb"))
    verdict = decision.decide_pod(s.pod({requests.GPU_MEMORY: "8Gi"}),
                                  supply=s.supply_of(view), policy=s.POLICY)
    (warning,) = [w for w in verdict.warnings if "in use" in w]
    assert warning.endswith("the pod waits for one to be freed")
