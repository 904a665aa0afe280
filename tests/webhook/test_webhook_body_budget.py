"""The webhook's admission bodies being received at once are bounded, all connections together
(``serving.read_body``'s budget: by default ``serving.WEBHOOK_BUDGET_BODIES`` of
``--max-body``), over the real TLS server.

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

    async def connect(client: int = 1) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        # from 127.0.0.``client``: one client may hold a share of the budget only
        return await asyncio.open_connection("127.0.0.1", port, ssl=client_ssl,
                                             server_hostname="localhost",
                                             local_addr=(f"127.0.0.{client}", 0))

    held = []
    for i in range(serving.WEBHOOK_BUDGET_BODIES):  # reviews of the largest body, being received
        reader, writer = await connect(10 + i)
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


async def test_one_client_with_four_slow_reviews_does_not_block_the_others(
        make_client: MakeClient, client_ssl: ssl.SSLContext) -> None:
    """An outside probe: four TLS connections from one client, each declaring a review of the
    largest size and sending one byte, held the whole budget: every other admission got 503
    for the body timeout. Now that client holds its share (all but one largest review); its
    next review gets 503 naming the share, and another client's admission is answered."""
    client = await make_client(max_body_bytes=MAX_BODY,
                               limits=serving.Limits(body_timeout=3.0))
    port = client.server.port
    share = (serving.WEBHOOK_BUDGET_BODIES - 1) * MAX_BODY

    async def connect(source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", port, ssl=client_ssl,
                                             server_hostname="localhost",
                                             local_addr=(source, 0))

    slow = []
    for _ in range(serving.WEBHOOK_BUDGET_BODIES):
        reader, writer = await connect("127.0.0.20")
        writer.write(_head(MAX_BODY) + b"{")
        await writer.drain()
        slow.append((reader, writer))
        await asyncio.sleep(0.05)  # in this order: the last one is over the share
    reader = slow[-1][0]
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 1.0)
    assert head.startswith(b"HTTP/1.1 503"), head
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    body = json.loads(await reader.readexactly(length))
    assert f"{share:,} at most from one client" in body["error"], body
    assert "--max-body-in-flight" in body["error"], body
    review = json.dumps(s.review(s.pod({requests.GPU_MEMORY: "8Gi"}))).encode()
    reader, writer = await connect("127.0.0.21")
    writer.write(_head(len(review)) + review)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2.0)
    assert head.startswith(b"HTTP/1.1 200"), head
    writer.close()
    for _, w in slow:
        w.transport.abort()


async def test_one_client_sending_many_reviews_at_once_within_the_budget_gets_every_answer(
        make_client: MakeClient, client_ssl: ssl.SSLContext) -> None:
    """kube-apiserver sends every admission from one address, many at once. An outside probe
    sent four reviews of about a quarter of the largest body each from one client, their
    bodies still arriving: a share of a quarter of the budget (one largest body) answered the
    fourth 503. Within its share (the webhook's budget of 8 largest bodies but one), one
    client gets every answer: here as many reviews of over half the largest body as it holds."""
    client = await make_client(max_body_bytes=MAX_BODY,
                               limits=serving.Limits(body_timeout=3.0))
    port = client.server.port
    padded = s.pod({requests.GPU_MEMORY: "8Gi", "example.com/note": "x" * (MAX_BODY // 2)})
    review = json.dumps(s.review(padded)).encode()
    assert MAX_BODY // 2 < len(review) <= MAX_BODY
    pending = []
    count = (serving.WEBHOOK_BUDGET_BODIES - 1) * MAX_BODY // len(review)  # its whole share
    assert count > serving.BUDGET_BODIES * MAX_BODY // len(review)  # beyond a budget of 4
    for _ in range(count):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ssl, server_hostname="localhost",
            local_addr=("127.0.0.22", 0))
        writer.write(_head(len(review)) + review[:100])
        await writer.drain()
        pending.append((reader, writer))
        await asyncio.sleep(0.05)
    for _, writer in pending:
        writer.write(review[100:])
    for reader, writer in pending:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 3.0)
        assert head.startswith(b"HTTP/1.1 200"), head
        writer.close()
