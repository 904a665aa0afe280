"""The cluster model: Kubernetes accounting rules, MIG views of nodes, incremental indexes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migfit import cluster, decoding, records

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def node(name: str, *, product: str | None = A100, strategy: str = "mixed",
         alloc: dict[str, int] | None = None, capacity: dict[str, int] | None = None,
         labels: dict[str, str] | None = None, unschedulable: bool = False,
         rv: str = "1") -> dict[str, Any]:
    alloc = {"3g.40gb": 2} if alloc is None else alloc
    res_alloc = {f"nvidia.com/mig-{p}": str(n) for p, n in alloc.items()}
    res_cap = {f"nvidia.com/mig-{p}": str(n) for p, n in (capacity or alloc).items()}
    all_labels = {"nvidia.com/mig.strategy": strategy, **(labels or {})}
    if product is not None:
        all_labels["nvidia.com/gpu.product"] = product
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": rv,
                     "labels": all_labels},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {"capacity": {"cpu": "64", "memory": "512Gi", **res_cap},
                   "allocatable": {"cpu": "63", "memory": "500Gi", **res_alloc}},
    }


def container(name: str = "main", *, requests: dict[str, str] | None = None,
              limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources, **extra}


def mig(profile: str, n: int = 1) -> dict[str, str]:
    return {f"nvidia.com/mig-{profile}": str(n)}


def pod(name: str, *, node_name: str | None = "n1", phase: str = "Running",
        containers: list[dict[str, Any]] | None = None,
        init: list[dict[str, Any]] | None = None, namespace: str = "ml",
        uid: str | None = None, deleting: bool = False,
        annotations: dict[str, str] | None = None,
        conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers if containers is not None
                            else [container(requests=mig("3g.40gb"), limits=mig("3g.40gb"))]}
    if init is not None:
        spec["initContainers"] = init
    if node_name is not None:
        spec["nodeName"] = node_name
    meta: dict[str, Any] = {"name": name, "namespace": namespace,
                            "uid": uid or f"uid-{namespace}-{name}", "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2024-06-12T10:00:00Z"
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": phase, "conditions": conditions or []}}


def loaded(*objects: dict[str, Any]) -> cluster.Cluster:
    model = cluster.Cluster()
    cluster.load_objects(model, objects)
    return model


def state(model: cluster.Cluster, name: str = "n1") -> records.NodeState:
    found = model.node(name)
    assert found is not None
    return found


# ---------------------------------------------------------------- accounting


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminated_pods_free_their_instances(phase: str) -> None:
    model = loaded(node("n1"), pod("done", phase=phase), pod("busy"))
    s = state(model)
    assert s.used == {"3g.40gb": 1}
    assert s.free == {"3g.40gb": 1}
    assert model.free_nodes("3g.40gb") == {"n1": 1}
    assert [p.name for p in model.pods_on("n1")] == ["busy"]


def test_a_pod_that_finishes_gives_its_instance_back() -> None:
    model = loaded(node("n1"), pod("job"))
    assert state(model).free == {"3g.40gb": 1}
    model.apply("Pod", "MODIFIED", pod("job", phase="Succeeded"))
    assert state(model).free == {"3g.40gb": 2}
    assert model.pods_on("n1") == []


def test_unbound_pods_use_nothing_and_are_pending() -> None:
    model = loaded(node("n1"), pod("waiting", node_name=None, phase="Pending"))
    assert state(model).used == {"3g.40gb": 0}
    assert state(model).idle
    assert [p.name for p in model.pending_pods()] == ["waiting"]


def test_a_deleting_pod_holds_its_instance_until_it_is_gone() -> None:
    model = loaded(node("n1"), pod("going", deleting=True))
    assert state(model).used == {"3g.40gb": 1}
    model.apply("Pod", "DELETED", pod("going", deleting=True))
    assert state(model).used == {"3g.40gb": 0}
    assert model.find_pod("ml", "going") is None


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        # regular containers are summed
        ([container(requests=mig("1g.10gb")), container("b", requests=mig("1g.10gb", 2))],
         [], 3),
        # a plain init container runs alone: the pod needs the max
        ([container(requests=mig("1g.10gb"))], [container("i", requests=mig("1g.10gb", 3))], 3),
        ([container(requests=mig("1g.10gb", 2))], [container("i", requests=mig("1g.10gb"))], 2),
        # a sidecar (restartable init container) runs all along: it adds to the sum
        ([container(requests=mig("1g.10gb"))],
         [container("s", requests=mig("1g.10gb"), restartPolicy="Always")], 2),
        # an init container after a sidecar runs next to it: max(sidecar + init, sidecar + main)
        ([container(requests=mig("1g.10gb"))],
         [container("s", requests=mig("1g.10gb"), restartPolicy="Always"),
          container("i", requests=mig("1g.10gb", 3))], 4),
        # an init container before the sidecar does not see it
        ([container(requests=mig("1g.10gb"))],
         [container("i", requests=mig("1g.10gb", 3)),
          container("s", requests=mig("1g.10gb"), restartPolicy="Always")], 3),
        # a sidecar without GPU changes nothing
        ([container(requests=mig("1g.10gb"))],
         [container("s", restartPolicy="Always")], 1),
    ],
)
def test_init_containers_and_sidecars_follow_kep_753(
        containers: list[dict[str, Any]], init: list[dict[str, Any]], expected: int) -> None:
    requests, _, _, _ = decoding.effective_requests(
        {"containers": containers, "initContainers": init})
    assert requests == {"nvidia.com/mig-1g.10gb": expected}
    model = loaded(node("n1", alloc={"1g.10gb": 7}),
                   pod("p", containers=containers, init=init))
    assert state(model).used == {"1g.10gb": expected}


def test_requests_given_only_as_limits_count() -> None:
    only_limits = [container(limits=mig("3g.40gb"))]
    model = loaded(node("n1"), pod("p", containers=only_limits))
    assert state(model).used == {"3g.40gb": 1}
    record = model.find_pod("ml", "p")
    assert record is not None
    assert record.container_requests == (("main", "nvidia.com/mig-3g.40gb", 1),)


def test_two_containers_asking_for_different_profiles() -> None:
    model = loaded(
        node("n1", alloc={"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        pod("pair", containers=[container("a", requests=mig("1g.10gb")),
                                container("b", limits=mig("2g.20gb"))]),
    )
    s = state(model)
    assert s.used == {"1g.10gb": 1, "2g.20gb": 1, "3g.40gb": 0}
    assert s.free == {"1g.10gb": 1, "2g.20gb": 0, "3g.40gb": 1}
    assert model.free_nodes("2g.20gb") == {}
    record = model.find_pod("ml", "pair")
    assert record is not None
    assert record.mig_requests == {"1g.10gb": 1, "2g.20gb": 1}


def test_allocatable_shrinking_below_use_is_reported_as_overcommit() -> None:
    model = loaded(node("n1", alloc={"1g.10gb": 3}),
                   *(pod(f"p{i}", containers=[container(requests=mig("1g.10gb"))])
                     for i in range(3)))
    assert model.overcommitted() == []
    model.apply("Node", "MODIFIED", node("n1", alloc={"1g.10gb": 1}, rv="2"))
    s = state(model)
    assert s.used == {"1g.10gb": 3}
    assert s.free == {"1g.10gb": 0}  # never negative
    assert s.overcommit == {"1g.10gb": 2}
    assert [o.name for o in model.overcommitted()] == ["n1"]
    # The profile disappears altogether (re-layout): its use is still there and reported.
    model.apply("Node", "MODIFIED", node("n1", alloc={"3g.40gb": 2}, rv="3"))
    assert state(model).overcommit == {"1g.10gb": 3}
    for i in range(3):
        model.apply("Pod", "DELETED", pod(f"p{i}"))
    assert state(model).overcommit == {}
    assert model.overcommitted() == []


def test_zero_allocatable_leftover_counts_as_not_advertised() -> None:
    model = loaded(node("n1", alloc={"1g.10gb": 0, "3g.40gb": 2}))
    s = state(model)
    assert s.node.advertised == {"3g.40gb": 2}
    assert model.free_nodes("1g.10gb") == {}
    stats = model.profile_stats()
    assert ("A100-80GB", "1g.10gb") not in stats
    assert stats[("A100-80GB", "3g.40gb")].nodes == 1


def test_capacity_without_allocatable_is_zero_allocatable() -> None:
    n = node("n1", alloc={"3g.40gb": 2}, capacity={"3g.40gb": 2, "1g.10gb": 7})
    s = state(loaded(n))
    assert s.node.allocatable == {"3g.40gb": 2, "1g.10gb": 0}
    assert s.node.capacity["1g.10gb"] == 7


def test_single_strategy_counts_nvidia_com_gpu_as_the_labelled_profile() -> None:
    n = node("s1", product="NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", strategy="single", alloc={},
             labels={"nvidia.com/gpu.memory": "4864", "nvidia.com/gpu.count": "14"})
    n["status"]["allocatable"]["nvidia.com/gpu"] = "14"
    n["status"]["capacity"]["nvidia.com/gpu"] = "14"
    whole = [container(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"})]
    model = loaded(n, *(pod(f"nb{i}", node_name="s1", containers=whole) for i in range(3)))
    s = state(model, "s1")
    assert s.node.model == "A100-40GB"
    assert s.node.strategy == "single"
    assert s.node.gpu_count == 2  # 14 MIG devices of 7 per GPU
    assert s.node.memory_mib == {"1g.5gb": 4864}
    assert s.node.resource_for("1g.5gb") == "nvidia.com/gpu"
    assert s.used == {"1g.5gb": 3}
    assert model.free_nodes("1g.5gb") == {"s1": 11}


def test_unknown_product_leaves_the_model_none_with_the_reason() -> None:
    model = loaded(node("odd", product="NVIDIA-GeForce-RTX-4090"))
    s = state(model, "odd")
    assert s.node.model is None
    assert s.node.model_error is not None
    assert "NVIDIA-GeForce-RTX-4090" in s.node.model_error
    assert model.models_present() == []
    assert model.profile_stats() == {}
    # Its instances are still counted and schedulable: the scheduler sees the resource.
    assert model.free_nodes("3g.40gb") == {"odd": 2}


def test_cordoned_and_repartitioning_nodes_offer_no_free_instances() -> None:
    model = loaded(
        node("cordoned", unschedulable=True),
        node("busy", labels={"nvidia.com/mig.config.state": "pending"}),
        node("ok"),
    )
    assert model.free_nodes("3g.40gb") == {"ok": 2}
    assert state(model, "busy").repartitioning
    assert model.profile_stats()[("A100-80GB", "3g.40gb")].nodes == 2  # cordoned excluded


def test_profile_stats_memory_follows_the_nodes_present() -> None:
    model = loaded(
        node("a", alloc={"1g.10gb": 7}, labels={"nvidia.com/mig-1g.10gb.memory": "9728"}),
        node("b", alloc={"1g.10gb": 7}, labels={"nvidia.com/mig-1g.10gb.memory": "9984"}),
    )
    assert model.profile_stats()[("A100-80GB", "1g.10gb")].memory_mib == 9728
    model.apply("Node", "DELETED", node("a"))
    assert model.profile_stats()[("A100-80GB", "1g.10gb")].memory_mib == 9984


def test_pods_without_gpu_or_annotation_are_not_kept() -> None:
    cpu_only = pod("web", containers=[container(requests={"cpu": "1"})])
    annotated = pod("asks", node_name=None, phase="Pending",
                    containers=[container(requests={"cpu": "1"})],
                    annotations={"migfit.io/gpu-memory": "12Gi", "other/key": "x"})
    model = loaded(node("n1"), cpu_only, annotated)
    assert model.find_pod("ml", "web") is None
    record = model.find_pod("ml", "asks")
    assert record is not None
    assert record.annotations == {"migfit.io/gpu-memory": "12Gi"}
    assert model.pending_pods() == []  # no GPU request yet: not MIG demand


def test_unschedulable_condition_is_recorded_with_its_time() -> None:
    cond = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "lastTransitionTime": "2024-06-12T10:00:00Z"}]
    model = loaded(pod("w", node_name=None, phase="Pending", conditions=cond))
    record = model.find_pod("ml", "w")
    assert record is not None
    assert record.unschedulable
    assert record.unschedulable_since == 1718186400.0


def test_find_pod_follows_a_pod_recreated_under_the_same_name() -> None:
    model = loaded(node("n1"), pod("db-0", uid="old"))
    model.apply("Pod", "ADDED", pod("db-0", uid="new"))
    model.apply("Pod", "DELETED", pod("db-0", uid="old"))
    found = model.find_pod("ml", "db-0")
    assert found is not None
    assert found.uid == "new"


def test_a_malformed_node_is_skipped_and_the_rest_kept() -> None:
    model = loaded(node("n1"))
    model.apply("Node", "ADDED", {"kind": "Node", "metadata": {}})
    assert model.node_names() == ["n1"]


# ---------------------------------------------------------------- incremental == rebuild


def view(model: cluster.Cluster) -> dict[str, Any]:
    """Everything a reader can see, in a comparable form."""
    names: dict[tuple[str, str], list[str]] = {}
    for p in model.pods():
        names.setdefault((p.namespace, p.name), []).append(p.uid)
    return {
        "nodes": {s.name: (s.node, dict(s.used), dict(s.free), dict(s.overcommit),
                           s.alloc_total, s.used_total, s.free_total, s.repartitioning)
                  for s in model.nodes()},
        "pods": {p.uid: p for p in model.pods()},
        "pods_on": {n: sorted(p.uid for p in model.pods_on(n)) for n in model.node_names()},
        "pending": sorted(p.uid for p in model.pending_pods()),
        "free": {p: dict(model.free_nodes(p))
                 for p in ("1g.10gb", "2g.20gb", "3g.40gb") if model.free_nodes(p)},
        "stats": {k: (v.nodes, v.allocatable, v.free, v.memory_mib)
                  for k, v in model.profile_stats().items()},
        "models": sorted(m.id for m in model.models_present()),
        "overcommitted": [s.name for s in model.overcommitted()],
        "find": {k: getattr(model.find_pod(*k), "uid", None)
                 for k, uids in names.items() if len(uids) == 1},
    }


PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")

nodes_st = st.builds(
    lambda name, product, alloc, unsched, state_label, memory: node(
        name, product=product, alloc=alloc, unschedulable=unsched,
        labels={**({"nvidia.com/mig.config.state": state_label} if state_label else {}),
                **({"nvidia.com/mig-1g.10gb.memory": memory} if memory else {})}),
    name=st.sampled_from(["n0", "n1", "n2"]),
    product=st.sampled_from([A100, H100, "NVIDIA-T4", None]),
    alloc=st.dictionaries(st.sampled_from(PROFILES), st.integers(0, 3), max_size=3),
    unsched=st.booleans(),
    state_label=st.sampled_from([None, "success", "pending"]),
    memory=st.sampled_from([None, "9728", "9984"]),
)


def _pod_from(name: str, gen: int, node_name: str | None, phase: str,
              requests: dict[str, int], deleting: bool) -> dict[str, Any]:
    containers = [container(f"c{i}", requests=mig(p, n)) for i, (p, n) in
                  enumerate(requests.items())] or [container(requests={"cpu": "1"})]
    return pod(name, uid=f"{name}-{gen}", node_name=node_name, phase=phase,
               containers=containers, deleting=deleting)


pods_st = st.builds(
    _pod_from,
    name=st.sampled_from(["a", "b", "c", "d"]),
    gen=st.integers(0, 1),
    node_name=st.sampled_from([None, "n0", "n1", "n2", "gone"]),
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
    requests=st.dictionaries(st.sampled_from(PROFILES), st.integers(1, 2), max_size=2),
    deleting=st.booleans(),
)

events_st = st.lists(
    st.one_of(
        st.tuples(st.just("Node"), st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), nodes_st),
        st.tuples(st.just("Pod"), st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), pods_st),
    ),
    max_size=40,
).flatmap(
    # Repeat some events verbatim (duplicates) and replay others later (out of order).
    lambda evs: st.lists(st.sampled_from(evs), max_size=10).map(lambda extra: evs + extra)
    if evs else st.just(evs)
)


def _key(kind: str, obj: dict[str, Any]) -> str:
    return obj["metadata"]["name"] if kind == "Node" else obj["metadata"]["uid"]


@settings(max_examples=150, deadline=None)
@given(events=events_st)
def test_incremental_indexes_equal_a_rebuild_from_the_final_objects(
        events: list[tuple[str, str, dict[str, Any]]]) -> None:
    model = cluster.Cluster()
    final: dict[str, dict[str, dict[str, Any]]] = {"Node": {}, "Pod": {}}
    for kind, event_type, obj in events:
        model.apply(kind, event_type, obj)  # type: ignore[arg-type]
        if event_type == "DELETED":
            final[kind].pop(_key(kind, obj), None)
        else:
            final[kind][_key(kind, obj)] = obj
    fresh = cluster.Cluster()
    fresh.replace("Node", list(final["Node"].values()))
    fresh.replace("Pod", list(final["Pod"].values()))
    assert view(model) == view(fresh)
    # The decoded-records path (the file source) builds the same state.
    records = cluster.Cluster()
    records.load_records(
        [decoding.node_from_api(o, records.catalog) for o in final["Node"].values()],
        [r for o in final["Pod"].values() if (r := decoding.pod_from_api(o)) is not None])
    assert view(records) == view(fresh)
    # A re-list onto the incremental model changes nothing either.
    model.replace("Node", list(final["Node"].values()))
    model.replace("Pod", list(final["Pod"].values()))
    assert view(model) == view(fresh)


def test_a_pending_pods_changed_record_bumps_the_pending_generation() -> None:
    # Demand caches (the extender's figures) recount only when pending_generation moves; a
    # pending pod whose annotations or Unschedulable condition change must move it.
    waiting = pod("w", node_name=None, phase="Pending")
    model = loaded(node("n1"), waiting)
    before = model.pending_generation
    cond = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "lastTransitionTime": "2024-06-12T10:00:00Z"}]
    model.apply("Pod", "MODIFIED", pod("w", node_name=None, phase="Pending", conditions=cond,
                                       annotations={"migfit.io/gpu-memory": "12Gi"}))
    assert model.pending_generation > before
    [record] = model.pending_pods()
    assert record.unschedulable and record.annotations == {"migfit.io/gpu-memory": "12Gi"}
    # A running pod's status change is not demand: the counter stays.
    model.apply("Pod", "ADDED", pod("r"))
    settled = model.pending_generation
    model.apply("Pod", "MODIFIED", pod("r", conditions=[{"type": "Ready", "status": "True"}]))
    assert model.pending_generation == settled


def test_pod_overhead_adds_to_cpu_and_memory() -> None:
    # KEP-688: kube-scheduler adds spec.overhead (set from the RuntimeClass) to the requests.
    spec = {"containers": [container(requests={"cpu": "500m", "memory": "1Gi",
                                               **mig("1g.10gb")})],
            "overhead": {"cpu": "250m", "memory": "120Mi"}}
    requests, _, cpu, mem = decoding.effective_requests(spec)
    assert requests == {"nvidia.com/mig-1g.10gb": 1}
    assert (cpu, mem) == (750, 2**30 + 120 * 2**20)
    bad = {**spec, "overhead": {"cpu": "lots"}}
    assert decoding.effective_requests(bad)[2] == 500


def test_pod_level_resources_stand_for_the_containers_and_nothing_is_negative() -> None:
    # KEP-2837 (beta, on by default from Kubernetes 1.34): the pod's own cpu and memory
    # replace its containers' sum where set (requests, else limits); overhead still adds.
    spec = {"containers": [container(requests={"cpu": "500m", "memory": "1Gi",
                                               **mig("1g.10gb")})],
            "resources": {"requests": {"cpu": "12"}},
            "overhead": {"cpu": "250m"}}
    requests, _, cpu, mem = decoding.effective_requests(spec)
    assert requests == {"nvidia.com/mig-1g.10gb": 1}
    assert (cpu, mem) == (12_250, 2**30)
    limits_only = {**spec, "resources": {"limits": {"memory": "8Gi"}}}
    assert decoding.effective_requests(limits_only)[2:] == (750, 8 * 2**30)
    # A negative request (the API server refuses one) counts as none: it made the
    # extender's score take the logarithm of a negative ratio (500).
    negative = {"containers": [container(requests={"cpu": "-3", "memory": "-5Gi",
                                                   **mig("1g.10gb")})]}
    assert decoding.effective_requests(negative)[2:] == (0, 0)


def test_an_in_place_cpu_resize_renews_the_node_state() -> None:
    # The extender's host-room figures are cached per NodeState: a pod whose cpu or memory
    # request changes in place (KEP-1287) must give its node a new state.
    def sized(cpu: str) -> dict[str, Any]:
        return pod("r", containers=[container(requests={"cpu": cpu, **mig("3g.40gb")},
                                              limits=mig("3g.40gb"))])

    model = loaded(node("n1"), sized("2"))
    before = model.node("n1")
    model.apply("Pod", "MODIFIED", sized("2"))
    assert model.node("n1") is before  # nothing changed: the state is kept
    model.apply("Pod", "MODIFIED", sized("8"))
    after = model.node("n1")
    assert after is not before
    assert [p.cpu_milli for p in model.pods_on("n1")] == [8000]


def test_equal_request_maps_are_shared_within_a_cluster_not_between_clusters() -> None:
    # The sharing table belonged to the module: every Cluster in the process (simulator runs,
    # tests, two servers) filled one table, bounded for all of them together.
    one = loaded(node("n1"), pod("a"), pod("b"))
    other = loaded(node("n1"), pod("a"))
    a, b = one.find_pod("ml", "a"), one.find_pod("ml", "b")
    elsewhere = other.find_pod("ml", "a")
    assert a is not None and b is not None and elsewhere is not None
    assert a.requests is b.requests
    assert elsewhere.requests == a.requests and elsewhere.requests is not a.requests


def test_restart_count_sums_every_kind_of_container_and_ignores_junk() -> None:
    obj = {"status": {
        "containerStatuses": [{"name": "a", "restartCount": 2}, {"name": "b", "restartCount": 0}],
        "initContainerStatuses": [{"name": "sidecar", "restartCount": 3}],
        "ephemeralContainerStatuses": [{"name": "debug", "restartCount": 1}]}}
    assert decoding.restart_count(obj) == 6
    junk = {"status": {"containerStatuses": [{"restartCount": "9"}, {"restartCount": True},
                                             {"restartCount": -4}, "x", None],
                       "initContainerStatuses": {"not": "a list"}}}
    assert decoding.restart_count(junk) == 0
    assert decoding.restart_count({}) == decoding.restart_count({"status": None}) == 0
    # restartPolicy Never: a container that died is not restarted, but it counts.
    ended = {"status": {"containerStatuses": [
        {"name": "a", "restartCount": 0, "state": {"terminated": {"exitCode": 137}}},
        {"name": "b", "restartCount": 0, "state": {"terminated": {"exitCode": 0}}},
        {"name": "c", "restartCount": 1, "state": {"running": {}}}]}}
    assert decoding.restart_count(ended) == 2
