"""How many MIG instances one pod may ask for, through the real TLS server (review issue 2).

A pod of 16,500 containers, each with its own ``migfit.io/gpu-memory.<container>``, fits in a
1 MiB AdmissionReview: it took 2.7 s of the event loop and got a 6.7 MB answer; from 1,500
containers on, the ``migfit.io/decision`` the webhook adds pushed the pod past the API
server's 256 KiB of annotations (admitted here, rejected there), and the INFO line listing the
profiles was tens of KB. A pod's instances must all be on its one node, which holds 56 at most
(8 GPUs × 7): more than ``reading.MAX_INSTANCES`` is refused before any per-container work.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import webhook_scenery as s
from webhook_scenery import Client, MakeClient

from migfit import profiles, requests
from migfit.webhook import reading

#: kube-apiserver's TotalAnnotationSizeLimitB: keys and values of all annotations together.
API_ANNOTATION_BYTES = 256 * 1024


def many(count: int, *, annotated: int | None = None, name_length: int = 12,
         pod_wide: bool = False, image: str | None = "registry.example/x:1") -> dict[str, Any]:
    """A pod of ``count`` containers, the first ``annotated`` (all by default) each given
    4Gi by its own key; ``pod_wide`` adds the pod-wide key too (for the first container)."""
    names = [f"c{i:05d}-".ljust(name_length, "x") for i in range(count)]
    annotations = {requests.GPU_MEMORY_PREFIX + n: "4Gi"
                   for n in names[:count if annotated is None else annotated]}
    if pod_wide:
        annotations[requests.GPU_MEMORY] = "4Gi"
    return s.pod(annotations, containers=[{"name": n} if image is None
                                          else {"name": n, "image": image} for n in names])


async def post(client: Client, pod: dict[str, Any]) -> tuple[dict[str, Any], int]:
    review = s.review(pod)
    resp = await client.post("/mutate", data=json.dumps(review),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 200
    raw = await resp.read()
    body: dict[str, Any] = json.loads(raw)
    assert body["response"]["uid"] == review["request"]["uid"]
    return body, len(raw)


def annotations_after(pod: dict[str, Any], body: dict[str, Any]) -> dict[str, str]:
    """The pod's annotations once the answer's patch is applied."""
    out = dict(pod["metadata"]["annotations"])
    prefix = "/metadata/annotations/"
    for op in s.patch_of(body):
        if op["path"].startswith(prefix):
            key = op["path"][len(prefix):].replace("~1", "/").replace("~0", "~")
            out[key] = op["value"]
    return out


def test_the_bound_holds_every_instance_the_largest_node_of_any_model_holds() -> None:
    most = max(p.max_instances for m in profiles.builtin().models for p in m.profiles)
    assert most <= reading.GPU_INSTANCES
    assert reading.MAX_INSTANCES >= reading.NODE_GPUS * reading.GPU_INSTANCES


async def test_more_instances_than_the_bound_are_denied_with_what_to_change(
        make_client: MakeClient) -> None:
    client = await make_client()
    bound = reading.MAX_INSTANCES
    # The bound itself is served, the main container counted once when both keys name it.
    for pod in (many(bound), many(bound, pod_wide=True), many(bound + 500, annotated=bound)):
        body, _size = await post(client, pod)
        assert body["response"]["allowed"] is True
        assert len(json.loads(annotations_after(pod, body)[requests.DECISION])[
            "containers"]) == bound
    main_too = many(bound + 1, pod_wide=True)  # the pod-wide key gives the first its memory
    del main_too["metadata"]["annotations"][requests.GPU_MEMORY_PREFIX + "c00000-xxxxx"]
    for pod in (many(bound + 1), main_too):
        body, size = await post(client, pod)
        response = body["response"]
        assert response["allowed"] is False and "patch" not in response
        assert response["status"]["code"] == 403
        message = response["status"]["message"]
        assert f"asks for {bound + 1} MIG instances" in message
        assert f"at most {bound} containers" in message and "split the pod" in message
        assert len(message) < 600 and size < 2048


async def test_a_pod_of_thousands_of_annotated_containers_is_denied_briefly(
        make_client: MakeClient) -> None:
    """16,500 annotated containers in 0.9 MB: one short denial, not a 6.7 MB patch."""
    client = await make_client()
    pod = many(16_500, name_length=6, image=None)
    assert len(json.dumps(s.review(pod))) < 1024 * 1024
    body, size = await post(client, pod)
    assert body["response"]["allowed"] is False
    assert "asks for 16500 MIG instances" in body["response"]["status"]["message"]
    assert size < 2048


async def test_no_admitted_pod_passes_the_api_servers_annotation_limit(
        make_client: MakeClient, caplog: pytest.LogCaptureFixture) -> None:
    """Whatever it admits, the pod's annotations with migfit's stay under 256 KiB (container
    names of 63 characters, the longest a DNS label has), and the answer and its log line
    stay small; the rest is denied."""
    client = await make_client()
    admitted = []
    for count in (1, 8, 64, 65, 1500, 4000):
        pod = many(count, name_length=63)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="migfit.webhook.server"):
            body, size = await post(client, pod)
        lines = [r.getMessage() for r in caplog.records if r.name == "migfit.webhook.server"]
        assert len(lines) == 1 and len(lines[0]) < 1024, count
        if not body["response"]["allowed"]:
            continue
        admitted.append(count)
        after = annotations_after(pod, body)
        assert sum(len(k.encode()) + len(v.encode()) for k, v in after.items()) \
            < API_ANNOTATION_BYTES, count
        assert size < 64 * 1024, count
        assert len(json.loads(after[requests.DECISION])["containers"]) == count
    assert admitted == [1, 8, 64]


async def test_the_log_line_counts_repeated_profiles(
        make_client: MakeClient, caplog: pytest.LogCaptureFixture) -> None:
    client = await make_client()
    bound = reading.MAX_INSTANCES
    pod = many(bound)
    pod["metadata"]["annotations"][requests.GPU_MEMORY_PREFIX + "c00001-xxxxx"] = "30Gi"
    with caplog.at_level(logging.INFO, logger="migfit.webhook.server"):
        body, _size = await post(client, pod)
    assert body["response"]["allowed"] is True
    (line,) = [r.getMessage() for r in caplog.records if r.name == "migfit.webhook.server"]
    assert line == f"patched ml/trainer: 1g.10gb×{bound - 1},3g.40gb"
    profile = annotations_after(pod, body)[requests.PROFILE]
    assert profile.split(",")[:3] == ["1g.10gb", "3g.40gb", "1g.10gb"]  # unchanged: in order


async def test_containers_that_need_different_gpus_are_listed_briefly(
        make_client: MakeClient) -> None:
    """The denial for containers no single node can serve together names a few of them and
    counts the rest (it named every one)."""
    # Usable memory per node from the GFD labels: 1g.10gb+me (the only media profile of
    # either model) holds 9500Mi only on the A100 node, 7g.80gb holds 80000Mi only on the
    # H100 node: no profile of either model holds both kinds of container.
    alloc = {"1g.10gb+me": 1, "7g.80gb": 1}
    view = s.make_cluster(
        s.mig_node("gpu-a", allocatable=alloc, memory={"1g.10gb+me": 10000, "7g.80gb": 79000}),
        s.mig_node("gpu-h", product=s.H100_PRODUCT, allocatable=alloc,
                   memory={"1g.10gb+me": 9000, "7g.80gb": 81000}))
    client = await make_client(view)
    pod = many(20)
    for i, name in enumerate(c["name"] for c in pod["spec"]["containers"]):
        pod["metadata"]["annotations"][requests.GPU_MEMORY_PREFIX + name] = (
            "9500Mi" if i % 2 else "80000Mi")
        if i % 2:
            pod["metadata"]["annotations"][requests.GPU_MEDIA_PREFIX + name] = "true"
    body, _size = await post(client, pod)
    response = body["response"]
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("the containers need GPUs no single node has")
    assert "; and 12 more)" in message and "split the pod" in message
    assert len(message) < 1024


async def test_a_pod_as_large_as_kube_apiserver_stores_is_decided(
        make_client: MakeClient) -> None:
    """etcd stores a pod of up to 1.5 MiB, and kube-apiserver takes request bodies of up to
    3 MiB: such a pod's AdmissionReview (a large inline env) is decided, not refused with a
    413 that the API server, the webhook failing closed, reports as a failed call."""
    client = await make_client()
    env = [{"name": f"SETTING_{i:04d}", "value": "x" * 1000} for i in range(1400)]
    pod = s.pod({requests.GPU_MEMORY: "8Gi"},
                containers=[{"name": "main", "image": "registry.example/x:1", "env": env}])
    assert 1.3 * 2**20 < len(json.dumps(s.review(pod))) < 1.5 * 2**20
    body, _ = await post(client, pod)
    assert body["response"]["allowed"] is True
    assert s.patch_of(body)
