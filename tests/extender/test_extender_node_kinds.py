"""Nodes of kinds the common ones are not (outside checks): without a MIG strategy or a
GPU, with a GPU model the catalog lacks, with time-sliced instances. Through the real
server, as kube-scheduler calls it."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient
from extender_builders import args, build, decision, mig_pod, node

from migfit import builders
from migfit.extender import figures, server

Client = TestClient  # type: ignore[type-arg]


async def _client(aiohttp_client: Any, objects: list[dict[str, Any]]) -> Client:
    app = server.make_app(settings=server.ExtenderSettings(), cluster=build(objects))
    made: Client = await aiohttp_client(app)
    return made


async def _post(client: Client, verb: str, body: dict[str, Any]) -> Any:
    resp = await client.post(f"/{verb}", json=body)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_a_single_strategy_pod_is_told_what_a_node_without_mig_is(
        aiohttp_client: Any) -> None:
    """A node without a GPU, or whose GPUs run without MIG, was said to use the mixed MIG
    strategy."""
    cpu_only = builders.node("cpu-only", labels={}, resources={})
    whole = builders.node("whole", labels={
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8",
        "nvidia.com/mig.strategy": "none"}, resources={"nvidia.com/gpu": "8"})
    client = await _client(aiohttp_client, [cpu_only, whole, node("mixed", {"1g.10gb": 7})])
    single = builders.pod("single", [{"nvidia.com/gpu": "1"}], annotations={
        "migfit.io/decision": decision([("c0", "1g.10gb", 9000, [])], strategy="single")})
    refused = (await _post(client, "filter", args(single, ["cpu-only", "whole", "mixed"])))[
        "FailedAndUnresolvableNodes"]
    assert refused["cpu-only"].startswith("node has no MIG GPU")
    assert refused["whole"].startswith("node advertises no MIG instances, so no 1g.10gb")
    assert refused["mixed"] == ("node uses the mixed MIG strategy; the pod asks for "
                                "nvidia.com/gpu (1g.10gb)")


async def test_a_gpu_model_the_catalog_lacks_is_not_scored_as_scarce(
        aiohttp_client: Any) -> None:
    """Its supply is not counted, so no pod's profile was 'short' there: it lost a point to
    an identical known node with no other pod pending."""
    unknown = node("unknown", {"1g.10gb": 7})
    unknown["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-Foo-9000"
    client = await _client(aiohttp_client, [unknown, node("a100", {"1g.10gb": 7})])
    scores = await _post(client, "prioritize", args(mig_pod("p", cpu="2"), ["unknown", "a100"]))
    assert {s["Host"]: s["Score"] for s in scores} == {"unknown": 7, "a100": 7}


def test_time_sliced_instances_count_their_slices_once() -> None:
    """Seven 1g.10gb shared two ways (14 advertised) are seven slices, and four pods on two
    of them use two: a GPU has eight memory slices, not fourteen."""
    shared = node("shared", {"1g.10gb": 14})
    shared["metadata"]["labels"]["nvidia.com/mig-1g.10gb.replicas"] = "2"
    pods = [mig_pod(f"a{i}", node_name="shared", cpu="1") for i in range(4)]
    index = figures.Index(build([shared, node("plain", {"1g.10gb": 7}), *pods]))
    index.refresh()
    fig = index.figures["shared"]
    assert (fig.total_slices, fig.used_slices) == (7, 2)
    assert index.figures["plain"].total_slices == 7


async def test_a_renamed_shared_resource_is_filtered_as_its_profile(
        aiohttp_client: Any) -> None:
    """Time-slicing with the device plugin's renameByDefault: the node advertises
    nvidia.com/mig-1g.10gb.shared (2 replicas of 7), the pod asks for that name, and both
    are read as 1g.10gb (before, both named an unknown profile, 1g.10gb.shared: the filter
    matched them by name, but the status, the advisor and the webhook knew no such one)."""
    shared = node("shared", {})
    shared["status"]["allocatable"]["nvidia.com/mig-1g.10gb.shared"] = "14"
    shared["status"]["capacity"]["nvidia.com/mig-1g.10gb.shared"] = "14"
    shared["metadata"]["labels"]["nvidia.com/mig-1g.10gb.replicas"] = "2"
    full = node("full", {"3g.40gb": 2})
    held = [builders.pod(f"h{i}", [{"nvidia.com/mig-1g.10gb.shared": "1"}],
                         node_name="shared") for i in range(13)]
    client = await _client(aiohttp_client, [shared, full, *held])
    pod = builders.pod("p", [{"nvidia.com/mig-1g.10gb.shared": "1"}])
    answer = await _post(client, "filter", args(pod, ["shared", "full"]))
    assert answer["NodeNames"] == ["shared"], answer
    held.append(builders.pod("h13", [{"nvidia.com/mig-1g.10gb.shared": "1"}],
                             node_name="shared"))
    client = await _client(aiohttp_client, [shared, full, *held])
    answer = await _post(client, "filter", args(pod, ["shared", "full"]))
    assert answer["NodeNames"] == [], answer  # all 14 held
