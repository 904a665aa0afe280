"""Helpers for the certs tests: client contexts and a real asyncio TLS echo server."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

from cryptography import x509

SERVICE = "migfit-webhook"
NAMESPACE = "migfit-system"
EXTRA = ("127.0.0.1", "localhost")
SANS = (
    SERVICE,
    f"{SERVICE}.{NAMESPACE}",
    f"{SERVICE}.{NAMESPACE}.svc",
    f"{SERVICE}.{NAMESPACE}.svc.cluster.local",
    *EXTRA,
)


def client_context(*, cafile: Path | None = None, cadata: bytes | None = None) -> ssl.SSLContext:
    """What a Go or Python client does: verify the chain and the hostname."""
    return ssl.create_default_context(
        cafile=None if cafile is None else str(cafile),
        cadata=None if cadata is None else cadata.decode("ascii"),
    )


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


@contextlib.asynccontextmanager
async def tls_server(context: ssl.SSLContext) -> AsyncIterator[int]:
    """An echo server on 127.0.0.1 speaking TLS with ``context``; yields its port."""
    server = await asyncio.start_server(_echo, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


class Connection:
    """An open TLS client connection to the echo server."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @property
    def serial(self) -> int:
        obj = self.writer.get_extra_info("ssl_object")
        der = obj.getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number

    async def echo(self, text: bytes = b"ping\n") -> bytes:
        self.writer.write(text)
        await self.writer.drain()
        return await asyncio.wait_for(self.reader.readline(), 10)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


async def connect(port: int, context: ssl.SSLContext, hostname: str) -> Connection:
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=hostname), 10
    )
    return Connection(reader, writer)


async def served_serial(port: int, context: ssl.SSLContext, hostname: str) -> int:
    """Open a new connection, check it works, and return the serial the server presented."""
    conn = await connect(port, context, hostname)
    try:
        assert await conn.echo() == b"ping\n"
        return conn.serial
    finally:
        await conn.close()


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number
