"""A webhook that can decide nothing is not Ready, and says so honestly (issue 16 item 5).

It reported Ready without a cluster view and without --gpu-models, denied every annotated pod
with "retry in a few seconds", and logged "deciding from --gpu-models from now on" though
none were given.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

import aiohttp
import pytest
import webhook_scenery as s
from webhook_scenery import MakeClient

from migfit import cluster, profiles, requests
from migfit.certs import certificates
from migfit.webhook import decision, server


def unsynced() -> cluster.Cluster:
    return cluster.Cluster(profiles.builtin())


async def test_no_view_and_no_models_is_not_ready(make_client: MakeClient) -> None:
    client = await make_client(unsynced(), policy=decision.Policy())
    resp = await client.get("/readyz")
    assert resp.status == 503
    body = await resp.json()
    assert body["ready"] is False and "--gpu-models" in body["reason"]


async def test_fallback_models_or_a_synced_view_are_ready(make_client: MakeClient) -> None:
    for client in (await make_client(unsynced(), policy=s.POLICY),
                   await make_client(policy=decision.Policy())):
        resp = await client.get("/readyz")
        assert resp.status == 200 and (await resp.json())["ready"] is True


async def test_a_stopped_source_is_logged_as_what_happens_next(
        tmp_path: Path, serving: certificates.Issued, client_ssl: ssl.SSLContext,
        caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    settings = server.Settings(policy=decision.Policy(), host="127.0.0.1", port=0,
                               tls_cert=tmp_path / "tls.crt", tls_key=tmp_path / "tls.key")
    stop = asyncio.Event()
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def failing_source() -> None:
        raise RuntimeError("cannot reach the API server")

    with caplog.at_level(logging.INFO, logger="migfit.webhook.server"):
        task = asyncio.create_task(server.serve(settings, unsynced(), stop=stop,
                                                source_run=failing_source,
                                                on_started=started.set_result))
        port = await asyncio.wait_for(started, 10)
        url = f"https://127.0.0.1:{port}"
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=client_ssl)) as session:
            async with session.get(url + "/readyz") as resp:
                assert resp.status == 503
            review = s.review(s.pod({requests.GPU_MEMORY: "12Gi"}))
            async with session.post(url + "/mutate", json=review) as resp:
                assert (await resp.json())["response"]["allowed"] is False
        stop.set()
        await asyncio.wait_for(task, 10)
    lines = [r.getMessage() for r in caplog.records if r.name == "migfit.webhook.server"]
    assert any("no --gpu-models: not Ready" in line for line in lines)
    (stopped,) = [line for line in lines if "the cluster source stopped" in line]
    assert "cannot reach the API server" in stopped
    assert "no cluster view and no --gpu-models" in stopped
    assert "deciding from --gpu-models" not in " ".join(lines)


def test_the_message_names_the_models_when_there_are_some() -> None:
    app = server.make_app(server.Settings(policy=s.POLICY), unsynced())
    assert server.without_source(app[server.STATE]) == (
        "deciding from --gpu-models (A100-80GB) from now on")
    app = server.make_app(server.Settings(policy=s.POLICY), s.make_cluster())
    assert "last view of the cluster" in server.without_source(app[server.STATE])
