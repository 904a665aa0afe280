"""The extender served as ``migfit extender`` serves it: the bodies of calls being received at
once are bounded, all connections together (``serving.read_body``'s budget, by default
``serving.BUDGET_BODIES`` of ``--max-body``).

Before: only each body was bounded (32 MiB), so about 25 slow clients each sending 30 MiB made
the extender hold more than 1 GiB; a call beyond what the budget holds waited for its body
like any other (and got 408 from a slow client). Now it gets 503 with ``Retry-After`` at
once, in the verb's wire shape, before its body is sent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from extender_builders import args, build, node, pod

from migfit import serving
from migfit.extender import server

MAX_BODY = 64 * 1024
LIMITS = serving.Limits(keepalive_timeout=5.0, body_timeout=2.0, max_connections=32)


@pytest.fixture
async def port() -> AsyncIterator[int]:
    settings = server.ExtenderSettings(host="127.0.0.1", port=0, limits=LIMITS,
                                       max_body_bytes=MAX_BODY)
    app = server.make_app(settings=settings, cluster=build([node("n", {"1g.10gb": 7})]))
    runner, started = await serving.start(app, server.listen_of(settings, None))
    yield started.port
    await runner.cleanup()


def _head(path: bytes, length: int) -> bytes:
    return (b"POST " + path + b" HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
            b"application/json\r\nContent-Length: " + str(length).encode() + b"\r\n\r\n")


async def _answer(reader: asyncio.StreamReader, within: float) -> tuple[bytes, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), within)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    return head, await asyncio.wait_for(reader.readexactly(length), within)


@pytest.mark.parametrize("path", [b"/filter", b"/prioritize"])
async def test_a_call_beyond_the_budget_gets_503_before_its_body_is_sent(
        port: int, path: bytes) -> None:
    held = []
    for i in range(serving.BUDGET_BODIES):  # four calls of the largest body, being received
        # each from its own client: one client may hold a share of the budget only
        reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                       local_addr=(f"127.0.0.{10 + i}", 0))
        writer.write(_head(path, MAX_BODY) + b'{"Pod": {')
        await writer.drain()
        held.append((reader, writer))
    await asyncio.sleep(0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_head(path, 1000))  # its head alone
    head, body = await _answer(reader, LIMITS.body_timeout / 2)
    assert head.startswith(b"HTTP/1.1 503"), head
    assert b"\r\nRetry-After: 1\r\n" in head and b"\r\nConnection: close\r\n" in head, head
    answer = json.loads(body)
    assert "--max-body-in-flight" in answer["Error"], answer
    if path == b"/filter":  # an ExtenderFilterResult, every field present
        assert set(answer) == {"Nodes", "NodeNames", "FailedNodes",
                               "FailedAndUnresolvableNodes", "Error"}, answer
    writer.close()
    # Once the held calls are done (here: their clients gone), calls fit again.
    for _, w in held:
        w.transport.abort()
    await asyncio.sleep(0.2)
    call = json.dumps(args(pod("x"), ["n"])).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_head(path, len(call)) + call)
    head, body = await _answer(reader, 2.0)
    assert head.startswith(b"HTTP/1.1 200"), head
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    metrics = await asyncio.wait_for(reader.read(), 5)
    verb = path.strip(b"/").decode()
    assert (f'migfit_extender_requests_total{{code="503",verb="{verb}"}} 1.0'.encode()
            in metrics)
    writer.close()


async def test_a_call_the_budget_cannot_hold_is_not_invited_to_send_its_body(port: int) -> None:
    """``Expect: 100-continue`` (curl's way with a large body): when the bodies in flight
    leave no room, the first answer is the 503, not ``100 Continue`` inviting a body that
    would be thrown away; with room, the invitation comes as before."""
    held = []
    for i in range(serving.BUDGET_BODIES):
        reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                       local_addr=(f"127.0.0.{10 + i}", 0))
        writer.write(_head(b"/filter", MAX_BODY) + b'{"Pod": {')
        await writer.drain()
        held.append((reader, writer))
    await asyncio.sleep(0.2)
    expect = _head(b"/filter", 1000).replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(expect)
    head, body = await _answer(reader, LIMITS.body_timeout / 2)
    assert head.startswith(b"HTTP/1.1 503"), head
    assert b"\r\nRetry-After: 1\r\n" in head and "--max-body-in-flight" in json.loads(
        body)["Error"]
    writer.close()
    for _, w in held:
        w.transport.abort()
    await asyncio.sleep(0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(expect)
    first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2.0)
    assert first.startswith(b"HTTP/1.1 100 Continue"), first
    writer.close()


async def test_a_slow_body_and_a_bad_expect_are_answered_saying_so() -> None:
    """The extender's 408 said "Request Timeout" (the reason phrase), not what was too slow,
    and an unknown Expect got aiohttp's text/plain 417 echoing the client's bytes."""
    settings = server.ExtenderSettings(host="127.0.0.1", port=0, max_body_bytes=MAX_BODY,
                                       limits=serving.Limits(body_timeout=0.5))
    app = server.make_app(settings=settings, cluster=build([node("n", {"1g.10gb": 7})]))
    runner, started = await serving.start(app, server.listen_of(settings, None))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", started.port)
        writer.write(_head(b"/filter", 100) + b'{"Pod": {')
        head, body = await _answer(reader, 3.0)
        assert head.startswith(b"HTTP/1.1 408"), head
        assert json.loads(body)["Error"] == "request body too slow", body
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", started.port)
        writer.write(_head(b"/filter", 2).replace(b"\r\n\r\n", b"\r\nExpect: zq<b>\r\n\r\n"))
        head, body = await _answer(reader, 3.0)
        assert head.startswith(b"HTTP/1.1 417") and b"application/json" in head, head
        assert b"zq" not in head + body
        assert json.loads(body)["Error"].startswith("unsupported Expect header"), body
        writer.close()
    finally:
        await runner.cleanup()


async def test_a_get_with_a_body_too_large_gets_413_unread(port: int) -> None:
    """GET /healthz with Content-Length: 99999999999 was answered 200 and its body read and
    dropped after the answer (an outside probe: 17 GB over 31 s). Now it is a 413 in the
    extender's shape, and the connection closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n")
    head, body = await _answer(reader, 5.0)
    assert head.startswith(b"HTTP/1.1 413") and b"\r\nConnection: close\r\n" in head, head
    assert "takes no body" in json.loads(body)["Error"], body
    assert await asyncio.wait_for(reader.read(), 5.0) == b""
    writer.close()
