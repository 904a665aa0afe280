"""The decision memo is bounded in bytes, not only in entries (review issue 1).

It kept up to 4,096 answers whatever their size, each with its encoded response and the
verdict's patch objects, until the supply moved: 40 distinct AdmissionReviews of 430 KB took
the webhook from 285 MB to 970 MB, and it stayed there (its pod's limit is 1 GiB). Now an
entry over ``memo.DEFAULT_MAX_ENTRY_BYTES`` is not kept, and the oldest go while all hold more
than ``max_bytes``. Real AdmissionReviews over real HTTP (aiohttp's test server).
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from typing import Any

import webhook_scenery as s
from webhook_scenery import Client, MakeClient

from migfit import cluster, requests
from migfit.webhook import memo, server, view

ENV: list[dict[str, Any]] = [{"name": f"SETTING_{k}", "value": f"value-{k}"} for k in range(20)]


async def post(client: Client, review: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post("/mutate", data=json.dumps(review),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 200
    body: dict[str, Any] = await resp.json()
    assert body["response"]["uid"] == review["request"]["uid"]
    response: dict[str, Any] = body["response"]
    del response["uid"]
    return response


def wide(i: int) -> dict[str, Any]:
    """A valid pod of 3,000 containers, 64 of them (the most a pod may ask for) given GPU
    memory: an AdmissionReview of about 250 KB; ``i`` makes it differ from the others."""
    names = [f"w{i}-c{j:04d}" for j in range(3000)]
    annotations = {requests.GPU_MEMORY_PREFIX + n: "4Gi" for n in names[:64]}
    return s.pod(annotations, containers=[{"name": n} for n in names])


async def test_large_answers_are_not_remembered(make_client: MakeClient) -> None:
    client = await make_client()
    state = client.server.app[server.STATE]
    first = await post(client, s.review(wide(0)))  # warm up: imports, caches, first supply
    assert first["allowed"] is True
    reviews = [s.review(wide(i)) for i in range(1, 21)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for review in reviews:
            assert (await post(client, review))["allowed"] is True
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert retained < 4 * 2**20, f"{retained} bytes kept after 20 answers"
    assert len(state.memo) == 0 and len(state.exact) == 0
    assert state.memo.stats.too_large == 21
    # Not remembered, still answered the same.
    assert await post(client, s.review(wide(0))) == first


async def test_the_memo_holds_at_most_its_bytes_and_forgets_the_oldest_first(
        aiohttp_client: Any) -> None:
    view_ = s.make_cluster()
    decisions: memo.DecisionMemo[server.Answer] = memo.DecisionMemo(max_bytes=40_000)
    app = server.make_app(server.Settings(policy=s.POLICY), view_,
                          tracker=view.SupplyTracker(view_), decisions=decisions)
    client: Client = await aiohttp_client(app)
    state = app[server.STATE]
    pods = [s.pod({requests.GPU_MEMORY: f"{8000 + i}Mi"}) for i in range(12)]
    answers = []
    for pod in pods:
        answers.append(await post(client, s.review(pod)))
        assert 0 < state.memo.bytes <= 40_000 and 0 < state.exact.bytes <= 40_000
    kept = len(state.memo)
    assert 1 < kept < len(pods) and state.memo.stats.evictions == len(pods) - kept
    assert state.memo.stats.too_large == 0
    # The newest are answered from ready bytes, the oldest decided again, alike.
    assert await post(client, s.review(pods[-1])) == answers[-1]
    assert state.exact.stats.hits == 1
    misses = state.memo.stats.misses
    assert await post(client, s.review(pods[0])) == answers[0]
    assert state.memo.stats.misses == misses + 1
    # A supply change drops every entry, and the bytes they held.
    cluster.load_objects(view_, [s.mig_node("gpu-c")])
    await post(client, s.review(pods[1]))
    assert len(state.memo) == 1 and state.memo.stats.resets == 1
    assert state.memo.bytes < 40_000 / kept * 2


async def test_the_default_bytes_hold_the_default_count_of_typical_answers(
        make_client: MakeClient) -> None:
    """The byte bound changes nothing for workloads' usual pods: 4,096 answers for a pod
    like bench/bench_webhook.py's (a trainer, two sidecars, an init container) fit in it."""
    client = await make_client()
    state = client.server.app[server.STATE]
    pod = s.pod({requests.GPU_MEMORY: "12Gi", requests.DEFAULT_CONTAINER: "trainer",
                 "prometheus.io/scrape": "true"}, containers=[
        {"name": "istio-proxy", "image": "istio/proxyv2:1.22.0", "env": ENV[:5],
         "resources": {"limits": {"cpu": "2", "memory": "1Gi"},
                       "requests": {"cpu": "100m", "memory": "128Mi"}}},
        {"name": "trainer", "image": "registry.example/ml/train:2.3", "env": ENV,
         "volumeMounts": [{"name": "data", "mountPath": "/data"}],
         "resources": {"limits": {"cpu": "8", "memory": "64Gi"},
                       "requests": {"cpu": "4", "memory": "32Gi"}}},
        {"name": "log-shipper", "image": "fluent/fluent-bit:3.0"}])
    pod["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox:1.36"}]
    response = await post(client, s.review(pod))
    assert response["allowed"] is True and len(state.memo) == 1
    assert state.memo.bytes * memo.DEFAULT_CAPACITY <= memo.DEFAULT_MAX_BYTES


def test_the_answer_estimate_bounds_what_an_answer_holds() -> None:
    # The server sizes a memo entry's answer from its encoded tail (server.entry_size), not
    # by walking the verdict's patch objects on every miss: the factor must cover them.
    from migfit.webhook import decision

    supply = s.supply_of(s.make_cluster())
    for n in (1, 3, 16, 64):
        names = [f"c{j}" for j in range(n)]
        pod = s.pod({requests.GPU_MEMORY_PREFIX + c: "8Gi" for c in names},
                    containers=[{"name": c, "env": ENV[:2]} for c in names])
        ready = server.answer_for(decision.decide_pod(pod, supply=supply, policy=s.POLICY))
        assert ready.verdict.allowed
        walked = memo.footprint(ready, 10**9)
        assert walked <= server.ANSWER_PER_TAIL_BYTE * len(ready.tail) <= 1.25 * walked, n
