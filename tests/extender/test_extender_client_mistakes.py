"""The extender served as ``migfit extender`` serves it: a client's mistakes are not ERRORs.

Before: a malformed request logged "Error handling request" at ERROR with a traceback, and a
client gone mid-body an ERROR traceback from the error middleware. Then, what aiohttp's parser
rejects was answered with aiohttp's ``text/plain`` 400 quoting the client's bytes back; now it
is the extender's ``{"Error": ...}`` with a fixed message (``serving.JsonErrors``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from extender_builders import args, build, node, pod

from migfit import serving
from migfit.certs import certificates
from migfit.extender import server

LIMITS = serving.Limits(keepalive_timeout=2.0, body_timeout=0.5, max_connections=16)


@pytest.fixture
async def port() -> AsyncIterator[int]:
    settings = server.ExtenderSettings(host="127.0.0.1", port=0, limits=LIMITS)
    app = server.make_app(settings=settings, cluster=build([node("n", {"1g.10gb": 7})]))
    runner, started = await serving.start(app, server.listen_of(settings, None))
    yield started.port
    await runner.cleanup()


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def _exchange(port: int, data: bytes, *, abort: bool = False) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    if abort:
        await asyncio.sleep(0.2)
        writer.transport.abort()
        await asyncio.sleep(0.3)
        return b""
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return answer


def _post(body: bytes, length: int | None = None) -> bytes:
    return (b"POST /filter HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body) if length is None else length).encode()
            + b"\r\n\r\n" + body)


async def test_a_filter_call_is_answered(port: int) -> None:
    body = json.dumps(args(pod("x"), ["n"])).encode()
    answer = await _exchange(port, _post(body).replace(b"HTTP/1.1\r\n",
                                                      b"HTTP/1.1\r\nConnection: close\r\n"))
    assert answer.startswith(b"HTTP/1.1 200") and b'"NodeNames":["n"]' in answer


async def test_malformed_http_is_one_warning(port: int,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    answer = await _exchange(port, b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: -5"
                                   b"\r\n\r\n")
    assert answer.split(b" ")[1] == b"400"
    assert not _errors(caplog)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


async def test_a_request_head_is_bounded(port: int, caplog: pytest.LogCaptureFixture) -> None:
    """A client cannot make a connection hold aiohttp's default 128 header lines of 8 KiB
    (about 2.5 MiB parsed, per connection, until the keep-alive timeout): more than
    ``serving.MAX_HEADERS`` lines, or a line over ``serving.MAX_FIELD_SIZE``, is a 431
    (Request Header Fields Too Large; 400 before, as aiohttp answers it)."""
    caplog.set_level(logging.DEBUG)
    body = json.dumps(args(pod("x"), ["n"])).encode()
    ok = b"".join(b"X-Pad-%d: v\r\n" % i for i in range(serving.MAX_HEADERS - 4))
    answer = await _exchange(port, _post(body).replace(
        b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n" + ok))
    assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
    token = b"Authorization: Bearer " + b"t" * 6000 + b"\r\n"  # a long service-account token
    answer = await _exchange(port, _post(body).replace(
        b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n" + token))
    assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
    many = b"".join(b"X-Pad-%d: v\r\n" % i for i in range(serving.MAX_HEADERS + 1))
    answer = await _exchange(port, _post(body).replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\n" + many))
    assert answer.split(b" ")[1] == b"431"
    long = b"X-Long: " + b"v" * serving.MAX_FIELD_SIZE + b"\r\n"
    answer = await _exchange(port, _post(body).replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\n" + long))
    assert answer.split(b" ")[1] == b"431"
    assert not _errors(caplog)


async def test_traffic_that_is_not_http_is_one_debug_line(
        port: int, caplog: pytest.LogCaptureFixture) -> None:
    """A first request line that is not HTTP at all (a port scanner, or plain text sent to a
    TLS port) is noise aiohttp logs at debug: one line, no traceback, and still a 400."""
    caplog.set_level(logging.DEBUG)
    answer = await _exchange(port, b"GARBAGE / NOTHTTP\r\n\r\n")
    assert answer.split(b" ")[1] == b"400"
    assert not _errors(caplog)
    mine = [r for r in caplog.records if r.name == "migfit.http"]
    assert [r.levelno for r in mine] == [logging.DEBUG], mine
    assert "\n" not in mine[0].getMessage() and "BadHttpMethod" in mine[0].getMessage()


async def test_a_client_gone_mid_body_is_no_error(port: int,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await _exchange(port, _post(b'{"Pod": {', length=5000), abort=True)
    assert not _errors(caplog)


async def test_a_slow_body_gets_408(port: int, caplog: pytest.LogCaptureFixture) -> None:
    answer = await _exchange(port, _post(b'{"Pod": {', length=5000))
    assert answer.startswith(b"HTTP/1.1 408")
    assert not _errors(caplog)
    # Counted as what it was answered (before, the calls counter said code="200").
    await _exchange(port, _post(b'{"Pod": {', length=5000), abort=True)  # gone mid-body
    metrics = await _exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                    b"Connection: close\r\n\r\n")
    calls = {line.split(b" ")[0] for line in metrics.splitlines()
             if line.startswith(b"migfit_extender_requests_total{")}
    assert calls == {b'migfit_extender_requests_total{code="408",verb="filter"}',
                     b'migfit_extender_requests_total{code="400",verb="filter"}'}, calls



@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_malformed_http_gets_the_extenders_json_error(
        tls: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client_tls = None
    if tls:
        cert, key, ca = certificates.self_signed_for_localhost()
        (tmp_path / "tls.crt").write_bytes(cert)
        (tmp_path / "tls.key").write_bytes(key)
        client_tls = ssl.create_default_context(cadata=ca.decode())
    settings = server.ExtenderSettings(
        host="127.0.0.1", port=0, limits=LIMITS, tls_cert=tmp_path / "tls.crt" if tls else None,
        tls_key=tmp_path / "tls.key" if tls else None)
    reloader = server.tls_reloader(settings)
    app = server.make_app(settings=settings, cluster=build([node("n", {"1g.10gb": 7})]))
    runner, started = await serving.start(app, server.listen_of(settings, reloader))
    mark = b"zq-client-bytes"
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", started.port, ssl=client_tls,
            server_hostname="localhost" if tls else None)
        writer.write(b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + mark + b"\r\n{}\r\n0\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 5)  # to the end: the server closes
        writer.close()
    finally:
        await runner.cleanup()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"400", answer[:200]
    assert b"\r\nConnection: close" in head
    assert b"\r\nContent-Type: application/json" in head
    assert json.loads(body) == {"Error": "malformed chunked body: each chunk is its size in "
                                         "hexadecimal, CRLF, the data, CRLF, and a chunk of "
                                         "size 0 ends the body"}
    assert mark not in answer
    mine = [r for r in caplog.records if r.name == "migfit.http"]
    assert [r.levelno for r in mine] == [logging.WARNING]
    assert mark.decode() not in mine[0].getMessage()
    assert not _errors(caplog)
