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


def _status_row(name: str, alloc: dict[str, str], labels: dict[str, str]) -> str:
    node = _node(name, alloc)
    node["metadata"]["labels"].update(labels)
    state = cluster.Cluster()
    state.replace("Node", [node])
    state.mark_synced()
    return next(line for line in status.render_table(state).splitlines()
                if line.startswith(name))


def test_status_names_gpus_of_another_model_on_the_node() -> None:
    # GFD labels a node with its first GPU's product (k8s-device-plugin issue #736), but the
    # mixed strategy advertises every GPU's MIG devices, each with its own .product label.
    row = _status_row("two", {"nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-1g.5gb": "7"},
                      {"nvidia.com/mig-1g.5gb.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"})
    assert ("GPUs of more than one model: 1g.5gb (A100-40GB) besides A100-80GB" in row
            and "keep one GPU model per node" in row), row
    assert "not in the catalog" not in row and "--catalog" not in row
    # Without the .product label: the models of the catalog that have the profile.
    row = _status_row("bare", {"nvidia.com/mig-1g.5gb": "7"}, {})
    assert "GPUs of more than one model: 1g.5gb (A100-40GB) besides A100-80GB" in row, row


def test_a_profile_labelled_with_the_nodes_own_model_is_a_drivers_name() -> None:
    # An A100-80GB GPU advertising 1g.5gb (another model's name) under its own product is
    # a driver's renaming, not a second model: the catalog note, not the two-model one.
    row = _status_row("own", {"nvidia.com/mig-1g.5gb": "7"},
                      {"nvidia.com/mig-1g.5gb.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.5gb"})
    assert "1g.5gb not in the catalog for A100-80GB" in row, row
    assert "more than one model" not in row
    # A name of no model stays a driver's own name, beside another model's profile.
    row = _status_row("both", {"nvidia.com/mig-7g.79gb": "1", "nvidia.com/mig-1g.5gb": "7"}, {})
    assert "1g.5gb (A100-40GB)" in row and "7g.79gb not in the catalog" in row, row


def test_gpu_instance_of_a_compute_instance_profile() -> None:
    assert profiles.gpu_instance_of("1c.3g.40gb") == "3g.40gb"
    assert profiles.gpu_instance_of("2c.4g.40gb+me") == "4g.40gb+me"
    assert profiles.gpu_instance_of("3g.40gb") is None
    assert profiles.gpu_instance_of("bogus") is None
