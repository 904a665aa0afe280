"""Apply mode under partial failure (issue 12 item 7), against kmock with a simulated MIG
Manager: the bound on re-layouts is the cluster's, a tainted node always carries its record,
a GPU pod bound meanwhile is noticed, a transient error on the taint is retried."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import Any

import kmock
import prometheus_client
import pytest
from advisor_scene import node, pod
from kubernetes_asyncio import client as k8s
from migmanager_sim import (
    LAYOUTS,
    NODES,
    MigManager,
    VersionedEmulator,
    adds_taint,
    advice_cache,
    events,
    read_node,
    relayouter,
    seed,
    sets_annotation,
    sets_label,
    snapshot,
    store,
    taints,
)

from migfit import keys, kube
from migfit.extender import advice, leader, relayout

FAST = relayout.Settings(max_concurrent=1, timeout_s=5.0, wedge_s=3.0, poll_s=0.02,
                         interval_s=0.02, write_retry_s=0.5)


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/pods", "v1/nodes", "v1/events", "coordination.k8s.io/v1/leases"):
        kmock.resources[res] = {}  # type: ignore[assignment]
    return kmock


async def _relayouter(api: k8s.ApiClient, elector: leader.LeaseElector | None = None,
                      settings: relayout.Settings = FAST, *,
                      client: kube.KubeClient | None = None) -> relayout.Relayouter:
    return await relayouter(api, settings=settings, elector=elector, client=client)


async def _one_relayout(api: k8s.ApiClient, *, client: kube.KubeClient | None = None
                        ) -> tuple[relayout.Outcome, MigManager]:
    """One pass of a fresh relayouter re-laying out node ``idle`` beside a MIG Manager that
    succeeds: its one outcome, and the MIG Manager (stopped) to read what it applied."""
    mm = MigManager(api, "idle", layouts=LAYOUTS, mode="success")
    mm.start()
    try:
        r = await _relayouter(api, client=client)
        assert await r.step() == ["idle"]
        (outcome,) = await r.wait()
    finally:
        await mm.stop()
    return outcome, mm


def _record(obj: dict[str, Any]) -> dict[str, Any] | None:
    text = obj["metadata"].get("annotations", {}).get(keys.ANNOTATION_RELAYOUT)
    return None if text is None else dict(json.loads(text))


async def _until(probe: Any, *, timeout_s: float = 10.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        found = await probe()
        if found:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def _stop(r: relayout.Relayouter) -> None:
    for t in r._tasks.values():
        t.cancel()
    await asyncio.gather(*r._tasks.values(), return_exceptions=True)


# ---------------------------------------------------------------- --max-relayouts, the Lease


async def test_the_bound_counts_the_cluster_not_this_replicas_memory(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    # Replica a leads, re-lays out one node, and loses the Lease mid-way. Replica b leads next
    # with a watch cache that has not caught up with that node: it must count the node from
    # the cluster (and adopt it), not start a second re-layout with a limit of 1.
    store(server, node("idle", alloc={"3g.40gb": 2}, config="all-3g.40gb"))
    store(server, node("idle2", alloc={"3g.40gb": 2}, config="all-3g.40gb"))
    for i in range(10):
        store(server, pod(f"s{i}", "1g.10gb"))
    a = leader.LeaseElector(api, namespace="default", identity="a", lease_s=1.0, renew_s=0.2)
    b = leader.LeaseElector(api, namespace="default", identity="b", lease_s=1.0, renew_s=0.2)
    assert await a.try_acquire() and not await b.try_acquire()
    slow = dataclasses.replace(FAST, timeout_s=60.0, wedge_s=60.0)
    first = await _relayouter(api, a, slow)
    (taken,) = await first.step()
    other = "idle2" if taken == "idle" else "idle"

    async def applying() -> bool:
        record = _record(await read_node(api, taken))
        return record is not None and record["state"] == "applying"

    await _until(applying)
    a.resign_locally()
    (outcome,) = await first.wait()
    assert outcome.result == "lost-leadership"
    await asyncio.sleep(1.1)  # a's lease expires
    assert await b.try_acquire()
    second = await _relayouter(api, b, slow)
    lagging = await read_node(api, taken)
    second.state.apply("Node", "DELETED", lagging)  # b's cache has not seen it yet
    assert [r.node for r in second.cache.get(second.state).recommendations] == [other]
    try:
        assert await second.step() == [taken]  # adopted from the cluster's records
        assert taints(await read_node(api, other)) == []
        assert second.in_flight == [taken]
    finally:
        await _stop(second)


async def test_a_replica_that_lost_the_lease_writes_nothing(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    seed(server)
    a = leader.LeaseElector(api, namespace="default", identity="a", lease_s=5.0, renew_s=1.0)
    assert await a.try_acquire()
    r = await _relayouter(api, a)
    assert await r.step() == ["idle"]
    a.resign_locally()  # before the re-layout's first call
    (outcome,) = await r.wait()
    assert outcome.result == "lost-leadership"
    obj = await read_node(api, "idle")
    assert taints(obj) == [] and _record(obj) is None
    assert obj["metadata"]["labels"][keys.LABEL_CONFIG] == "all-3g.40gb"
    assert await r.step() == []  # and a follower starts nothing


# ---------------------------------------------------------------- never a taint without a record


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_tainted_node_keeps_its_record_when_the_label_and_failure_writes_fail(
    server: VersionedEmulator, api: k8s.ApiClient,
) -> None:
    seed(server)
    server.fail(NODES, "idle", sets_label(keys.LABEL_CONFIG), status=403)
    server.fail(NODES, "idle", sets_annotation(keys.ANNOTATION_RELAYOUT_FAILED), status=403)
    r = await _relayouter(api)
    assert await r.step() == ["idle"]
    (outcome,) = await r.wait()
    assert outcome.result == "error" and "403" in outcome.reason, outcome
    obj = await read_node(api, "idle")
    assert taints(obj) == [keys.TAINT_RELAYOUT]
    record = _record(obj)
    assert record is not None and record["state"] == "tainted"
    assert record["target"] == "all-1g.10gb"
    # Whichever replica leads next adopts it (here a fresh one) and finishes it.
    done, mm = await _one_relayout(api)
    assert done.result == "success", done.reason
    obj = await read_node(api, "idle")
    assert taints(obj) == [] and _record(obj) is None
    assert mm.applied == ["all-1g.10gb"]


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_lost_answer_to_the_taint_is_confirmed_and_the_relayout_goes_on(
    server: VersionedEmulator, api: k8s.ApiClient,
) -> None:
    seed(server)
    server.fail(NODES, "idle", adds_taint(keys.TAINT_RELAYOUT), status=503, after_write=True)
    # No retries inside the client: the 503 reaches the re-layout.
    outcome, mm = await _one_relayout(
        api, client=kube.as_client(api, connection=kube.Connection(retries=0)))
    assert outcome.result == "success", outcome.reason
    assert mm.applied == ["all-1g.10gb"]
    assert taints(await read_node(api, "idle")) == []


# ---------------------------------------------------------------- a GPU pod bound meanwhile


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_gpu_pod_bound_after_the_taint_aborts_before_the_label(
    server: VersionedEmulator, api: k8s.ApiClient,
) -> None:
    # The pod names the node (or tolerates the taint): the taint does not stop it.
    seed(server)
    server.after(NODES, "idle", adds_taint(keys.TAINT_RELAYOUT),
                 lambda: store(server, pod("runner", "3g.40gb", namespace="t", node="idle")))
    outcome, mm = await _one_relayout(api)
    assert outcome.result == "aborted" and "t/runner" in outcome.reason, outcome
    assert mm.applied == []
    obj = await read_node(api, "idle")
    assert obj["metadata"]["labels"][keys.LABEL_CONFIG] == "all-3g.40gb"
    assert taints(obj) == [] and _record(obj) is None
    assert keys.ANNOTATION_RELAYOUT_FAILED not in obj["metadata"].get("annotations", {})
    assert any(e["reason"] == relayout.REASON_ABORTED and e["type"] == "Warning"
               and "t/runner" in e["message"] for e in await events(api))


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_pod_whose_profile_the_relayout_removes_is_never_a_success(
    server: VersionedEmulator, api: k8s.ApiClient,
) -> None:
    # Bound just as the label is set: its 3g.40gb instance disappears under it.
    seed(server)
    server.after(NODES, "idle", sets_label(keys.LABEL_CONFIG),
                 lambda: store(server, pod("runner", "3g.40gb", namespace="t", node="idle")))
    outcome, _ = await _one_relayout(api)
    assert outcome.result == "failed", outcome
    assert "t/runner (3g.40gb)" in outcome.reason
    obj = await read_node(api, "idle")
    assert taints(obj) == [keys.TAINT_RELAYOUT]
    assert json.loads(obj["metadata"]["annotations"][keys.ANNOTATION_RELAYOUT_FAILED])[
        "result"] == "failed"
    assert any(e["reason"] == relayout.REASON_FAILED for e in await events(api))
    assert not any(e["reason"] == relayout.REASON_DONE for e in await events(api))


# ---------------------------------------------------------------- a transient error on the taint


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_transient_error_on_the_taint_is_retried_like_a_conflict(
    server: VersionedEmulator, api: k8s.ApiClient,
) -> None:
    # More 503s than the API client retries on its own: the re-layout must skip (nothing was
    # changed), not mark the node failed for ever.
    seed(server)
    server.fail(NODES, "idle", adds_taint(keys.TAINT_RELAYOUT), status=503, times=3)
    mm = MigManager(api, "idle", layouts=LAYOUTS, mode="success")
    mm.start()
    try:
        r = await _relayouter(api)
        assert await r.step() == ["idle"]
        (outcome,) = await r.wait()
        assert outcome.result == "skipped" and "503" in outcome.reason, outcome
        obj = await read_node(api, "idle")
        notes = obj["metadata"].get("annotations", {})
        assert taints(obj) == [] and keys.ANNOTATION_RELAYOUT_FAILED not in notes
        assert keys.ANNOTATION_RELAYOUT not in notes
        assert not any(e["reason"] == relayout.REASON_FAILED for e in await events(api))
        r.state = await snapshot(api)
        assert await r.step() == ["idle"]  # the next pass tries again
        (done,) = await r.wait()
        assert done.result == "success", done.reason
    finally:
        await mm.stop()
    assert mm.applied == ["all-1g.10gb"]


# ---------------------------------------------------------------- failed runs hold the bound


async def test_a_failure_that_fails_every_change_stops_at_the_bound(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient, caplog: pytest.LogCaptureFixture,
) -> None:
    """A MIG Manager that fails every change (a custom config missing from its file): a
    failed node keeps its taint, and it used not to count against --max-relayouts, so each
    pass took the next recommended node out of service (all four here, with a bound of 1).
    Each pass is a fresh replica over a fresh view (a restart, a new leader): the failed
    node is counted from the cluster."""
    names = [f"gpu{i}" for i in range(4)]
    for n in names:
        store(server, node(n, alloc={"3g.40gb": 2}, config="all-3g.40gb"))
    for i in range(28):
        store(server, pod(f"small{i}", "1g.10gb", namespace="ml"))
    mms = {n: MigManager(api, n, layouts=LAYOUTS, mode="fail") for n in names}
    for mm in mms.values():
        mm.start()
    registry = prometheus_client.CollectorRegistry()

    async def one_pass() -> list[relayout.Outcome]:
        nonlocal registry
        registry = prometheus_client.CollectorRegistry()  # a fresh replica's
        r = relayout.Relayouter(await snapshot(api), api, elector=None, cache=advice_cache(),
                                metrics=advice.Metrics(registry), settings=FAST)
        await r.step()
        return await r.wait()

    async def tainted() -> list[str]:
        return [n for n in names
                if keys.TAINT_RELAYOUT in taints(await read_node(api, n))]

    try:
        (first,) = await one_pass()
        assert first.result == "failed", first
        with caplog.at_level(logging.WARNING, logger="migfit.extender.relayout"):
            for _ in range(3):
                assert await one_pass() == []
        assert await tainted() == [first.node]
        assert [n for n, mm in mms.items() if mm.applied] == [first.node]
        assert registry.get_sample_value("migfit_relayout_held_slots") == 1.0
        said = [r.getMessage() for r in caplog.records if "hold the --max-relayouts" in
                r.getMessage()]
        assert said and first.node in said[0] and "kubectl taint node NODE" in said[0]
        assert "no new re-layout starts until they are cleared" in said[0]
        # Cleared as the Warning Event says: the next node is tried (and fails the same way).
        obj = await read_node(api, first.node)
        await kube.as_client(api).patch_node(first.node, {
            "metadata": {"annotations": {keys.ANNOTATION_RELAYOUT: None,
                                         keys.ANNOTATION_RELAYOUT_FAILED: None}},
            "spec": {"taints": [t for t in obj["spec"]["taints"]
                                if t["key"] != keys.TAINT_RELAYOUT]}})
        (second,) = await one_pass()
        assert second.result == "failed" and second.node != first.node
        assert await tainted() == [second.node]
    finally:
        for mm in mms.values():
            await mm.stop()


# ---------------------------------------------------------------- the label, never overwritten


# Someone else (a human, another tool) sets nvidia.com/mig.config; the MIG Manager starts on it.
SOMEONE_LABELS = {"metadata": {"labels": {keys.LABEL_CONFIG: "all-disabled",
                                          keys.LABEL_CONFIG_STATE: "pending"}}}


@pytest.mark.kmock(cls=VersionedEmulator)
@pytest.mark.parametrize("when", ["after-taint", "between-read-and-label"])
async def test_a_label_set_by_someone_else_meanwhile_is_never_overwritten(
    server: VersionedEmulator, api: k8s.ApiClient, when: str,
) -> None:
    """Someone sets the label while the node is tainted (after-taint: before migfit's last
    read; between-read-and-label: after it, so only the label patch's resourceVersion
    precondition catches it). migfit used to overwrite it, in the middle of the MIG
    Manager's apply of theirs. Now the run is aborted: theirs stays, taint and record go."""
    seed(server)
    change = SOMEONE_LABELS
    if when == "after-taint":
        server.after(NODES, "idle", adds_taint(keys.TAINT_RELAYOUT),
                     lambda: server.objects[NODES, None, "idle"].patch(change))
    else:  # lands just before migfit's next write of the node: the label patch
        server.after(NODES, "idle", adds_taint(keys.TAINT_RELAYOUT),
                     lambda: server.race(NODES, None, "idle", change))
    r = await _relayouter(api)
    assert await r.step() == ["idle"]
    (outcome,) = await r.wait()
    assert outcome.result == "aborted", outcome
    assert "changed from 'all-3g.40gb' to 'all-disabled' by someone else" in outcome.reason
    obj = await read_node(api, "idle")
    labels = obj["metadata"]["labels"]
    assert labels[keys.LABEL_CONFIG] == "all-disabled"
    assert labels[keys.LABEL_CONFIG_STATE] == "pending"
    assert taints(obj) == [] and _record(obj) is None
    assert keys.ANNOTATION_RELAYOUT_FAILED not in obj["metadata"].get("annotations", {})
    assert any(e["reason"] == relayout.REASON_ABORTED and "all-disabled" in e["message"]
               for e in await events(api))
    assert not any(e["reason"] == relayout.REASON_STARTED for e in await events(api))


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_an_unrelated_write_before_the_label_is_read_again_then_labelled(
    server: VersionedEmulator, api: k8s.ApiClient,
) -> None:
    # Another controller writes the node between migfit's read and its label patch: a 409,
    # a new read, and the label with the new version.
    seed(server)
    server.after(NODES, "idle", adds_taint(keys.TAINT_RELAYOUT), lambda: server.race(
        NODES, None, "idle", {"metadata": {"labels": {"example.com/other": "x"}}}))
    outcome, mm = await _one_relayout(api)
    assert outcome.result == "success", outcome
    assert mm.applied == ["all-1g.10gb"]
    labels = (await read_node(api, "idle"))["metadata"]["labels"]
    assert labels["example.com/other"] == "x"
