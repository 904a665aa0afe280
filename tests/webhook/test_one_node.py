"""One node serves a whole pod: a pod whose containers ask for GPU memory gets profiles one
kind of node advertises together (a GPU model under one device-plugin strategy), and a
warning when no node advertises, or has free, all of its instances."""

from __future__ import annotations

import json
from typing import Any

import webhook_scenery as s

from migfit import cluster, profiles, requests, snapshots
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
        "the smallest fitting profiles (a: 1g.5gb, b: 3g.40gb): no one node could hold them "
        "all; chose a: 1g.10gb, b: 3g.40gb on A100-80GB nodes under the mixed strategy: one "
        "node has them all free",
        "a: 4Gi was rounded up to 1g.10gb (9.5Gi): 57% of its memory unused")
    assert verdict.record is not None
    assert [c["reason"] for c in verdict.record["containers"]] == [
        "smallest fitting, with a free instance; so that the pod's instances are on one "
        "A100-80GB node (mixed strategy)"] * 2
    # Each alone keeps its smallest profile.
    assert decide(pod(a="4Gi"), c).profiles == ("1g.5gb",)
    assert decide(pod(a="4Gi", b="4Gi"), c).profiles == ("1g.5gb", "1g.5gb")


def test_containers_split_between_models_then_one_node_short() -> None:
    """8Gi fits the A100's advertised 1g.10gb, 30Gi the H100's 3g.40gb. Both models have
    both profiles, so a re-layout of either could hold the pair; the H100 alone holds two
    3g.40gb, but advertises one: neither choice runs now, the smallest is kept, and said."""
    c = s.make_cluster(
        s.mig_node("a80-0", allocatable={"1g.10gb": 2}),
        s.mig_node("h100-0", product=s.H100_PRODUCT, allocatable={"3g.40gb": 1},
                   memory=H100_MEMORY))
    verdict = decide(pod(a="8Gi", b="30Gi"), c)
    assert verdict.profiles == ("1g.10gb", "3g.40gb")
    assert verdict.warnings == (
        "no node advertises all of the pod's instances (1g.10gb, 3g.40gb) together; the pod "
        "stays Pending until a GPU is re-partitioned (see migfit advise), or split the pod",)


def test_a_pair_no_model_holds_is_chosen_again_where_a_relayout_could() -> None:
    """A media profile only the A100-40GB advertises, and 30Gi only the H100 holds: the
    H100 has a media profile too, not advertised."""
    c = s.make_cluster(
        s.mig_node("a40-0", product=A100_40_PRODUCT, allocatable={"1g.5gb+me": 1},
                   memory={"1g.5gb+me": 4864}, strategy="single"),
        s.mig_node("h100-0", product=s.H100_PRODUCT, allocatable={"3g.40gb": 1},
                   memory=H100_MEMORY))
    p = pod(a="4Gi", b="30Gi")
    p["metadata"]["annotations"][requests.GPU_MEDIA_PREFIX + "a"] = "true"
    verdict = decide(p, c)
    assert verdict.allowed and verdict.profiles == ("1g.10gb+me", "3g.40gb")
    assert verdict.warnings[0] == (
        "the smallest fitting profiles (a: 1g.5gb+me, b: 3g.40gb): no one node could hold "
        "them all; chose a: 1g.10gb+me, b: 3g.40gb on H100-80GB nodes under the mixed "
        "strategy: a re-layout could put them on one node")
    assert verdict.warnings[1].startswith("a: no node advertises 1g.10gb+me now")


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
    # spec.nodeName skips the scheduler: the kubelet does not wait, it fails the pod.
    assert decide(pinned, c).warnings == (
        "node a80-1 (the pod's spec.nodeName) does not have all of the pod's instances "
        "(2 × 3g.40gb) free now; the kubelet fails the pod at once (never retried): remove "
        "spec.nodeName or name a node that has them all free",)
    pinned["spec"] = {"containers": pinned["spec"]["containers"],
                      "nodeSelector": {"kubernetes.io/hostname": "a80-1"}}
    assert decide(pinned, c).warnings == (
        "none of the nodes the pod's nodeSelector selects has all of the pod's instances "
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
        "a container asks for nvidia.com/gpu itself (under the mixed strategy a whole GPU, "
        "MIG off); for migfit to choose, remove it and annotate the pod "
        "migfit.io/gpu-memory.side: migfit does not count it, and the pod's one node must "
        "have it too",)
    # The fix comes first and fits kube-apiserver's 256 characters with the longest names
    # (63 characters each): it was cut off the end (an outside check).
    long = "s" * 63
    p_long = s.pod({requests.GPU_MEMORY: "30Gi"}, containers=[
        {"name": "main"},
        {"name": long, "resources": {"limits": {"nvidia.com/gpu": "1"}}}])
    (warning,) = decide(p_long, c).warnings
    fix = f"remove it and annotate the pod migfit.io/gpu-memory.{long}"
    assert fix in warning and warning.index(fix) + len(fix) <= 256, warning
    # None of it: not a request.
    zero = s.pod({requests.GPU_MEMORY: "30Gi"}, containers=[
        {"name": "main"}, {"name": "side", "resources": {"limits": {"nvidia.com/gpu": "0"}}}])
    assert decide(zero, c).warnings == ()
    # Many: three named, the rest counted.
    many = s.pod({requests.GPU_MEMORY: "30Gi"}, containers=[{"name": "main"}] + [
        {"name": f"s{i}", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}
        for i in range(5)])
    (warning,) = decide(many, c).warnings
    assert warning.startswith("containers 's0' (nvidia.com/mig-1g.10gb), 's1' "
                              "(nvidia.com/mig-1g.10gb), 's2' (nvidia.com/mig-1g.10gb) and 2 "
                              "more ask for a GPU resource themselves; for migfit to "
                              "choose, remove them and annotate the pod "
                              "migfit.io/gpu-memory.<container> for each")


def test_a_single_strategy_node_never_holds_two_profiles() -> None:
    """Two single-strategy A100-40GB nodes, one of 1g.5gb, one of 3g.20gb: no node offers
    both (a single-strategy node has one profile); the H100's 1g.20gb serve the pair."""
    c = s.make_cluster(
        s.mig_node("s5", product=A100_40_PRODUCT, allocatable={"1g.5gb": 7},
                   memory={"1g.5gb": 4864}, strategy="single"),
        s.mig_node("s20", product=A100_40_PRODUCT, allocatable={"3g.20gb": 2},
                   memory={"3g.20gb": 19968}, strategy="single"),
        s.mig_node("h", product=s.H100_PRODUCT, allocatable={"1g.20gb": 4},
                   memory={"1g.20gb": 19968}))
    verdict = decide(pod(a="4Gi", b="16Gi"), c)
    assert verdict.allowed and verdict.profiles == ("1g.20gb", "1g.20gb")
    assert resources(verdict) == ["nvidia.com/mig-1g.20gb"] * 2


def test_a_pair_of_models_apart_is_chosen_again_on_one_model() -> None:
    """On the example cluster 4Gi alone is the A100-40GB's 1g.5gb, 70Gi a 7g.80gb no model
    with 1g.5gb has: the pair is chosen again on one model."""
    verdict = decision.decide_pod(
        pod(a="4Gi", b="70Gi"), policy=FREE,
        supply=view.SupplyTracker(snapshots.load(snapshots.EXAMPLE_CLUSTER)).supply())
    assert verdict.allowed
    assert verdict.record is not None
    models = [set(c["models"]) for c in verdict.record["containers"]]
    assert verdict.profiles[0] != "1g.5gb"
    assert verdict.warnings[0].startswith(
        "the smallest fitting profiles (a: 1g.5gb, b: 7g.80gb): no one node could hold them "
        "all; chose ")
    assert not any("no one node could hold" in w for w in verdict.warnings[1:])
    assert all(not m or m & models[0] for m in models)


def test_too_few_on_one_node_takes_a_profile_one_node_has_enough_of_free() -> None:
    """One 1g.10gb on x, two 2g.20gb on y: two 8Gi containers get y's two 2g.20gb."""
    c = s.make_cluster(s.mig_node("x", allocatable={"1g.10gb": 1}),
                       s.mig_node("y", allocatable={"2g.20gb": 2}))
    verdict = decide(pod(a="8Gi", b="8Gi"), c)
    assert verdict.profiles == ("2g.20gb", "2g.20gb")
    assert verdict.record is not None
    assert verdict.record["containers"][0]["reason"] == (
        "smallest with as many free on one node as the pod takes (1g.10gb: fewer on every "
        "node); so that the pod's instances are on one A100-80GB node (mixed strategy)")
    # The smallest-first policy keeps the smallest, and says no node advertises two.
    smallest = decision.decide_pod(pod(a="8Gi", b="8Gi"), policy=s.POLICY,
                                   supply=view.SupplyTracker(c).supply())
    assert smallest.profiles == ("1g.10gb", "1g.10gb")
    assert smallest.warnings[0].startswith(
        "no node advertises all of the pod's instances (2 × 1g.10gb) together;")


def test_busy_instances_no_node_has_enough_of_are_said_so() -> None:
    c = s.make_cluster(s.mig_node("n0", allocatable={"3g.40gb": 2}, gpus=2),
                       s.mig_node("n1", allocatable={"3g.40gb": 2}, gpus=2))
    for i, name in enumerate(["n0", "n0", "n1", "n1"]):
        c.apply("Pod", "ADDED", s.bound_pod(name, uid=f"u{i}", profile="3g.40gb"))
    verdict = decide(pod(a="30Gi", b="30Gi", c="30Gi"), c)
    assert verdict.warnings[0].startswith(
        "no node advertises all of the pod's instances (3 × 3g.40gb) together;")
    # One line for the three containers, not one each (kube-apiserver may drop some).
    assert [w for w in verdict.warnings if "every 3g.40gb instance is in use" in w] == [
        "a, b, c: every 3g.40gb instance is in use now or asked for by pods already waiting; "
        "the pod waits for one to be freed"]


def test_profiles_no_one_model_holds_are_said_so() -> None:
    """Media only on the A30, 30Gi only on the RTX PRO 5000 (24 GB against 48): no model
    holds both, whatever its layout."""
    c = s.make_cluster(
        s.mig_node("a30", product="NVIDIA-A30", allocatable={"1g.6gb+me": 1},
                   memory={"1g.6gb+me": 5952}),
        s.mig_node("rtx", product="NVIDIA-RTX-PRO-5000-Blackwell", allocatable={"2g.48gb": 1},
                   memory={"2g.48gb": 47185}))
    p = pod(a="4Gi", b="30Gi")
    p["metadata"]["annotations"][requests.GPU_MEDIA_PREFIX + "a"] = "true"
    verdict = decide(p, c)
    assert verdict.profiles == ("1g.6gb+me", "2g.48gb")
    assert verdict.warnings[0] == (
        "no one node could hold all of the pod's profiles (a: 1g.6gb+me, b: 2g.48gb): they "
        "are on different GPU models or device-plugin strategies; give the containers "
        "requests one GPU model holds, or split the pod")


def test_profiles_on_different_nodes_of_one_model_are_not_taken_for_one_node() -> None:
    """x has 1g.10gb, y one 3g.40gb: 8Gi + 30Gi are advertised on one model, but no node
    has both; said so (and never "one node has them all")."""
    c = s.make_cluster(s.mig_node("x", allocatable={"1g.10gb": 7}),
                       s.mig_node("y", allocatable={"3g.40gb": 1}))
    verdict = decide(pod(a="8Gi", b="30Gi"), c)
    assert verdict.profiles == ("1g.10gb", "3g.40gb")
    assert verdict.warnings == (
        "no node advertises all of the pod's instances (1g.10gb, 3g.40gb) together; the pod "
        "stays Pending until a GPU is re-partitioned (see migfit advise), or split the pod",)
    assert not verdict.memoisable  # read node by node
    # Both on z: no warning.
    c.apply("Node", "ADDED", s.mig_node("z", allocatable={"1g.10gb": 1, "3g.40gb": 1}))
    assert decide(pod(a="8Gi", b="30Gi"), c).warnings == ()


def test_a_container_takes_the_next_free_profile_where_a_node_has_the_others() -> None:
    """x has 1g.10gb, y 3g.40gb, z a 2g.20gb beside a 3g.40gb: 8Gi + 30Gi get z's pair
    (8Gi's 1g.10gb is on no node with a 3g.40gb), with a warning naming both sets."""
    c = s.make_cluster(s.mig_node("x", allocatable={"1g.10gb": 7}),
                       s.mig_node("y", allocatable={"3g.40gb": 2}),
                       s.mig_node("z", allocatable={"2g.20gb": 1, "3g.40gb": 1}))
    verdict = decide(pod(a="8Gi", b="30Gi"), c)
    assert verdict.profiles == ("2g.20gb", "3g.40gb")
    assert verdict.warnings[0] == (
        "the smallest fitting profiles (a: 1g.10gb, b: 3g.40gb): no one node advertises them "
        "all; chose a: 2g.20gb, b: 3g.40gb on A100-80GB nodes under the mixed strategy: one "
        "node has them all free")
    assert verdict.record is not None
    assert verdict.record["containers"][0]["reason"] == (
        "smallest free on a node that has the pod's other instances free (1g.10gb: not "
        "there); so that the pod's instances are on one A100-80GB node (mixed strategy)")
    assert not verdict.memoisable  # read node by node
    # z's 2g.20gb in use: y's two 3g.40gb are the next pair one node has free.
    c.apply("Pod", "ADDED", s.bound_pod("z", uid="u1", profile="2g.20gb"))
    assert decide(pod(a="8Gi", b="30Gi"), c).profiles == ("3g.40gb", "3g.40gb")


def test_alike_containers_keep_as_many_of_a_profile_as_one_node_has_free() -> None:
    """One node, one 1g.10gb and two 2g.20gb free: of three 8Gi containers one keeps the
    1g.10gb and two take the 2g.20gb (before, all three took a 2g.20gb, which the node
    lacks, or two of them the one 1g.10gb). The answer read the node, so it is not kept."""
    c = s.make_cluster(s.mig_node("n", allocatable={"1g.10gb": 1, "2g.20gb": 2}))
    two = decide(pod(a="8Gi", b="9Gi"), c)
    assert two.profiles == ("1g.10gb", "2g.20gb")
    assert two.record is not None
    assert two.record["containers"][1]["reason"] == (
        "smallest of those one node has free beside the pod's others (1g.10gb: taken); so "
        "that the pod's instances are on one A100-80GB node (mixed strategy)")
    three = decide(pod(a="8Gi", b="8Gi", c="8Gi"), c)
    assert three.profiles == ("1g.10gb", "2g.20gb", "2g.20gb")
    assert three.warnings[0].endswith("one node has them all free")
    assert not three.memoisable
    # The 1g.10gb on another node than the 2g.20gb: the pair of 2g.20gb is one node's.
    c = s.make_cluster(s.mig_node("x", allocatable={"1g.10gb": 1}),
                       s.mig_node("y", allocatable={"2g.20gb": 2}))
    assert decide(pod(a="8Gi", b="9Gi"), c).profiles == ("2g.20gb", "2g.20gb")


def test_a_single_strategy_kind_is_given_one_profile_for_every_container() -> None:
    """A single-strategy A100-80GB node of 3g.40gb, and a mixed A100-40GB whose only
    instance is busy: 12Gi + 60Gi on one single-strategy node means one profile that holds
    60Gi for both, never a pair of profiles."""
    c = s.make_cluster(
        s.mig_node("s", allocatable={"3g.40gb": 6}, strategy="single"),
        s.mig_node("m", product=A100_40_PRODUCT, allocatable={"3g.20gb": 1},
                   memory={"3g.20gb": 19968}),
        s.bound_pod("m", uid="u1", profile="3g.20gb"))
    for policy in (FREE, s.POLICY):
        verdict = decision.decide_pod(pod(a="12Gi", b="60Gi"), policy=policy,
                                      supply=view.SupplyTracker(c).supply())
        assert verdict.allowed, verdict.message
        assert verdict.profiles == ("7g.80gb", "7g.80gb")
        assert resources(verdict) == ["nvidia.com/gpu"] * 2
        assert "on A100-80GB nodes under the single strategy: a re-layout could put them on " \
            "one node" in verdict.warnings[0]


def test_more_instances_than_one_node_has_gpus_for_are_said_so() -> None:
    """The largest node has 8 GPUs (its label says 1, its eight 7g.80gb say 8): nine 70Gi
    can never run on one node, and the warning says so instead of promising a re-layout;
    sixteen 30Gi fit two to a GPU as 3g.40gb after one, so they get 3g.40gb, not the
    advertised 7g.80gb, which would need sixteen GPUs."""
    c = s.make_cluster(s.mig_node("a", allocatable={"7g.80gb": 8}),
                       s.mig_node("big", allocatable={"7g.80gb": 12}, unschedulable=True))
    nine = decide(pod(**{f"c{i}": "70Gi" for i in range(9)}), c)
    assert nine.allowed and set(nine.profiles) == {"7g.80gb"}
    assert nine.warnings == (
        "no node has GPUs enough for all of the pod's instances (9 × 7g.80gb: at least 9 "
        "GPUs; the most on one node is 8): the pod can never be scheduled; split it into "
        "pods of at most 8 GPUs' worth of instances",)
    sixteen = decide(pod(**{f"c{i}": "30Gi" for i in range(16)}), c)
    assert sixteen.profiles == ("3g.40gb",) * 16
    assert sixteen.record is not None
    assert sixteen.record["containers"][0]["reason"] == (
        "smallest fitting after a re-layout (the advertised ones need more GPUs than a node "
        "has); so that the pod's instances are on one A100-80GB node (mixed strategy)")
    assert sixteen.warnings[0].endswith("a re-layout could put them on one node")
    # Eight fit the 8-GPU node as they are advertised.
    eight = decide(pod(**{f"c{i}": "70Gi" for i in range(8)}), c)
    assert eight.profiles == ("7g.80gb",) * 8 and eight.warnings == ()
    # The cordoned 12-GPU node is uncordoned: nine fit it.
    c.apply("Node", "MODIFIED", s.mig_node("big", allocatable={"7g.80gb": 12}))
    assert decide(pod(**{f"c{i}": "70Gi" for i in range(9)}), c).warnings == ()


def test_the_strategy_is_that_of_the_nodes_that_advertise_the_profile() -> None:
    """A100-80GB nodes under single advertise seven free 1g.10gb, H100 nodes under mixed
    only 3g.40gb: an 8Gi pod asks for the single strategy's nvidia.com/gpu (the H100's
    1g.10gb exists only after a re-layout), not nvidia.com/mig-1g.10gb, which no node has."""
    c = s.make_cluster(
        s.mig_node("a1", allocatable={"1g.10gb": 7}, strategy="single"),
        s.mig_node("h1", product=s.H100_PRODUCT, allocatable={"3g.40gb": 2},
                   memory=H100_MEMORY))
    verdict = decide(s.pod({requests.GPU_MEMORY: "8Gi"}), c)
    assert verdict.profiles == ("1g.10gb",) and verdict.warnings == ()
    assert resources(verdict) == ["nvidia.com/gpu"]


def test_a_profile_under_both_strategies_is_asked_for_where_one_is_free() -> None:
    """One model under both strategies: m1 (mixed) has its 1g.10gb in use, s1 (single) seven
    free. The pod asks for s1's nvidia.com/gpu, with the MIG product affinity, not for
    m1's busy nvidia.com/mig-1g.10gb; read node by node, so not memoised."""
    c = s.make_cluster(s.mig_node("m1", allocatable={"1g.10gb": 1, "3g.40gb": 1}),
                       s.mig_node("s1", allocatable={"1g.10gb": 7}, strategy="single"),
                       s.bound_pod("m1", uid="u1", profile="1g.10gb"))
    verdict = decide(s.pod({requests.GPU_MEMORY: "8Gi"}), c)
    assert verdict.profiles == ("1g.10gb",) and verdict.warnings == ()
    assert resources(verdict) == ["nvidia.com/gpu"]
    assert "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb" in json.dumps(verdict.patch)
    assert not verdict.memoisable
    # s1's all taken, m1's free again: the mixed resource.
    for i in range(7):
        c.apply("Pod", "ADDED", s.bound_pod("s1", uid=f"s{i}", profile="1g.10gb"))
    c.apply("Pod", "DELETED", s.bound_pod("m1", uid="u1", profile="1g.10gb"))
    assert resources(decide(s.pod({requests.GPU_MEMORY: "8Gi"}), c)) == [
        "nvidia.com/mig-1g.10gb"]


def test_a_gpu_an_init_or_sidecar_container_asks_for_itself_is_named() -> None:
    """A sidecar (an init container with restartPolicy Always) or a plain init container
    asking for nvidia.com/mig-1g.5gb itself: the pod's node must have it too, which migfit's
    choice for the main container does not count; warned, as for a regular container (a
    zero request is none)."""
    c = s.make_cluster(
        s.mig_node("a40", product=A100_40_PRODUCT, allocatable={"1g.5gb": 2},
                   memory={"1g.5gb": 4864}),
        s.mig_node("a80", allocatable={"1g.10gb": 2, "3g.40gb": 1}))
    for sidecar in (True, False):
        helper: dict[str, Any] = {"name": "helper", "resources": {
            "limits": {"nvidia.com/mig-1g.5gb": "1"}}}
        if sidecar:
            helper["restartPolicy"] = "Always"
        p = pod(main="30Gi")
        p["spec"]["initContainers"] = [helper]
        verdict = decide(p, c)
        assert verdict.profiles == ("3g.40gb",)
        assert verdict.warnings == (
            "init container 'helper' (nvidia.com/mig-1g.5gb) asks for a GPU resource itself; "
            "give it a resource of the GPU model the containers' profiles are on, or remove "
            "it: migfit chooses for the containers only, and the pod's one node must have it "
            "too",)
        helper["resources"]["limits"]["nvidia.com/mig-1g.5gb"] = "0"
        assert decide(p, c).warnings == ()


def many(*amounts: str) -> dict[str, Any]:
    """A pod of one container per amount, named a, b, c, ..."""
    return pod(**{chr(ord("a") + i): amount for i, amount in enumerate(amounts)})


def test_the_gpus_a_node_has_are_read_only_where_known() -> None:
    """The bound on GPUs per node (outside checks): a cordoned node named in spec.nodeName
    counts with its own GPUs; a node without nvidia.com/gpu.count, or under the single
    strategy, gives no bound (its instances give only a lower one); time-slicing replicas
    are not GPUs."""
    never = "no node has GPUs enough"
    c = s.make_cluster(s.mig_node("small", allocatable={"7g.80gb": 1}, gpus=1),
                       s.mig_node("big", allocatable={"7g.80gb": 2}, gpus=2,
                                  unschedulable=True))
    named = many("70Gi", "70Gi")
    named["spec"]["nodeName"] = "big"
    assert decide(named, c).warnings == ()
    assert decide(many("70Gi", "70Gi"), c).warnings[0].startswith(never)
    unlabelled = s.mig_node("a", allocatable={"3g.40gb": 4}, gpus=4)
    del unlabelled["metadata"]["labels"]["nvidia.com/gpu.count"]
    verdict = decide(many("70Gi", "70Gi", "70Gi"), s.make_cluster(unlabelled))
    assert not any(w.startswith(never) for w in verdict.warnings), verdict.warnings
    single = s.make_cluster(s.mig_node("s", allocatable={"3g.40gb": 4}, gpus=4,
                                       strategy="single"))
    verdict = decide(many("70Gi", "70Gi", "70Gi"), single)
    assert not any(w.startswith(never) for w in verdict.warnings), verdict.warnings
    shared = s.mig_node("t", allocatable={"1g.10gb": 28}, gpus=1)
    shared["metadata"]["labels"]["nvidia.com/mig-1g.10gb.replicas"] = "4"
    assert decide(many("70Gi", "70Gi"), s.make_cluster(shared)).warnings[0].startswith(
        "no node has GPUs enough for all of the pod's instances (2 × 7g.80gb: at least 2 "
        "GPUs; the most on one node is 1): the pod can never be scheduled; split it into "
        "pods of at most 1 GPU's worth of instances")


def test_counts_of_a_profile_under_both_strategies_are_read_per_strategy() -> None:
    """Three free 7g.80gb on a single-strategy node, one busy on a mixed one: three small
    containers are asked for under single (nvidia.com/gpu), where one node has them all
    free, not under mixed, whose summed counts had borrowed the single node's."""
    a100 = {p.name: p.memory_mib for p in profiles.builtin().get("A100-80GB").profiles}
    c = s.make_cluster(
        s.mig_node("single-0", allocatable={"7g.80gb": 3}, gpus=3, strategy="single",
                   memory=a100),
        s.mig_node("mixed-0", allocatable={"7g.80gb": 1}, gpus=1, memory=a100),
        s.mig_node("mixed-1", allocatable={"1g.20gb": 2, "3g.40gb": 1, "2g.20gb": 2}, gpus=3,
                   memory=a100),
        s.bound_pod("mixed-0", uid="b0", profile="7g.80gb"),
        *(s.bound_pod("mixed-1", uid=f"b1{i}", profile=p)
          for i, p in enumerate(["1g.20gb", "1g.20gb", "2g.20gb", "2g.20gb"])))
    verdict = decide(many("4Gi", "8Gi", "12Gi"), c)
    assert resources(verdict) == ["nvidia.com/gpu"] * 3
    assert verdict.warnings[0].endswith("under the single strategy: one node has them all free")


def test_after_a_set_is_made_on_one_model_the_warnings_read_every_model_it_fits() -> None:
    """30Gi + 4Gi: made again on the A100 as two 4g.40gb (one free there); the record does
    not restrict the pod to the A100, and the H100 h0 has two 4g.40gb free: no warning that
    no node has them free."""
    h100 = {"1g.20gb": 20096, "3g.40gb": 40448, "4g.40gb": 40448}
    a100 = {p.name: p.memory_mib for p in profiles.builtin().get("A100-80GB").profiles}
    c = s.make_cluster(
        s.mig_node("h0", product=s.H100_PRODUCT, allocatable={"4g.40gb": 2, "3g.40gb": 2},
                   memory=h100, gpus=2),
        s.mig_node("h1", product=s.H100_PRODUCT, allocatable={"1g.20gb": 3}, memory=h100,
                   gpus=3),
        s.mig_node("a2", allocatable={"1g.20gb": 1}, memory=a100, gpus=3),
        s.mig_node("a3", allocatable={"4g.40gb": 3}, memory=a100, gpus=4),
        s.bound_pod("h0", uid="x1", profile="3g.40gb"),
        s.bound_pod("h1", uid="x2", profile="1g.20gb"),
        s.bound_pod("a2", uid="x3", profile="1g.20gb"),
        s.bound_pod("a3", uid="x4", profile="4g.40gb"),
        s.bound_pod("a3", uid="x5", profile="4g.40gb"))
    verdict = decide(many("30Gi", "4Gi"), c)
    assert verdict.profiles == ("4g.40gb", "4g.40gb")
    assert verdict.warnings[0].endswith("one node has them all free")
    assert not any("free now" in w for w in verdict.warnings), verdict.warnings
