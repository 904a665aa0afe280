"""Hostile requests to the extender over a real socket: too many nodes, JSON that is not JSON,
names megabytes long.

A call with a million unknown names took 43 s, answered 46 MB (a failure message per name)
and held 510 MB; a Node holding ``NaN``, ``-Infinity`` or ``1e999`` was echoed as ``NaN`` and
``Infinity``, which Go's encoding/json cannot read, with a 200; a 5 MiB node or pod name made
a 5 MB scoring-log line on every prioritize call.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from extender_builders import args, args_nodes, build, node, pod

from migfit import serving
from migfit.extender import scoring_log, server

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client(aiohttp_client: Any) -> Client:
    model = build([node("a", {"1g.10gb": 7}), node("b", {"3g.40gb": 2})])
    app = server.make_app(settings=server.ExtenderSettings(log_format="both"), cluster=model)
    made: Client = await aiohttp_client(app)
    return made


async def _post(client: Client, verb: str, body: bytes) -> tuple[int, bytes]:
    resp = await client.post(f"/{verb}", data=body, headers={"Content-Type": "application/json"})
    return resp.status, await resp.read()


def _not_a_constant(name: str) -> Any:
    raise AssertionError(f"the answer holds {name}, which is not JSON")


def _strict(body: bytes) -> Any:
    """The answer read as Go reads JSON: no NaN, no Infinity."""
    return json.loads(body, parse_constant=_not_a_constant)


# ---------------------------------------------------------------- at most MAX_NODES a call


def _names_body(names: list[str], *, escaped: bool) -> bytes:
    body = json.dumps(args(pod("want"), names), separators=(",", ":"))
    # An escape sends the body past the fast read (msgspec) to the usual one (orjson).
    return body.replace('"want"', '"w\\u0061nt"', 1).encode() if escaped else body.encode()


def _nodes_body(count: int, *, lower_case: bool) -> bytes:
    items = [{"metadata": {"name": f"n{i}"}} for i in range(count)]
    body = args_nodes(pod("want"), items)
    if lower_case:  # keys in another case: the usual read
        body = {k.lower(): v for k, v in body.items()}
    return json.dumps(body, separators=(",", ":")).encode()


@pytest.mark.parametrize("route", ["filter", "prioritize"])
async def test_a_declared_body_too_large_is_refused_in_words(client: Client, route: str) -> None:
    """Without Expect the 413 said aiohttp's "Maximum request body size 33554432 exceeded,
    actual body size 50000000"; it says what the Expect path says."""
    answer = await _refused_as_too_large(client, route, b"{")
    assert "the request body of 50,000,000 bytes is larger than 33,554,432" in \
        json.dumps(answer), answer
    assert "Maximum request body size" not in json.dumps(answer), answer


async def _refused_as_too_large(client: Client, route: str, start: bytes,
                                headers: str = "") -> Any:
    """The JSON answer to a POST to ``route`` declaring a 50 MB body (``headers`` added, the
    body's first bytes ``start``), which must be a 413."""
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(f"POST /{route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"{headers}Content-Length: 50000000\r\n\r\n".encode() + start)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 413"), head
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    answer = _strict(await reader.readexactly(length))
    writer.close()
    return answer


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("escaped", [False, True], ids=["fast-read", "usual-read"])
async def test_more_node_names_than_the_cap_get_400_naming_it(
        client: Client, verb: str, escaped: bool) -> None:
    names = [f"unknown-{i}" for i in range(server.MAX_NODES + 1)]
    status, body = await _post(client, verb, _names_body(names, escaped=escaped))
    assert status == 400
    error = _strict(body)["Error"]
    assert "NodeNames" in error and f"{server.MAX_NODES + 1:,} names" in error
    assert f"at most {server.MAX_NODES:,}" in error
    assert len(body) < 1000  # no message per name
    status, body = await _post(client, verb, _names_body(names[:-1], escaped=escaped))
    assert status == 200  # the cap itself is taken


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("lower_case", [False, True], ids=["fast-read", "usual-read"])
async def test_more_nodes_than_the_cap_get_400_naming_it(
        client: Client, verb: str, lower_case: bool) -> None:
    status, body = await _post(client, verb,
                               _nodes_body(server.MAX_NODES + 1, lower_case=lower_case))
    assert status == 400
    error = _strict(body)["Error"]
    assert "Nodes.items" in error and f"{server.MAX_NODES + 1:,} Nodes" in error
    assert f"at most {server.MAX_NODES:,}" in error
    status, body = await _post(client, verb, _nodes_body(server.MAX_NODES, lower_case=lower_case))
    assert status == 200


# ---------------------------------------------------------------- NaN, Infinity, 1e999

_HOLE = '"__number__"'


def _in_node(number: str, *, ascii_only: bool = True) -> bytes:
    item = node("a", {"1g.10gb": 7})
    item["x"] = "__number__"
    if not ascii_only:  # a byte beyond ASCII: the usual read
        item["metadata"]["labels"]["team"] = "naïve"
    text = json.dumps(args_nodes(pod("want"), [item]), separators=(",", ":"),
                      ensure_ascii=ascii_only)
    return text.replace(_HOLE, number).encode()


def _in_pod(number: str, *, nodes: bool = False) -> bytes:
    want = pod("want")
    want["metadata"]["x"] = "__number__"
    body = args_nodes(want, [node("a", {"1g.10gb": 7})]) if nodes else args(want, ["a", "b"])
    return json.dumps(body, separators=(",", ":")).replace(_HOLE, number).encode()


BODIES: dict[str, Callable[[], bytes]] = {
    "NaN in a Node": lambda: _in_node("NaN"),
    "-Infinity in a Node": lambda: _in_node("-Infinity"),
    "NaN and Infinity in a Node": lambda: _in_node('NaN,"y":-Infinity'),
    "1e999 in a Node read whole": lambda: _in_node("1e999", ascii_only=False),
    "an integer beyond a double in a Node": lambda: _in_node("9" * 400, ascii_only=False),
    "NaN in the Pod, NodeNames": lambda: _in_pod("NaN"),
    "1e999 in the Pod, NodeNames": lambda: _in_pod("1e999"),
    "-1e999 in the Pod, Nodes": lambda: _in_pod("-1e999", nodes=True),
    "Infinity in the Pod, Nodes": lambda: _in_pod("Infinity", nodes=True),
}


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize("case", list(BODIES))
async def test_numbers_json_has_not_get_400_saying_the_body_is_not_valid_json(
        client: Client, verb: str, case: str) -> None:
    status, body = await _post(client, verb, BODIES[case]())
    assert status == 400, body[:300]
    error = _strict(body)["Error"]  # the answer itself is JSON Go can read
    assert error.startswith("request body is not valid JSON: "), error
    assert len(error) < 300


# ---------------------------------------------------------------- names in log lines

LONG = 2**20  # characters of each hostile name


async def test_scoring_log_lines_cut_long_node_pod_and_profile_names(
        client: Client, caplog: pytest.LogCaptureFixture) -> None:
    hostile = pod("p" * LONG, [{"q" * LONG: 1}], namespace="n" * LONG)
    names = ["a", "b", "z" * LONG]
    with caplog.at_level(logging.INFO, logger="migfit.scoring"):
        status, body = await _post(client, "prioritize",
                                   json.dumps(args(hostile, names)).encode())
        assert status == 200
        assert len(_strict(body)) == 3
        client.app[server.SCORING_LOG].flush()  # lines written after the response
    text_line, json_line = (r.getMessage() for r in caplog.records)
    marker = f"… ({LONG} characters)"
    for line in (text_line, json_line):
        assert len(line) < 8 * scoring_log.KEY_LIMIT + 4000, len(line)
        assert f" ({LONG} characters)" in line  # JSON writes the … as \u2026
    record = json.loads(json_line)
    assert record["pod"] == ("n" * LONG + "/" + "p" * LONG)[:scoring_log.KEY_LIMIT] + \
        f"… ({2 * LONG + 1} characters)"
    assert len(record["uid"]) < scoring_log.NAME_LIMIT + 30
    assert record["uid"].endswith(" characters)")
    assert record["profile"] == "q" * scoring_log.NAME_LIMIT + marker
    logged = [s["node"] for s in record["scores"]]
    assert "z" * scoring_log.NAME_LIMIT + marker in logged
    assert {"a", "b"} <= set(logged)  # real names whole
    assert text_line.startswith("prioritize " + "n" * scoring_log.KEY_LIMIT + "…")


async def test_filter_debug_lines_cut_long_names(
        client: Client, caplog: pytest.LogCaptureFixture) -> None:
    hostile = pod("p" * LONG, [{"q" * LONG: 1}], namespace="n" * LONG)
    with caplog.at_level(logging.DEBUG, logger="migfit.extender.server"):
        status, body = await _post(client, "filter",
                                   json.dumps(args(hostile, ["a", "z" * LONG])).encode())
    assert status == 200
    assert _strict(body)["NodeNames"] == []
    lines = [r.getMessage() for r in caplog.records if r.name == "migfit.extender.server"]
    assert len(lines) == 3  # the summary, then a line per refused node
    for line in lines:
        assert len(line) < 4000, len(line)
        assert f"… ({LONG} characters)" in line or f"… ({2 * LONG + 1} characters)" in line


async def test_an_absurd_instance_count_is_named_briefly(client: Client) -> None:
    # A limit of "1e100" is an integer quantity: the reason printed its 101 digits.
    want = pod("want")
    want["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] = "1e100"
    status, body = await _post(client, "filter", json.dumps(args(want, ["a"])).encode())
    assert status == 200
    reason = _strict(body)["FailedAndUnresolvableNodes"]["a"]
    assert reason == "node advertises 7 1g.10gb in all; the pod needs about 1e+100"


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
async def test_a_body_too_large_is_refused_before_it_is_invited(client: Client,
                                                                 verb: str) -> None:
    # Expect: 100-continue with a declared 50 MB body was answered "100 Continue" (send it).
    answer = await _refused_as_too_large(client, verb, b"", "Expect: 100-continue\r\n")
    assert answer["Error"] == "the request body of 50,000,000 bytes is larger than 33,554,432"
    status, _ = await _post(client, verb, json.dumps(args(pod("want"), ["a"])).encode())
    assert status == 200


@pytest.mark.parametrize("escaped", [False, True], ids=["fast-read", "usual-read"])
async def test_a_key_given_twice_in_two_cases_is_read_as_go_reads_it(client: Client,
                                                                      escaped: bool) -> None:
    # Go's encoding/json sets ExtenderArgs.Pod from every key equal to "Pod" ignoring case:
    # the last one wins. The extender took the exactly spelled one.
    first, last = pod("small"), pod("big", ({"3g.40gb": 1},))
    body = ('{"Pod":' + json.dumps(first) + ',"pod":' + json.dumps(last)
            + ',"Nodes":null,"NodeNames":["a","b"]}')
    if escaped:  # an escape sends the body past the fast read
        body = body.replace('"small"', '"sm\\u0061ll"', 1)
    status, answer = await _post(client, "filter", body.encode())
    assert status == 200
    assert _strict(answer)["NodeNames"] == ["b"]  # the 3g.40gb pod's node


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
async def test_a_body_nested_200000_deep_is_refused_and_the_server_lives(
        client: Client, verb: str) -> None:
    """400 KB of brackets in the pod: orjson before 3.9.15 overflowed the C stack on it and
    the extender died (CVE-2024-27454), which, registered as not ignorable, stops every MIG
    pod's scheduling; now it is a 400."""
    depth = 200_000
    body = (b'{"Pod":{"x":' + b"[" * depth + b"]" * depth + b'},"NodeNames":["a"]}')
    status, answer = await _post(client, verb, body)
    assert status == 400, answer[:200]
    status, _ = await _post(client, verb, json.dumps(args(pod("p"), ["a"])).encode())
    assert status == 200


# ---------------------------------------------------------------- what a body makes parsed


def _empty_arrays(count: int) -> bytes:
    """A NodeNames call whose Pod holds ``count`` empty arrays (an outside probe's body)."""
    return (b'{"NodeNames":["a"],"Pod":{"metadata":{"name":"p","namespace":"d"},"x":['
            + b"[]," * (count - 1) + b"[]]}}")


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
async def test_a_body_of_more_arrays_than_its_size_allows_gets_413_before_it_is_parsed(
        aiohttp_client: Any, verb: str) -> None:
    """A 30 MiB /filter body of empty arrays took the extender from 295 MB to 1.17 GB and the
    event loop for 1.1 s per call: each array parsed costs 56 bytes or more, and 3 bytes of
    body. Now a body may hold one array or object per serving.BYTES_PER_CONTAINER bytes of
    --max-body; more is a 413 in the verb's shape, saying what to change."""
    max_body = 256 * 1024
    most = max_body // serving.BYTES_PER_CONTAINER
    app = server.make_app(settings=server.ExtenderSettings(max_body_bytes=max_body),
                          cluster=build([node("a", {"1g.10gb": 7})]))
    client: Client = await aiohttp_client(app)
    status, body = await _post(client, verb, _empty_arrays(most + 10))
    assert status == 413, body[:300]
    error = _strict(body)["Error"]
    assert f"more than {most:,}" in error and "--max-body" in error, error
    status, body = await _post(client, verb, _empty_arrays(most // 2))
    assert status == 200, body[:300]  # within the bound: read as before


@pytest.mark.parametrize(("body", "said"), [
    (b'{"Pod":{"metadata":{"name":"\xff"}},"NodeNames":["a"]}',
     "not valid UTF-8 at byte offset 28"),
    (b'{"Pod":{"x":' + b"[" * 5000 + b"]" * 5000 + b'},"NodeNames":["a"]}',
     "arrays and objects nested too deep; nest at most 500 levels"),
], ids=["not UTF-8", "nested 5000 deep"])
async def test_json_errors_say_what_is_wrong_on_the_wire(client: Client, body: bytes,
                                                         said: str) -> None:
    """The extender's 400 quoted Python's words ("'utf-8' codec can't decode byte 0xff in
    position 28", "maximum recursion depth exceeded while decoding a JSON array"); now it
    says what is wrong with the bytes sent."""
    status, answer = await _post(client, "filter", body)
    assert status == 400, answer[:300]
    error = _strict(answer)["Error"]
    assert error.startswith(f"request body is not valid JSON: {said}"), error
    assert "codec" not in error and "recursion" not in error, error
