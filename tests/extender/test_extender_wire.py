"""The HTTP adapter over real sockets: kube-scheduler's extender/v1 wire in both modes."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import hypothesis
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from extender_builders import args, args_nodes, build, node, pod

from migfit import cluster
from migfit.extender import scoring, server

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[web.Application], Awaitable[Client]]

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def _objects() -> list[dict[str, Any]]:
    return [
        node("idle-3g", {"3g.40gb": 2}),
        node("full-1g", {"1g.10gb": 7}),
        *[pod(f"busy-{i}", node_name="full-1g") for i in range(7)],
        node("free-1g", {"1g.10gb": 7}),
        pod("one", node_name="free-1g"),
        node("partly", {"1g.10gb": 7}),
        *[pod(f"p-{i}", node_name="partly") for i in range(4)],
        node("relayout", {"1g.10gb": 7}, state="rebooting"),
    ]


NAMES = ["idle-3g", "full-1g", "free-1g", "partly", "relayout", "ghost"]


@pytest.fixture
def model() -> cluster.Cluster:
    return build(_objects())


@pytest.fixture
async def client(aiohttp_client: Any, model: cluster.Cluster) -> Client:
    app = server.make_app(settings=server.ExtenderSettings(), cluster=model)
    made: Client = await aiohttp_client(app)
    return made


async def _post(client: Client, verb: str, body: Any) -> tuple[int, Any]:
    resp = await client.post(f"/{verb}", data=json.dumps(body),
                             headers={"Content-Type": "application/json"})
    return resp.status, await resp.json()


def _check_partition(result: dict[str, Any], names: list[str], passed: list[str]) -> None:
    assert set(result) == FILTER_KEYS
    failed, unresolvable = result["FailedNodes"], result["FailedAndUnresolvableNodes"]
    outcomes = [*passed, *failed, *unresolvable]
    assert sorted(outcomes) == sorted(set(names))  # exactly one outcome each, none invented
    assert all(isinstance(v, str) and v for v in [*failed.values(), *unresolvable.values()])


async def test_filter_node_names_mode(client: Client) -> None:
    status, result = await _post(client, "filter", args(pod("want"), NAMES))
    assert status == 200
    assert result["Nodes"] is None
    assert result["NodeNames"] == ["free-1g", "partly"]
    assert result["Error"] == ""
    _check_partition(result, NAMES, result["NodeNames"])
    assert result["FailedNodes"] == {"full-1g": "every 1g.10gb instance is in use"}
    assert "re-layout of its idle GPU could provide it" in (
        result["FailedAndUnresolvableNodes"]["idle-3g"])
    assert set(result["FailedAndUnresolvableNodes"]) == {"idle-3g", "relayout", "ghost"}


async def test_filter_nodes_mode_returns_the_node_objects_as_sent(client: Client) -> None:
    sent = [n for n in _objects() if n["kind"] == "Node"]
    sent[2]["metadata"]["labels"]["extra"] = "kept as sent"
    status, result = await _post(client, "filter", args_nodes(pod("want"), sent))
    assert status == 200
    assert result["NodeNames"] is None
    assert result["Nodes"]["kind"] == "NodeList"
    assert result["Nodes"]["metadata"] == {"resourceVersion": "42"}
    items = result["Nodes"]["items"]
    assert [i["metadata"]["name"] for i in items] == ["free-1g", "partly"]
    assert items[0] == sent[2]
    _check_partition(result, [n["metadata"]["name"] for n in sent],
                     [i["metadata"]["name"] for i in items])


async def test_lower_case_keys_are_accepted(client: Client) -> None:
    body = {"pod": pod("want"), "nodes": None, "nodenames": ["free-1g", "full-1g"]}
    status, result = await _post(client, "filter", body)
    assert status == 200
    assert result["NodeNames"] == ["free-1g"]
    status, scores = await _post(client, "prioritize", body)
    assert status == 200
    assert [s["Host"] for s in scores] == ["free-1g", "full-1g"]


async def test_prioritize_scores_every_input_node(client: Client) -> None:
    status, scores = await _post(client, "prioritize", args(pod("want"), NAMES))
    assert status == 200
    assert [s["Host"] for s in scores] == NAMES
    assert all(set(s) == {"Host", "Score"} and 0 <= s["Score"] <= 10 for s in scores)
    by_host = {s["Host"]: s["Score"] for s in scores}
    # best fit on slices (raw strictly higher: test_extender_scoring); the 0..10 integer may
    # round both the same
    assert by_host["partly"] >= by_host["free-1g"] > 0
    assert by_host["ghost"] == by_host["idle-3g"] == 0


async def test_pod_without_mig_request_passes_all(client: Client) -> None:
    status, result = await _post(client, "filter", args(pod("plain", [{}]), NAMES))
    assert status == 200
    assert result["NodeNames"] == NAMES
    assert result["FailedNodes"] == {} and result["FailedAndUnresolvableNodes"] == {}


@pytest.mark.parametrize("body", [
    b"{not json", b"[]", b'{"Pod": 3, "NodeNames": []}', b'{"NodeNames": ["a"]}',
    b'{"Pod": {}, "NodeNames": "a"}', b'{"Pod": {}, "Nodes": {"items": [{}]}}',
    b'{"Pod": {}, "NodeNames": [1, 2]}', b"[" * 100_000,
])
async def test_malformed_bodies_get_400_with_an_error(client: Client, body: bytes) -> None:
    for verb in ("filter", "prioritize"):
        resp = await client.post(f"/{verb}", data=body)
        assert resp.status == 400
        answer = await resp.json()
        assert isinstance(answer["Error"], str) and answer["Error"]
        assert "Traceback" not in answer["Error"]


async def test_body_size_is_limited(aiohttp_client: Any, model: cluster.Cluster) -> None:
    app = server.make_app(settings=server.ExtenderSettings(max_body_bytes=1000), cluster=model)
    small: Client = await aiohttp_client(app)
    resp = await small.post("/filter", data=json.dumps(args(pod("x"), ["a" * 2000])))
    assert resp.status == 413
    assert (await resp.json())["Error"]


async def test_not_ready_until_the_cache_has_synced(aiohttp_client: Any) -> None:
    model = cluster.Cluster()
    app = server.make_app(settings=server.ExtenderSettings(), cluster=model)
    c: Client = await aiohttp_client(app)
    assert (await c.get("/readyz")).status == 503
    assert (await c.get("/healthz")).status == 200
    for verb in ("filter", "prioritize"):
        status, answer = await _post(c, verb, args(pod("x"), ["n"]))
        assert status == 503 and "not synced" in answer["Error"]
    cluster.load_objects(model, _objects())
    assert (await c.get("/readyz")).status == 200
    status, _ = await _post(c, "filter", args(pod("x"), ["free-1g"]))
    assert status == 200


async def test_replicas_on_the_same_state_agree(aiohttp_client: Any) -> None:
    a: Client = await aiohttp_client(server.make_app(
        settings=server.ExtenderSettings(), cluster=build(_objects())))
    b: Client = await aiohttp_client(server.make_app(
        settings=server.ExtenderSettings(), cluster=build(list(reversed(_objects())))))
    for body in (args(pod("want"), NAMES), args(pod("big", [{"3g.40gb": 1}]), NAMES),
                 args_nodes(pod("want"), [n for n in _objects() if n["kind"] == "Node"])):
        for verb in ("filter", "prioritize"):
            assert await _post(a, verb, body) == await _post(b, verb, body)


async def test_metrics_count_calls_and_show_cluster_gauges(client: Client) -> None:
    await _post(client, "filter", args(pod("want"), NAMES))
    await _post(client, "prioritize", args(pod("want"), NAMES))
    resp = await client.get("/metrics")
    assert resp.status == 200
    text = await resp.text()
    assert 'migfit_extender_requests_total{code="200",verb="filter"} 1.0' in text
    assert 'migfit_extender_request_duration_seconds_count{verb="prioritize"} 1.0' in text
    assert ('migfit_extender_filtered_nodes_total{outcome="unresolvable",'
            'reason="not-advertised"} 1.0') in text
    assert 'migfit_extender_free_instances{node="free-1g",profile="1g.10gb"} 6.0' in text
    assert 'migfit_extender_node_fragmentation{node="idle-3g"}' in text


async def test_advice_is_the_advise_json_document(client: Client) -> None:
    # Was "a JSON 404 without the advisor" with its assertions inside an if: it could not fail.
    resp = await client.get("/advice")
    assert resp.status == 200
    doc = await resp.json()
    assert isinstance(doc["recommendations"], list)


async def test_unknown_path_is_json(client: Client) -> None:
    resp = await client.get("/nope")
    assert resp.status == 404
    assert "Error" in await resp.json()


@hypothesis.given(hypothesis.strategies.lists(
    hypothesis.strategies.tuples(hypothesis.strategies.text(), hypothesis.strategies.integers(
        min_value=0, max_value=10)), max_size=20))
def test_host_priority_list_is_exactly_the_json_of_the_scores(
        pairs: list[tuple[str, int]]) -> None:
    scores = [scoring.NodeScore(name, score, True) for name, score in pairs]
    assert json.loads(server.host_priority_list(scores)) == [
        {"Host": name, "Score": score} for name, score in pairs]
