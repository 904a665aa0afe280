"""The webhook, served over TLS as ``migfit webhook`` serves it, answers what aiohttp's parser
rejects (before any handler runs) in its own error shape, ``{"error": ..., "status": ...}``,
with ``Connection: close`` and none of the client's bytes, and counts it in
``migfit_webhook_bad_requests``.

Before: aiohttp's ``text/plain`` answer quoted the bytes back (``Invalid header token:
b'Bad Header: v'``), and the log line quoted them too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import AsyncIterator

import pytest
import webhook_scenery as scenery

from migfit import serving as http
from migfit.certs import certificates, reloading
from migfit.webhook import server

MARK = b"zq-client-bytes"


@pytest.fixture
async def port(serving: certificates.Issued) -> AsyncIterator[int]:
    context = reloading.context_from_pem(cert_pem=serving.cert_pem, key_pem=serving.key_pem)
    app = server.make_app(server.Settings(policy=scenery.POLICY), scenery.make_cluster())
    runner, started = await http.start(app, http.Listen(host="127.0.0.1", port=0,
                                                        ssl_context=context))
    yield started.port
    await runner.cleanup()


async def _exchange(port: int, tls: ssl.SSLContext, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls,
                                                   server_hostname="localhost")
    writer.write(data)
    answer = await asyncio.wait_for(reader.read(), 5)  # to the end: the server closes
    writer.close()
    return answer


@pytest.mark.parametrize(("head", "status", "says"), [
    (b"Bad Header: " + MARK + b"\r\n", 400, "malformed header line"),
    (b"Content-Length: " + MARK + b"\r\n", 400, "invalid Content-Length"),
    (b"X-Long: " + MARK * 700 + b"\r\n", 431, "longer than 8,190 bytes"),
    (b"".join(b"X-%d: v\r\n" % i for i in range(http.MAX_HEADERS + 1)), 431,
     f"more than {http.MAX_HEADERS} header lines"),
], ids=["header", "content-length", "long-header", "many-headers"])
async def test_a_malformed_request_is_answered_in_the_webhooks_shape(
        port: int, client_ssl: ssl.SSLContext, caplog: pytest.LogCaptureFixture,
        head: bytes, status: int, says: str) -> None:
    caplog.set_level(logging.DEBUG)
    answer = await _exchange(port, client_ssl, b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n"
                                               + head + b"\r\n")
    top, _, body = answer.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert lines[0].split(" ")[1] == str(status), answer[:200]
    assert headers["content-type"].startswith("application/json")
    assert headers["connection"] == "close"
    error = json.loads(body)
    assert error["status"] == status and set(error) == {"error", "status"}
    assert says in error["error"]
    assert MARK not in answer
    mine = [r for r in caplog.records if r.name == "migfit.http"]
    assert [r.levelno for r in mine] == [logging.WARNING]
    assert MARK.decode() not in mine[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    metrics = await _exchange(port, client_ssl, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n"
                                                b"Connection: close\r\n\r\n")
    assert f'migfit_webhook_bad_requests_total{{status="{status}"}} 1.0'.encode() in metrics


def _post(head: bytes, body: bytes = b"") -> bytes:
    return (b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            + head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


@pytest.mark.parametrize(("data", "status", "says"), [
    (_post(b"Content-Encoding: br\r\n", b"abc"), 415,
     "unsupported Content-Encoding: send the body as gzip, deflate or identity"),
    (_post(b"Content-Encoding: zstd\r\n", b"abc"), 415,
     "unsupported Content-Encoding: send the body as gzip, deflate or identity"),
    (b"GET /healthz HTTP/1.1\r\nX-Mark: " + MARK + b"\r\n\r\n", 400,
     "the Host header is missing"),
    (_post(b"Content-Encoding: gzip\r\n", b'{"kind": "' + MARK + b'"}'), 400,
     "the request body does not decode as gzip"),
    (_post(b"Expect: " + MARK + b"\r\n", b"{}"), 417,
     "unsupported Expect header: send Expect: 100-continue, or none"),
], ids=["br", "zstd", "no-host", "not-gzip", "expect"])
async def test_a_refusal_says_what_is_wrong(
        port: int, client_ssl: ssl.SSLContext, caplog: pytest.LogCaptureFixture,
        data: bytes, status: int, says: str) -> None:
    """Each was answered "malformed HTTP request" (br, zstd), "malformed header line" (no
    Host), "incomplete request body" with an "Unhandled exception" warning and a "client gone
    mid-body" line (a body that is not gzip), or text/plain echoing the client's Expect."""
    caplog.set_level(logging.DEBUG)
    answer = await _exchange(port, client_ssl, data)
    top, _, body = answer.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert lines[0].split(" ")[1] == str(status), answer[:300]
    assert headers["content-type"].startswith("application/json"), answer[:300]
    assert headers["connection"] == "close", answer[:300]
    error = json.loads(body)
    assert error["error"].startswith(says) and error["status"] == status, error
    assert MARK not in answer
    logged = " | ".join(r.getMessage() for r in caplog.records)
    assert "Unhandled exception" not in logged and "mid-body" not in logged, logged
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_a_slow_body_is_answered_408_saying_so(
        serving: certificates.Issued, client_ssl: ssl.SSLContext) -> None:
    """The 408 said "Request Timeout" (the reason phrase), not what was too slow."""
    context = reloading.context_from_pem(cert_pem=serving.cert_pem, key_pem=serving.key_pem)
    app = server.make_app(server.Settings(policy=scenery.POLICY,
                                          limits=http.Limits(body_timeout=0.5)),
                          scenery.make_cluster())
    runner, started = await http.start(app, http.Listen(host="127.0.0.1", port=0,
                                                        ssl_context=context))
    try:
        answer = await _exchange(started.port, client_ssl,
                                 _post(b"", b"{" * 50)[:-40])  # 10 bytes of 50, then nothing
    finally:
        await runner.cleanup()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    error = json.loads(answer.partition(b"\r\n\r\n")[2])
    assert error == {"error": "request body too slow", "status": 408}, error


async def test_a_get_with_a_body_is_answered_and_closed_unread(
        port: int, client_ssl: ssl.SSLContext) -> None:
    """GET /healthz with Content-Length: 99999999999 was answered 200, then the server read
    and dropped what the client streamed, past --max-body and --body-timeout (an outside
    probe: 17 GB). Now a declared body beyond --max-body is a 413 on a GET too, and a smaller
    one is left unread: answered, then the connection closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ssl,
                                                   server_hostname="localhost")
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n"
                 b"Content-Length: 99999999999\r\n\r\n" + b" " * 65536)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"\r\nConnection: close\r\n" in head, head
    rest = await _until_closed(reader)
    assert b"takes no body" in rest and b"--max-body" in rest, rest
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ssl,
                                                   server_hostname="localhost")
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n"
                 + b" " * 10)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"\r\nConnection: close\r\n" in head, head
    await _until_closed(reader)
    writer.close()


async def _until_closed(reader: asyncio.StreamReader) -> bytes:
    """What the server sends until it closes the connection (it must, within 5 s)."""
    data = b""
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while chunk := await asyncio.wait_for(reader.read(65536), 5):
            data += chunk
    return data
