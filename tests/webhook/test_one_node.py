"""One node serves a whole pod: a pod whose containers ask for GPU memory gets profiles one
kind of node advertises together (a GPU model under one device-plugin strategy), and a
warning when no node advertises, or has free, all of its instances."""

from __future__ import annotations

import json
from typing import Any

import webhook_scenery as s

from migfit import cluster, requests
from migfit.webhook import decision, memo, server, view

A100_40_PRODUCT = "NVIDIA-A100-SXM4-40GB"
H100_MEMORY = {"1g.10gb": 9984, "2g.20gb": 20096, "3g.40gb": 40448, "7g.80gb": 81152}
FREE = decision.Policy(contention="free")


def pod(**memory: str) -> dict[str, Any]:
    """A pod with one container per keyword, each asking for that much GPU memory."""
    annotations = {f"{requests.GPU_MEMORY_PREFIX}{name}": amount
                   for name, amount in memory.items()}
    return s.pod(annotations, containers=[{"name": name} for name in memory])


def busy(node_name: str, profile: str, uid: str) -> dict[str, Any]:
    return s.bound_pod(node_name, uid=uid, profile=profile)


def decide(p: dict[str, Any], c: cluster.Cluster) -> decision.Verdict:
    return decision.decide_pod(p, supply=view.SupplyTracker(c).supply(), policy=FREE)


def resources(verdict: decision.Verdict) -> list[str]:
    assert verdict.record is not None
    return [c["resource"] for c in verdict.record["containers"]]


def test_containers_split_between_strategies_are_given_profiles_one_node_has() -> None:
    """4Gi alone would get the A100-40GB's 1g.5gb (single strategy: nvidia.com/gpu), 30Gi
    the A100-80GB's 3g.40gb (mixed): no node advertises both, and the mixed resource
    nvidia.com/mig-1g.5gb none at all."""
    c = s.make_cluster(
        s.mig_node("a40-0", product=A100_40_PRODUCT, allocatable={"1g.5gb": 4},
                   memory={"1g.5gb": 4864}, strategy="single"),
        s.mig_node("a80-0", allocatable={"1g.10gb": 2, "3g.40gb": 1}))
    verdict = decide(pod(a="4Gi", b="30Gi"), c)
    assert verdict.allowed and verdict.profiles == ("1g.10gb", "3g.40gb")
    assert resources(verdict) == ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]
    assert verdict.warnings == (
        "the smallest fitting profiles (a: 1g.5gb, b: 3g.40gb) are on no one kind of node "
        "together; chose a: 1g.10gb, b: 3g.40gb, which A100-80GB nodes under the mixed "
        "strategy advertise together",
        "a: 4Gi was rounded up to 1g.10gb (9.5Gi): 57% of its memory unused")
    assert verdict.record is not None
    assert [c["reason"] for c in verdict.record["containers"]] == [
        "smallest fitting, with a free instance; among A100-80GB nodes under the mixed "
        "strategy, which advertise all the pod's profiles"] * 2
    # Each alone keeps its smallest profile.
    assert decide(pod(a="4Gi"), c).profiles == ("1g.5gb",)
    assert decide(pod(a="4Gi", b="4Gi"), c).profiles == ("1g.5gb", "1g.5gb")


def test_containers_split_between_models_then_one_node_short() -> None:
    """8Gi fits the A100's advertised 1g.10gb, 30Gi only the H100's 3g.40gb: the H100
    holds both (two 3g.40gb), but it advertises one."""
    c = s.make_cluster(
        s.mig_node("a80-0", allocatable={"1g.10gb": 2}),
        s.mig_node("h100-0", product=s.H100_PRODUCT, allocatable={"3g.40gb": 1},
                   memory=H100_MEMORY))
    verdict = decide(pod(a="8Gi", b="30Gi"), c)
    assert verdict.profiles == ("3g.40gb", "3g.40gb")
    assert verdict.warnings[0].startswith(
        "the smallest fitting profiles (a: 1g.10gb, b: 3g.40gb) are on no one kind of node")
    assert ("no node advertises all of the pod's instances (2 × 3g.40gb) on one node; the "
            "pod stays Pending until a GPU is re-partitioned (see migfit advise), or split the "
            "pod") in verdict.warnings


def test_no_kind_of_node_holds_them_all() -> None:
    """A media profile only the A100-40GB advertises, and 30Gi only the H100 holds."""
    c = s.make_cluster(
        s.mig_node("a40-0", product=A100_40_PRODUCT, allocatable={"1g.5gb+me": 1},
                   memory={"1g.5gb+me": 4864}, strategy="single"),
        s.mig_node("h100-0", product=s.H100_PRODUCT, allocatable={"3g.40gb": 1},
                   memory=H100_MEMORY))
    p = pod(a="4Gi", b="30Gi")
    p["metadata"]["annotations"][requests.GPU_MEDIA_PREFIX + "a"] = "true"
    verdict = decide(p, c)
    assert verdict.allowed and verdict.profiles == ("1g.5gb+me", "3g.40gb")
    assert ("no node advertises all of the pod's profiles together (a: 1g.5gb+me, b: "
            "3g.40gb); the pod stays Pending until a GPU is re-partitioned (see migfit "
            "advise)") in verdict.warnings


def two_half_busy() -> cluster.Cluster:
    """Two A100s with two 3g.40gb each, one of them taken on each."""
    out = s.make_cluster(
        s.mig_node("a80-0", allocatable={"3g.40gb": 2}),
        s.mig_node("a80-1", allocatable={"3g.40gb": 2}))
    out.apply("Pod", "ADDED", busy("a80-0", "3g.40gb", "u0"))
    out.apply("Pod", "ADDED", busy("a80-1", "3g.40gb", "u1"))
    return out


def test_instances_free_on_no_one_node_warn_and_a_move_reaches_the_memo() -> None:
    c = two_half_busy()
    verdict = decide(pod(a="30Gi", b="30Gi"), c)
    assert verdict.profiles == ("3g.40gb", "3g.40gb")
    assert verdict.warnings == ("no node has all of the pod's instances (2 × 3g.40gb) free "
                                "now; the pod waits until one node does",)
    assert decide(pod(a="30Gi"), c).warnings == ()
    # Free moves between nodes without the free sum moving: the most free on one node
    # moves, so the supply does, and the memo is not read.
    app = server.make_app(server.Settings(policy=FREE), c, tracker=view.SupplyTracker(c),
                          decisions=memo.DecisionMemo(memo.DEFAULT_CAPACITY))
    st = app[server.STATE]

    def ask() -> list[str]:
        status, body = server.answer_bytes(
            json.dumps(s.review(pod(a="30Gi", b="30Gi"))).encode(), state=st)
        assert status == 200
        warnings: list[str] = json.loads(body)["response"].get("warnings", [])
        return warnings

    assert len(ask()) == 1
    c.apply("Pod", "DELETED", busy("a80-0", "3g.40gb", "u0"))
    c.apply("Pod", "ADDED", busy("a80-1", "3g.40gb", "u2"))  # a80-1 full, a80-0 all free
    assert ask() == []
    assert (st.memo.stats.hits, st.exact.stats.hits) == (0, 0)
    assert st.exact.stats.resets == 1


def test_the_check_reads_only_the_nodes_the_pod_may_run_on() -> None:
    c = two_half_busy()
    c.apply("Pod", "DELETED", busy("a80-0", "3g.40gb", "u0"))  # a80-0 has both free
    assert decide(pod(a="30Gi", b="30Gi"), c).warnings == ()
    pinned = pod(a="30Gi", b="30Gi")
    pinned["spec"]["nodeName"] = "a80-1"
    assert decide(pinned, c).warnings == (
        "no node among node a80-1 (the pod's spec.nodeName) has all of the pod's instances "
        "(2 × 3g.40gb) free now; the pod waits until one node does",)


def test_a_gpu_another_container_asks_for_itself_is_named() -> None:
    c = s.make_cluster(s.mig_node("a80-0", allocatable={"3g.40gb": 2}))
    p = s.pod({requests.GPU_MEMORY: "30Gi"}, containers=[
        {"name": "main"},
        {"name": "side", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        {"name": "logs", "resources": {"requests": {"cpu": "1"}}}])
    verdict = decide(p, c)
    assert verdict.allowed and verdict.profiles == ("3g.40gb",)
    assert verdict.warnings == (
        "container 'side' (nvidia.com/gpu) asks for a GPU resource itself: the pod's one node "
        "must have it too (nvidia.com/gpu under the mixed strategy is a GPU with MIG off), and "
        "migfit's choice does not count it; to have migfit choose for it, give it "
        "migfit.io/gpu-memory.<container> instead of the resource",)
    # Many: three named, the rest counted.
    many = s.pod({requests.GPU_MEMORY: "30Gi"}, containers=[{"name": "main"}] + [
        {"name": f"s{i}", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}
        for i in range(5)])
    (warning,) = decide(many, c).warnings
    assert warning.startswith("containers 's0' (nvidia.com/mig-1g.10gb), 's1' "
                              "(nvidia.com/mig-1g.10gb), 's2' (nvidia.com/mig-1g.10gb) and 2 "
                              "more ask for a GPU resource themselves:")
