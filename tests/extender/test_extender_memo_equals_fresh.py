"""Memoised answers equal a fresh computation: after random sequences of cache events, filter
and score from a long-lived index (its per-node memo tables warm) give exactly what a new index
over the same cluster gives."""

from __future__ import annotations

import random
from typing import Any

import pytest
from extender_builders import build, node, pod

from migfit.extender import figures, filtering, scoring

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
            kind = "MODIFIED" if name in pods else "ADDED"
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
