"""Two extender apps in one process share nothing, and their memos are bounded by the cluster.

Before: the figures index lived in a module-level registry keyed by cluster, ``/advice`` read a
process-wide cache that the command line configured, and the host-prefix and message tables
were module globals; per-node memo tables kept an entry for every name a request carried
(50,000 unseen names per call grew them without bound) and for every deleted node.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from extender_builders import args, build, node, pod

from migfit import advisor
from migfit.extender import advice, figures, filtering, scoring, server

Client = TestClient[web.Request, web.Application]


async def _post(client: Client, verb: str, body: Any) -> Any:
    resp = await client.post(f"/{verb}", data=json.dumps(body),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 200
    return await resp.json()


def _waiting(name: str, seconds: float) -> dict[str, Any]:
    """A pending 3g.40gb pod the scheduler marked Unschedulable ``seconds`` ago."""
    since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    obj = pod(name, ({"3g.40gb": 1},))
    obj["status"]["conditions"] = [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ")}]
    return obj


async def test_two_apps_over_two_clusters_share_nothing(aiohttp_client: Any) -> None:
    model_a = build([node("a", {"1g.10gb": 7}), _waiting("waiting", 30)])
    model_b = build([node("b", {"1g.10gb": 7}), _waiting("waiting", 30)])
    index_a, index_b = figures.Index(model_a), figures.Index(model_b)
    grace_0 = advice.AdviceCache(settings=advisor.Settings(grace_s=0.0))
    app_a = server.make_app(settings=server.ExtenderSettings(), cluster=model_a,
                            index=index_a, advice_cache=grace_0)
    app_b = server.make_app(settings=server.ExtenderSettings(), cluster=model_b,
                            index=index_b)
    a: Client = await aiohttp_client(app_a)
    b: Client = await aiohttp_client(app_b)
    names = ["a", "b"]

    assert (await _post(a, "filter", args(pod("x"), names)))["NodeNames"] == ["a"]
    assert (await _post(b, "filter", args(pod("x"), names)))["NodeNames"] == ["b"]
    scores_a = {h["Host"]: h["Score"] for h in await _post(a, "prioritize", args(pod("x"), names))}
    scores_b = {h["Host"]: h["Score"] for h in await _post(b, "prioritize", args(pod("x"), names))}
    assert scores_a["b"] == 0 and scores_a["a"] > 0
    assert scores_b["a"] == 0 and scores_b["b"] > 0

    # Each app holds what it was given, and nothing of the other's.
    assert app_a[server.INDEX] is index_a and app_b[server.INDEX] is index_b
    assert app_a[server.ADVICE] is grace_0 and app_b[server.ADVICE] is not grace_0
    assert app_a[server.MESSAGES] is not app_b[server.MESSAGES]

    # A change in one cluster reaches its app only.
    model_a.apply("Node", "DELETED", node("a", {}))
    assert (await _post(a, "filter", args(pod("x"), names)))["NodeNames"] == []
    assert (await _post(b, "filter", args(pod("x"), names)))["NodeNames"] == ["b"]

    # /advice answers from each app's own cache: with a grace of 0 s (a's) the pod waiting
    # for 30 s counts, with the default 60 s (b's) it does not yet.
    assert (await (await a.get("/advice")).json())["waiting"] == ["default/waiting"]
    assert (await (await b.get("/advice")).json())["waiting"] == []


def test_an_index_given_for_another_cluster_is_refused() -> None:
    one, other = build([node("a", {"1g.10gb": 1})]), build([])
    try:
        server.make_app(settings=server.ExtenderSettings(), cluster=one,
                        index=figures.Index(other))
    except ValueError as exc:
        assert "another cluster" in str(exc)
    else:
        raise AssertionError("an index of another cluster was accepted")


def _both_verbs(index: figures.Index, names: list[str]) -> None:
    for shape in (pod("x"), pod("y", ({"1g.10gb": 2},)), pod("z", ({"3g.40gb": 1},))):
        request = filtering.decode_pod(shape)
        filtering.filter_nodes(index, request, names)
        scores = scoring.score_nodes(index, request, names)
        server.host_priority_list(scores, index)


def test_unknown_names_leave_no_memo_entry() -> None:
    model = build([node(f"n{i}", {"1g.10gb": 7}) for i in range(3)])
    index = figures.Index(model)
    _both_verbs(index, ["n0", "n1", "n2"])
    known = index.memo_entries()
    assert known > 0
    for call in range(5):
        _both_verbs(index, [f"ghost-{call}-{i}" for i in range(2000)] + ["n0"])
    assert index.memo_entries() == known


def test_deleted_nodes_leave_no_memo_entry() -> None:
    model = build([node(f"n{i}", {"1g.10gb": 7}) for i in range(200)])
    index = figures.Index(model)
    _both_verbs(index, model.node_names())
    assert index.memo_entries() > 0
    for name in model.node_names():
        model.apply("Node", "DELETED", node(name, {}))
    _both_verbs(index, ["n0"])  # the next call refreshes the index
    assert len(model) == 0 and index.memo_entries() == 0
