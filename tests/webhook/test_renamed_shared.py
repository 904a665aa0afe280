"""Time-slicing or MPS with the device plugin's ``renameByDefault``: a node advertises
``nvidia.com/mig-1g.10gb.shared`` (``nvidia.com/gpu.shared`` under single), GFD keeps the
plain names in its labels. migfit reads such a node's instances and the pods bound there as
the profile's, and the webhook asks for the renamed name where every node that advertises
the profile renames it (before: ``1g.10gb.shared`` was an unknown profile, the node had no
``1g.10gb``, and pods were patched for a resource no node advertises)."""

from __future__ import annotations

from typing import Any

import webhook_scenery as s

from migfit import requests
from migfit.webhook import decision, view

FREE = decision.Policy(contention="free")


def renamed(node: dict[str, Any], replicas: int) -> dict[str, Any]:
    """``node`` as the device plugin advertises it with time-slicing ``replicas`` and
    ``renameByDefault: true``."""
    labels = node["metadata"]["labels"]
    single = labels.get("nvidia.com/mig.strategy") == "single"
    for part in ("capacity", "allocatable"):
        res = node["status"][part]
        for name in [n for n in res if n.startswith(("nvidia.com/mig-", "nvidia.com/gpu"))]:
            count = int(res.pop(name))
            if count and (single or name.startswith("nvidia.com/mig-")):
                res[name + ".shared"] = str(count * replicas)
    if single:
        labels["nvidia.com/gpu.replicas"] = str(replicas)
    else:
        for name in [n for n in node["status"]["allocatable"] if n.endswith(".shared")]:
            labels[name[:-len(".shared")] + ".replicas"] = str(replicas)
    return node


def decide(c: Any, memory: str = "8Gi") -> decision.Verdict:
    pod = s.pod({requests.GPU_MEMORY: memory})
    return decision.decide_pod(pod, supply=view.SupplyTracker(c).supply(), policy=FREE)


def asked(verdict: decision.Verdict) -> dict[str, str]:
    ops = [op for op in verdict.patch if op["path"].endswith("/resources")]
    assert len(ops) == 1, verdict.patch
    limits: dict[str, str] = ops[0]["value"]["limits"]
    return limits


def test_a_renamed_node_is_read_and_asked_for_by_its_renamed_name() -> None:
    c = s.make_cluster(renamed(s.mig_node("ts", allocatable={"1g.10gb": 7}), 2))
    state = c.node("ts")
    assert state is not None
    assert state.node.allocatable == {"1g.10gb": 14}
    assert state.node.instances == {"1g.10gb": 7}
    assert state.node.renamed == {"1g.10gb"}
    verdict = decide(c)
    assert asked(verdict) == {"nvidia.com/mig-1g.10gb.shared": "1"}
    assert verdict.record is not None
    assert verdict.record["containers"][0]["resource"] == "nvidia.com/mig-1g.10gb.shared"
    # A pod bound there asking for the renamed name holds one of the node's 14.
    c.apply("Pod", "ADDED", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "b", "namespace": "ml", "uid": "b"},
        "spec": {"nodeName": "ts", "containers": [{"name": "c", "resources": {
            "limits": {"nvidia.com/mig-1g.10gb.shared": "1"}}}]},
        "status": {"phase": "Running"}})
    state = c.node("ts")
    assert state is not None and state.used == {"1g.10gb": 1} and state.free["1g.10gb"] == 13


def test_the_plain_name_where_some_nodes_advertise_it() -> None:
    c = s.make_cluster(renamed(s.mig_node("ts", allocatable={"1g.10gb": 7}), 2),
                       s.mig_node("plain", allocatable={"1g.10gb": 7}))
    assert asked(decide(c)) == {"nvidia.com/mig-1g.10gb": "1"}


def test_single_strategy_asks_for_nvidia_com_gpu_shared() -> None:
    c = s.make_cluster(renamed(s.mig_node("ts", allocatable={"1g.10gb": 7},
                                          strategy="single"), 3))
    state = c.node("ts")
    assert state is not None and state.node.instances == {"1g.10gb": 7}
    assert asked(decide(c)) == {"nvidia.com/gpu.shared": "1"}


def test_a_reinvocation_keeps_the_renamed_name() -> None:
    c = s.make_cluster(renamed(s.mig_node("ts", allocatable={"1g.10gb": 7}), 2))
    first = decide(c)
    assert first.record is not None
    pod = s.pod({requests.GPU_MEMORY: "8Gi",
                 requests.DECISION: requests.encode_decision(first.record)})
    pod["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/mig-1g.10gb.shared": "1"},
        "requests": {"nvidia.com/mig-1g.10gb.shared": "1"}}
    again = decision.decide_pod(pod, supply=view.SupplyTracker(c).supply(), policy=FREE)
    assert again.record == first.record


def test_a_leftover_zero_of_the_renamed_name_is_not_a_renaming() -> None:
    """A node back from renamed time-slicing keeps nvidia.com/mig-1g.10gb.shared: 0 beside
    its plain nvidia.com/mig-1g.10gb: 7 (an outside check: pods were asked for .shared)."""
    plain = s.mig_node("back", allocatable={"1g.10gb": 7})
    for part in ("capacity", "allocatable"):
        plain["status"][part]["nvidia.com/mig-1g.10gb.shared"] = "0"
    c = s.make_cluster(plain)
    state = c.node("back")
    assert state is not None and state.node.renamed == frozenset()
    assert asked(decide(c)) == {"nvidia.com/mig-1g.10gb": "1"}


def test_renaming_is_read_per_device_plugin_strategy() -> None:
    """A single-strategy A100-40GB node renames nvidia.com/gpu; a mixed one of the same
    model advertises a plain 1g.5gb, in use. The pod is sent to the single node under the
    name it advertises (an outside check: it asked for nvidia.com/gpu, which no node had)."""
    a40 = "NVIDIA-A100-SXM4-40GB"
    single = renamed(s.mig_node("sg", product=a40, allocatable={"1g.5gb": 7}, strategy="single",
                                memory={"1g.5gb": 4864}), 2)
    mixed = s.mig_node("mx", product=a40, allocatable={"1g.5gb": 1, "3g.20gb": 1},
                       memory={"1g.5gb": 4864, "3g.20gb": 19968})
    c = s.make_cluster(single, mixed)
    c.apply("Pod", "ADDED", s.bound_pod("mx", uid="u1", profile="1g.5gb"))
    verdict = decide(c, "4Gi")
    assert verdict.record is not None and verdict.record["strategy"] == "single"
    assert asked(verdict) == {"nvidia.com/gpu.shared": "1"}


def test_containers_whose_names_no_one_node_advertises_are_warned() -> None:
    """r renames 1g.10gb and 3g.40gb; p advertises a plain 3g.40gb: a pod of a 30Gi and an
    8Gi container asks for mig-3g.40gb and mig-1g.10gb.shared, which no one node has."""
    c = s.make_cluster(renamed(s.mig_node("r", allocatable={"1g.10gb": 3, "3g.40gb": 1}), 2),
                       s.mig_node("p", allocatable={"3g.40gb": 1}))
    pod = s.pod({f"{requests.GPU_MEMORY}.a": "30Gi", f"{requests.GPU_MEMORY}.b": "8Gi"},
                containers=[{"name": "a", "image": "x"}, {"name": "b", "image": "x"}])
    verdict = decision.decide_pod(pod, supply=view.SupplyTracker(c).supply(), policy=FREE)
    assert any("no one node may advertise them all" in w for w in verdict.warnings), \
        verdict.warnings
