"""Starts an aiohttp app through ``migfit.serving`` for the serving tests: over plain HTTP, or
over TLS with a throwaway certificate for localhost and a client context that trusts it."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from pathlib import Path

from aiohttp import web

from migfit import serving
from migfit.certs import certificates


async def start(app: web.Application, tmp: Path, *, tls: bool, limits: serving.Limits
                ) -> tuple[web.AppRunner, serving.Started, ssl.SSLContext | None]:
    """The runner, where it listens (127.0.0.1, a free port), and the client's TLS context
    (None over plain HTTP)."""
    server_ctx = client_ctx = None
    if tls:
        cert, key, ca = certificates.self_signed_for_localhost()
        (tmp / "tls.crt").write_bytes(cert)
        (tmp / "tls.key").write_bytes(key)
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ctx.load_cert_chain(tmp / "tls.crt", tmp / "tls.key")
        client_ctx = ssl.create_default_context(cadata=ca.decode())
    runner, started = await serving.start(app, serving.Listen(
        host="127.0.0.1", port=0, ssl_context=server_ctx, limits=limits))
    return runner, started, client_ctx


class Client:
    """Opens connections to a started app, over TLS when the app was started with it."""

    def __init__(self, started: serving.Started, tls: ssl.SSLContext | None, *,
                 receive_buffer: int | None = None) -> None:
        self.started = started
        self.client_tls = tls
        self._receive_buffer = receive_buffer  # None: the kernel's default

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._receive_buffer is None:
            return await asyncio.open_connection("127.0.0.1", self.started.port,
                                                 ssl=self.client_tls)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", self.started.port))
        return await asyncio.open_connection(
            sock=sock, ssl=self.client_tls,
            server_hostname="localhost" if self.client_tls else None)


async def closed_within(reader: asyncio.StreamReader, seconds: float = 3.0) -> bytes:
    """Everything the server sends until it closes the connection; fails if it stays open
    ``seconds`` longer."""
    data = b""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"connection still open after {seconds}s (got {data[:80]!r})"
        try:
            chunk = await asyncio.wait_for(reader.read(65536), left)
        except (ConnectionError, ssl.SSLError):
            return data
        if not chunk:
            return data
        data += chunk
