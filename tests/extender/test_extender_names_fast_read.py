"""NodeNames bodies read by msgspec, with the Pod kept as its bytes, answer as if read whole.

``server.decode_args`` reads a NodeNames-mode ``ExtenderArgs`` (what kube-scheduler sends
with ``nodeCacheCapable: true``) into a list of names and the Pod's bytes; the pod's MIG
request comes from ``server.PodRequests`` (decoded once per distinct Pod, bounded). Every
spelling, and every bad body, must get the answers and errors of the usual read, over a real
socket; the table must stay within its bounds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from extender_builders import args, build, node, pod

from migfit import cluster
from migfit.extender import server

Client = TestClient[web.Request, web.Application]
NAMES = ["idle-3g", "full-1g", "free-1g", "partly", "ghost", "free-1g"]


def _objects() -> list[dict[str, Any]]:
    return [node("idle-3g", {"3g.40gb": 2}), node("full-1g", {"1g.10gb": 7}),
            node("free-1g", {"1g.10gb": 7}), node("partly", {"1g.10gb": 7}),
            *[pod(f"busy-{i}", node_name="full-1g") for i in range(7)],
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
    """One ExtenderArgs as kube-scheduler writes it, and in spellings the fast read leaves
    to the usual one (or reads too: pretty)."""
    accented = json.loads(json.dumps(body))
    accented["Pod"]["metadata"]["labels"] = {"team": "naïve"}
    upper = {k.upper() if k == "Pod" else k: v for k, v in body.items()}
    return {
        "compact": json.dumps(body, separators=(",", ":")).encode(),
        "pretty": json.dumps(body, indent=2).encode(),
        "escaped": json.dumps(body, separators=(",", ":")).replace(
            '"free-1g"', '"free\\u002d1g"').encode(),
        "non-ascii pod": json.dumps(accented, ensure_ascii=False).encode(),
        "lower-case keys": json.dumps({k.lower(): v for k, v in body.items()}).encode(),
        "other-case Pod": json.dumps(upper).encode(),
        "no Nodes key": json.dumps({k: v for k, v in body.items() if k != "Nodes"}).encode(),
    }


async def _post(client: Client, verb: str, data: bytes) -> tuple[int, Any]:
    resp = await client.post(f"/{verb}", data=data, headers={"Content-Type": "application/json"})
    return resp.status, await resp.json()


def test_kube_schedulers_spelling_is_read_with_the_pod_as_bytes() -> None:
    body = args(pod("want"), NAMES)
    compact = json.dumps(body, separators=(",", ":")).encode()
    got = server.decode_args(compact)
    assert got.pod_raw == json.dumps(body["Pod"], separators=(",", ":")).encode()
    assert got.names == NAMES and got.cache_mode
    assert got.pod == body["Pod"]  # decoded from its bytes when asked
    assert server.decode_args(json.dumps(body, indent=1).encode()).pod_raw is not None
    for name, data in _variants(body).items():
        if name not in ("compact", "pretty"):
            read = server.decode_args(data)
            assert read.pod_raw is None, name
            assert read.names == NAMES, name
    nulls = server.decode_args(b'{"Pod":{"metadata":{"name":"x"}},"Nodes":null,'
                               b'"NodeNames":null}')
    assert nulls.names == [] and nulls.pod == {"metadata": {"name": "x"}}


async def test_every_spelling_gets_the_same_answers(client: Client) -> None:
    body = args(pod("want", [{"1g.10gb": 1}]), NAMES)
    answers: dict[str, tuple[Any, Any]] = {}
    for name, data in _variants(body).items():
        fstatus, filtered = await _post(client, "filter", data)
        pstatus, scores = await _post(client, "prioritize", data)
        assert (fstatus, pstatus) == (200, 200), name
        answers[name] = (filtered, scores)
    filtered, scores = answers["compact"]
    assert filtered["NodeNames"] == ["free-1g", "partly"]
    assert set(filtered["FailedNodes"]) == {"full-1g"}
    assert [s["Host"] for s in scores] == ["idle-3g", "full-1g", "free-1g", "partly", "ghost"]
    for name, got in answers.items():
        assert got == answers["compact"], name


async def test_the_same_pod_bytes_are_decoded_once_and_other_pods_each(
        aiohttp_client: Any, model: cluster.Cluster) -> None:
    app = server.make_app(settings=server.ExtenderSettings(), cluster=model)
    client: Client = await aiohttp_client(app)
    table = app[server.POD_REQUESTS]
    one = json.dumps(args(pod("want", [{"1g.10gb": 1}]), NAMES), separators=(",", ":"))
    other = json.dumps(args(pod("want", [{"3g.40gb": 1}]), NAMES), separators=(",", ":"))
    first = [await _post(client, verb, one.encode()) for verb in ("filter", "prioritize")]
    assert len(table) == 1
    # Same name, another request: another entry, another answer (the bytes are the key).
    second = [await _post(client, verb, other.encode()) for verb in ("filter", "prioritize")]
    assert len(table) == 2
    assert first[0][1]["NodeNames"] == ["free-1g", "partly"]
    assert second[0][1]["NodeNames"] == ["idle-3g"]
    assert [await _post(client, v, one.encode()) for v in ("filter", "prioritize")] == first


def test_the_table_is_bounded_in_entries_and_in_bytes() -> None:
    table = server.PodRequests(entries=3, max_bytes=400)
    sent = []
    for i in range(10):
        body = json.dumps(args(pod(f"p{i}"), ["n"]), separators=(",", ":")).encode()
        read = server.decode_args(body)
        assert table.of(read).name == f"p{i}"
        sent.append(read)
        assert len(table) == min(i + 1, 3)
    assert table.of(sent[9]).name == "p9"  # kept, the most recent
    big = pod("big")
    big["metadata"]["annotations"] = {"note": "x" * 500}
    read = server.decode_args(json.dumps(args(big, ["n"])).encode())
    assert read.pod_raw is not None and len(read.pod_raw) > 400
    assert table.of(read).name == "big"
    assert len(table) == 3  # decoded, not kept


@pytest.mark.parametrize(("mangle", "status", "message"), [
    (lambda b: b.update(Pod=[]), 400, "ExtenderArgs.Pod must be a Pod object"),
    (lambda b: b.update(Pod=None), 400, "ExtenderArgs.Pod must be a Pod object"),
    (lambda b: b.update(NodeNames=["a", 7]), 400,
     "ExtenderArgs.NodeNames must be a list of strings or null"),
    (lambda b: b.update(NodeNames={"a": 1}), 400,
     "ExtenderArgs.NodeNames must be a list of strings or null"),
    (lambda b: b["Pod"]["metadata"].update(generation=2**70), 200, ""),  # beyond 64 bits
])
async def test_bad_and_odd_bodies_get_the_usual_answers(
        client: Client, mangle: Callable[[Any], Any], status: int, message: str) -> None:
    body = args(pod("want", [{"1g.10gb": 1}]), NAMES)
    mangle(body)
    for data in (json.dumps(body, separators=(",", ":")).encode(), json.dumps(body).encode(),
                 json.dumps(body, ensure_ascii=False).replace("want", "wänt").encode()):
        got, result = await _post(client, "filter", data)
        assert got == status, data
        assert result["Error"] == message
        pgot, _ = await _post(client, "prioritize", data)
        assert pgot == status
