"""The webhook decides against the nodes a pod may run on: its nodeSelector, required node
affinity and spec.nodeName (an 8Gi pod pinned to the A100 nodes is not given a profile only
an H100 has free), never memoised across a move the cluster's sums do not show."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonpatch
import webhook_scenery as s

from migfit import builders, cluster, requests
from migfit.webhook import decision, memo, reading, server, view

H100_MEMORY = {"1g.10gb": 9984, "2g.20gb": 20096, "3g.40gb": 40448}
FREE = decision.Policy(contention="free")


def node(name: str, *, pool: str, **kwargs: Any) -> dict[str, Any]:
    out = s.mig_node(name, **kwargs)
    out["metadata"]["labels"]["example.com/pool"] = pool
    return out


def busy(node_name: str, profile: str, uid: str) -> dict[str, Any]:
    return s.bound_pod(node_name, uid=uid, profile=profile)


def two_models() -> cluster.Cluster:
    """An A100 whose only 1g.10gb is taken (its 3g.40gb is free) and an H100 with two free
    1g.10gb."""
    c = s.make_cluster(
        node("a100-0", pool="a", allocatable={"1g.10gb": 1, "3g.40gb": 1}),
        node("h100-0", pool="h", product=s.H100_PRODUCT, allocatable={"1g.10gb": 2},
             memory=H100_MEMORY))
    c.apply("Pod", "ADDED", busy("a100-0", "1g.10gb", "u1"))
    return c


def pinned(**spec: Any) -> dict[str, Any]:
    out = s.pod({requests.GPU_MEMORY: "8Gi"})
    out["spec"].update(spec)
    return out


def decide(pod: dict[str, Any], c: cluster.Cluster,
           policy: decision.Policy = FREE) -> decision.Verdict:
    return decision.decide_pod(pod, supply=view.SupplyTracker(c).supply(), policy=policy)


def affinity(key: str, *values: str) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": key, "operator": "In", "values": list(values)}]}]}}}


def test_without_constraints_the_whole_cluster_is_read() -> None:
    verdict = decide(pinned(), two_models())
    assert verdict.profiles == ("1g.10gb",) and verdict.warnings == ()


def test_a_node_selector_limits_the_choice_to_its_nodes() -> None:
    c = two_models()
    verdict = decide(pinned(nodeSelector={"nvidia.com/gpu.product": s.A100_PRODUCT}), c)
    # The A100's 1g.10gb is taken: the free choice takes its free 3g.40gb, not the H100's.
    assert verdict.profiles == ("3g.40gb",)
    assert verdict.record is not None
    assert verdict.record["containers"][0]["reason"] == (
        "smallest with a free instance (1g.10gb: 0 free that no waiting pod asks for)")
    # Smallest first: 1g.10gb, with the warning saying where none is free.
    smallest = decide(pinned(nodeSelector={"example.com/pool": "a"}), c, s.POLICY)
    assert smallest.profiles == ("1g.10gb",)
    assert ("every 1g.10gb instance on the nodes the pod's nodeSelector selects is in use "
            "now") in smallest.warnings[0]
    assert decide(pinned(nodeSelector={"example.com/pool": "h"}), c).profiles == ("1g.10gb",)


def test_required_node_affinity_and_node_name_limit_it_too() -> None:
    c = two_models()
    assert decide(pinned(affinity=affinity("example.com/pool", "a")), c).profiles == (
        "3g.40gb",)
    assert decide(pinned(nodeName="a100-0"), c).profiles == ("3g.40gb",)
    assert decide(pinned(nodeName="h100-0"), c).profiles == ("1g.10gb",)
    # Preferred affinity does not bind the scheduler: the whole cluster.
    preferred = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [
            {"key": "example.com/pool", "operator": "In", "values": ["a"]}]}}]}}
    assert decide(pinned(affinity=preferred), c).profiles == ("1g.10gb",)


def test_a_profile_its_nodes_lack_is_named_with_them() -> None:
    c = two_models()
    verdict = decide(s.pod({requests.GPU_MEMORY: "12Gi"}) | {"spec": {
        "containers": [{"name": "main"}], "nodeName": "h100-0"}}, c)
    assert verdict.profiles == ("1g.20gb",)  # the H100's smallest that holds 12Gi
    assert verdict.warnings[0].startswith(
        "1g.20gb is not advertised on node h100-0 (the pod's spec.nodeName) now;")
    too_big = decide(s.pod({requests.GPU_MEMORY: "90Gi"}) | {"spec": {
        "containers": [{"name": "main"}], "nodeSelector": {"example.com/pool": "h"}}}, c)
    assert not too_big.allowed
    assert "of the GPU models on the nodes the pod's nodeSelector selects: 7g.80gb on H100" \
        in too_big.message


def test_nodes_unknown_to_migfit_are_decided_as_for_any_node_with_a_warning() -> None:
    c = two_models()
    pool = decide(pinned(nodeSelector={"example.com/pool": "scaled-to-zero"}), c)
    assert pool.profiles == ("1g.10gb",)
    assert pool.warnings == ("none of the nodes the pod's nodeSelector selects has a MIG GPU "
                             "migfit knows now (a node pool scaled to zero?); decided as for "
                             "any node",)
    gone = decide(pinned(nodeName="gpu-7"), c)
    assert gone.profiles == ("1g.10gb",)
    assert gone.warnings == ("node gpu-7 (the pod's spec.nodeName) is not in migfit's view "
                             "(not yet seen?); decided as for any node",)


def test_node_name_of_a_node_without_a_mig_gpu_is_denied() -> None:
    c = two_models()
    cpu_node = builders.node("cpu-0", labels={}, resources={}, cpu="64", memory="256Gi")
    cluster.load_objects(c, [cpu_node])
    verdict = decide(pinned(nodeName="cpu-0"), c)
    assert not verdict.allowed
    assert verdict.message == (
        "spec.nodeName names cpu-0, a node without a MIG GPU migfit knows: no MIG instance "
        "can be given there; name a node with MIG GPUs, or remove spec.nodeName and let the "
        "scheduler choose")


def test_node_name_skips_the_cordon_but_not_the_pods_own_selector() -> None:
    c = s.make_cluster(
        node("a100-0", pool="a", allocatable={"1g.10gb": 2}, unschedulable=True),
        node("h100-0", pool="h", product=s.H100_PRODUCT, allocatable={"2g.20gb": 2},
             memory=H100_MEMORY))
    # Cordoned: the scheduler passes it over, a pod naming it runs there all the same.
    named = decide(pinned(nodeName="a100-0"), c)
    assert named.profiles == ("1g.10gb",) and named.warnings == ()
    assert decide(pinned(), c).profiles == ("2g.20gb",)
    # A nodeName its own nodeSelector excludes: the kubelet refuses it; said, and decided
    # for the node named.
    against = decide(pinned(nodeName="a100-0", nodeSelector={"example.com/pool": "h"}), c)
    assert against.profiles == ("1g.10gb",)
    assert against.warnings == (
        "node a100-0 (the pod's spec.nodeName) is not one the pod's nodeSelector selects: "
        "the kubelet will refuse the pod there; decided for that node",)


def test_a_cordoned_node_named_in_node_name_is_read_for_room_and_for_the_whole_pod() -> None:
    """The named node is cordoned, its 1g.10gb in use and its 3g.40gb free: ``usable`` sees
    the free 3g.40gb where the pod's cpu fits, as ``free`` does (it took the busy 1g.10gb,
    no fitting instance seen free), and a pod of 8Gi + 30Gi is not told the node lacks
    them free (it has both)."""
    def build() -> cluster.Cluster:
        return s.make_cluster(
            node("a1", pool="a", allocatable={"1g.10gb": 1, "3g.40gb": 1}, unschedulable=True),
            node("b1", pool="b", allocatable={"2g.20gb": 1}))
    one = pinned(nodeName="a1")
    one["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    c = build()
    c.apply("Pod", "ADDED", busy("a1", "1g.10gb", "u1"))
    for policy in (FREE, decision.Policy(contention="usable")):
        assert decide(one, c, policy).profiles == ("3g.40gb",), policy.contention
    two = s.pod({requests.GPU_MEMORY_PREFIX + "a": "8Gi", requests.GPU_MEMORY_PREFIX + "b": "30Gi"},
                containers=[{"name": "a"}, {"name": "b"}])
    two["spec"]["nodeName"] = "a1"
    verdict = decide(two, build())
    assert verdict.profiles == ("1g.10gb", "3g.40gb") and verdict.warnings == ()


def test_the_models_a_pinned_request_fits_are_the_clusters() -> None:
    """9800Mi fits the H100's 1g.10gb (9984 MiB), not the A100's (9728 MiB). Pinned to the
    pool of H100s, the record still names the H100 alone and the product affinity is added
    (before: models [], which says it fits every model with the profile, and no affinity:
    an A100 relabelled into the pool later would have taken it)."""
    c = s.make_cluster(
        node("a1", pool="a", allocatable={"1g.10gb": 2}),
        node("h1", pool="h", product=s.H100_PRODUCT, allocatable={"1g.10gb": 2},
             memory=H100_MEMORY))
    for selector in ({}, {"example.com/pool": "h"}):
        pod = s.pod({requests.GPU_MEMORY: "9800Mi"})
        pod["spec"]["nodeSelector"] = selector
        verdict = decide(pod, c)
        assert verdict.record is not None
        assert verdict.record["containers"][0]["models"] == ["H100-80GB"], selector
        assert s.H100_PRODUCT in json.dumps(
            [op["value"] for op in verdict.patch if op["path"].startswith("/spec/affinity")])


def test_a_pinned_request_fits_the_model_it_was_chosen_on_whatever_other_nodes_label() -> None:
    """Zone a's A100 labels its 1g.10gb 9984 MiB, zone b's 9728 (drivers differ): 9800Mi
    pinned to zone a fits the A100 there, and the record must not restrict it to the H100
    (the least label of the whole cluster had said it does not fit the A100: the extender
    then refused the pod's only node)."""
    def zoned(obj: dict[str, Any], zone: str) -> dict[str, Any]:
        obj["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone
        return obj
    c = s.make_cluster(
        zoned(s.mig_node("a100-a", allocatable={"1g.10gb": 7}, memory={"1g.10gb": 9984}), "a"),
        zoned(s.mig_node("a100-b", allocatable={"1g.10gb": 7}, memory={"1g.10gb": 9728}), "b"),
        zoned(s.mig_node("h100-b", product=s.H100_PRODUCT, allocatable={"1g.10gb": 7},
                         memory={"1g.10gb": 9984}), "b"))
    pod = s.pod({requests.GPU_MEMORY: "9800Mi"})
    pod["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "a"}
    verdict = decide(pod, c)
    assert verdict.record is not None
    assert verdict.record["containers"][0]["models"] == []
    assert verdict.warnings == ()


def test_single_strategy_product_affinity_comes_from_the_selected_nodes() -> None:
    c = s.make_cluster(
        node("a100-0", pool="a", allocatable={"1g.10gb": 4}, strategy="single"),
        node("h100-0", pool="h", product=s.H100_PRODUCT, allocatable={"1g.10gb": 4},
             strategy="single", memory=H100_MEMORY))
    pod = pinned(nodeSelector={"example.com/pool": "h"})
    verdict = decide(pod, c)
    assert verdict.record is not None and verdict.record["strategy"] == "single"
    values = [op["value"] for op in verdict.patch if op["path"].startswith("/spec/affinity")]
    assert json.dumps(values).count("-MIG-1g.10gb") == 1
    assert s.H100_PRODUCT + "-MIG-1g.10gb" in json.dumps(values)


def _product_values(verdict: decision.Verdict) -> list[str]:
    (term,) = [op["value"] for op in verdict.patch if op["path"].startswith("/spec/affinity")]
    (sel,) = term["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    (expr,) = [e for e in sel["matchExpressions"] if e["key"] == "nvidia.com/gpu.product"]
    return list(expr["values"])


def test_single_strategy_affinity_spells_a_media_profile_as_gfd_labels_it() -> None:
    """GFD writes a MIG device's "+" as "." (…-MIG-1g.10gb.me): an 8Gi pod asking for media
    engines on a node laid out in 3g.40gb must match the label it will have after the
    re-layout, not a "+me" spelling no node ever carries."""
    c = s.make_cluster(node("a100-0", pool="a", allocatable={"3g.40gb": 2}, strategy="single"))
    pod = s.pod({requests.GPU_MEMORY: "8Gi", requests.GPU_MEDIA: "true"})
    verdict = decide(pod, c)
    assert verdict.record is not None and verdict.record["strategy"] == "single"
    values = _product_values(verdict)
    assert values == [s.A100_PRODUCT + "-MIG-1g.10gb.me"], values


def test_single_strategy_affinity_keeps_the_shared_suffix_of_time_sliced_nodes() -> None:
    """A time-sliced single-strategy node is labelled …-MIG-1g.10gb-SHARED; after a re-layout
    to 3g.40gb it is …-MIG-3g.40gb-SHARED, which the affinity must allow."""
    shared = node("a100-0", pool="a", allocatable={"1g.10gb": 7}, strategy="single")
    labels = shared["metadata"]["labels"]
    labels["nvidia.com/gpu.product"] += "-SHARED"
    labels["nvidia.com/gpu.replicas"] = "2"
    c = s.make_cluster(shared)
    verdict = decide(s.pod({requests.GPU_MEMORY: "30Gi"}), c)
    values = _product_values(verdict)
    assert s.A100_PRODUCT + "-MIG-3g.40gb-SHARED" in values, values
    assert s.A100_PRODUCT + "-MIG-3g.40gb" in values, values


def test_a_pinned_pod_is_not_answered_from_the_memo_after_its_node_freed_up() -> None:
    """Two A100s, one 1g.10gb each; the taken one moves from a100-0 to a100-1. The cluster's
    sums are what they were, so the memo's key would not move; the pinned pod's nodes did."""
    c = s.make_cluster(node("a100-0", pool="a", allocatable={"1g.10gb": 1, "3g.40gb": 1}),
                       node("a100-1", pool="b", allocatable={"1g.10gb": 1, "3g.40gb": 1}))
    c.apply("Pod", "ADDED", busy("a100-0", "1g.10gb", "u1"))
    app = server.make_app(server.Settings(policy=FREE), c, tracker=view.SupplyTracker(c),
                          decisions=memo.DecisionMemo(memo.DEFAULT_CAPACITY))
    st = app[server.STATE]

    def ask() -> tuple[str, ...]:
        body = json.dumps(s.review(pinned(nodeName="a100-0"))).encode()
        status, answer = server.answer_bytes(body, state=st)
        assert status == 200
        record = json.loads(answer)["response"]
        return tuple(w for w in record.get("warnings", []))

    generation = st.supply().generation
    first = ask()
    assert any("rounded up to 3g.40gb" in w for w in first)
    c.apply("Pod", "DELETED", busy("a100-0", "1g.10gb", "u1"))
    c.apply("Pod", "ADDED", busy("a100-1", "1g.10gb", "u2"))
    assert st.supply().generation == generation  # the sums did not move
    assert ask() == ()  # 1g.10gb, free on a100-0 now
    assert (st.memo.stats.hits, st.exact.stats.hits) == (0, 0)


def test_the_kept_sums_of_a_selection_follow_every_change() -> None:
    """A tracker that keeps a selection's sums current answers as one counting afresh, through
    binds, deletions, a relabel into and out of the selection, a cordon, a node deleted and
    one added, and a pod waiting for an instance."""
    nodes = [node(f"a100-{i}", pool="a" if i < 3 else "b",
                  allocatable={"1g.10gb": 2, "3g.40gb": 1}) for i in range(5)]
    c = s.make_cluster(*nodes)
    tracker = view.SupplyTracker(c)
    pool_a = {"nodeSelector": {"example.com/pool": "a"}}
    placement = reading.placement_of(pinned(**pool_a))

    def check() -> None:
        kept = tracker.within(placement.constraints, None, "pool a")
        fresh = view.SupplyTracker(c).within(placement.constraints, None, "pool a")
        assert (kept is None) == (fresh is None)
        if kept is not None and fresh is not None:
            assert kept.same_content(fresh), (kept.offers, fresh.offers)
            assert kept.scope in ("pool a", "")

    check()
    steps: list[Callable[[], None]] = [
        lambda: c.apply("Pod", "ADDED", busy("a100-0", "1g.10gb", "u1")),
        lambda: c.apply("Pod", "ADDED", busy("a100-3", "3g.40gb", "u2")),
        lambda: c.apply("Pod", "DELETED", busy("a100-0", "1g.10gb", "u1")),
        lambda: c.apply("Node", "MODIFIED", relabelled(nodes[3], "a")),  # into pool a
        lambda: c.apply("Node", "MODIFIED", relabelled(nodes[0], "b")),  # out of it
        lambda: c.apply("Node", "MODIFIED", cordoned(nodes[1])),
        lambda: c.apply("Node", "DELETED", nodes[2]),
        lambda: c.apply("Node", "ADDED", node("a100-9", pool="a", allocatable={"2g.20gb": 3})),
        lambda: c.apply("Pod", "ADDED", waiting("2g.20gb", "u3")),
        lambda: c.apply("Node", "DELETED", node("a100-9", pool="a",
                                                allocatable={"2g.20gb": 3})),
    ]
    for step in steps:
        step()
        check()
    # Every node of the cluster selected: the whole snapshot itself.
    everything = reading.placement_of(pinned(nodeSelector={"nvidia.com/mig.strategy": "mixed"}))
    assert tracker.within(everything.constraints, None, "all") is tracker.supply()


def relabelled(obj: dict[str, Any], pool: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["labels"]["example.com/pool"] = pool
    out["metadata"]["resourceVersion"] = str(int(out["metadata"].get("resourceVersion", "1")) + 1)
    return out


def cordoned(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"]["unschedulable"] = True
    return out


def waiting(profile: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"wait-{uid}", "namespace": "ml", "uid": uid},
            "spec": {"containers": [{"name": "c", "resources": {
                "limits": {f"nvidia.com/mig-{profile}": "1"}}}]},
            "status": {"phase": "Pending"}}


def test_usable_counts_room_only_on_the_selected_nodes() -> None:
    c = s.make_cluster(node("a100-0", pool="a", allocatable={"1g.10gb": 1}),
                       node("a100-1", pool="b", allocatable={"1g.10gb": 1}))
    c.apply("Pod", "ADDED", s.bound_pod("a100-0", uid="hog", cpu="30"))
    usable = decision.Policy(contention="usable")
    pod = pinned()
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "8"}}
    anywhere = decide(pod, c, usable)
    assert anywhere.record is not None
    assert anywhere.record["containers"][0]["reason"].startswith(
        "smallest fitting, with a free instance")
    pod["spec"]["nodeSelector"] = {"example.com/pool": "a"}
    there = decide(pod, c, usable)
    assert there.record is not None
    assert there.record["containers"][0]["reason"].startswith(
        "smallest fitting: no fitting profile has a free instance")


def test_a_pinned_pod_is_charged_the_claims_of_pods_that_may_go_where_it_may() -> None:
    """A pod waiting for pool b's 1g.10gb does not take pool a's: an 8Gi pod pinned to
    pool a still gets its free 1g.10gb; a waiting pod with no selector is charged."""
    c = s.make_cluster(node("a1", pool="a", allocatable={"1g.10gb": 1, "3g.40gb": 1}),
                       node("b1", pool="b", allocatable={"1g.10gb": 1}))
    elsewhere = waiting("1g.10gb", "w1")
    elsewhere["spec"]["nodeSelector"] = {"example.com/pool": "b"}
    c.apply("Pod", "ADDED", elsewhere)
    assert decide(pinned(nodeSelector={"example.com/pool": "a"}), c).profiles == ("1g.10gb",)
    assert decide(pinned(nodeName="a1"), c).profiles == ("1g.10gb",)
    c.apply("Pod", "ADDED", waiting("1g.10gb", "w2"))  # may go anywhere: a1's is set aside
    assert decide(pinned(nodeSelector={"example.com/pool": "a"}), c).profiles == ("3g.40gb",)
    c.apply("Pod", "DELETED", waiting("1g.10gb", "w2"))
    c.apply("Pod", "DELETED", elsewhere)
    assert c.claims_beside(reading.placement_of(pinned()).constraints) == {}


def test_a_pinned_pod_is_charged_what_an_overlapping_selection_must_take_from_its_nodes(
) -> None:
    """A pod waiting for a 1g.10gb in zone z1, whose only free one is a1's, takes it from
    pool a too: an 8Gi pod pinned to pool a is charged that claim and takes a1's free
    3g.40gb. Where zone z1 has a free 1g.10gb outside pool a (c1), the claim is taken to go
    there and pool a's pod keeps a1's. Before, a selection other than the pod's own was
    taken to wait elsewhere, and the pool-a pod got a 1g.10gb it waited for."""
    def zoned(name: str, pool: str, zone: str, alloc: dict[str, int]) -> dict[str, Any]:
        out = node(name, pool=pool, allocatable=alloc)
        out["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone
        return out

    c = s.make_cluster(zoned("a1", "a", "z1", {"1g.10gb": 1, "3g.40gb": 1}),
                       zoned("b1", "b", "z2", {"1g.10gb": 1}))
    zone_z1 = waiting("1g.10gb", "w-z1")
    zone_z1["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "z1"}
    c.apply("Pod", "ADDED", zone_z1)
    pool_a = pinned(nodeSelector={"example.com/pool": "a"})
    assert decide(pool_a, c).profiles == ("3g.40gb",)
    assert decide(pinned(nodeName="a1"), c).profiles == ("3g.40gb",)
    # Pool b shares no node with zone z1: its 1g.10gb stays free to it.
    assert decide(pinned(nodeSelector={"example.com/pool": "b"}), c).profiles == ("1g.10gb",)
    c.apply("Node", "ADDED", zoned("c1", "c", "z1", {"1g.10gb": 1}))
    assert decide(pool_a, c).profiles == ("1g.10gb",)


def test_a_selection_sharing_no_free_instance_with_the_pod_charges_it_nothing() -> None:
    """Three pods wait for a 1g.10gb in zone z1, which has none free: a zone-z2 pod (or one
    named to a z2 node) keeps z2's free 1g.10gb, which they can never use (an outside check:
    they had been charged all three claims, and the pod took a 2g.20gb)."""
    def zoned(name: str, zone: str, alloc: dict[str, int]) -> dict[str, Any]:
        out = node(name, pool=zone, allocatable=alloc)
        out["metadata"]["labels"]["topology.kubernetes.io/zone"] = zone
        return out

    c = s.make_cluster(zoned("a1", "z1", {"1g.10gb": 1, "2g.20gb": 1}),
                       zoned("b1", "z2", {"1g.10gb": 2, "2g.20gb": 1}))
    c.apply("Pod", "ADDED", busy("a1", "1g.10gb", "held"))
    for i in range(3):
        w = waiting("1g.10gb", f"w{i}")
        w["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "z1"}
        c.apply("Pod", "ADDED", w)
    assert decide(pinned(nodeSelector={"topology.kubernetes.io/zone": "z2"}), c).profiles == (
        "1g.10gb",)
    assert decide(pinned(nodeName="b1"), c).profiles == ("1g.10gb",)


def test_a_pinned_burst_is_charged_its_own_claims_whatever_tolerations_and_product() -> None:
    """Pods of one workload pinned to pool a: the one waiting carries a toleration and, under
    the single strategy, the product affinity the webhook gave it; the next arrives without
    that affinity. It is still charged the first one's claim (before, each difference made
    the claim look like another workload's, and the whole burst got a1's one 1g.10gb)."""
    for strategy in ("mixed", "single"):
        c = s.make_cluster(
            node("a1", pool="a", allocatable={"1g.10gb": 1}, strategy=strategy),
            node("a2", pool="a", allocatable={"3g.40gb": 1}, strategy=strategy),
            node("b1", pool="b", allocatable={"3g.40gb": 1}, strategy=strategy))
        toleration = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        first = pinned(nodeSelector={"example.com/pool": "a"}, tolerations=toleration)
        verdict = decide(first, c)
        assert verdict.profiles == ("1g.10gb",)
        admitted = _patched(first, verdict)
        admitted["status"] = {"phase": "Pending"}
        c.apply("Pod", "ADDED", admitted)
        second = decide(pinned(nodeSelector={"example.com/pool": "a"}, tolerations=toleration), c)
        assert second.profiles == ("3g.40gb",), strategy


def _patched(pod: dict[str, Any], verdict: decision.Verdict) -> dict[str, Any]:
    out: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(pod), list(verdict.patch))
    out["metadata"]["uid"] = "admitted-1"
    return out


def test_a_claim_no_node_can_serve_now_is_left_out_once() -> None:
    """A pod pinned to pool b asks for two 1g.10gb, which no node has free: pending_claims
    already leaves its claim out, and claims_beside must not take it out a second time from
    the claim of a pod that may go anywhere (a pool-a pod then took a1's 1g.10gb)."""
    c = s.make_cluster(node("a1", pool="a", allocatable={"1g.10gb": 1, "3g.40gb": 1}),
                       node("b1", pool="b", allocatable={"1g.10gb": 1}))
    c.apply("Pod", "ADDED", waiting("1g.10gb", "w-any"))
    two = waiting("1g.10gb", "w-b")
    two["spec"]["nodeSelector"] = {"example.com/pool": "b"}
    two["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] = "2"
    c.apply("Pod", "ADDED", two)
    pool_a = reading.placement_of(pinned(nodeSelector={"example.com/pool": "a"})).constraints
    assert c.claims_beside(pool_a) == {"1g.10gb": 1}
    assert decide(pinned(nodeSelector={"example.com/pool": "a"}), c).profiles == ("3g.40gb",)
    # b1 frees a second 1g.10gb: the pool-b pod's claim counts, for pool b's pods only.
    c.apply("Node", "MODIFIED", node("b1", pool="b", allocatable={"1g.10gb": 2}))
    assert c.claims_beside(pool_a) == {"1g.10gb": 1}
    assert dict(c.pending_claims()) == {"1g.10gb": 3}


def test_the_models_of_a_selection_are_in_one_order_whatever_the_hash_seed() -> None:
    """Models as many nodes each: by count, then by name (the record's models list is part
    of the pod's patch: two replicas, each with its own hash seed, must write the same)."""
    script = """
import sys
sys.path.insert(0, HERE)
import webhook_scenery as s
from migfit.webhook import reading, view
nodes = []
for i, (product, mib) in enumerate([("NVIDIA-H100-80GB-HBM3", 9984), (s.A100_PRODUCT, 9728),
                                    ("NVIDIA-A100-SXM4-40GB", 9856)]):
    n = s.mig_node(f"n{i}", product=product, allocatable={"1g.10gb": 2},
                   memory={"1g.10gb": mib})
    n["metadata"]["labels"]["pool"] = "a"
    nodes.append(n)
c = s.make_cluster(*nodes, s.mig_node("zz", allocatable={"3g.40gb": 1}))
pod = s.pod({})
pod["spec"]["nodeSelector"] = {"pool": "a"}
scoped = view.SupplyTracker(c).within(reading.placement_of(pod).constraints, None, "a")
print([m.id for m in scoped.models])
""".replace("HERE", repr(str(Path(__file__).parent)))
    seen = {subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                           text=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}
                           ).stdout.strip() for seed in range(6)}
    assert seen == {"['A100-40GB', 'A100-80GB', 'H100-80GB']"}
