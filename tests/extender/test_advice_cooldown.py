"""The extender's advice cools a node down after a re-layout it saw (docs/relayout.md §6).

Before, only the simulator passed ``recent`` to the advisor: the extender's advice never
cooled a node down, so a node re-laid out a moment ago was planned again at once for pods
that had waited since before its change, and layouts could flap.
"""

from __future__ import annotations

from typing import Any

from migfit import advisor, builders, cluster, profiles
from migfit.extender import advice

T0 = 1_700_000_000.0
STAMP = "2023-11-14T22:13:20Z"  # T0


def _node(name: str, alloc: dict[str, int], config: str, state: str = "success"
          ) -> dict[str, Any]:
    labels = builders.mig_labels(product="NVIDIA-A100-SXM4-80GB", instances=alloc,
                                 config=config, config_state=state, count_labels=False)
    return builders.node(name, labels=labels,
                         resources=builders.mig_resources(alloc, whole_gpus=None))


def _waiting(name: str, profile: str) -> dict[str, Any]:
    return builders.pod(name, [{profiles.resource_name(profile): "1"}],
                        unschedulable_since=STAMP, image="x", container_names=["main"])


def _recommended(cache: advice.AdviceCache, state: cluster.Cluster, now: float) -> list[str]:
    return [r.node for r in cache.get(state, now=now).recommendations]


def test_a_node_seen_re_laid_out_is_not_planned_again_for_older_demand() -> None:
    state = cluster.Cluster()
    cluster.load_objects(state, [_node("a", {"3g.40gb": 2}, "all-3g.40gb"),
                                 _waiting("p", "1g.10gb")])
    cache = advice.AdviceCache(clock=lambda: T0)
    assert _recommended(cache, state, T0 + 120) == ["a"]
    assert cache.recent == {}  # the first look is no change
    # The node is re-laid out (by someone else) to a layout that still lacks 1g.10gb.
    state.apply("Node", "MODIFIED", _node("a", {"7g.80gb": 1}, "all-7g.80gb", "pending"))
    state.apply("Node", "MODIFIED", _node("a", {"7g.80gb": 1}, "all-7g.80gb"))
    assert _recommended(cache, state, T0 + 200) == []
    assert cache.recent == {"a": T0 + 200}
    # Without the history (a process that did not see the change) it is planned at once.
    assert _recommended(advice.AdviceCache(), state, T0 + 200) == ["a"]
    # Cooled down after Settings.cooldown_s: planned again, and forgotten.
    later = T0 + 200 + advisor.Settings().cooldown_s
    state.apply("Pod", "ADDED", _waiting("q", "2g.20gb"))  # any change of the cluster
    assert _recommended(cache, state, later) == ["a"]
    assert cache.recent == {}


def test_demand_newer_than_the_change_may_re_lay_it_out_again() -> None:
    state = cluster.Cluster()
    cluster.load_objects(state, [_node("a", {"3g.40gb": 2}, "all-3g.40gb")])
    cache = advice.AdviceCache()
    assert _recommended(cache, state, T0) == []
    state.apply("Node", "MODIFIED", _node("a", {"7g.80gb": 1}, "all-7g.80gb"))
    assert _recommended(cache, state, T0 + 10) == []
    assert cache.recent == {"a": T0 + 10}
    # Two pods that became unschedulable after the change (cooldown_min = 2 instances).
    for name in ("p", "q"):
        pod = builders.pod(name, [{profiles.resource_name("1g.10gb"): "1"}],
                           unschedulable_since="2023-11-14T22:20:00Z", image="x",
                           container_names=["main"])
        state.apply("Pod", "ADDED", pod)
    assert _recommended(cache, state, T0 + 600) == ["a"]
