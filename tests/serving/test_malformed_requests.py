"""What aiohttp's parser rejects before any handler runs, over real sockets (plain and TLS, both
event loops): answered in the application's JSON error shape with a fixed message that says
what to change, 400 (431 for a request head over its bounds), ``Connection: close``; one log
line, no traceback, and none of the client's bytes in the answer or the log.

Before: aiohttp's own answer, ``text/plain``, quoted the offending bytes back
(``Invalid header token: b'Bad Header: <script>'``), always 400, with no ``Connection``
header, and the log line quoted them too. These tests also fail should aiohttp stop
answering its parse errors through ``RequestHandler.handle_error`` (``serving.JsonErrors``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import tls_app
from aiohttp import web

from migfit import serving

LIMITS = serving.Limits(keepalive_timeout=2.0, body_timeout=1.0, handshake_timeout=2.0,
                        max_connections=8)
MARK = b"zq-client-bytes"  # in every bad request: must come back nowhere
Server = tls_app.Client


async def _echo(request: web.Request) -> web.Response:
    return web.Response(body=await serving.read_body(request, LIMITS.body_timeout))


def _shaped(status: int, message: str) -> web.StreamResponse:
    return web.json_response({"Problem": message, "code": status}, status=status)


async def _boom(request: web.Request) -> web.Response:
    raise RuntimeError("a bug, with no error middleware to answer it")


@pytest.fixture(params=[False, True], ids=["http", "https"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Server]:
    app = web.Application()
    app.router.add_post("/echo", _echo)
    app.router.add_get("/boom", _boom)
    app[serving.ERROR_ANSWER] = _shaped
    runner, started, client_ctx = await tls_app.start(app, tmp_path, tls=request.param,
                                                      limits=LIMITS)
    yield Server(started, client_ctx)
    await runner.cleanup()


def _post(head: bytes = b"", body: bytes = b"") -> bytes:
    return b"POST /echo HTTP/1.1\r\nHost: localhost\r\n" + head + b"\r\n" + body


CASES: list[tuple[str, bytes, int, str]] = [
    ("not HTTP", MARK + b"\r\n\r\n", 400, "not an HTTP request"),
    ("bad version", b"GET /" + MARK + b" HTTP/9.x\r\nHost: x\r\n\r\n", 400,
     "malformed request line"),
    ("bad header name", _post(b"Bad " + MARK + b": v\r\n"), 400, "malformed header line"),
    ("no colon", _post(MARK + b"<b>\r\n"), 400, "malformed header line"),
    ("control character", _post(b"X-A: " + MARK + b"\x00\r\n"), 400, "malformed header line"),
    ("bad Content-Length", _post(b"Content-Length: -5" + MARK + b"\r\n"), 400,
     "Content-Length"),
    ("two Content-Lengths", _post(b"Content-Length: 1\r\nContent-Length: 2\r\n", b"ab"), 400,
     "Content-Length"),
    ("chunked and Content-Length", _post(b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
                                         b"0\r\n\r\n"), 400, "Transfer-Encoding"),
    ("bad chunk size", _post(b"Transfer-Encoding: chunked\r\n",
                             MARK + b"\r\nabc\r\n0\r\n\r\n"), 400, "malformed chunked body"),
    ("long request line", b"GET /" + MARK * 700 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431,
     f"longer than {serving.MAX_LINE_SIZE:,} bytes"),
    ("long header", _post(b"X-Long: " + MARK * 700 + b"\r\n"), 431,
     f"longer than {serving.MAX_FIELD_SIZE:,} bytes"),
    ("too many headers", _post(b"".join(b"X-%d: %s\r\n" % (i, MARK)
                                        for i in range(serving.MAX_HEADERS + 1))), 431,
     f"more than {serving.MAX_HEADERS} header lines"),
]


def _parse(answer: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, json.loads(body)


@pytest.mark.parametrize(("data", "status", "says"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
async def test_a_malformed_request_gets_the_apps_json_error(
        server: Server, caplog: pytest.LogCaptureFixture, data: bytes, status: int,
        says: str) -> None:
    caplog.set_level(logging.DEBUG)
    reader, writer = await server.open()
    writer.write(data)
    answer = await tls_app.closed_within(reader)  # Connection: close, and closed
    writer.close()
    code, headers, body = _parse(answer)
    assert code == status, answer[:200]
    assert headers["content-type"].startswith("application/json")
    assert headers["connection"] == "close"
    assert body == {"Problem": body["Problem"], "code": status}
    assert says in body["Problem"], body
    assert MARK not in answer
    mine = [r for r in caplog.records if r.name == "migfit.http"]
    assert len(mine) == 1, [r.getMessage() for r in mine]
    line = mine[0].getMessage()
    assert "\n" not in line and MARK.decode() not in line and says in line
    assert mine[0].levelno == (logging.DEBUG if says == "not an HTTP request"
                               else logging.WARNING)
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def test_tls_sent_to_a_plain_http_port_is_told_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A client speaking TLS to a plain-HTTP port (kube-scheduler's enableHTTPS against an
    extender without --tls-cert): one debug line that says so, not a warning."""
    caplog.set_level(logging.DEBUG)
    runner, started, _ = await tls_app.start(web.Application(), tmp_path, tls=False,
                                             limits=LIMITS)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", started.port)
        writer.write(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + MARK)
        answer = await tls_app.closed_within(reader)
        writer.close()
    finally:
        await runner.cleanup()
    code, headers, body = _parse(answer)
    assert code == 400 and headers["connection"] == "close"
    # No ERROR_ANSWER: the default shape.
    assert body == {"error": "TLS was sent to a plain-HTTP port; connect with http://",
                    "status": 400}
    mine = [r for r in caplog.records if r.name == "migfit.http"]
    assert [r.levelno for r in mine] == [logging.DEBUG]
    assert "TLS was sent to a plain-HTTP port" in mine[0].getMessage()


async def test_the_connection_before_a_malformed_request_is_served_as_usual(
        server: Server) -> None:
    """Only the malformed request is refused: the requests before it on the connection were
    answered as they came."""
    reader, writer = await server.open()
    writer.write(_post(b"Content-Length: 2\r\n", b"ok"))
    first = await reader.readuntil(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200")
    assert await reader.readexactly(2) == b"ok"
    writer.write(_post(b"Bad Header: v\r\n"))
    code, headers, body = _parse(await tls_app.closed_within(reader))
    writer.close()
    assert code == 400 and headers["connection"] == "close"
    assert body["Problem"].startswith("malformed header line")


async def test_an_error_past_the_parser_is_in_the_apps_shape_too(server: Server) -> None:
    """A handler's unexpected error that no middleware answered (both servers' middlewares
    answer theirs): aiohttp's 500, in the application's JSON, with no traceback."""
    reader, writer = await server.open()
    writer.write(b"GET /boom HTTP/1.1\r\nHost: localhost\r\n\r\n")
    code, headers, body = _parse(await tls_app.closed_within(reader))
    writer.close()
    assert code == 500 and headers["connection"] == "close"
    assert body == {"Problem": "internal error; see the server's log", "code": 500}
