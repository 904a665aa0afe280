"""Hostile annotation values and names, through the real TLS server (issue 12 items 3-5).

A ``gpu-compute`` of 5,000 digits crashed the decision (``int()`` refuses more than 4,300
digits: a 500 and an ERROR traceback); long ``gpu-compute``/``gpu-media`` values were echoed
whole; ``gpu-memory: "12"`` was 12 bytes and got a 1g.5gb; a name with a newline wrote a
forged log line.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import webhook_scenery as s
from webhook_scenery import MakeClient

from migfit import requests, serving
from migfit.extender import filtering, scoring, scoring_log


async def post(make_client: MakeClient, review: dict[str, Any]) -> dict[str, Any]:
    client = await make_client()
    resp = await client.post("/mutate", data=json.dumps(review),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 200
    body: dict[str, Any] = await resp.json()
    return body["response"]


@pytest.mark.parametrize(("key", "value"), [
    (requests.GPU_COMPUTE, "9" * 5000),
    (requests.GPU_COMPUTE, "1" * 500_000),
    (requests.GPU_MEDIA, "x" * 500_000),
    (requests.GPU_COMPUTE, "٣"),  # a digit to str.isdigit, not to the catalog
    (requests.GPU_MEMORY_PREFIX + "main", "1" * 500_000),
], ids=["compute-5000-digits", "compute-500k-digits", "media-500k", "compute-arabic-digit",
        "memory-500k-digits"])
async def test_huge_or_odd_values_are_denied_briefly_without_an_error_log(
        make_client: MakeClient, caplog: pytest.LogCaptureFixture, key: str, value: str
) -> None:
    annotations = {requests.GPU_MEMORY: "8Gi", key: value}
    with caplog.at_level(logging.INFO):
        response = await post(make_client, s.review(s.pod(annotations)))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert key in message and len(message) < 400
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_long_keys_and_container_names_are_quoted_short() -> None:
    name = "c" * 100_000
    with pytest.raises(requests.RequestError) as raised:
        requests.parse({requests.GPU_MEMORY_PREFIX + name: "1Gi"},
                       containers=[f"n{i}" for i in range(1000)])
    assert len(raised.value.message) < 600
    assert "and 992 more" in raised.value.message


@pytest.mark.parametrize(("value", "hint"), [
    ("12", "did you mean 12Gi?"),
    ("512", "did you mean 512Gi?"),
    ("1023Ki", "too little for any GPU instance; write an amount such as 12Gi"),
    ("1e5", "with a unit such as 12Gi"),
])
async def test_less_than_a_mebibyte_is_a_forgotten_unit(
        make_client: MakeClient, value: str, hint: str) -> None:
    response = await post(make_client, s.review(s.pod({requests.GPU_MEMORY: value})))
    assert response["allowed"] is False
    assert "less than 1Mi" in response["status"]["message"]
    assert hint in response["status"]["message"]


async def test_one_mebibyte_is_still_a_request(make_client: MakeClient) -> None:
    response = await post(make_client, s.review(s.pod({requests.GPU_MEMORY: "1Mi"})))
    assert response["allowed"] is True


@pytest.mark.parametrize("name", [
    "x\n2026-12-03T06:00:00.000Z CRITICAL migfit: forged",
    "x\r\x1b[2Kforged",
    "lone \ud800 surrogate\u2028line",
], ids=["newline", "carriage-return-escape", "lone-surrogate"])
async def test_logged_names_cannot_forge_lines(
        make_client: MakeClient, caplog: pytest.LogCaptureFixture, name: str) -> None:
    review = s.review(s.pod({requests.GPU_MEMORY: "12"}))
    review["request"]["name"] = name
    review["request"]["namespace"] = name
    with caplog.at_level(logging.INFO, logger="migfit.webhook.server"):
        response = await post(make_client, review)
    assert response["allowed"] is False
    lines = [r.getMessage() for r in caplog.records if r.name == "migfit.webhook.server"]
    assert lines and all(line.isprintable() for line in lines)
    assert all(line.encode("utf-8") for line in lines)  # no lone surrogate left


async def test_a_uid_with_a_lone_surrogate_is_echoed(make_client: MakeClient) -> None:
    review = s.review(s.pod({requests.GPU_MEMORY: "12Gi"}))
    review["request"]["uid"] = "uid-\ud800"
    response = await post(make_client, review)
    assert response["uid"] == "uid-\ud800" and response["allowed"] is True


def test_the_extender_text_line_escapes_node_names() -> None:
    """kube-scheduler's node names are the client's: a lone surrogate made every text
    scoring line fail to encode (248 times in one run), a newline forged a line."""
    request = filtering.decode_pod({"metadata": {"name": "p\nforged", "namespace": "ml",
                                                 "uid": "u"},
                                    "spec": {"containers": [{"name": "c", "resources": {
                                        "limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}})
    scores = [scoring.NodeScore(node="gpu-\ud800\nCRITICAL forged", score=0, fits=False)]
    line = scoring_log.ScoringLog().text_line(request, scores, 0.001)
    assert line.isprintable() and line.encode("utf-8")


@pytest.mark.parametrize("drop", ["missing", "null"])
async def test_a_pod_create_without_its_object_is_malformed_not_let_through(
        make_client: MakeClient, drop: str) -> None:
    # kube-apiserver always sends the Pod of a CREATE; one without it was allowed untouched.
    sent = s.review(s.pod({requests.GPU_MEMORY: "8Gi"}))
    if drop == "missing":
        del sent["request"]["object"]
    else:
        sent["request"]["object"] = None
    response = await post(make_client, sent)
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    assert "no Pod object" in response["status"]["message"]
    # a DELETE carries no object and is let through untouched, as before
    gone = s.review(s.pod({requests.GPU_MEMORY: "8Gi"}), operation="DELETE")
    gone["request"]["object"] = None
    assert (await post(make_client, gone))["allowed"] is True


async def test_a_body_too_large_is_refused_before_it_is_invited(
        make_client: MakeClient, client_ssl: Any) -> None:
    # Expect: 100-continue with a declared 50 MB body got "100 Continue" (send it), then the
    # 413 once it came: the server now answers the declared length at once.
    import asyncio

    client = await make_client()
    port = client.server.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ssl,
                                                   server_hostname="localhost")
    writer.write(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                 b"\r\nExpect: 100-continue\r\nContent-Length: 50000000\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"100 Continue" not in head
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    body = json.loads(await reader.readexactly(length))
    assert body == {"error": "the request body is larger than 3145728 bytes", "status": 413}
    writer.close()
    # a body within the limit is still invited and answered
    small = json.dumps(s.review(s.pod({requests.GPU_MEMORY: "8Gi"}))).encode()
    resp = await client.post("/mutate", data=small, expect100=True,
                             headers={"Content-Type": "application/json"})
    assert resp.status == 200 and (await resp.json())["response"]["allowed"] is True


async def test_a_body_nested_90000_deep_is_refused_and_the_server_lives(
        make_client: MakeClient) -> None:
    """180 KB of brackets: orjson before 3.9.15 overflowed the C stack on it and the process
    died (CVE-2024-27454); now it is a 400 like any body that is not an AdmissionReview."""
    client = await make_client()
    depth = 90_000  # within the arrays a body may hold (serving.BYTES_PER_CONTAINER)
    for body in (b"[" * depth + b"]" * depth,
                 b'{"kind":"AdmissionReview","request":' + b"[" * depth + b"]" * depth + b"}"):
        resp = await client.post("/mutate", data=body,
                                 headers={"Content-Type": "application/json"})
        assert resp.status == 400, await resp.text()
    review = s.review(s.pod({requests.GPU_MEMORY: "12Gi"}))
    resp = await client.post("/mutate", json=review)
    assert resp.status == 200


async def test_a_review_of_more_arrays_than_its_size_allows_gets_413_before_it_is_parsed(
        make_client: MakeClient) -> None:
    """Empty arrays cost 3 bytes of body and 56 bytes or more each once parsed (an outside
    probe's 30 MiB of them took the extender to 1.17 GB). A body may hold one array or object
    per serving.BYTES_PER_CONTAINER bytes of --max-body; more is a 413 that says so."""
    max_body = 256 * 1024
    most = max_body // serving.BYTES_PER_CONTAINER
    client = await make_client(max_body_bytes=max_body)

    def review(arrays: int) -> bytes:
        made = s.review(s.pod({requests.GPU_MEMORY: "12Gi"}))
        made["request"]["object"]["metadata"]["labels"] = {"x": "PAD"}
        return json.dumps(made).encode().replace(
            b'"PAD"', b'"y"},"x":[' + b"[]," * (arrays - 1) + b'[]],"z":{"a":"b"')

    resp = await client.post("/mutate", data=review(most + 10),
                             headers={"Content-Type": "application/json"})
    body = await resp.json()
    assert resp.status == 413, body
    assert f"more than {most:,}" in body["error"] and "--max-body" in body["error"], body
    resp = await client.post("/mutate", data=review(most // 2),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 200, await resp.text()
