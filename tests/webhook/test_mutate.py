"""POST /mutate over real TLS: AdmissionReview v1 in and out, patches that apply and validate."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import webhook_scenery as s
from webhook_scenery import Client, MakeClient

from migfit import cluster, profiles, requests
from migfit.webhook import decision

REALISTIC_CONTAINERS: list[dict[str, Any]] = [
    {"name": "trainer", "image": "registry.example/train:1.4",
     "env": [{"name": "EPOCHS", "value": "3"}],
     "volumeMounts": [{"name": "data", "mountPath": "/data"}],
     "resources": {"limits": {"cpu": "4", "memory": "32Gi"},
                   "requests": {"cpu": "2", "memory": "16Gi"}}},
    {"name": "log-shipper", "image": "fluent/fluent-bit:3"},
]


async def mutate(client: Client, review: dict[str, Any], *,
                 query: str = "?timeout=10s") -> dict[str, Any]:
    resp = await client.post(f"/mutate{query}", json=review)
    assert resp.status == 200, await resp.text()
    assert resp.content_type == "application/json"
    body: dict[str, Any] = await resp.json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == review["request"]["uid"]
    return body


def patched(pod: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(pod), s.patch_of(body))
    return out


def validate(pod: dict[str, Any]) -> None:
    """Schema validation, plus the rule that extended-resource requests equal limits."""
    for c in pod["spec"]["containers"]:
        c.setdefault("image", "registry.example/x:1")
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    for c in pod["spec"]["containers"]:
        res = c.get("resources") or {}
        limits, reqs = res.get("limits") or {}, res.get("requests") or {}
        for name in set(limits) | set(reqs):
            if "/" in name:
                assert name in limits, f"Limit must be set for {name}"
                assert limits[name] == reqs.get(name, limits[name])


@pytest.mark.parametrize(("memory", "resource"), [
    ("8Gi", "nvidia.com/mig-1g.10gb"),
    ("10Gi", "nvidia.com/mig-2g.20gb"),
    ("12Gi", "nvidia.com/mig-2g.20gb"),
    ("30Gi", "nvidia.com/mig-3g.40gb"),
])
async def test_seed_cases(make_client: MakeClient, memory: str, resource: str) -> None:
    client = await make_client()
    pod = s.pod({requests.GPU_MEMORY: memory}, containers=copy.deepcopy(REALISTIC_CONTAINERS))
    body = await mutate(client, s.review(pod))
    assert body["response"]["allowed"] is True
    out = patched(pod, body)
    res = out["spec"]["containers"][0]["resources"]
    assert res["limits"] == {"cpu": "4", "memory": "32Gi", resource: "1"}
    assert res["requests"] == {"cpu": "2", "memory": "16Gi", resource: "1"}
    assert "resources" not in out["spec"]["containers"][1]
    validate(out)


async def test_100gi_is_denied_naming_the_largest_profile(make_client: MakeClient) -> None:
    client = await make_client()
    body = await mutate(client, s.review(s.pod({requests.GPU_MEMORY: "100Gi"})))
    response = body["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert "7g.80gb" in response["status"]["message"]
    assert "patch" not in response and "patchType" not in response


async def test_unadvertised_profile_is_patched_with_a_warning(make_client: MakeClient) -> None:
    client = await make_client()
    pod = s.pod({requests.GPU_MEMORY: "64Gi"})
    body = await mutate(client, s.review(pod))
    assert body["response"]["allowed"] is True
    assert any("no node advertises 7g.80gb" in w for w in body["response"]["warnings"])
    assert patched(pod, body)["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/mig-7g.80gb": "1"}


async def test_container_without_resources_and_with_cpu_limits(make_client: MakeClient) -> None:
    client = await make_client()
    containers = [{"name": "a"}, {"name": "b", "resources": {"limits": {"cpu": "500m"}}}]
    pod = s.pod({requests.GPU_MEMORY_PREFIX + "a": "8Gi", requests.GPU_MEMORY_PREFIX + "b": "8Gi"},
                containers=containers)
    out = patched(pod, await mutate(client, s.review(pod)))
    assert out["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/mig-1g.10gb": "1"}, "requests": {"nvidia.com/mig-1g.10gb": "1"}}
    assert out["spec"]["containers"][1]["resources"] == {
        "limits": {"cpu": "500m", "nvidia.com/mig-1g.10gb": "1"},
        "requests": {"nvidia.com/mig-1g.10gb": "1"}}
    validate(out)


async def test_reinvocation_changes_nothing(make_client: MakeClient) -> None:
    client = await make_client()
    pod = s.pod({requests.GPU_MEMORY: "12Gi"}, containers=copy.deepcopy(REALISTIC_CONTAINERS))
    once = patched(pod, await mutate(client, s.review(pod)))
    body = await mutate(client, s.review(once))
    assert body["response"]["allowed"] is True
    assert s.patch_of(body) == []


async def test_single_strategy_over_http(make_client: MakeClient) -> None:
    view = s.make_cluster(s.mig_node("gpu-s", strategy="single", allocatable={"3g.40gb": 2}))
    client = await make_client(view)
    pod = s.pod({requests.GPU_MEMORY: "30Gi"})
    out = patched(pod, await mutate(client, s.review(pod)))
    assert out["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"][0]["values"] == ["NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"]
    validate(out)


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
async def test_other_operations_pass_untouched(make_client: MakeClient, operation: str) -> None:
    client = await make_client()
    body = await mutate(client, s.review(s.pod({requests.GPU_MEMORY: "8Gi"}),
                                         operation=operation))
    assert body["response"] == {"uid": body["response"]["uid"], "allowed": True}


async def test_unannotated_pods_get_no_patch(make_client: MakeClient) -> None:
    client = await make_client()
    body = await mutate(client, s.review(s.pod({"app": "web"})))
    assert body["response"] == {"uid": body["response"]["uid"], "allowed": True}


async def test_dry_run_is_decided_the_same(make_client: MakeClient) -> None:
    client = await make_client()
    body = await mutate(client, s.review(s.pod({requests.GPU_MEMORY: "8Gi"}), dry_run=True))
    assert body["response"]["allowed"] is True and s.patch_of(body)
    metrics = await (await client.get("/metrics")).text()
    assert ('migfit_webhook_admissions_total{dry_run="true",outcome="patched",'
            'profile="1g.10gb"} 1.0') in metrics


async def test_a_pod_of_several_profiles_is_counted_under_one_bounded_label(
        make_client: MakeClient) -> None:
    """Containers given different profiles count under profile="several": a label made of
    their combination would grow a series per combination."""
    client = await make_client()
    containers = [{"name": n, "image": "registry.example/train:1"} for n in ("a", "b")]
    body = await mutate(client, s.review(s.pod(
        {f"{requests.GPU_MEMORY}.a": "5Gi", f"{requests.GPU_MEMORY}.b": "30Gi"},
        containers=containers)))
    assert body["response"]["allowed"] is True and s.patch_of(body)
    metrics = await (await client.get("/metrics")).text()
    assert ('migfit_webhook_admissions_total{dry_run="false",outcome="patched",'
            'profile="several"} 1.0') in metrics
    assert "profile=\"1g.10gb," not in metrics and 'profile="1g.10gb,' not in metrics


async def test_without_a_cluster_view_it_decides_from_gpu_models(make_client: MakeClient) -> None:
    client = await make_client(cluster.Cluster(profiles.builtin()))  # never synced
    body = await mutate(client, s.review(s.pod({requests.GPU_MEMORY: "12Gi"})))
    assert body["response"]["allowed"] is True
    assert any("no cluster view" in w for w in body["response"]["warnings"])
    ready = await client.get("/readyz")
    assert ready.status == 200 and (await ready.json())["clusterView"] == "unavailable"


@pytest.mark.parametrize("body", [
    b"", b"{", b"[]", b'"x"', b"null",
    b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}',
    b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
    b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 3}}',
    b"[" * 100000,
])
async def test_malformed_bodies_get_a_400_json_error(make_client: MakeClient, body: bytes) -> None:
    client = await make_client()
    resp = await client.post("/mutate", data=body, headers={"Content-Type": "application/json"})
    assert resp.status == 400
    error = await resp.json()
    assert error["status"] == 400 and "Traceback" not in error["error"]


async def test_a_review_with_a_bad_pod_is_answered_not_crashed(make_client: MakeClient) -> None:
    client = await make_client()
    review = s.review(s.pod({requests.GPU_MEMORY: "8Gi"}))
    review["request"]["object"]["spec"]["containers"] = "nope"
    body = await mutate(client, review)
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["code"] == 400


async def test_too_large_bodies_get_a_413(make_client: MakeClient) -> None:
    client = await make_client(max_body_bytes=64 * 1024)
    review = s.review(s.pod({requests.GPU_MEMORY: "8Gi", "big": "x" * 100_000}))
    resp = await client.post("/mutate", data=json.dumps(review),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 413
    assert "larger than 65536 bytes" in (await resp.json())["error"]

    async def chunks() -> Any:  # no Content-Length: the limit holds while reading
        for _ in range(100):
            yield b"x" * 1024
    resp = await client.post("/mutate", data=chunks())
    assert resp.status == 413


async def test_health_metrics_and_unknown_paths(make_client: MakeClient) -> None:
    client = await make_client()
    assert (await client.get("/healthz")).status == 200
    ready = await client.get("/readyz")
    assert ready.status == 200 and (await ready.json())["clusterView"] == "synced"
    await mutate(client, s.review(s.pod({requests.GPU_MEMORY: "100Gi"})))
    resp = await client.get("/metrics")
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")
    text = await resp.text()
    assert 'migfit_webhook_admissions_total{dry_run="false",outcome="denied",profile=""} 1.0' \
        in text
    assert "migfit_webhook_admission_duration_seconds_bucket" in text
    assert "migfit_webhook_cluster_view 1.0" in text
    missing = await client.get("/nope")
    assert missing.status == 404 and (await missing.json())["status"] == 404
    wrong = await client.get("/mutate")
    assert wrong.status == 405


async def test_plain_http_is_refused(make_client: MakeClient) -> None:
    import aiohttp
    client = await make_client()
    url = str(client.make_url("/healthz")).replace("https://", "http://")
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(url) as resp:
                await resp.read()


def test_policy_default_is_label_mode() -> None:
    assert decision.Policy().memory_match == "label"
