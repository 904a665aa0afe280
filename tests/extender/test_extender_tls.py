"""HTTPS with a client certificate, as kube-scheduler's tlsConfig can present one: required for
the scheduler's verbs and /advice, not for the probes and metrics."""

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


async def test_https_with_a_client_certificate_for_the_verbs_and_the_advice(
        pki: dict[str, Path]) -> None:
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
            async with session.get(f"https://localhost:{port}/advice",
                                   ssl=_client_context(pki, "client")) as resp:
                assert resp.status == 200
            # A certificate of another CA fails the handshake.
            with pytest.raises(aiohttp.ClientError):
                async with session.post(url, data=body,
                                        ssl=_client_context(pki, "stranger")) as resp:
                    await resp.read()
            # None at all: the kubelet's probes and a metrics scrape get through (a required
            # certificate failed them all, so the pod never became Ready: an outside check);
            # the scheduler's verbs and the pending pods of /advice do not.
            anonymous = _client_context(pki, None)
            for path in ("/healthz", "/readyz", "/metrics"):
                async with session.get(f"https://localhost:{port}{path}",
                                       ssl=anonymous) as resp:
                    assert resp.status == 200, path
            for method, path in (("POST", "/filter"), ("POST", "/prioritize"),
                                 ("GET", "/advice")):
                async with session.request(method, f"https://localhost:{port}{path}",
                                           data=body if method == "POST" else None,
                                           ssl=anonymous) as resp:
                    assert resp.status == 403, path
                    assert (await resp.json())["Error"] == (
                        f"{path} needs a client certificate signed by the extender's "
                        "--client-ca (kube-scheduler: the extender's tlsConfig.certFile and "
                        "keyFile)")
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
