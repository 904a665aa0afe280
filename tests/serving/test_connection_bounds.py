"""migfit.serving over real sockets: idle, slow and surplus connections are closed; client
mistakes are one log line, never an ERROR with a traceback.

Before: aiohttp's defaults (a keep-alive of about an hour, no body timeout, no connection cap,
a 256 KiB TLS buffer per connection) kept every idle or slow connection open, and a malformed
request or a client gone mid-body logged ERROR with a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import tls_app
from aiohttp import web

from migfit import serving

LIMITS = serving.Limits(keepalive_timeout=1.0, body_timeout=1.0, handshake_timeout=1.0,
                        max_connections=8)
SLACK = 1.5  # seconds beyond a timeout within which the close must come


async def _echo(request: web.Request) -> web.Response:
    body = await serving.read_body(request, LIMITS.body_timeout)
    return web.Response(body=body)


Server = tls_app.Client


async def _start(tls: bool, tmp: Path, limits: serving.Limits = LIMITS
                 ) -> tuple[web.AppRunner, Server]:
    app = web.Application()
    app.router.add_post("/echo", _echo)
    runner, started, client_ctx = await tls_app.start(app, tmp, tls=tls,
                                                      limits=limits)
    return runner, Server(started, client_ctx)


@pytest.fixture(params=[False, True], ids=["http", "https"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Server]:
    runner, srv = await _start(request.param, tmp_path)
    yield srv
    await runner.cleanup()


def _request(body: bytes) -> bytes:
    return (b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


async def test_a_request_is_answered(server: Server) -> None:
    reader, writer = await server.open()
    writer.write(_request(b"hello"))
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    writer.close()


async def test_a_large_body_arrives_whole_through_the_small_tls_buffer(server: Server) -> None:
    body = bytes(range(256)) * 4096  # 1 MiB, many TLS records
    reader, writer = await server.open()
    writer.write(_request(body))
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert await reader.readexactly(len(body)) == body
    writer.close()


async def test_an_idle_connection_is_closed_after_the_keepalive_timeout(server: Server) -> None:
    reader, writer = await server.open()
    start = time.monotonic()
    await tls_app.closed_within(reader, LIMITS.keepalive_timeout + SLACK)
    assert time.monotonic() - start >= LIMITS.keepalive_timeout * 0.8
    writer.close()


async def test_an_idle_connection_after_a_response_is_closed(server: Server) -> None:
    reader, writer = await server.open()
    writer.write(_request(b"x"))
    await reader.readuntil(b"\r\n\r\n")
    await tls_app.closed_within(reader, LIMITS.keepalive_timeout + SLACK)
    writer.close()


async def test_slow_headers_are_cut_off(server: Server) -> None:
    reader, writer = await server.open()
    writer.write(b"POST /echo HTTP/1.1\r\nHost: localhost\r\n")

    async def trickle() -> None:
        with pytest.raises((ConnectionError, ssl.SSLError, RuntimeError)):
            for i in range(100):
                writer.write(f"X-Slow-{i}: y\r\n".encode())
                await writer.drain()
                await asyncio.sleep(0.1)

    task = asyncio.create_task(trickle())
    await tls_app.closed_within(reader, LIMITS.keepalive_timeout + SLACK)
    task.cancel()
    writer.close()


async def test_a_slow_body_gets_408_and_the_connection_is_closed(server: Server) -> None:
    reader, writer = await server.open()
    writer.write(_request(b"0123456789" * 10)[:-90])  # headers and 10 of 100 bytes
    data = await tls_app.closed_within(reader, LIMITS.body_timeout + serving.LINGER_S + SLACK)
    assert data.startswith(b"HTTP/1.1 408")
    writer.close()


async def test_connections_beyond_the_cap_are_refused_and_the_rest_still_served(
        server: Server) -> None:
    held = [await server.open() for _ in range(LIMITS.max_connections)]
    await asyncio.sleep(0.2)
    assert server.started.open_connections == LIMITS.max_connections
    extra_reader, extra_writer = await server.open() if server.client_tls is None else (
        None, None)
    if extra_reader is not None:
        assert await tls_app.closed_within(extra_reader, 1.0) == b""
        extra_writer.close()  # type: ignore[union-attr]
    else:  # over TLS the refused handshake itself fails
        with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
            await server.open()
    assert server.started.refused_connections >= 1
    reader, writer = held[0]
    writer.write(_request(b"still here"))
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    for _, w in held:
        w.close()
    await asyncio.sleep(0.3)
    assert server.started.open_connections == 0
    reader, writer = await server.open()
    writer.write(_request(b"room again"))
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    writer.close()


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_one_client_address_cannot_take_every_slot(tls: bool, tmp_path: Path) -> None:
    # A slowloris from one pod held all 1000 slots: kube-apiserver got connection resets
    # until the keep-alive timeout. Now one address holds at most max_per_client of them.
    limits = serving.Limits(keepalive_timeout=5.0, body_timeout=1.0, handshake_timeout=5.0,
                            max_connections=8, max_per_client=3)
    runner, server = await _start(tls, tmp_path, limits)
    port = server.started.port
    try:
        # 127.0.0.2 floods: raw connections that never send a byte (no handshake either)
        flood = []
        for _ in range(6):
            # one refused at accept may be reset before the client has seen it open
            with contextlib.suppress(ConnectionResetError):
                flood.append(await asyncio.open_connection("127.0.0.1", port,
                                                           local_addr=("127.0.0.2", 0)))
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert server.started.open_connections == 3
        for reader, _ in flood[3:]:  # the ones beyond its share: closed, nothing read
            with contextlib.suppress(ConnectionResetError):
                assert await tls_app.closed_within(reader, SLACK) == b""
        assert server.started.refused_connections == 3
        # another client (127.0.0.1) still gets in, up to its own share
        held = [await server.open() for _ in range(3)]
        reader, writer = held[-1]
        writer.write(_request(b"served"))
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        for _, w in flood + held:
            w.close()
        await asyncio.sleep(0.3)
        assert server.started.open_connections == 0
        # the flooder's share is free again once its connections are gone
        again = await asyncio.open_connection("127.0.0.1", port, ssl=server.client_tls,
                                              local_addr=("127.0.0.2", 0))
        again[1].write(_request(b"again"))
        assert (await again[0].readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        again[1].close()
    finally:
        await runner.cleanup()


async def test_failed_and_stalled_tls_handshakes_free_their_slots(server: Server) -> None:
    if server.client_tls is None:
        pytest.skip("TLS only")
    port = server.started.port
    stalled = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
    garbage = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
    for _, w in garbage:
        w.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # plain HTTP to a TLS port
    for r, _ in garbage:
        await tls_app.closed_within(r, SLACK)
    for r, _ in stalled:  # no ClientHello: cut off by the handshake timeout
        await tls_app.closed_within(r, LIMITS.handshake_timeout + SLACK)
    await asyncio.sleep(0.2)
    assert server.started.open_connections == 0
    # every slot is free again: the cap's worth of real clients still gets in
    held = [await server.open() for _ in range(LIMITS.max_connections)]
    reader, writer = held[-1]
    writer.write(_request(b"after"))
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    for _, w in held + stalled + garbage:
        w.close()


async def test_malformed_http_is_one_warning_line(
        server: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    reader, writer = await server.open()
    writer.write(b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: nope\r\n\r\n")
    data = await tls_app.closed_within(reader, 2.0)
    assert data.split(b" ")[1] == b"400"
    writer.close()
    await asyncio.sleep(0.1)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if r.exc_info]
    lines = [r for r in caplog.records if r.name == "migfit.http"
             and r.levelno == logging.WARNING]
    assert len(lines) == 1 and "\n" not in lines[0].getMessage()


async def test_a_client_gone_mid_body_is_not_an_error(
        server: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _reader, writer = await server.open()
    writer.write(_request(b"x" * 1000)[:-990])
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.transport.abort()
    await asyncio.sleep(0.5)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if r.exc_info]


def test_limits_refuse_values_that_cannot_work() -> None:
    for bad in (serving.Limits(keepalive_timeout=0), serving.Limits(body_timeout=-1),
                serving.Limits(max_connections=0), serving.Limits(max_per_client=0)):
        with pytest.raises(ValueError, match="--"):
            bad.check()


async def _raw(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_each_kind_of_refusal_is_logged(tls: bool, tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """One counter served both limits and only its first refusal was logged: after a
    per-client refusal, filling --max-connections logged nothing (an outside probe). Now
    the first refusal of each kind is logged, and the first of each new episode."""
    caplog.set_level(logging.WARNING, logger="migfit.http")
    limits = serving.Limits(keepalive_timeout=5.0, body_timeout=1.0, handshake_timeout=5.0,
                            max_connections=4, max_per_client=2)
    runner, server = await _start(tls, tmp_path, limits)
    port = server.started.port
    opened = []
    try:
        for _ in range(3):  # the third beyond 127.0.0.2's share
            with contextlib.suppress(ConnectionResetError):
                opened.append(await _raw(port, "127.0.0.2"))
            await asyncio.sleep(0.05)
        for source in ("127.0.0.3", "127.0.0.3", "127.0.0.4"):  # the last beyond the cap
            with contextlib.suppress(ConnectionResetError):
                opened.append(await _raw(port, source))
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert server.started.refused_connections == 2
        lines = [r.getMessage() for r in caplog.records if "refusing new connections" in
                 r.getMessage()]
        assert len(lines) == 2, lines
        assert "--max-connections-per-client" in lines[0], lines
        assert "(--max-connections)" in lines[1], lines
    finally:
        for _, w in opened:
            w.close()
        await runner.cleanup()


def test_a_new_episode_of_refusals_is_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    """After the count drops below its limit, or a quiet minute, the next refusal is logged
    again; refusals in a row are not (but every thousandth), nor an episode that begins
    within 10 s of the last line."""
    caplog.set_level(logging.WARNING, logger="migfit.http")
    now = [100.0]
    gate = serving._Gate(2, 2, clock=lambda: now[0])

    def lines() -> int:
        return sum("refusing new connections" in r.getMessage() for r in caplog.records)

    assert gate.admit() and gate.admit()
    assert not gate.admit() and not gate.admit()  # one episode: one line
    assert lines() == 1
    gate.release()  # below the limit: the episode ends
    assert gate.admit()
    assert not gate.admit()  # a new episode, but within 10 s of the last line
    assert lines() == 1
    now[0] += 11
    gate.release()
    assert gate.admit()
    assert not gate.admit()  # a new episode, 11 s later: logged
    assert lines() == 2
    now[0] += 61
    assert not gate.admit()  # a quiet minute later, still full: a new episode
    assert lines() == 3
    for _ in range(serving._Gate.REFUSALS_PER_LINE - 1):
        assert not gate.admit()
    assert lines() == 4  # the thousandth of the episode
