"""HTTPS with a required client certificate, as kube-scheduler's tlsConfig can present one."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path

import aiohttp
import pytest
from extender_builders import args, build, node, pod

from migfit.certs import certificates
from migfit.extender import server


def _write(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    ca = certificates.create_ca(common_name="test CA")
    serving = certificates.issue_serving(ca=ca, sans=("localhost", "127.0.0.1"))
    client = certificates.issue_client(ca=ca, common_name="kube-scheduler")
    stranger_ca = certificates.create_ca(common_name="someone else")
    stranger = certificates.issue_client(ca=stranger_ca, common_name="intruder")
    return {
        "ca": _write(tmp_path, "ca.crt", ca.cert_pem),
        "cert": _write(tmp_path, "tls.crt", serving.cert_pem),
        "key": _write(tmp_path, "tls.key", serving.key_pem),
        "client_cert": _write(tmp_path, "client.crt", client.cert_pem),
        "client_key": _write(tmp_path, "client.key", client.key_pem),
        "stranger_cert": _write(tmp_path, "s.crt", stranger.cert_pem),
        "stranger_key": _write(tmp_path, "s.key", stranger.key_pem),
    }


def _client_context(pki: dict[str, Path], who: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    if who is not None:
        context.load_cert_chain(str(pki[f"{who}_cert"]), str(pki[f"{who}_key"]))
    return context


async def test_https_with_client_certificate_required(pki: dict[str, Path]) -> None:
    model = build([node("n", {"1g.10gb": 7})])
    settings = server.ExtenderSettings(host="127.0.0.1", port=0, tls_cert=pki["cert"],
                                       tls_key=pki["key"], client_ca=pki["ca"])
    stop = asyncio.Event()
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(settings, model, stop=stop,
                                            on_started=started.set_result))
    try:
        port = await asyncio.wait_for(started, 10)
        url = f"https://localhost:{port}/filter"
        body = json.dumps(args(pod("want"), ["n"]))
        async with aiohttp.ClientSession() as session:
            async with session.post(url, data=body,
                                    ssl=_client_context(pki, "client")) as resp:
                assert resp.status == 200
                assert (await resp.json())["NodeNames"] == ["n"]
            for who in (None, "stranger"):
                with pytest.raises(aiohttp.ClientError):
                    async with session.post(url, data=body,
                                            ssl=_client_context(pki, who)) as resp:
                        await resp.read()
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_plain_http_when_no_certificate_is_given() -> None:
    model = build([node("n", {"1g.10gb": 7})])
    settings = server.ExtenderSettings(host="127.0.0.1", port=0)
    stop = asyncio.Event()
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(settings, model, stop=stop,
                                            on_started=started.set_result))
    try:
        port = await asyncio.wait_for(started, 10)
        async with aiohttp.ClientSession() as session, session.get(
                f"http://127.0.0.1:{port}/readyz") as resp:
            assert resp.status == 200
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
