"""Fixtures for the webhook tests: a generated CA, and the webhook app served over real TLS."""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp
import pytest
import webhook_scenery as scenery
from webhook_scenery import Client, MakeClient

from migfit import cluster
from migfit.certs import certificates, reloading
from migfit.webhook import decision, server


@pytest.fixture(scope="session")
def ca() -> certificates.Issued:
    return certificates.create_ca(common_name="webhook tests CA")


@pytest.fixture(scope="session")
def serving(ca: certificates.Issued) -> certificates.Issued:
    return certificates.issue_serving(ca=ca, sans=("localhost", "127.0.0.1"))


@pytest.fixture
def client_ssl(ca: certificates.Issued) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    return context


@pytest.fixture
def make_client(
    aiohttp_server: Any, aiohttp_client: Any, serving: certificates.Issued,
    client_ssl: ssl.SSLContext,
) -> MakeClient:
    """Serve ``make_app`` over TLS and return a client that trusts only the test CA."""

    async def make(view: cluster.Cluster | None = None, *,
                   policy: decision.Policy = scenery.POLICY, **settings: Any) -> Client:
        context = reloading.context_from_pem(cert_pem=serving.cert_pem,
                                             key_pem=serving.key_pem)
        app = server.make_app(server.Settings(policy=policy, **settings),
                              scenery.make_cluster() if view is None else view)
        srv = await aiohttp_server(app, ssl=context)
        client: Client = await aiohttp_client(
            srv, connector=aiohttp.TCPConnector(ssl=client_ssl))
        return client

    return make
