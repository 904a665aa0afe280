"""Memoised answers equal a fresh computation: after random sequences of cache events, filter
and score from a long-lived index (its per-node memo tables warm) give exactly what a new index
over the same cluster gives."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from extender_builders import build, decision, node, pod

from migfit import cluster, keys
from migfit.extender import figures, filtering, scoring, server

PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")
NODES = [f"n{i}" for i in range(8)]


def _sized(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``obj`` with cpu and memory requests (the score's host terms read them)."""
    resources = obj["spec"]["containers"][0].setdefault("resources", {})
    resources.setdefault("requests", {}).update(
        {"cpu": str(rng.randint(1, 48)), "memory": f"{rng.randint(1, 400)}Gi"})
    return obj


def _answers(index: figures.Index, request: filtering.PodRequest
             ) -> tuple[list[str], list[scoring.NodeScore]]:
    names = [*NODES, "ghost"]
    return (list(filtering.filter_nodes(index, request, names).passed),
            scoring.score_nodes(index, request, names))


@pytest.mark.parametrize("seed", range(6))
def test_memoised_answers_equal_fresh_ones_after_random_events(seed: int) -> None:
    rng = random.Random(seed)
    objects = [node(n, {p: rng.randint(0, 3) for p in PROFILES}) for n in NODES]
    model = build(objects)
    warm = figures.Index(model)
    pods: dict[str, str | None] = {}
    for step in range(120):
        event = rng.random()
        name = f"p{rng.randint(0, 30)}"
        profile = rng.choice(PROFILES)
        if event < 0.45:  # a pod arrives pending or bound, or changes binding
            bound = rng.choice([None, *NODES])
            kind: cluster.EventType = "MODIFIED" if name in pods else "ADDED"
            model.apply("Pod", kind,
                        _sized(pod(name, ({profile: 1},), node_name=bound), rng))
            pods[name] = bound
        elif event < 0.7 and name in pods:
            model.apply("Pod", "DELETED", pod(name, ({profile: 1},), node_name=pods.pop(name)))
        elif event < 0.85:  # a node's layout changes
            n = rng.choice(NODES)
            model.apply("Node", "MODIFIED", node(n, {p: rng.randint(0, 3) for p in PROFILES}))
        wanted = _sized(pod(f"w{step}", ({rng.choice(PROFILES): rng.randint(1, 2)},)), rng)
        model.apply("Pod", "ADDED", wanted)
        record = model.pod(wanted["metadata"]["uid"])
        assert record is not None
        request = filtering.request_of(record)
        # Twice on the warm index (the second answer comes from its memo), once fresh.
        _answers(warm, request)
        assert _answers(warm, request) == _answers(figures.Index(model), request), step
        model.apply("Pod", "DELETED", wanted)


# ---------------------------------------------------------------- the answer tables, on the wire

MODELS = ("A100-80GB", "H100-80GB")


def _fresh_filter(model: cluster.Cluster, request: filtering.PodRequest,
                  args: server.Args) -> bytes:
    result = filtering.filter_nodes(figures.Index(model), request, args.names)
    return json.dumps(server.filter_result(args, result), separators=(",", ":")).encode()


def _fresh_prioritize(model: cluster.Cluster, request: filtering.PodRequest,
                      names: list[str]) -> bytes:
    fresh = figures.Index(model)  # nothing kept: each node's score from score_node alone
    scores = [scoring.score_node(fresh, request, n) for n in dict.fromkeys(names)]
    return server.host_priority_list(scores).encode()


@pytest.mark.parametrize("seed", range(4))
async def test_table_answers_equal_fresh_ones_after_random_events(
        aiohttp_client: Any, seed: int) -> None:
    """Filter and prioritize answers of a long-lived server (its answer tables warm), in
    NodeNames and full Nodes modes, are the bytes a fresh computation gives, after random
    node adds/changes/deletes, pod adds/binds/deletes and pending pods that move the
    model-wide scarcity (decision records limiting them to one model)."""
    rng = random.Random(seed)
    nodes: dict[str, dict[str, Any]] = {}

    def layout(n: str) -> dict[str, Any]:
        return node(n, {p: rng.randint(0, 3) for p in PROFILES}, model=rng.choice(MODELS))

    for n in NODES:
        nodes[n] = layout(n)
    model = build(list(nodes.values()))
    client = await aiohttp_client(server.make_app(
        settings=server.ExtenderSettings(log_format="json"), cluster=model))
    pods: dict[str, tuple[str | None, str]] = {}
    for step in range(80):
        event = rng.random()
        name = f"p{rng.randint(0, 20)}"
        profile = rng.choice(PROFILES)
        if event < 0.35:  # a pod arrives pending or bound, or changes binding
            bound = rng.choice([None, *NODES])
            only = rng.choice(MODELS)
            annotations = {keys.DECISION: decision([("c", profile, 9000, [only])])}
            kind: cluster.EventType = "MODIFIED" if name in pods else "ADDED"
            model.apply("Pod", kind, _sized(pod(name, ({profile: 1},), node_name=bound,
                                                annotations=annotations), rng))
            pods[name] = (bound, profile)
        elif event < 0.5 and name in pods:
            bound, had = pods.pop(name)
            model.apply("Pod", "DELETED", pod(name, ({had: 1},), node_name=bound))
        elif event < 0.65:  # a node's layout (or model) changes
            n = rng.choice(NODES)
            nodes[n] = layout(n)
            model.apply("Node", "MODIFIED", nodes[n])
        elif event < 0.75:  # a node goes, or comes back
            n = rng.choice(NODES)
            if n in nodes:
                model.apply("Node", "DELETED", nodes.pop(n))
            else:
                nodes[n] = layout(n)
                model.apply("Node", "ADDED", nodes[n])
        # Few request shapes, so that tables are reused across events: the point of the test.
        wanted = pod(f"w{step % 3}", ({rng.choice(PROFILES): 1},))
        wanted["spec"]["containers"][0]["resources"]["requests"] = {
            "cpu": rng.choice(["1", "8"]), "memory": rng.choice(["4Gi", "64Gi"])}
        model.apply("Pod", "ADDED", wanted)
        request = filtering.decode_pod(wanted)
        names = rng.sample(NODES, rng.randint(1, len(NODES)))
        if rng.random() < 0.3:
            names.append("ghost")  # unknown to the cache: answered, kept nowhere
        node_list = {"kind": "NodeList", "items": [nodes[n] for n in names if n in nodes]}
        for body in ({"Pod": wanted, "NodeNames": names, "Nodes": None},
                     {"Pod": wanted, "NodeNames": None, "Nodes": node_list}):
            data = json.dumps(body).encode()
            args = server.decode_args(data)
            for _twice in range(2):  # the second answer comes from the tables
                filtered = await client.post("/filter", data=data)
                assert await filtered.read() == _fresh_filter(model, request, args), step
                ranked = await client.post("/prioritize", data=data)
                assert await ranked.read() == _fresh_prioritize(model, request, args.names), \
                    step
        model.apply("Pod", "DELETED", wanted)
