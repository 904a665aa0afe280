"""The bodies an application reads at once are bounded, all connections together (real sockets).

Before: each request's body was bounded (``client_max_size``, the extender's 32 MiB) but not
their sum, so memory grew with the connections: about 25 slow clients each sending 30 MiB
made the extender hold more than 1 GiB. Now ``serving.read_body`` takes each body from the
app's ``BodyBudget`` before reading it: a request the budget cannot hold gets 503 with
``Retry-After`` at once, before a byte of its body is read, and every way a read ends (the
body handed over, 408, a client gone, 413, 503) gives its share back.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import tls_app
from aiohttp import web

from migfit import serving

MAX_BODY = 64 * 1024
LIMITS = serving.Limits(keepalive_timeout=5.0, body_timeout=1.5, handshake_timeout=5.0,
                        max_connections=32)
BUDGET = serving.BUDGET_BODIES * MAX_BODY
SLACK = 1.5


async def _size(request: web.Request) -> web.Response:
    body = await serving.read_body(request, LIMITS.body_timeout)
    return web.Response(text=str(len(body)))


class Server:
    def __init__(self, started: serving.Started, budget: serving.BodyBudget,
                 tls: ssl.SSLContext | None) -> None:
        self.started = started
        self.budget = budget
        self.client_tls = tls

    async def open(self, client: int = 1) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection from 127.0.0.``client`` (each address one client of the budget)."""
        return await asyncio.open_connection(
            "127.0.0.1", self.started.port, ssl=self.client_tls,
            local_addr=(f"127.0.0.{client}", 0),
            server_hostname="localhost" if self.client_tls else None)

    async def held_reaches(self, size: int, within: float = 3.0) -> None:
        deadline = time.monotonic() + within
        while self.budget.held != size:
            assert time.monotonic() < deadline, f"budget holds {self.budget.held}, not {size}"
            await asyncio.sleep(0.02)


@pytest.fixture(params=[False, True], ids=["http", "https"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Server]:
    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/size", _size)
    budget = serving.limit_bodies(app, LIMITS, MAX_BODY)
    runner, started, client_ctx = await tls_app.start(app, tmp_path, tls=request.param,
                                                      limits=LIMITS)
    yield Server(started, budget, client_ctx)
    await runner.cleanup()


def _head(length: int) -> bytes:
    return (b"POST /size HTTP/1.1\r\nHost: localhost\r\nContent-Length: "
            + str(length).encode() + b"\r\n\r\n")


def _chunked_head() -> bytes:
    return b"POST /size HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _answer(reader: asyncio.StreamReader, within: float) -> tuple[bytes, bytes]:
    """The status line and the whole head of the next answer, which must come ``within``."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), within)
    return head.split(b"\r\n", 1)[0], head


async def _closed(reader: asyncio.StreamReader, within: float) -> None:
    async def drain() -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            while await reader.read(65536):
                pass
    await asyncio.wait_for(drain(), within)


async def _holding(server: Server, count: int
                   ) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """``count`` requests of the largest body, each with 1 KiB of it sent: being read, each
    from its own client (127.0.0.10 and on; one client holds one of them at most)."""
    held = []
    for i in range(count):
        reader, writer = await server.open(10 + i)
        writer.write(_head(MAX_BODY) + b"x" * 1024)
        await writer.drain()
        held.append((reader, writer))
    await server.held_reaches(count * MAX_BODY)
    return held


async def test_a_body_beyond_the_budget_gets_503_before_it_is_sent(server: Server) -> None:
    held = await _holding(server, serving.BUDGET_BODIES)
    assert server.budget.held == BUDGET
    reader, writer = await server.open()
    writer.write(_head(MAX_BODY))  # the head alone: the answer must not wait for the body
    started = time.monotonic()
    status, head = await _answer(reader, LIMITS.body_timeout / 2)
    assert status == b"HTTP/1.1 503 Service Unavailable", head
    assert b"\r\nRetry-After: 1\r\n" in head and b"\r\nConnection: close\r\n" in head, head
    assert time.monotonic() - started < LIMITS.body_timeout / 2
    await _closed(reader, serving.LINGER_S + SLACK)
    writer.close()
    assert server.budget.held == BUDGET  # the refused request took nothing
    assert server.budget.refused == 1
    # A small body does not fit either, while the budget is full.
    reader, writer = await server.open()
    writer.write(_head(10) + b"0123456789")
    assert (await _answer(reader, 1.0))[0].startswith(b"HTTP/1.1 503")
    writer.close()
    for _, w in held:
        w.close()


async def test_every_way_a_read_ends_gives_the_budget_back(server: Server) -> None:
    (ok_r, ok_w), (_, gone_w), (slow_r, _slow_w), (_, closed_w) = await _holding(
        server, serving.BUDGET_BODIES)
    # the body handed over: 200
    ok_w.write(b"y" * (MAX_BODY - 1024))
    status, _ = await _answer(ok_r, 2.0)
    assert status == b"HTTP/1.1 200 OK"
    await server.held_reaches(3 * MAX_BODY)
    # the client gone mid-body: reset, or closed
    gone_w.transport.abort()
    await server.held_reaches(2 * MAX_BODY)
    closed_w.close()
    await server.held_reaches(1 * MAX_BODY)
    # the body too slow: 408 once body_timeout has passed
    status, _ = await _answer(slow_r, LIMITS.body_timeout + SLACK)
    assert status == b"HTTP/1.1 408 Request Timeout"
    await server.held_reaches(0)
    # a chunked body longer than the largest: 413, and nothing kept
    reader, writer = await server.open()
    writer.write(_chunked_head() + _chunk(b"z" * MAX_BODY) + _chunk(b"z"))
    status, _ = await _answer(reader, 2.0)
    assert status == b"HTTP/1.1 413 Request Entity Too Large"
    writer.close()
    await server.held_reaches(0)
    # the whole budget is there again: as many bodies of the largest size at once
    held = await _holding(server, serving.BUDGET_BODIES)
    for reader, writer in held:
        writer.write(b"y" * (MAX_BODY - 1024))
        assert (await _answer(reader, 2.0))[0] == b"HTTP/1.1 200 OK"
        writer.close()
    await server.held_reaches(0)


async def test_a_chunked_body_takes_the_budget_as_it_arrives(server: Server) -> None:
    """A body of no declared length is counted as it comes: it fits where the budget has
    room, and gets 503 where it would pass it, part-way."""
    held = await _holding(server, serving.BUDGET_BODIES - 1)
    reader, writer = await server.open()
    writer.write(_chunked_head() + _chunk(b"c" * (MAX_BODY // 2)))
    await server.held_reaches((serving.BUDGET_BODIES - 1) * MAX_BODY + MAX_BODY // 2)
    writer.write(_chunk(b"c" * (MAX_BODY // 2)) + b"0\r\n\r\n")
    body = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2.0)
    assert body.startswith(b"HTTP/1.1 200"), body
    writer.close()
    await server.held_reaches((serving.BUDGET_BODIES - 1) * MAX_BODY)
    # one more declared body takes what is left but half of one
    extra_r, extra_w = await server.open()
    extra_w.write(_head(MAX_BODY // 2) + b"x")
    await server.held_reaches((serving.BUDGET_BODIES - 1) * MAX_BODY + MAX_BODY // 2)
    reader, writer = await server.open()
    writer.write(_chunked_head() + _chunk(b"c" * (MAX_BODY // 4)))
    await server.held_reaches((serving.BUDGET_BODIES - 1) * MAX_BODY + 3 * MAX_BODY // 4)
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        writer.write(_chunk(b"c" * (MAX_BODY // 2)))
    status, head = await _answer(reader, 2.0)
    assert status == b"HTTP/1.1 503 Service Unavailable", head
    assert b"\r\nRetry-After: 1\r\n" in head
    writer.close()
    await server.held_reaches((serving.BUDGET_BODIES - 1) * MAX_BODY + MAX_BODY // 2)
    for _, w in [*held, (extra_r, extra_w)]:
        w.close()
    await server.held_reaches(0)


async def test_one_client_cannot_take_the_whole_budget(server: Server) -> None:
    """Four slow bodies of the largest size from one client (an outside probe: four TLS
    connections, each declaring 3 MiB and sending one byte) held the whole budget, and every
    other client got 503 until they timed out. One client may hold all of the budget but one
    largest body: its next request gets 503 naming that share and the flag, and another
    client's request of the largest size is answered."""
    share = LIMITS.client_share(MAX_BODY)
    assert share == (serving.BUDGET_BODIES - 1) * MAX_BODY == server.budget.share
    mine = []
    for _ in range(serving.BUDGET_BODIES - 1):
        reader, writer = await server.open(1)
        writer.write(_head(MAX_BODY) + b"x")
        await writer.drain()
        mine.append((reader, writer))
    await server.held_reaches(share)
    reader, writer = await server.open(1)
    writer.write(_head(MAX_BODY) + b"x")
    status, head = await _answer(reader, LIMITS.body_timeout / 2)
    assert status == b"HTTP/1.1 503 Service Unavailable", head
    assert b"\r\nRetry-After: 1\r\n" in head, head
    text = await _text(reader, head)
    assert f"{share:,} at most from one client" in text, text
    assert "--max-body-in-flight" in text, text
    mine.append((reader, writer))
    assert server.budget.held == share
    reader, writer = await server.open(2)
    writer.write(_head(MAX_BODY) + b"y" * MAX_BODY)
    status, head = await _answer(reader, 5.0)
    assert status == b"HTTP/1.1 200 OK", head
    writer.close()
    for _, w in mine:
        w.close()
    await server.held_reaches(0)


async def _text(reader: asyncio.StreamReader, head: bytes) -> str:
    """The body of the answer whose head is ``head``, as text."""
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    return (await asyncio.wait_for(reader.readexactly(length), 1.0)).decode()


def test_a_clients_share_is_the_budget_but_one_largest_body() -> None:
    assert serving.Limits().client_share(MAX_BODY) == (serving.BUDGET_BODIES - 1) * MAX_BODY
    limits = serving.Limits(max_body_in_flight=10 * MAX_BODY + 5)
    assert limits.client_share(MAX_BODY) == 9 * MAX_BODY + 5
    assert serving.Limits(max_body_in_flight=MAX_BODY).client_share(MAX_BODY) == MAX_BODY


def test_the_budget_defaults_to_a_few_of_the_largest_bodies() -> None:
    assert serving.Limits().body_budget(MAX_BODY) == serving.BUDGET_BODIES * MAX_BODY
    assert serving.Limits(max_body_in_flight=5 * MAX_BODY).body_budget(MAX_BODY) == 5 * MAX_BODY
    with pytest.raises(ValueError, match="--max-body-in-flight 1000: use at least"):
        serving.Limits(max_body_in_flight=1000).body_budget(MAX_BODY)
    with pytest.raises(ValueError, match="--max-body-in-flight 0: use a positive"):
        serving.Limits(max_body_in_flight=0).check()


def test_a_later_burst_of_refusals_is_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    """Only a process's first refusal (and every 1000th) was logged: an outside probe's 530
    later 503s, in bursts minutes apart, wrote nothing. Now one line per ``LINE_S`` at most."""
    now = [100.0]
    budget = serving.BodyBudget(MAX_BODY, clock=lambda: now[0])
    assert budget.take(MAX_BODY, "10.0.0.1") is None
    with caplog.at_level("WARNING", logger="migfit.http"):
        for _ in range(5):  # one burst: one line
            assert budget.take(1, "10.0.0.2") is not None
        assert len(caplog.records) == 1
        now[0] += serving.BodyBudget.LINE_S / 2
        assert budget.take(1, "10.0.0.2") is not None  # still within the line's interval
        assert len(caplog.records) == 1
        now[0] += 120.0  # a later burst
        assert budget.take(1, "10.0.0.3") is not None
    assert len(caplog.records) == 2
    assert "10.0.0.3: request body refused, answering 503 (7 refused so far)" in \
        caplog.records[-1].getMessage()
