"""Apply mode against kmock's Kubernetes emulator with a simulated MIG Manager."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import kmock
import prometheus_client
import pytest
from advisor_scene import node, pod
from kubernetes_asyncio import client as k8s
from migmanager_sim import (
    LAYOUTS,
    NODES,
    NOW,
    MigManager,
    VersionedEmulator,
    advice_cache,
    events,
    read_node,
    relayouter,
    seed,
    snapshot,
    store,
    taints,
)

from migfit import advisor, builders, decoding, keys, profiles
from migfit.extender import advice, leader, relayout, relayout_machine

# untaint_after_s scaled down too: a run adopted after the MIG Manager's success never saw it
# at work, and takes the taint off that long after the label.
FAST = relayout.Settings(max_concurrent=1, timeout_s=2.0, wedge_s=0.3, poll_s=0.02,
                         interval_s=0.02, untaint_after_s=0.2)


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/pods", "v1/nodes", "v1/events", "coordination.k8s.io/v1/leases"):
        kmock.resources[res] = {}  # type: ignore[assignment]
    return kmock


async def _relayouter(api: k8s.ApiClient, elector: leader.LeaseElector | None = None,
                      ) -> relayout.Relayouter:
    return await relayouter(api, settings=FAST, elector=elector)


async def _apply_once(api: k8s.ApiClient, mode: str) -> tuple[relayout.Outcome, MigManager]:
    mm = MigManager(api, "idle", layouts=LAYOUTS, mode=mode)  # type: ignore[arg-type]
    mm.start()
    try:
        r = await _relayouter(api)
        assert await r.step() == ["idle"]
        (outcome,) = await r.wait()
        return outcome, mm
    finally:
        await mm.stop()


async def test_success_path(server: kmock.KubernetesEmulator, api: k8s.ApiClient) -> None:
    seed(server)
    outcome, mm = await _apply_once(api, "success")
    assert outcome.result == "success", outcome.reason
    assert mm.applied == ["all-1g.10gb"]
    obj = await read_node(api, "idle")
    assert taints(obj) == []
    assert obj["metadata"]["labels"]["nvidia.com/mig.config"] == "all-1g.10gb"
    assert advisor.ANNOTATION_RELAYOUT not in obj["metadata"].get("annotations", {})
    reasons = [e["reason"] for e in await events(api)]
    assert relayout.REASON_STARTED in reasons and relayout.REASON_DONE in reasons
    # The pod is now servable: nothing more to do.
    again = await _relayouter(api)
    assert await again.step() == []


@pytest.mark.parametrize("mode, result", [("fail", "failed"), ("wedge", "wedged"),
                                          ("ignore", "timeout"), ("lost", "timeout")])
async def test_failures_keep_the_taint_and_never_loop(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient, mode: str, result: str,
) -> None:
    seed(server)
    outcome, mm = await _apply_once(api, mode)
    assert outcome.result == result
    obj = await read_node(api, "idle")
    assert taints(obj) == [keys.relayout_taint()["key"]]
    notes = obj["metadata"]["annotations"]
    assert json.loads(notes[relayout.ANNOTATION])["state"] == "failed"
    assert json.loads(notes[relayout.FAILED])["result"] == result
    assert any(e["reason"] == relayout.REASON_FAILED and e["type"] == "Warning"
               for e in await events(api))
    # No loop: a fresh replica with a fresh view starts nothing on that node.
    for _ in range(3):
        r = await _relayouter(api)
        assert await r.step() == []
    assert mm.applied == ["all-1g.10gb"]


async def test_the_warnings_commands_make_a_failed_node_retryable(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    """The Warning Event (and the README) name what an operator removes once the node is
    fixed: the taint and both annotations. Before, they named the taint and
    ``migfit.io/relayout-failed`` only, and the record's ``state: failed`` kept the node
    failed for ever."""
    seed(server)
    outcome, _ = await _apply_once(api, "fail")
    assert outcome.result == "failed"
    (warning,) = [e for e in await events(api) if e["reason"] == relayout.REASON_FAILED]
    assert ("kubectl annotate node idle migfit.io/relayout- migfit.io/relayout-failed-"
            in warning["message"]), warning["message"]
    obj = await read_node(api, "idle")

    def record(without: tuple[str, ...]) -> Any:
        fixed = json.loads(json.dumps(obj))
        fixed["spec"]["taints"] = []
        for key in without:
            del fixed["metadata"]["annotations"][key]
        return decoding.node_from_api(fixed, profiles.builtin())

    assert relayout_machine.failed(record(()))
    assert relayout_machine.failed(record((relayout.FAILED,)))  # what was written before
    assert not relayout_machine.failed(record((relayout.FAILED, relayout.ANNOTATION)))


async def test_busy_and_custom_nodes_are_not_applied(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    store(server, node("busy", alloc={"3g.40gb": 2}, config="all-3g.40gb"))
    store(server, pod("runner", "3g.40gb", namespace="t", node="busy"))
    store(server, pod("small", "1g.10gb", namespace="ml"))
    r = await _relayouter(api)
    assert r.cache.get(r.state).recommendations  # advised, disruptive
    assert await r.step() == []
    assert taints(await read_node(api, "busy")) == []


async def test_a_whole_gpu_pod_makes_its_node_busy(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    """A mixed-strategy node with one GPU MIG-disabled, running a pod on nvidia.com/gpu, and
    two 3g.40gb on the other: enabling MIG on the whole GPU resets every GPU, and the apply
    mode never starts anything there (it had been taken for an idle node: tainted, aborted,
    tainted again on every pass)."""
    whole = node("mixed", gpus=2, alloc={"3g.40gb": 2}, config="all-3g.40gb")
    for field in ("allocatable", "capacity"):
        whole["status"][field]["nvidia.com/gpu"] = "1"
    store(server, whole)
    store(server, builders.pod("train", [{"nvidia.com/gpu": "1"}], namespace="ml",
                               node_name="mixed", phase="Running", image="x",
                               container_names=["main"]))
    for i in range(3):
        store(server, pod(f"small-{i}", "1g.10gb", namespace="ml"))
    r = await _relayouter(api)
    # Which GPU runs with MIG disabled is not known (no config says): the advisor leaves the
    # node alone (before, it proposed enabling MIG there, disrupting the pod).
    assert r.cache.get(r.state).recommendations == ()
    for _ in range(2):
        assert await r.step() == []
    assert taints(await read_node(api, "mixed")) == []


async def test_bound_on_nodes_at_once(server: kmock.KubernetesEmulator,
                                      api: k8s.ApiClient) -> None:
    seed(server, node("idle2", alloc={"3g.40gb": 2}, config="all-3g.40gb"),
          *[pod(f"s{i}", "1g.10gb") for i in range(10)])
    r = await _relayouter(api)
    started = await r.step()
    assert len(started) == 1 and len(r.in_flight) == 1
    for t in list(r._tasks.values()):
        t.cancel()
    await asyncio.gather(*r._tasks.values(), return_exceptions=True)


async def test_only_the_leader_applies_and_a_new_leader_adopts(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    seed(server)
    a = leader.LeaseElector(api, namespace="default", identity="a", lease_s=1.0, renew_s=0.2)
    b = leader.LeaseElector(api, namespace="default", identity="b", lease_s=1.0, renew_s=0.2)
    assert await a.try_acquire() and not await b.try_acquire()
    follower = await _relayouter(api, b)
    assert not follower.leading
    mm = MigManager(api, "idle", layouts=LAYOUTS, mode="success", delay_s=0.3)
    mm.start()
    try:
        first = await _relayouter(api, a)
        assert await first.step() == ["idle"]
        for _ in range(1000):  # until the label is set (the record says "applying")
            note = (await read_node(api, "idle"))["metadata"].get("annotations", {})
            if '"applying"' in note.get(relayout.ANNOTATION, ""):
                break
            await asyncio.sleep(0.01)
        a.resign_locally()  # leadership lost mid-way (e.g. renewals failing)
        (outcome,) = await first.wait()
        assert outcome.result == "lost-leadership"
        obj = await read_node(api, "idle")
        assert taints(obj) == [keys.relayout_taint()["key"]]  # accounted for: still marked applying
        assert json.loads(obj["metadata"]["annotations"][relayout.ANNOTATION])["state"] == \
            "applying"
        await asyncio.sleep(1.1)  # a's lease (1 s) expires
        assert await b.try_acquire()
        second = await _relayouter(api, b)
        assert await second.step() == ["idle"]  # adopted, not re-labelled
        (done,) = await second.wait()
        assert done.result == "success", done.reason
    finally:
        await mm.stop()
    assert mm.applied == ["all-1g.10gb"]
    assert taints(await read_node(api, "idle")) == []


async def test_publisher_marks_and_unmarks(server: kmock.KubernetesEmulator,
                                           api: k8s.ApiClient) -> None:
    seed(server)
    state = await snapshot(api)
    pub = advice.Publisher(state, api, cache=advice_cache())
    await pub.publish_once()
    await pub.publish_once()  # deduplicated
    obj = await read_node(api, "idle")
    assert obj["metadata"]["labels"][advice.LABEL] == "true"
    mark = json.loads(obj["metadata"]["annotations"][advice.ANNOTATION])
    assert mark["target"] == "all-1g.10gb" and mark["unblocks"] == ["ml/small"]
    reasons = [e["reason"] for e in await events(api)]
    assert reasons.count(advice.REASON_NODE) == 1 and reasons.count(advice.REASON_POD) == 1
    # The pod goes away: the marks are removed.
    server.objects[kmock.resource("v1", "pods"), "ml", "small"].delete()
    pub.state = await snapshot(api)
    await pub.publish_once()
    obj = await read_node(api, "idle")
    assert advice.LABEL not in obj["metadata"].get("labels", {})
    assert advice.ANNOTATION not in obj["metadata"].get("annotations", {})


async def test_publisher_leaves_the_apply_modes_record_alone(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    # The publisher marks the node, then the apply mode takes it over (taint, "applying"
    # mark): the advice no longer names the node, but its record must stay for adoption.
    seed(server)
    pub = advice.Publisher(await snapshot(api), api, cache=advice_cache())
    await pub.publish_once()
    mm = MigManager(api, "idle", layouts=LAYOUTS, mode="wedge")
    mm.start()
    try:
        r = await _relayouter(api)
        assert await r.step() == ["idle"]
        for _ in range(1000):  # until the label is set (the record says "applying")
            note = (await read_node(api, "idle"))["metadata"].get("annotations", {})
            if '"applying"' in note.get(relayout.ANNOTATION, ""):
                break
            await asyncio.sleep(0.01)
        pub.state = await snapshot(api)
        pub.cache = advice_cache()
        await pub.publish_once()
        obj = await read_node(api, "idle")
        assert json.loads(obj["metadata"]["annotations"][relayout.ANNOTATION])["state"] == \
            "applying"
        (outcome,) = await r.wait()
        assert outcome.result == "wedged"
    finally:
        await mm.stop()
    pub.state = await snapshot(api)
    pub.cache = advice_cache()
    await pub.publish_once()
    obj = await read_node(api, "idle")
    assert json.loads(obj["metadata"]["annotations"][relayout.ANNOTATION])["state"] == "failed"
    assert taints(obj) == [keys.relayout_taint()["key"]]


async def test_failed_nodes_gauge_follows_the_nodes(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    # It was only ever incremented: a restarted replica showed 0, a cleared node stayed counted.
    store(server, node("broken", alloc={"3g.40gb": 2}, config="all-3g.40gb",
                       taints=[keys.relayout_taint()],
                       annotations={relayout.FAILED: '{"result": "failed"}'}))
    registry = prometheus_client.CollectorRegistry()
    metrics = advice.Metrics(registry)
    r = relayout.Relayouter(await snapshot(api), api, elector=None, cache=advice_cache(),
                            metrics=metrics, settings=FAST)
    await r.step()
    assert registry.get_sample_value("migfit_relayout_failed_nodes") == 1.0
    store(server, node("broken", alloc={"3g.40gb": 2}, config="all-3g.40gb"))  # cleared
    r.state = await snapshot(api)
    await r.step()
    assert registry.get_sample_value("migfit_relayout_failed_nodes") == 0.0


def _status(code: int, reason: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "code": code, "reason": reason, "message": reason}


def _stored(server: kmock.KubernetesEmulator, name: str) -> dict[str, Any]:
    """The node as the emulator holds it (when reading it through the API fails on purpose)."""
    raw: dict[str, Any] = server.objects[NODES, None, name].raw
    return raw


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_conflict_while_tainting_is_a_retryable_skip(
    server: VersionedEmulator, api: k8s.ApiClient,
) -> None:
    # Someone writes the node between the read and the taint: 409, nothing was changed, so the
    # node must not be marked failed, and a later pass may try again.
    seed(server)
    server.race(NODES, None, "idle", {"metadata": {"labels": {"example.com/other": "x"}}})
    mm = MigManager(api, "idle", layouts=LAYOUTS, mode="success")
    mm.start()
    try:
        r = await _relayouter(api)
        assert await r.step() == ["idle"]
        (outcome,) = await r.wait()
        assert outcome.result == "skipped" and "409" in outcome.reason, outcome
        obj = await read_node(api, "idle")
        assert taints(obj) == []
        assert obj["metadata"]["labels"]["example.com/other"] == "x"  # their write stands
        assert obj["metadata"]["labels"]["nvidia.com/mig.config"] == "all-3g.40gb"
        notes = obj["metadata"].get("annotations", {})
        assert relayout.FAILED not in notes and relayout.ANNOTATION not in notes
        assert not any(e["reason"] == relayout.REASON_FAILED for e in await events(api))
        r.state = await snapshot(api)
        assert await r.step() == ["idle"]  # tried again on the next pass
        (done,) = await r.wait()
        assert done.result == "success", done.reason
    finally:
        await mm.stop()
    assert mm.applied == ["all-1g.10gb"]
    assert taints(await read_node(api, "idle")) == []


def _adoptable(server: kmock.KubernetesEmulator, *, state: str = "success",
               started: str | None = None) -> None:
    """A node a previous leader tainted and labelled; the MIG Manager already finished."""
    mark: dict[str, Any] = {"state": "applying", "target": "all-1g.10gb",
                            "from": "all-3g.40gb", "expected": {"1g.10gb": 7}}
    if started is not None:
        mark["started"] = started
    store(server, node("idle", alloc={"1g.10gb": 7}, config="all-1g.10gb", state=state,
                       taints=[keys.relayout_taint()],
                       annotations={relayout.ANNOTATION: json.dumps(mark)}))


async def test_transient_api_errors_while_waiting_are_retried(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    _adoptable(server)
    server[kmock.action.FETCH, NODES][:3] << 503 << _status(503, "ServiceUnavailable")
    r = await _relayouter(api)
    assert await r.step() == ["idle"]
    (outcome,) = await r.wait()
    assert outcome.result == "success", outcome.reason
    obj = await read_node(api, "idle")
    assert taints(obj) == [] and relayout.FAILED not in obj["metadata"].get("annotations", {})


async def test_an_api_failing_until_the_timeout_is_a_timeout(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    _adoptable(server)
    server[kmock.action.FETCH, NODES] << 500 << _status(500, "InternalError")
    r = await _relayouter(api)
    assert await r.step() == ["idle"]
    (outcome,) = await r.wait()
    assert outcome.result == "timeout" and "HTTP 500" in outcome.reason, outcome
    obj = _stored(server, "idle")
    assert taints(obj) == [keys.relayout_taint()["key"]]
    assert json.loads(obj["metadata"]["annotations"][relayout.FAILED])["result"] == "timeout"


@pytest.mark.parametrize("state, result", [("pending", "wedged"), ("rebooting", "timeout")])
async def test_an_adopted_node_keeps_its_timers(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient, state: str, result: str,
) -> None:
    # The previous leader set the label an hour ago: a new leader must not start the timeout
    # and the wedge timer from zero (here they would run for 20 and 10 more minutes).
    _adoptable(server, state=state, started="2033-05-18T02:33:20.000000Z")
    r = relayout.Relayouter(await snapshot(api), api, elector=None, cache=advice_cache(),
                            settings=dataclasses.replace(FAST, timeout_s=1200, wedge_s=600),
                            wall_clock=lambda: NOW)
    assert await r.step() == ["idle"]
    (outcome,) = await asyncio.wait_for(r.wait(), 30)  # a guard against hanging, not a timing
    assert outcome.result == result, outcome
    obj = await read_node(api, "idle")
    assert json.loads(obj["metadata"]["annotations"][relayout.FAILED])["result"] == result
    assert taints(obj) == [keys.relayout_taint()["key"]]


async def test_the_record_says_when_the_label_was_set(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    seed(server)
    mm = MigManager(api, "idle", layouts=LAYOUTS, mode="wedge")
    mm.start()
    try:
        r = relayout.Relayouter(await snapshot(api), api, elector=None, cache=advice_cache(),
                                settings=FAST, wall_clock=lambda: NOW)
        assert await r.step() == ["idle"]
        (outcome,) = await r.wait()
    finally:
        await mm.stop()
    assert outcome.result == "wedged"
    obj = await read_node(api, "idle")
    mark = json.loads(obj["metadata"]["annotations"][relayout.ANNOTATION])
    assert mark["started"] == "2033-05-18T03:33:20.000000Z"  # NOW, RFC 3339


async def test_pod_events_name_the_pod_by_uid_and_are_forgotten_with_it(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    seed(server)
    pub = advice.Publisher(await snapshot(api), api, cache=advice_cache())
    await pub.publish_once()

    def waiting() -> list[dict[str, Any]]:
        return [e["involvedObject"] for e in sent if e["reason"] == advice.REASON_POD]

    sent = await events(api)
    assert waiting() == [{"kind": "Pod", "name": "small", "namespace": "ml", "apiVersion": "v1",
                          "uid": "uid-ml-small"}]
    # The pod goes: its entry goes too (the dedup table is bounded by the cluster).
    server.objects[kmock.resource("v1", "pods"), "ml", "small"].delete()
    pub.state = await snapshot(api)
    await pub.publish_once()
    assert not [k for k in pub._events if k[0] == "Pod"]
    # Recreated under the same name, it is another pod: it gets its own Event.
    again = pod("small", "1g.10gb", namespace="ml")
    again["metadata"]["uid"] = "uid-ml-small-2"
    store(server, again)
    pub.state = await snapshot(api)
    await pub.publish_once()
    sent = await events(api)
    assert [o["uid"] for o in waiting()] == ["uid-ml-small", "uid-ml-small-2"]


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_publisher_with_a_stale_view_never_overwrites_the_apply_modes_record(
    server: VersionedEmulator, api: k8s.ApiClient,
) -> None:
    # The publisher's view predates the claim (a lagging watch, or another replica): its
    # recommendation must not replace the record a new leader would adopt the node by.
    seed(server)
    stale = advice.Publisher(await snapshot(api), api, cache=advice_cache())
    mm = MigManager(api, "idle", layouts=LAYOUTS, mode="wedge")
    mm.start()
    try:
        r = await _relayouter(api)
        assert await r.step() == ["idle"]
        for _ in range(500):  # until the label and the "applying" record are written
            obj = await read_node(api, "idle")
            if "applying" in obj["metadata"].get("annotations", {}).get(relayout.ANNOTATION, ""):
                break
            await asyncio.sleep(0.01)
        await stale.publish_once()
        obj = await read_node(api, "idle")
        assert json.loads(obj["metadata"]["annotations"][relayout.ANNOTATION])["state"] == \
            "applying"
        (outcome,) = await r.wait()
        assert outcome.result == "wedged"
    finally:
        await mm.stop()
    # Once its view catches up, it leaves the failed record alone too.
    stale.state = await snapshot(api)
    await stale.publish_once()
    obj = await read_node(api, "idle")
    assert json.loads(obj["metadata"]["annotations"][relayout.ANNOTATION])["state"] == "failed"


async def test_the_publisher_writes_the_one_relayout_record(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    # One schema for both writers: the advice's record is the apply mode's first state.
    seed(server)
    await advice.Publisher(await snapshot(api), api, cache=advice_cache()).publish_once()
    text = (await read_node(api, "idle"))["metadata"]["annotations"][advice.ANNOTATION]
    record = keys.decode_relayout(text)
    assert record.v == 1 and record.state is keys.RelayoutState.RECOMMENDED
    assert record.target == "all-1g.10gb" and record.expected == {"1g.10gb": 7}
    assert record.unblocks == ("ml/small",) and not record.active


async def test_nothing_is_planned_before_the_view_has_synced(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    # A half-listed cluster shows busy nodes as idle: the loop waits for the watch to sync.
    seed(server)
    state = await snapshot(api)
    state.synced = False
    r = relayout.Relayouter(state, api, elector=None, cache=advice_cache(), settings=FAST)
    mm = MigManager(api, "idle", layouts=LAYOUTS)
    mm.start()
    task = asyncio.create_task(r.run())
    try:
        await asyncio.sleep(0.3)
        assert taints(await read_node(api, "idle")) == [] and r.outcomes == []
        state.mark_synced()
        for _ in range(300):
            if r.outcomes:
                break
            await asyncio.sleep(0.01)
        # (The view is a snapshot the test never updates: later passes find the node at
        # its target already and skip it.)
        assert r.outcomes[0].result == "success", r.outcomes
        assert {o.result for o in r.outcomes[1:]} <= {"skipped"}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await mm.stop()


async def test_a_run_by_a_newer_migfit_is_left_to_it_for_the_timeout(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient, caplog: pytest.LogCaptureFixture,
) -> None:
    """A rolling upgrade: a replica meets a tainted node whose record a newer migfit wrote (a
    version it cannot read). It neither fails nor untaints the node while a newer replica
    may finish it, counts it toward --max-relayouts and says so once; past the timeout (a
    rollback: no newer replica left) it fails the node, so that an operator looks. A taint
    without any record is failed at once, as before."""
    newer = json.dumps({"v": keys.RELAYOUT_VERSION + 1, "state": "applying",
                        "target": "all-1g.10gb", "some_new_field": [1]})
    seed(server, node("upgrading", alloc={"3g.40gb": 2}, config="all-1g.10gb",
                      taints=[keys.relayout_taint()],
                      annotations={relayout.ANNOTATION: newer}))
    store(server, node("bare", alloc={"3g.40gb": 2}, config="all-3g.40gb",
                       taints=[keys.relayout_taint()]))
    # Without the taint a newer record is advice: this publisher replaces or removes it
    # as its own (it does not recommend the node: removed, not left stale forever).
    ahead = json.dumps({"v": keys.RELAYOUT_VERSION + 1, "state": "recommended"})
    store(server, node("ahead", alloc={"1g.10gb": 7}, config="all-1g.10gb",
                       annotations={relayout.ANNOTATION: ahead}))
    pub = advice.Publisher(await snapshot(api), api, cache=advice_cache())
    await pub.publish_once()
    assert relayout.ANNOTATION not in (await read_node(api, "ahead"))["metadata"].get(
        "annotations", {})
    now = [0.0]
    r = relayout.Relayouter(await snapshot(api), api, elector=None, cache=advice_cache(),
                            settings=FAST, clock=lambda: now[0])

    async def step_at(t: float) -> list[str]:
        now[0] = t
        r.state = await snapshot(api)
        r.cache = advice_cache()
        taken = await r.step()
        await r.wait()
        return taken

    with caplog.at_level("WARNING", logger="migfit.extender.relayout"):
        # "idle" waits: "bare" and "upgrading" fill the one place (max_concurrent=1)
        assert await step_at(0.0) == ["bare"]
        assert await step_at(FAST.timeout_s - 0.1) == []
        obj = await read_node(api, "upgrading")
        assert obj["metadata"]["annotations"][relayout.ANNOTATION] == newer  # untouched
        assert relayout.FAILED not in obj["metadata"]["annotations"]
        assert taints(obj) == [keys.relayout_taint()["key"]]
        said = [m for m in caplog.messages if "newer migfit" in m]
        assert len(said) == 1 and "upgrading" in said[0] and "version 2" in said[0]
        assert await step_at(FAST.timeout_s) == ["upgrading"]  # overdue: failed
    obj = await read_node(api, "upgrading")
    assert relayout.FAILED in obj["metadata"]["annotations"]
    assert taints(obj) == [keys.relayout_taint()["key"]]  # kept for the operator
    (failure,) = [o for o in r.outcomes if o.node == "upgrading"]
    assert failure.result == "failed" and "version 2" in failure.reason
    bare = await read_node(api, "bare")
    assert relayout.FAILED in bare["metadata"]["annotations"]
    assert keys.relayout_taint()["key"] not in taints(await read_node(api, "idle"))


def test_newer_relayout_reads_only_a_newer_version() -> None:
    note = relayout.ANNOTATION
    assert keys.newer_relayout({note: '{"v": 2, "state": "x"}'}) == {"version": 2,
                                                                     "target": ""}
    assert keys.newer_relayout({note: '{"v": 3, "target": "custom-7"}'}) == {
        "version": 3, "target": "custom-7"}
    for text in ('{"v": 1, "state": "applying"}', '{"v": 0}', '{"v": "2"}', '{"v": true}',
                 '{"v": 2.0}', "[2]", "not json", "[" * 100_000):
        assert keys.newer_relayout({note: text}) is None, text
    assert keys.newer_relayout({}) is None


async def test_a_pod_that_fits_free_instances_is_not_told_none_is_free(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    # A review: a pod unschedulable past the free-instance grace beside free instances that
    # fit it was told "no node has one free" in its Event, as advise and explain no longer say.
    seed(server, pod("stuck", "3g.40gb", namespace="ml", since="2023-11-14T20:00:00Z"))
    pub = advice.Publisher(await snapshot(api), api, cache=advice_cache())
    await pub.publish_once()
    said = {e["involvedObject"]["name"]: e["message"] for e in await events(api)
            if e["reason"] == advice.REASON_POD}
    assert said["stuck"].startswith(
        "Waiting for 1 × 3g.40gb: free instances fit it on a node it may use, yet "
        "kube-scheduler has not placed it: something migfit does not model keeps it off"), said
    assert "no node has one free" in said["small"]


async def test_the_taint_goes_at_success_so_that_the_operands_come_back(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    """The MIG Manager restores the operands' deploy labels and reports success; their
    DaemonSets create no pod on a node with a NoSchedule taint they do not tolerate (the GPU
    Operator's default tolerations are nvidia.com/gpu's only), so with migfit's taint kept
    until the new instances showed, the device plugin never came back and every re-layout
    timed out with the node out of service (an outside check; the simulated MIG Manager now
    brings the device plugin back only where the DaemonSet may run). The taint goes once
    the MIG Manager reports success; the record says "applying" until the new instances
    show and the pods are checked, and the extender's filter refuses the node meanwhile."""
    seed(server)
    seen: list[tuple[bool, str | None]] = []

    async def watch() -> None:
        while True:
            obj = await read_node(api, "idle")
            record = obj["metadata"].get("annotations", {}).get(relayout.ANNOTATION)
            seen.append((bool(taints(obj)), json.loads(record)["state"] if record else None))
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        outcome, _ = await _apply_once(api, "success")
    finally:
        watcher.cancel()
    assert outcome.result == "success", outcome
    assert (False, "applying") in seen  # untainted, still under re-layout
    obj = await read_node(api, "idle")
    assert taints(obj) == [] and relayout.ANNOTATION not in obj["metadata"]["annotations"]
    assert obj["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "7"

