"""The served certificate follows its files without dropping requests; shutdown finishes work."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import webhook_scenery as s

from migfit import errors, requests
from migfit.certs import certificates
from migfit.webhook import server

REVIEW = json.dumps(s.review(s.pod({requests.GPU_MEMORY: "12Gi"}))).encode()


def write_pair(directory: Path, issued: certificates.Issued) -> None:
    """Replace the pair atomically, as kubelet's symlink swap does."""
    for name, data in (("tls.crt", issued.cert_pem), ("tls.key", issued.key_pem)):
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, directory / name)


@pytest.fixture
async def running(tmp_path: Path, ca: certificates.Issued, serving: certificates.Issued
                  ) -> AsyncIterator[tuple[int, asyncio.Event, Path]]:
    write_pair(tmp_path, serving)
    settings = server.Settings(policy=s.POLICY, host="127.0.0.1", port=0,
                               tls_cert=tmp_path / "tls.crt", tls_key=tmp_path / "tls.key",
                               reload_interval=0.05, shutdown_timeout=5)
    stop = asyncio.Event()
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(settings, s.make_cluster(), stop=stop,
                                            on_started=started.set_result))
    port = await asyncio.wait_for(started, 10)
    yield port, stop, tmp_path
    stop.set()
    await asyncio.wait_for(task, 10)


async def peer_certificate(port: int, context: ssl.SSLContext) -> bytes:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    der: bytes = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    await writer.wait_closed()
    return der


def der(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


async def test_rotation_is_seen_by_new_connections_and_drops_nothing(
    running: tuple[int, asyncio.Event, Path], ca: certificates.Issued,
    serving: certificates.Issued, client_ssl: ssl.SSLContext,
) -> None:
    port, _, directory = running
    assert await peer_certificate(port, client_ssl) == der(serving.cert_pem)
    url = f"https://127.0.0.1:{port}/mutate?timeout=10s"
    failures: list[str] = []
    done = asyncio.Event()

    async def keep_asking() -> int:
        count = 0
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl)) as kept:
            while not done.is_set() or count < 20:
                async with kept.post(url, data=REVIEW) as resp:
                    if resp.status != 200 or not (await resp.json())["response"]["allowed"]:
                        failures.append(str(resp.status))
                count += 1
        return count

    asker = asyncio.create_task(keep_asking())
    await asyncio.sleep(0.1)
    renewed = certificates.issue_serving(ca=ca, sans=("localhost", "127.0.0.1"))
    write_pair(directory, renewed)
    for _ in range(200):
        if await peer_certificate(port, client_ssl) == der(renewed.cert_pem):
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the new certificate was never served")
    # A broken pair keeps the last good certificate.
    (directory / "tls.key").write_bytes(b"not a key")
    await asyncio.sleep(0.2)
    assert await peer_certificate(port, client_ssl) == der(renewed.cert_pem)
    done.set()
    assert await asker >= 20
    assert failures == []


async def test_shutdown_drains_then_finishes_requests_in_flight(
    tmp_path: Path, serving: certificates.Issued, client_ssl: ssl.SSLContext,
) -> None:
    write_pair(tmp_path, serving)
    settings = server.Settings(policy=s.POLICY, host="127.0.0.1", port=0,
                               tls_cert=tmp_path / "tls.crt", tls_key=tmp_path / "tls.key",
                               drain_delay=0.5, shutdown_timeout=5)
    stop = asyncio.Event()
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(settings, s.make_cluster(), stop=stop,
                                            on_started=started.set_result))
    port = await asyncio.wait_for(started, 10)
    base = f"https://127.0.0.1:{port}"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl)) as session:
        async def ask() -> int:
            async with session.post(f"{base}/mutate", data=REVIEW) as resp:
                await resp.read()
                return resp.status

        assert await ask() == 200
        burst = [asyncio.create_task(ask()) for _ in range(20)]
        stop.set()  # SIGTERM while requests are in flight
        assert await asyncio.gather(*burst) == [200] * 20
        async with session.get(f"{base}/readyz") as resp:
            assert resp.status == 503  # draining: endpoints drop us, requests still served
        assert await ask() == 200
        await asyncio.wait_for(task, 10)
    with pytest.raises(OSError):  # then the listener is gone
        await peer_certificate(port, client_ssl)


@pytest.mark.parametrize(("field", "value", "flag"), [
    ("reload_interval", 0.0, "--reload-interval"),
    ("max_body_bytes", 0, "--max-body"),
    ("shutdown_timeout", -1.0, "--shutdown-timeout"),
    ("drain_delay", float("nan"), "--drain-delay"),
])
async def test_settings_that_would_fail_quietly_are_refused_up_front(
        tmp_path: Path, serving: certificates.Issued, field: str, value: float, flag: str
) -> None:
    """A reload interval of 0 used to stop the reload task at once, silently."""
    write_pair(tmp_path, serving)
    settings = server.Settings(policy=s.POLICY, host="127.0.0.1", port=0,
                               tls_cert=tmp_path / "tls.crt", tls_key=tmp_path / "tls.key")
    changes: dict[str, Any] = {field: value}
    settings = dataclasses.replace(settings, **changes)
    with pytest.raises(errors.UsageError) as exc:
        await server.serve(settings, None, stop=asyncio.Event())
    assert exc.value.message.startswith(flag)
