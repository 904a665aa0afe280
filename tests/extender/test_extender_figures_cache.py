"""The extender's precomputed figures follow every cache change, and never outlive their cluster."""

from __future__ import annotations

import dataclasses
import gc
import json
import weakref

from extender_builders import build, decision, node, pod

from migfit import keys, profiles
from migfit.extender import figures

A100 = profiles.builtin().get("A100-80GB")


def _fresh(index: figures.Index) -> figures.Index:
    index.refresh()
    return index


def _free(index: figures.Index, name: str, profile: str = "1g.10gb") -> int | None:
    fig = _fresh(index).figures.get(name)
    if fig is None:
        return None
    return {p: free for p, _alloc, free in fig.advertised}.get(profiles.ProfileName(profile), 0)


def test_node_add_modify_delete_refresh_the_figures_and_supply() -> None:
    model = build([node("a", {"1g.10gb": 2})])
    index = figures.Index(model)
    assert _free(index, "a") == 2 and index.supply("a100-80gb", "1g.10gb") == 2
    model.apply("Node", "ADDED", node("b", {"1g.10gb": 3}))
    assert _free(index, "b") == 3 and index.supply("a100-80gb", "1g.10gb") == 5
    model.apply("Node", "MODIFIED", node("a", {"3g.40gb": 2}))
    assert _free(index, "a") == 0 and _free(index, "a", "3g.40gb") == 2
    assert index.supply("a100-80gb", "1g.10gb") == 3
    model.apply("Node", "DELETED", node("b", {}))
    assert _free(index, "b") is None and index.supply("a100-80gb", "1g.10gb") == 0


def test_annotation_and_label_changes_refresh_the_figures() -> None:
    model = build([node("a", {"1g.10gb": 2})])
    index = figures.Index(model)
    assert _fresh(index).figures["a"].repartitioning is None
    busy = json.dumps({"state": "applying"})
    model.apply("Node", "MODIFIED", node("a", {"1g.10gb": 2},
                                         annotations={keys.ANNOTATION_RELAYOUT: busy}))
    assert _fresh(index).figures["a"].repartitioning is not None
    assert _fresh(index).supply("a100-80gb", "1g.10gb") == 0
    model.apply("Node", "MODIFIED", node("a", {"1g.10gb": 2}, state="pending"))
    assert "pending" in (_fresh(index).figures["a"].repartitioning or "")
    model.apply("Node", "MODIFIED", node("a", {"1g.10gb": 2}))
    assert _fresh(index).figures["a"].repartitioning is None
    assert _fresh(index).supply("a100-80gb", "1g.10gb") == 2


def test_pod_bind_unbind_and_termination_refresh_the_figures_and_demand() -> None:
    model = build([node("a", {"1g.10gb": 2}), pod("p")])
    index = figures.Index(model)
    assert _free(index, "a") == 2 and index.demand_profiles() == {"1g.10gb": 1}
    model.apply("Pod", "MODIFIED", pod("p", node_name="a"))  # bound
    assert _free(index, "a") == 1 and index.demand_profiles() == {}
    model.apply("Pod", "MODIFIED", pod("p", node_name="a", phase="Succeeded"))  # terminated
    assert _free(index, "a") == 2
    model.apply("Pod", "ADDED", pod("q", node_name="a"))
    assert _free(index, "a") == 1
    model.apply("Pod", "DELETED", pod("q", node_name="a"))  # unbound by deletion
    assert _free(index, "a") == 2
    model.apply("Pod", "ADDED", pod("r", ({"3g.40gb": 1},)))
    assert index.demand_profiles() == {"3g.40gb": 1}
    model.apply("Pod", "DELETED", pod("r", ({"3g.40gb": 1},)))
    assert index.demand_profiles() == {}


def test_a_pending_pods_annotation_change_refreshes_demand() -> None:
    model = build([node("a", {"1g.10gb": 2}), pod("p")])
    index = figures.Index(model)
    assert index.demand("a100-80gb", "1g.10gb") == 1
    only_h100 = decision([("c0", "1g.10gb", 9000, ["H100-80GB"])])
    model.apply("Pod", "MODIFIED", pod("p", annotations={"migfit.io/decision": only_h100}))
    assert index.demand("a100-80gb", "1g.10gb") == 0
    assert index.demand("h100-80gb", "1g.10gb") == 1


def test_an_index_does_not_keep_its_cluster_alive() -> None:
    model = build([node("a", {"1g.10gb": 2})])
    _fresh(figures.Index(model))
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None


def test_relayout_chance_is_per_model_not_per_model_id() -> None:
    # A catalog override may give the same model id other memory: the answer must follow it.
    small = A100.profile("1g.10gb")
    bigger = dataclasses.replace(small, memory_mib=small.memory_mib * 2)
    other = dataclasses.replace(
        A100, profiles=tuple(bigger if p is small else p for p in A100.profiles),
        _by_name={**{p.name: p for p in A100.profiles}, small.name: bigger})
    need = small.memory_mib + 1
    assert not figures.relayout_chance(A100, "1g.10gb", need).possible
    assert figures.relayout_chance(other, "1g.10gb", need).possible
