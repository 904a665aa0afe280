"""The webhook's admission bodies being received at once are bounded, all connections together
(``serving.read_body``'s budget: by default ``serving.BUDGET_BODIES`` of ``--max-body``), over
the real TLS server.

Before: each body was bounded (1 MiB) but not their sum, so a thousand slow connections could
make the webhook hold a GiB; a review beyond what the budget holds waited for its body like
any other. Now it gets 503 with ``Retry-After: 1`` before its body is read: kube-apiserver's
client (client-go's REST client) retries such an answer, where a 413 would fail the pod's
creation.
"""

from __future__ import annotations

import asyncio
import json
import ssl

import webhook_scenery as s
from webhook_scenery import MakeClient

from migfit import requests, serving

MAX_BODY = 16 * 1024


def _head(length: int) -> bytes:
    return (b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(length).encode() + b"\r\n\r\n")


async def test_a_review_beyond_the_budget_gets_503_with_retry_after(
        make_client: MakeClient, client_ssl: ssl.SSLContext) -> None:
    client = await make_client(max_body_bytes=MAX_BODY,
                               limits=serving.Limits(body_timeout=3.0))
    port = client.server.port

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", port, ssl=client_ssl,
                                             server_hostname="localhost")

    held = []
    for _ in range(serving.BUDGET_BODIES):  # reviews of the largest body, being received
        reader, writer = await connect()
        writer.write(_head(MAX_BODY) + b'{"kind": ')
        await writer.drain()
        held.append((reader, writer))
    await asyncio.sleep(0.2)
    review = json.dumps(s.review(s.pod({requests.GPU_MEMORY: "8Gi"}))).encode()
    reader, writer = await connect()
    writer.write(_head(len(review)))  # its head alone: answered before the body is sent
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 1.0)
    assert head.startswith(b"HTTP/1.1 503"), head
    assert b"\r\nRetry-After: 1\r\n" in head and b"\r\nConnection: close\r\n" in head, head
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    body = json.loads(await reader.readexactly(length))
    assert body["status"] == 503 and "--max-body-in-flight" in body["error"], body
    writer.close()
    for _, w in held:  # their clients gone: the budget is whole again
        w.transport.abort()
    await asyncio.sleep(0.2)
    resp = await client.post("/mutate", data=review, headers={"Content-Type": "application/json"})
    assert resp.status == 200 and (await resp.json())["response"]["allowed"] is True
