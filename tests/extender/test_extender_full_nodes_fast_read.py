"""Full-Nodes bodies read without building their Node objects answer as if read whole.

``server.decode_args`` keeps each Node of a full NodeList as the bytes it came in (msgspec
Raw) and echoes them into the filter answer; any body it cannot take that way (escapes,
bytes beyond ASCII, keys in another case) is read the usual way. Both must give the same
answers, errors and Node objects, over a real socket.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from extender_builders import args_nodes, build, node, pod

from migfit import cluster
from migfit.extender import server

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[web.Application], Awaitable[Client]]


def _nodes() -> list[dict[str, Any]]:
    out = [node("idle-3g", {"3g.40gb": 2}), node("full-1g", {"1g.10gb": 7}),
           node("free-1g", {"1g.10gb": 7}), node("partly", {"1g.10gb": 7})]
    out[2]["metadata"]["labels"]["team"] = "kept as sent"
    out[3]["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return out


def _objects() -> list[dict[str, Any]]:
    return [*_nodes(), *[pod(f"busy-{i}", node_name="full-1g") for i in range(7)],
            *[pod(f"p-{i}", node_name="partly") for i in range(2)]]


@pytest.fixture
def model() -> cluster.Cluster:
    return build(_objects())


@pytest.fixture
async def client(aiohttp_client: Any, model: cluster.Cluster) -> Client:
    made: Client = await aiohttp_client(
        server.make_app(settings=server.ExtenderSettings(), cluster=model))
    return made


def _variants(body: dict[str, Any]) -> dict[str, bytes]:
    """The same ExtenderArgs spelled as kube-scheduler writes it and in ways the fast read
    leaves to the usual one."""
    escaped = json.loads(json.dumps(body))
    escaped["Nodes"]["items"][2]["metadata"]["labels"]["team"] = "naïve"  # non-ASCII
    return {
        "compact": json.dumps(body, separators=(",", ":")).encode(),
        "pretty": json.dumps(body, indent=2).encode(),
        "escaped": json.dumps(body, separators=(",", ":")).replace(
            '"kept as sent"', '"kept\\u0020as sent"').encode(),
        "non-ascii": json.dumps(escaped, ensure_ascii=False).encode(),
        "lower-case keys": json.dumps({k.lower(): v for k, v in body.items()}).encode(),
    }


async def _post(client: Client, verb: str, data: bytes) -> tuple[int, Any]:
    resp = await client.post(f"/{verb}", data=data, headers={"Content-Type": "application/json"})
    return resp.status, await resp.json()


def test_kube_schedulers_spelling_is_read_without_building_nodes() -> None:
    body = args_nodes(pod("want"), _nodes())
    compact = json.dumps(body, separators=(",", ":")).encode()
    got = server.decode_args(compact)
    raw = got.raw
    assert raw is not None  # the fast read took it
    assert got.names == ["idle-3g", "full-1g", "free-1g", "partly"]
    assert got.node_list == {"kind": "NodeList", "apiVersion": "v1",
                             "metadata": {"resourceVersion": "42"}}
    for sent in body["Nodes"]["items"]:
        name = sent["metadata"]["name"]
        assert raw[name] == sent
        assert raw.echo(name) == json.dumps(sent, separators=(",", ":")).encode()
    # Pretty-printed, it is still read fast; escapes and other key spellings are not.
    assert server.decode_args(json.dumps(body, indent=1).encode()).raw is not None
    for name, data in _variants(body).items():
        if name in ("escaped", "non-ascii", "lower-case keys"):
            assert server.decode_args(data).raw is None, name


async def test_every_spelling_gets_the_same_answers(client: Client) -> None:
    sent = _nodes()
    body = args_nodes(pod("want"), sent)
    answers: dict[str, tuple[Any, Any]] = {}
    for name, data in _variants(body).items():
        fstatus, filtered = await _post(client, "filter", data)
        pstatus, scores = await _post(client, "prioritize", data)
        assert fstatus == pstatus == 200, name
        answers[name] = (filtered, scores)
    filtered, scores = answers["compact"]
    assert [i["metadata"]["name"] for i in filtered["Nodes"]["items"]] == ["free-1g", "partly"]
    assert filtered["Nodes"]["items"] == [sent[2], sent[3]]  # the objects as sent
    assert filtered["Nodes"]["metadata"] == {"resourceVersion": "42"}
    assert filtered["NodeNames"] is None and filtered["Error"] == ""
    assert set(filtered["FailedNodes"]) == {"full-1g"}
    assert [s["Host"] for s in scores] == ["idle-3g", "full-1g", "free-1g", "partly"]
    for name in ("pretty", "escaped", "lower-case keys"):
        assert answers[name] == answers["compact"], name
    filtered_na, scores_na = answers["non-ascii"]
    assert scores_na == scores
    assert filtered_na["Nodes"]["items"][0]["metadata"]["labels"]["team"] == "naïve"
    assert {k: v for k, v in filtered_na.items() if k != "Nodes"} == {
        k: v for k, v in filtered.items() if k != "Nodes"}


async def test_duplicate_names_keep_the_first_object_in_both_reads(client: Client) -> None:
    sent = _nodes()
    twin = json.loads(json.dumps(sent[2]))
    twin["metadata"]["labels"]["team"] = "the second one"
    body = args_nodes(pod("want"), [*sent, twin])
    for data in (json.dumps(body, separators=(",", ":")).encode(),
                 json.dumps(body, ensure_ascii=False).replace(
                     "the second one", "the second ône").encode()):
        status, filtered = await _post(client, "filter", data)
        assert status == 200
        items = filtered["Nodes"]["items"]
        assert [i["metadata"]["name"] for i in items] == ["free-1g", "partly"]
        assert items[0]["metadata"]["labels"]["team"] == "kept as sent"


@pytest.mark.parametrize(("mangle", "message"), [
    (lambda b: b["Nodes"]["items"][1]["metadata"].pop("name"),
     "ExtenderArgs.Nodes.items[1] has no metadata.name"),
    (lambda b: b["Nodes"]["items"][1]["metadata"].update(name=7),
     "ExtenderArgs.Nodes.items[1] has no metadata.name"),
    (lambda b: b["Nodes"]["items"].__setitem__(0, "a node"),
     "ExtenderArgs.Nodes.items[0] has no metadata.name"),
    (lambda b: b["Nodes"].update(items={"not": "a list"}),
     "ExtenderArgs.Nodes.items must be a list of Node objects"),
    (lambda b: b.update(Pod=[]), "ExtenderArgs.Pod must be a Pod object"),
])
async def test_bad_bodies_get_the_usual_errors(client: Client, mangle: Callable[[Any], Any],
                                               message: str) -> None:
    body = args_nodes(pod("want"), _nodes())
    mangle(body)
    for data in (json.dumps(body, separators=(",", ":")).encode(), json.dumps(body).encode()):
        status, result = await _post(client, "filter", data)
        assert status == 400
        assert result["Error"] == message
