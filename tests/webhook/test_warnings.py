"""The webhook's warnings say what will really happen to the pod and what to change: a pod
with spec.nodeName is not waited for (the kubelet fails it at once), a single-strategy choice
is not pointed at ``migfit advise`` (which plans mixed-strategy re-layouts only), and
containers asking alike share one warning instead of one each (kube-apiserver may drop some
of many)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import webhook_scenery as s
from webhook_scenery import MakeClient

from migfit import profiles, requests, sources
from migfit.webhook import decision

ROOT = Path(__file__).resolve().parents[2]
#: What ``migfit serve`` decides by.
SERVE = decision.Policy()


def create(annotations: dict[str, str], containers: int = 1, **spec: Any) -> dict[str, Any]:
    """examples/requests/create-12gi.json with ``annotations``, ``containers`` copies of its
    first container (``c0``, ``c1``, … in place of both when more than one) and ``spec``
    fields."""
    review: dict[str, Any] = json.loads(
        (ROOT / "examples" / "requests" / "create-12gi.json").read_text())
    pod = review["request"]["object"]
    pod["metadata"]["annotations"] = annotations
    if containers > 1:
        first = pod["spec"]["containers"][0]
        pod["spec"]["containers"] = [copy.deepcopy(first) | {"name": f"c{i}"}
                                     for i in range(containers)]
    pod["spec"].update(spec)
    return review


async def warnings_of(make_client: MakeClient, review: dict[str, Any]) -> list[str]:
    """The warnings of the example cluster's webhook for ``review``, which it allows."""
    client = await make_client(sources.load_snapshot(ROOT / "examples" / "cluster.yaml"),
                               policy=SERVE)
    resp = await client.post("/mutate", json=review)
    assert resp.status == 200
    response = (await resp.json())["response"]
    assert response["allowed"] is True  # migfit's view may lag the node: still admitted
    warnings: list[str] = response.get("warnings", [])
    # kube-apiserver passes them on whole (its Go code measures bytes)
    assert all(len(w.encode()) <= 256 for w in warnings)
    return warnings


async def test_a_node_name_pod_is_told_the_kubelet_fails_it_not_that_it_waits(
        make_client: MakeClient) -> None:
    warnings = await warnings_of(make_client, create({requests.GPU_MEMORY: "8Gi"},
                                                      nodeName="gpu-a100-1"))
    assert warnings == [
        "every 1g.10gb instance on node gpu-a100-1 (the pod's spec.nodeName) is in use now "
        "or asked for by pods already waiting",
        "a pod with spec.nodeName skips the scheduler and does not wait: the kubelet fails "
        "the pod at once if no 1g.10gb is free there (OutOfnvidia.com/mig-1g.10gb, never "
        "retried); remove spec.nodeName or name a node with a free 1g.10gb"]


async def test_a_node_name_pod_whose_node_lacks_the_profile_is_not_told_it_stays_pending(
        make_client: MakeClient) -> None:
    warnings = await warnings_of(make_client, create({requests.GPU_MEMORY: "30Gi"},
                                                      nodeName="gpu-a100-1"))
    assert warnings == [
        "3g.40gb is not advertised on node gpu-a100-1 (the pod's spec.nodeName) now; the "
        "kubelet fails the pod at once (never retried), or starts it without one if the node "
        "has no nvidia.com/mig-3g.40gb: remove spec.nodeName or name a node with a free "
        "3g.40gb"]


def test_a_node_name_pod_lacking_a_busy_profile_hears_of_the_free_one_there() -> None:
    """The free alternative on the named node keeps its hint; the kubelet's answer is a
    line of its own, so that neither is cut at 256 characters."""
    view = s.make_cluster(s.mig_node("gpu-a", allocatable={"1g.10gb": 1, "2g.20gb": 1}),
                          s.bound_pod("gpu-a", uid="u0", profile="1g.10gb"))
    pod = s.pod({requests.GPU_MEMORY: "8Gi"})
    pod["spec"]["nodeName"] = "gpu-a"
    verdict = decision.decide_pod(pod, supply=s.supply_of(view), policy=s.POLICY)
    assert verdict.allowed and verdict.profiles == ("1g.10gb",)
    assert verdict.warnings == (
        "every 1g.10gb instance on node gpu-a (the pod's spec.nodeName) is in use now or "
        "asked for by pods already waiting; 2g.20gb (19.5Gi) also fits and has 1 free: ask "
        'for it with migfit.io/gpu-compute: "2"',
        "a pod with spec.nodeName skips the scheduler and does not wait: the kubelet fails "
        "the pod at once if no 1g.10gb is free there (OutOfnvidia.com/mig-1g.10gb, never "
        "retried); remove spec.nodeName or name a node with a free 1g.10gb")


def test_a_node_name_pod_whose_node_lacks_them_together_is_told_to_move_or_split() -> None:
    view = s.make_cluster(s.mig_node("a80-0", allocatable={"3g.40gb": 1}),
                          s.mig_node("a80-1", allocatable={"3g.40gb": 2}))
    pod = s.pod({requests.GPU_MEMORY_PREFIX + "a": "30Gi",
                 requests.GPU_MEMORY_PREFIX + "b": "30Gi"},
                containers=[{"name": "a"}, {"name": "b"}])
    pod["spec"]["nodeName"] = "a80-0"
    verdict = decision.decide_pod(pod, supply=s.supply_of(view), policy=s.POLICY)
    assert verdict.allowed
    assert verdict.warnings == (
        "node a80-0 (the pod's spec.nodeName) does not advertise all of the pod's instances "
        "(2 × 3g.40gb) together; the kubelet fails the pod at once (never retried): remove "
        "spec.nodeName, name a node that has them all free, or split the pod",)


def waiting(name: str, profile: str) -> dict[str, Any]:
    """A pod admitted earlier, asking for one ``profile`` instance, that kube-scheduler has
    not bound yet."""
    resource = profiles.resource_name(profile)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "c", "resources": {
                "limits": {resource: "1"}, "requests": {resource: "1"}}}]},
            "status": {"phase": "Pending"}}


def test_a_node_name_pod_short_only_by_waiting_pods_claims_is_not_told_it_fails() -> None:
    """The kubelet counts the pods bound to the node, not those waiting to be: where the
    named node has the pod's instances unallocated and only waiting pods' claims leave it
    short, the kubelet fails the pod only if they are taken first."""
    view = s.make_cluster(s.mig_node("a80-1", allocatable={"3g.40gb": 2}),
                          waiting("w", "3g.40gb"))
    two = s.pod({requests.GPU_MEMORY_PREFIX + "a": "30Gi",
                 requests.GPU_MEMORY_PREFIX + "b": "30Gi"},
                containers=[{"name": "a"}, {"name": "b"}])
    two["spec"]["nodeName"] = "a80-1"
    verdict = decision.decide_pod(two, supply=s.supply_of(view), policy=s.POLICY)
    assert verdict.allowed and verdict.profiles == ("3g.40gb", "3g.40gb")
    assert verdict.warnings == (
        "node a80-1 (the pod's spec.nodeName) has the pod's instances (2 × 3g.40gb) free, but "
        "waiting pods ask for some; the kubelet fails the pod at once if they are not free "
        "when it arrives: remove spec.nodeName or name a node with them all free",)
    # One of them bound there: the kubelet does fail it.
    view = s.make_cluster(s.mig_node("a80-1", allocatable={"3g.40gb": 2}),
                          s.bound_pod("a80-1", uid="u0", profile="3g.40gb"))
    verdict = decision.decide_pod(two, supply=s.supply_of(view), policy=s.POLICY)
    assert verdict.warnings == (
        "node a80-1 (the pod's spec.nodeName) does not have all of the pod's instances (2 × "
        "3g.40gb) free now; the kubelet fails the pod at once (never retried): remove "
        "spec.nodeName or name a node that has them all free",)
    # One container, its one instance claimed: the kubelet's answer is conditional too.
    view = s.make_cluster(s.mig_node("a80-1", allocatable={"3g.40gb": 1}),
                          waiting("w", "3g.40gb"))
    one = s.pod({requests.GPU_MEMORY: "30Gi"})
    one["spec"]["nodeName"] = "a80-1"
    verdict = decision.decide_pod(one, supply=s.supply_of(view), policy=s.POLICY)
    assert verdict.allowed and verdict.profiles == ("3g.40gb",)
    assert verdict.warnings == (
        "every 3g.40gb instance on node a80-1 (the pod's spec.nodeName) is in use now or "
        "asked for by pods already waiting",
        "a pod with spec.nodeName skips the scheduler and does not wait: the kubelet fails "
        "the pod at once if no 3g.40gb is free there (OutOfnvidia.com/mig-3g.40gb, never "
        "retried); remove spec.nodeName or name a node with a free 3g.40gb")


async def test_a_single_strategy_choice_is_not_pointed_at_migfit_advise(
        make_client: MakeClient) -> None:
    warnings = await warnings_of(make_client, create(
        {requests.GPU_MEMORY: "8Gi"}, nodeSelector={"kubernetes.io/hostname": "gpu-a100-40-0"}))
    assert warnings == [
        "1g.10gb is not advertised on the nodes the pod's nodeSelector selects now; the pod "
        "stays Pending until a single-strategy node's GPUs are re-partitioned as 1g.10gb (its "
        "nvidia.com/mig.config label)"]


def test_a_single_strategy_pod_no_node_holds_is_not_pointed_at_migfit_advise() -> None:
    view = s.make_cluster(s.mig_node("s-0", allocatable={"1g.10gb": 1}, strategy="single"))
    pod = s.pod({requests.GPU_MEMORY_PREFIX + "a": "8Gi", requests.GPU_MEMORY_PREFIX + "b": "8Gi"},
                containers=[{"name": "a"}, {"name": "b"}])
    verdict = decision.decide_pod(pod, supply=s.supply_of(view), policy=s.POLICY)
    assert verdict.record is not None and verdict.record["strategy"] == "single"
    assert verdict.warnings == (
        "no node advertises all of the pod's instances (2 × 1g.10gb) together; the pod stays "
        "Pending until a single-strategy node's GPUs are re-partitioned as 1g.10gb (its "
        "nvidia.com/mig.config label), or split the pod",)


async def test_nine_containers_asking_alike_share_one_warning(make_client: MakeClient) -> None:
    """Nine 70Gi where the most GPUs on a node is 2: told the pod can never be scheduled,
    its containers are not told it stays Pending until a GPU is re-partitioned."""
    nine = {f"{requests.GPU_MEMORY_PREFIX}c{i}": "70Gi" for i in range(9)}
    assert await warnings_of(make_client, create(nine, containers=9)) == [
        "no node has GPUs enough for all of the pod's instances (9 × 7g.80gb: at least 9 GPUs; "
        "the most on one node is 2): the pod can never be scheduled; split it into pods of at "
        "most 2 GPUs' worth of instances",
        "c0, c1, c2, c3, c4, c5, c6, c7 and 1 more: no node advertises 7g.80gb now"]
    # Under the single strategy GFD counts MIG devices, not GPUs: the GPUs a pod needs are
    # not bounded there, so no "never" warning, and a re-layout is still what it waits for.
    sixteen = {f"{requests.GPU_MEMORY_PREFIX}c{i}": "30Gi" for i in range(16)}
    warnings = await warnings_of(make_client, create(sixteen, containers=16))
    assert len(warnings) == 2
    assert "can never be scheduled" not in warnings[0]
    assert warnings[1] == (
        "c0, c1, c2, c3, c4, c5, c6, c7 and 8 more: no node advertises 7g.40gb now; the pod "
        "stays Pending until a single-strategy node's GPUs are re-partitioned as 7g.40gb (its "
        "nvidia.com/mig.config label)")


def test_a_pod_that_can_never_be_scheduled_is_not_told_it_waits_for_a_freed_one() -> None:
    """Told it can never be scheduled, a pod's containers are not told either that it
    waits for a busy instance to be freed: no freed instance places it."""
    view = s.make_cluster(s.mig_node("a80-0", allocatable={"3g.40gb": 2}, gpus=1),
                          *[s.bound_pod("a80-0", uid=f"u{i}", profile="3g.40gb")
                            for i in range(2)])
    three = s.pod({requests.GPU_MEMORY_PREFIX + n: "30Gi" for n in "abc"},
                  containers=[{"name": n} for n in "abc"])
    verdict = decision.decide_pod(three, supply=s.supply_of(view), policy=s.POLICY)
    assert verdict.allowed
    assert verdict.warnings == (
        "no node has GPUs enough for all of the pod's instances (3 × 3g.40gb: at least 2 "
        "GPUs; the most on one node is 1): the pod can never be scheduled; split it into "
        "pods of at most 1 GPU's worth of instances",
        "a, b, c: every 3g.40gb instance is in use now or asked for by pods already waiting")


def test_a_shared_warning_names_the_key_of_each_container_and_one_alone_its_own() -> None:
    """The hint of a free profile names a per-container key: ``…<container>`` where several
    containers share the warning, the container's own where one has it alone."""
    view = s.make_cluster(s.mig_node("gpu-a", allocatable={"1g.10gb": 3, "2g.20gb": 3}),
                          *[s.bound_pod("gpu-a", uid=f"u{i}", profile="1g.10gb")
                            for i in range(3)])
    three = s.pod({requests.GPU_MEMORY_PREFIX + n: "8Gi" for n in "abc"},
                  containers=[{"name": n} for n in "abc"])
    verdict = decision.decide_pod(three, supply=s.supply_of(view), policy=s.POLICY)
    assert verdict.warnings == (
        "a, b, c: every 1g.10gb instance is in use now or asked for by pods already waiting; "
        "the pod waits for one to be freed; 2g.20gb (19.5Gi) also fits and has 3 free: ask "
        'for it with migfit.io/gpu-compute.<container>: "2"',)
    two = s.pod({requests.GPU_MEMORY_PREFIX + "a": "8Gi", requests.GPU_MEMORY_PREFIX + "b": "30Gi"},
                containers=[{"name": "a"}, {"name": "b"}])
    verdict = decision.decide_pod(two, supply=s.supply_of(view), policy=s.POLICY)
    assert verdict.warnings[0] == (
        "a: every 1g.10gb instance is in use now or asked for by pods already waiting; the pod "
        "waits for one to be freed; 2g.20gb (19.5Gi) also fits and has 3 free: ask for it "
        'with migfit.io/gpu-compute.a: "2"')


def test_a_shared_warning_names_no_more_containers_than_leave_it_whole() -> None:
    names = [f"worker-with-a-long-name-that-takes-room-{i:02}" for i in range(8)]
    pod = s.pod({requests.GPU_MEMORY_PREFIX + n: "1Mi" for n in names},
                containers=[{"name": n} for n in names])
    view = s.make_cluster(s.mig_node("gpu-a", allocatable={"1g.10gb": 8}))
    verdict = decision.decide_pod(pod, supply=s.supply_of(view), policy=s.POLICY)
    (rounded,) = verdict.warnings
    assert rounded == (f"{names[0]}, {names[1]}, {names[2]}, {names[3]} and 4 more: 1Mi was "
                       f"rounded up to 1g.10gb (9.5Gi): 99% of its memory unused")
    assert len(rounded) <= 256


async def test_a_warning_too_long_is_cut_to_256_bytes_not_characters(
        make_client: MakeClient) -> None:
    """Cut at 256 characters with a "…" (three bytes), a warning was 258 bytes: over what
    kube-apiserver, whose Go code measures bytes, passes on whole (an outside check)."""
    review = create({requests.GPU_MEMORY: "8Gi"})
    pod = review["request"]["object"]
    main = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [main] + [
        {"name": f"c{i}-" + "x" * 59, "image": "x",
         "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}} for i in range(5)]
    warnings = await warnings_of(make_client, review)
    cut = [w for w in warnings if w.endswith("...")]
    assert cut, warnings
    assert all(len(w.encode()) <= 256 for w in warnings)
