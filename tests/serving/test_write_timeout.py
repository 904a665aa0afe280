"""A client that sends requests but reads none of the answers does not hold its connection
for ever (real sockets, plain and TLS, on both event loops).

Before: once the socket's buffers were full the server's transport paused for writing, the
handler waited on it, and nothing ever timed out: the connection (a slot of the gate) and the
answer's bytes were held until the client went away. Now a connection whose client takes
nothing of what is left to send for ``write_timeout`` is aborted; a client that reads, even
slowly, gets its whole answer.
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

WRITE_TIMEOUT = 1.0
LIMITS = serving.Limits(keepalive_timeout=30.0, body_timeout=5.0, handshake_timeout=5.0,
                        write_timeout=WRITE_TIMEOUT, max_connections=8)
# More than the kernel's socket buffers hold (tcp_wmem's largest is 4 MiB by default), so
# that the server's transport must buffer and pause.
BIG = bytes(range(256)) * (16 * 4096)  # 16 MiB
SMALL = b"s" * (64 * 1024)
SLACK = 1.5


async def _big(request: web.Request) -> web.Response:
    return web.Response(body=BIG)


async def _small(request: web.Request) -> web.Response:
    return web.Response(body=SMALL)


class Server(tls_app.Client):
    """Its connections' clients keep little in their sockets (a small receive buffer)."""

    def __init__(self, started: serving.Started, tls: ssl.SSLContext | None) -> None:
        super().__init__(started, tls, receive_buffer=4096)

    async def open_connections_reach(self, count: int, within: float) -> float:
        """Seconds until the server holds ``count`` connections; fails after ``within``."""
        start = time.monotonic()
        while self.started.open_connections != count:
            assert time.monotonic() - start < within, (
                f"{self.started.open_connections} connections still open after {within}s")
            await asyncio.sleep(0.05)
        return time.monotonic() - start


@pytest.fixture(params=[False, True], ids=["http", "https"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Server]:
    app = web.Application()
    app.router.add_get("/big", _big)
    app.router.add_get("/small", _small)
    runner, started, client_ctx = await tls_app.start(app, tmp_path, tls=request.param,
                                                      limits=LIMITS)
    yield Server(started, client_ctx)
    await runner.cleanup()


def _get(path: bytes) -> bytes:
    return b"GET " + path + b" HTTP/1.1\r\nHost: localhost\r\n\r\n"


async def test_a_client_that_reads_no_answer_is_cut_off(server: Server) -> None:
    # Two answers: under uvloop's TLS the first goes to the socket's transport whole, where
    # no pause reaches the connection's protocol (it is closed by the keep-alive timeout,
    # then uvloop's TLS shutdown timeout); the second waits behind it, and pauses.
    _reader, writer = await server.open()
    writer.write(_get(b"/big") * 2)
    await writer.drain()
    await server.open_connections_reach(1, 1.0)
    # nothing read: closed once a write timeout has passed with nothing taken (two at most)
    waited = await server.open_connections_reach(0, 2 * WRITE_TIMEOUT + SLACK)
    assert waited >= WRITE_TIMEOUT * 0.8
    writer.close()


async def test_pipelined_requests_whose_answers_are_never_read_are_cut_off(
        server: Server) -> None:
    """Many small requests sent at once (HTTP/1.1 pipelining), no answer read: the answers
    fill the socket, then the server's buffer."""
    _reader, writer = await server.open()
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        writer.write(_get(b"/small") * 400)  # 400 answers of 64 KiB: 25 MiB
        await writer.drain()
    await server.open_connections_reach(0, 2 * WRITE_TIMEOUT + SLACK + 2.0)
    writer.close()


async def test_a_client_that_reads_slowly_gets_its_whole_answer(server: Server) -> None:
    """Pauses shorter than the write timeout, but longer than it in all: each time the
    client takes a part of the answer the server gives it another write timeout."""
    reader, writer = await server.open()
    writer.write(_get(b"/big"))
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    got = b""
    for _ in range(3):
        await asyncio.sleep(0.7 * WRITE_TIMEOUT)
        got += await asyncio.wait_for(reader.readexactly(2**20), 5.0)
    got += await asyncio.wait_for(reader.readexactly(len(BIG) - len(got)), 10.0)
    assert got == BIG
    assert server.started.open_connections == 1
    writer.close()
