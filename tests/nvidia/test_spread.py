"""The device plugin picks the instance inside a node: ``migfit status`` says when the instances
in use may sit on more GPUs than they need (README: the packed allocation policy)."""

from __future__ import annotations

from typing import Any

from migfit import cluster, migparted, profiles
from migfit.commands import status

A100 = profiles.builtin().get("A100-80GB")
P = profiles.ProfileName


def test_spread_bounds_on_a_uniform_layout() -> None:
    alloc = {P("1g.10gb"): 28}  # 4 GPUs of all-1g.10gb
    s = migparted.spread(A100, alloc, {P("1g.10gb"): 3}, 4)
    assert s == migparted.Spread(needed=1, worst=3)
    assert migparted.spread(A100, alloc, {P("1g.10gb"): 8}, 4) == migparted.Spread(2, 4)
    assert migparted.spread(A100, alloc, {}, 4) is None


def test_no_note_when_packing_cannot_do_better() -> None:
    alloc = {P("7g.80gb"): 2}
    assert migparted.spread_note(A100, alloc, {P("7g.80gb"): 2}, 2) == ""
    assert migparted.spread_note(A100, alloc, {P("7g.80gb"): 1}, 2) == ""
    note = migparted.spread_note(A100, {P("3g.40gb"): 4}, {P("3g.40gb"): 2}, 2)
    assert "fit on 1 GPU(s) but may occupy 2" in note and "packed" in note


def _node(name: str, alloc: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/gpu.count": "2"}},
        "status": {"capacity": alloc, "allocatable": alloc,
                   "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                "limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
            "status": {"phase": "Running"}}


def test_status_table_reports_a_node_whose_instances_may_spread() -> None:
    state = cluster.Cluster()
    state.replace("Node", [_node("busy", {"nvidia.com/mig-1g.10gb": "14"}),
                            _node("idle", {"nvidia.com/mig-1g.10gb": "14"})])
    state.replace("Pod", [_pod("a", "busy"), _pod("b", "busy")])
    state.mark_synced()
    lines = status.render_table(state).splitlines()
    busy = next(line for line in lines if line.startswith("busy"))
    idle = next(line for line in lines if line.startswith("idle"))
    assert "may occupy 2" in busy and "packed" in busy
    assert "packed" not in idle


def test_status_reports_a_profile_the_catalog_does_not_know() -> None:
    state = cluster.Cluster()
    state.replace("Node", [_node("r510", {"nvidia.com/mig-7g.79gb": "2"})])
    state.mark_synced()
    lines = status.render_table(state).splitlines()
    row = next(line for line in lines if line.startswith("r510"))
    assert "7g.79gb" in row and "not in the catalog for A100-80GB" in row


def test_status_says_a_compute_instance_profile_is_no_gpu_instance() -> None:
    # The device plugin would name one compute slice of a 3g.40gb GPU instance 1c.3g.40gb
    # (reference/MIG.md 3.1); its instances share 40 GB, so no catalog entry is the fix.
    state = cluster.Cluster()
    state.replace("Node", [_node("split", {"nvidia.com/mig-1c.3g.40gb": "6",
                                           "nvidia.com/mig-7g.79gb": "1"})])
    state.mark_synced()
    row = next(line for line in status.render_table(state).splitlines()
               if line.startswith("split"))
    assert "1c.3g.40gb: compute instances share their GPU instance's memory" in row
    assert "GPU instance profiles (3g.40gb)" in row
    assert "--catalog" in row and "7g.79gb not in the catalog" in row  # the other kept
    assert "1c.3g.40gb not in the catalog" not in row


def test_gpu_instance_of_a_compute_instance_profile() -> None:
    assert profiles.gpu_instance_of("1c.3g.40gb") == "3g.40gb"
    assert profiles.gpu_instance_of("2c.4g.40gb+me") == "4g.40gb+me"
    assert profiles.gpu_instance_of("3g.40gb") is None
    assert profiles.gpu_instance_of("bogus") is None
