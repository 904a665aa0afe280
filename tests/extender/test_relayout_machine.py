"""The apply mode's state machine, transition by transition (pure: no API, no clock)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from migfit import advisor, cluster, decoding, keys, migparted, profiles, records
from migfit.commands import options as cli_options
from migfit.extender import relayout_machine as m

CATALOG = cluster.Cluster().catalog
SETTINGS = m.Settings(timeout_s=100.0, wedge_s=50.0, poll_s=1.0, backoff_max_s=8.0,
                      write_retry_s=10.0)
TAINT = keys.relayout_taint()
WALL = 2_000_000_000.0


def at(now: float = 0.0, *, leading: bool = True) -> m.Context:
    return m.Context(now=now, wall=WALL + now, leading=leading, settings=SETTINGS)


def recommendation(node: str = "n", *, disrupts: tuple[str, ...] = (),
                   config: str | None = "all-1g.10gb") -> advisor.Recommendation:
    return advisor.Recommendation(
        node=node, model=profiles.ModelId("A100-SXM4-80GB"), config=config,
        mig_parted=None if config else {"version": "v1", "mig-configs": {"custom-1": []}},
        gpus=(advisor.GpuChange(index=0, before=("3g.40gb", "3g.40gb"),
                                after=("1g.10gb",) * 7),),
        unblocks=("ml/small",), disrupts=disrupts, before_config="all-3g.40gb",
        before_source="config", note="", served={})


def node(*, name: str = "n", alloc: dict[str, int] | None = None, config: str = "all-3g.40gb",
         state: str = "success", taints: list[dict[str, str]] | None = None,
         record: keys.RelayoutRecord | None = None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    notes = dict(annotations or {})
    if record is not None:
        notes[keys.ANNOTATION_RELAYOUT] = keys.encode_relayout(record)
    res = {f"nvidia.com/mig-{p}": str(n) for p, n in (alloc or {"3g.40gb": 2}).items()}
    return {
        "metadata": {"name": name, "resourceVersion": "7", "annotations": notes,
                     "labels": {keys.LABEL_PRODUCT: "NVIDIA-A100-SXM4-80GB",
                                keys.LABEL_GPU_COUNT: "1", keys.LABEL_STRATEGY: "mixed",
                                keys.LABEL_CONFIG: config, keys.LABEL_CONFIG_STATE: state}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": res, "capacity": res,
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def record_of(obj: dict[str, Any]) -> records.NodeRecord:
    return decoding.node_from_api(obj, CATALOG)


def seen(obj: dict[str, Any]) -> m.NodeSeen:
    return m.NodeSeen(record_of(obj), taints=tuple(obj["spec"]["taints"]),
                      resource_version=obj["metadata"]["resourceVersion"])


def gpu_pod(name: str, profile: str, *, on: str = "n") -> records.PodRecord:
    p = decoding.pod_from_api({
        "metadata": {"name": name, "namespace": "t", "uid": name},
        "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {
            "limits": {f"nvidia.com/mig-{profile}": "1"}}}]},
        "status": {"phase": "Running"}})
    assert p is not None
    return p


def written_record(step: m.Step) -> keys.RelayoutRecord | None:
    assert isinstance(step.action, m.Patch)
    text = step.action.body["metadata"]["annotations"][keys.ANNOTATION_RELAYOUT]
    return None if text is None else keys.decode_relayout(text)


def claimed() -> tuple[m.Run, keys.RelayoutRecord]:
    """A run that has read the node and tainted it (the claim was written)."""
    run = m.begin(recommendation())
    step = m.advance(run, None, at())
    step = m.advance(step.run, seen(node()), at())
    record = written_record(step)
    assert record is not None
    step = m.advance(step.run, m.Written(), at())
    assert isinstance(step.action, m.ListPods) and step.run.phase is m.Phase.CHECK
    return step.run, record


def verified(step: m.Step, clock: m.Context | None = None) -> m.Step:
    """VERIFY reads the node as claimed (taint, ``tainted`` record, its label as it was when
    tainted, the MIG Manager idle): on to the label patch."""
    assert step.run.phase is m.Phase.VERIFY and isinstance(step.action, m.ReadNode), step
    obj = node(config=step.run.record.from_config or "all-3g.40gb", taints=[TAINT],
               record=step.run.record.but(state=keys.RelayoutState.TAINTED))
    return m.advance(step.run, seen(obj), clock or at())


def labelled(now: float = 0.0) -> m.Run:
    run, _ = claimed()
    step = verified(m.advance(run, m.PodsSeen(()), at(now)), at(now))
    step = m.advance(step.run, m.Written(), at(now))
    assert step.run.phase is m.Phase.WAIT
    return step.run


# ---------------------------------------------------------------- the happy path


def test_a_whole_relayout_writes_taint_and_record_together_and_removes_them_together() -> None:
    run = m.begin(recommendation())
    step = m.advance(run, None, at())
    assert isinstance(step.action, m.ReadNode)
    step = m.advance(step.run, seen(node(taints=[{"key": "other", "effect": "NoSchedule"}])),
                     at())
    assert isinstance(step.action, m.Patch)
    body = step.action.body
    assert body["metadata"]["resourceVersion"] == "7"  # the precondition
    assert body["spec"]["taints"] == [{"key": "other", "effect": "NoSchedule"}, TAINT]
    claim = written_record(step)
    assert claim is not None and claim.state is keys.RelayoutState.TAINTED
    assert claim.target == "all-1g.10gb" and claim.from_config == "all-3g.40gb"
    assert claim.expected == {"1g.10gb": 7} and claim.unblocks == ("ml/small",)
    step = m.advance(step.run, m.Written(), at())
    assert isinstance(step.action, m.ListPods)
    step = m.advance(step.run, m.PodsSeen((gpu_pod("x", "1g.10gb", on="elsewhere"),)), at(1))
    assert isinstance(step.action, m.ReadNode) and step.run.phase is m.Phase.VERIFY
    step = verified(step, at(1))
    assert isinstance(step.action, m.Patch)
    assert step.action.body["metadata"]["labels"] == {keys.LABEL_CONFIG: "all-1g.10gb"}
    assert step.action.body["metadata"]["resourceVersion"] == "7"  # VERIFY's read
    applying = written_record(step)
    assert applying is not None and applying.state is keys.RelayoutState.APPLYING
    assert applying.started == keys.rfc3339(WALL + 1)
    step = m.advance(step.run, m.Written(), at(1))
    assert [e.reason for e in step.emits] == [m.REASON_STARTED]
    assert isinstance(step.action, m.ReadNode)
    done = node(alloc={"1g.10gb": 7}, config="all-1g.10gb", taints=[TAINT], record=applying)
    step = m.advance(step.run, seen(done), at(5))
    assert isinstance(step.action, m.ListPods) and step.run.settled
    step = m.advance(step.run, m.PodsSeen(()), at(5))
    assert isinstance(step.action, m.ReadNode) and step.run.phase is m.Phase.RELEASE
    done["spec"]["taints"] = [{"key": "other", "effect": "NoSchedule"}, TAINT]
    step = m.advance(step.run, seen(done), at(6))
    assert isinstance(step.action, m.Patch)
    body = step.action.body
    assert body["metadata"]["annotations"] == {keys.ANNOTATION_RELAYOUT: None}
    assert body["metadata"]["labels"] == {keys.LABEL_RELAYOUT_RECOMMENDED: None}
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["spec"]["taints"] == [{"key": "other", "effect": "NoSchedule"}]
    step = m.advance(step.run, m.Written(), at(6))
    assert step.action == m.Done(m.Outcome("n", "success"))
    assert [e.reason for e in step.emits] == [m.REASON_DONE]
    with pytest.raises(ValueError):
        m.advance(step.run, None, at(7))


def test_the_record_states_written_are_exactly_the_states_the_record_has() -> None:
    # The publisher writes "recommended"; the machine "tainted", "applying" and "failed".
    states = {m.planned(recommendation()).state}
    run, claim = claimed()
    states.add(claim.state)
    step = verified(m.advance(run, m.PodsSeen(()), at()))
    states.add(written_record(step).state)  # type: ignore[union-attr]
    step = m.advance(step.run, m.Written(), at())
    step = m.advance(step.run, seen(node(config="all-1g.10gb", state="failed", taints=[TAINT],
                                         record=step.run.record)), at(1))
    states.add(written_record(step).state)  # type: ignore[union-attr]
    assert states == set(keys.RelayoutState)
    assert {keys.RelayoutState.TAINTED, keys.RelayoutState.APPLYING} == keys.ACTIVE_STATES


# ---------------------------------------------------------------- before anything changed


@pytest.mark.parametrize("obj, why", [
    (node(taints=[TAINT]), "already under re-layout"),
    (node(annotations={keys.ANNOTATION_RELAYOUT_FAILED: "{}"}), "already under re-layout"),
    (node(record=keys.RelayoutRecord(state=keys.RelayoutState.APPLYING)), "already under"),
    (node(state="pending"), "MIG Manager is busy"),
])
def test_a_node_not_fit_to_claim_is_skipped(obj: dict[str, Any], why: str) -> None:
    step = m.advance(m.advance(m.begin(recommendation()), None, at()).run, seen(obj), at())
    assert isinstance(step.action, m.Done) and step.action.outcome.result == "skipped"
    assert why in step.action.outcome.reason


def test_an_unreadable_node_is_skipped() -> None:
    run = m.advance(m.begin(recommendation()), None, at()).run
    step = m.advance(run, m.CallFailed("HTTP 503", retryable=True), at())
    assert isinstance(step.action, m.Done) and step.action.outcome.result == "skipped"
    assert "nothing was changed" in step.action.outcome.reason


def _claim_failed(failure: m.CallFailed) -> m.Run:
    run = m.advance(m.begin(recommendation()), None, at()).run
    step = m.advance(run, seen(node()), at())
    step = m.advance(step.run, failure, at())
    assert isinstance(step.action, m.ReadNode) and step.run.phase is m.Phase.CONFIRM
    return step.run


@pytest.mark.parametrize("failure, text", [
    (m.CallFailed("HTTP 409 Conflict", conflict=True), "409 Conflict"),
    (m.CallFailed("HTTP 503 Service Unavailable", retryable=True), "503"),
    (m.CallFailed("no answer", retryable=True), "no answer"),
])
def test_a_claim_that_did_not_land_is_a_retryable_skip(failure: m.CallFailed,
                                                       text: str) -> None:
    step = m.advance(_claim_failed(failure), seen(node()), at())
    assert isinstance(step.action, m.Done)
    outcome = step.action.outcome
    assert outcome.result == "skipped" and text in outcome.reason
    assert "a later pass tries again" in outcome.reason


def test_a_claim_whose_answer_was_lost_goes_on() -> None:
    run = _claim_failed(m.CallFailed("HTTP 503", retryable=True))
    landed = node(taints=[TAINT], record=run.record)
    step = m.advance(run, seen(landed), at())
    assert isinstance(step.action, m.ListPods) and step.run.phase is m.Phase.CHECK


def test_a_claim_refused_for_good_changes_nothing() -> None:
    run = m.advance(m.begin(recommendation()), None, at()).run
    step = m.advance(run, seen(node()), at())
    step = m.advance(step.run, m.CallFailed("HTTP 403 Forbidden"), at())
    assert isinstance(step.action, m.Done) and step.action.outcome.result == "error"


# ---------------------------------------------------------------- tainted: pods, label


def test_a_gpu_pod_bound_after_the_taint_aborts_and_releases_taint_and_record() -> None:
    run, claim = claimed()
    step = m.advance(run, m.PodsSeen((gpu_pod("late", "3g.40gb"),)), at())
    assert step.run.phase is m.Phase.RELEASE and isinstance(step.action, m.ReadNode)
    tainted = node(taints=[TAINT], record=claim)
    step = m.advance(step.run, seen(tainted), at())
    assert isinstance(step.action, m.Patch)
    assert step.action.body["spec"]["taints"] == []
    assert "labels" not in step.action.body["metadata"]  # the advice's label is not ours
    step = m.advance(step.run, m.Written(), at())
    assert isinstance(step.action, m.Done)
    assert step.action.outcome.result == "aborted" and "t/late" in step.action.outcome.reason
    assert [(e.reason, e.type) for e in step.emits] == [(m.REASON_ABORTED, "Warning")]


def test_listing_pods_is_retried_then_left_to_a_later_pass() -> None:
    run, _ = claimed()
    step = m.advance(run, m.CallFailed("HTTP 500", retryable=True), at(1))
    assert step.action == m.Sleep(2.0)
    step = m.advance(step.run, m.Slept(), at(3))
    assert isinstance(step.action, m.ListPods)
    step = m.advance(step.run, m.CallFailed("HTTP 500", retryable=True), at(20))
    assert isinstance(step.action, m.Done)
    assert step.action.outcome.result == "interrupted"


def test_a_transient_error_setting_the_label_reads_the_node_then_checks_the_pods_again(
) -> None:
    run, _ = claimed()
    step = verified(m.advance(run, m.PodsSeen(()), at()))
    sent = written_record(step)
    step = m.advance(step.run, m.CallFailed("HTTP 502", retryable=True), at())
    assert isinstance(step.action, m.Sleep) and step.run.phase is m.Phase.LABELLED
    step = m.advance(step.run, m.Slept(), at(2))
    assert isinstance(step.action, m.ReadNode)
    # It did not land: the pods are checked again before it is sent again.
    tainted = node(taints=[TAINT], record=step.run.record.but(state=keys.RelayoutState.TAINTED))
    again = m.advance(step.run, seen(tainted), at(3))
    assert again.run.phase is m.Phase.CHECK and isinstance(again.action, m.ListPods)
    # It landed (the answer was lost): wait for the MIG Manager as if it had come.
    landed = node(config="all-1g.10gb", state="pending", taints=[TAINT], record=sent)
    waiting = m.advance(step.run, seen(landed), at(3))
    assert waiting.run.phase is m.Phase.WAIT and isinstance(waiting.action, m.ReadNode)
    assert [e.reason for e in waiting.emits] == [m.REASON_STARTED]


def test_a_label_refused_for_good_is_a_failure_that_keeps_the_taint() -> None:
    run, _ = claimed()
    step = verified(m.advance(run, m.PodsSeen(()), at()))
    step = m.advance(step.run, m.CallFailed("HTTP 403 Forbidden"), at())
    assert step.run.phase is m.Phase.FAIL and isinstance(step.action, m.Patch)
    notes = step.action.body["metadata"]["annotations"]
    assert json.loads(notes[keys.ANNOTATION_RELAYOUT_FAILED])["result"] == "error"
    assert "spec" not in step.action.body  # the taint stays
    step = m.advance(step.run, m.Written(), at())
    assert isinstance(step.action, m.Done) and step.action.outcome.result == "error"
    assert [e.reason for e in step.emits] == [m.REASON_FAILED]


def test_a_failure_that_cannot_be_recorded_leaves_the_record_to_adopt() -> None:
    run, _ = claimed()
    step = verified(m.advance(run, m.PodsSeen(()), at()))
    step = m.advance(step.run, m.CallFailed("HTTP 403 Forbidden"), at())
    step = m.advance(step.run, m.CallFailed("HTTP 500", retryable=True), at(1))
    assert isinstance(step.action, m.Sleep)  # retried for write_retry_s
    step = m.advance(step.run, m.Slept(), at(3))
    assert isinstance(step.action, m.Patch)
    step = m.advance(step.run, m.CallFailed("HTTP 500", retryable=True), at(30))
    assert isinstance(step.action, m.Done)
    assert "a later pass adopts it" in step.action.outcome.reason


# ---------------------------------------------------------------- waiting


def _applying_node(run: m.Run, **kw: Any) -> m.NodeSeen:
    return seen(node(taints=[TAINT], record=run.record, **kw))


@pytest.mark.parametrize("kw, now, result, text", [
    ({"config": "all-1g.10gb", "state": "failed"}, 1, "failed", "mig.config.state=failed"),
    ({"config": "other"}, 1, "failed", "changed to 'other' by someone else"),
    ({"config": "all-1g.10gb", "state": "pending"}, 60, "wedged", "stuck at pending"),
    ({"config": "all-1g.10gb", "state": "rebooting"}, 101, "timeout", "within 100s"),
    ({"config": "all-1g.10gb", "alloc": {"1g.10gb": 6}}, 101, "timeout", "instances"),
])
def test_waiting_ends_in_failure(kw: dict[str, Any], now: float, result: str,
                                 text: str) -> None:
    step = m.advance(labelled(), _applying_node(labelled(), **kw), at(now))
    assert step.run.phase is m.Phase.FAIL, step
    assert step.run.ending is not None
    assert step.run.ending.result == result and text in step.run.ending.reason
    failed = written_record(step)
    assert failed is not None and failed.state is keys.RelayoutState.FAILED
    assert failed.result == result and failed.started is not None


def test_waiting_polls_node_then_pods_and_sleeps() -> None:
    run = labelled()
    step = m.advance(run, _applying_node(run, config="all-1g.10gb", state="pending"), at(1))
    assert isinstance(step.action, m.ListPods) and not step.run.settled
    step = m.advance(step.run, m.PodsSeen(()), at(1))
    assert step.action == m.Sleep(SETTINGS.poll_s)
    step = m.advance(step.run, m.Slept(), at(2))
    assert isinstance(step.action, m.ReadNode)


def test_a_pod_whose_profile_the_new_layout_lacks_fails_the_relayout() -> None:
    run = labelled()
    step = m.advance(run, _applying_node(run, config="all-1g.10gb", alloc={"1g.10gb": 7}),
                     at(1))
    assert step.run.settled
    pods = (gpu_pod("fits", "1g.10gb"), gpu_pod("gone", "3g.40gb"))
    step = m.advance(step.run, m.PodsSeen(pods), at(1))
    assert step.run.phase is m.Phase.FAIL and step.run.ending is not None
    assert "t/gone (3g.40gb)" in step.run.ending.reason
    assert "t/fits" not in step.run.ending.reason


def test_a_time_sliced_node_settles_on_its_instances_not_its_advertised_count() -> None:
    """GFD's replicas=2: the device plugin advertises each of the seven new 1g.10gb twice
    (14); the layout is reached (it had waited for 7 advertised until the timeout, and the
    node stayed tainted as failed)."""
    run = labelled()
    shared = node(taints=[TAINT], record=run.record, config="all-1g.10gb",
                  alloc={"1g.10gb": 14})
    shared["metadata"]["labels"]["nvidia.com/mig-1g.10gb.replicas"] = "2"
    step = m.advance(run, seen(shared), at(1))
    assert step.run.settled and step.run.phase is m.Phase.WAIT


def test_transient_errors_while_waiting_back_off_until_the_timeout() -> None:
    run = labelled()
    sleeps = []
    step = m.Step(run, m.ReadNode())
    for now in (1, 2, 3, 4, 5):
        step = m.advance(step.run, m.CallFailed("HTTP 503", retryable=True), at(now))
        assert isinstance(step.action, m.Sleep)
        sleeps.append(step.action.seconds)
    assert sleeps == [2.0, 4.0, 8.0, 8.0, 8.0]  # doubling, capped at backoff_max_s
    step = m.advance(step.run, m.CallFailed("HTTP 503", retryable=True), at(100))
    assert step.run.ending is not None and step.run.ending.result == "timeout"
    assert "the API kept failing: HTTP 503" in step.run.ending.reason


def test_an_adopted_relayout_keeps_its_timers_from_the_records_stamp() -> None:
    started = keys.RelayoutRecord(state=keys.RelayoutState.APPLYING, target="all-1g.10gb",
                                  started=keys.rfc3339(WALL - 90), expected={"1g.10gb": 7})
    obj = node(config="all-1g.10gb", state="rebooting", taints=[TAINT], record=started)
    run = m.adopt(record_of(obj))
    assert run is not None and run.phase is m.Phase.WAIT
    step = m.advance(run, None, at(0))
    assert isinstance(step.action, m.ReadNode)
    step = m.advance(step.run, seen(obj), at(11))  # 101 s since the label was set
    assert step.run.ending is not None and step.run.ending.result == "timeout"


def test_losing_the_lease_ends_the_run_before_the_next_call() -> None:
    run, _ = claimed()
    step = m.advance(run, m.PodsSeen(()), at(leading=False))
    assert isinstance(step.action, m.Done)
    assert step.action.outcome.result == "lost-leadership"


def test_release_re_reads_on_a_conflict_and_is_idempotent() -> None:
    run, claim = claimed()
    step = m.advance(run, m.PodsSeen((gpu_pod("late", "1g.10gb"),)), at())
    step = m.advance(step.run, seen(node(taints=[TAINT], record=claim)), at())
    step = m.advance(step.run, m.CallFailed("HTTP 409", conflict=True), at(1))
    assert isinstance(step.action, m.ReadNode)
    step = m.advance(step.run, seen(node()), at(1))  # already released by the earlier patch
    assert isinstance(step.action, m.Done) and step.action.outcome.result == "aborted"


# ---------------------------------------------------------------- adoption and the bound


def test_adoption_by_record_state() -> None:
    claim = keys.RelayoutRecord(state=keys.RelayoutState.TAINTED, target="x")
    applying = claim.but(state=keys.RelayoutState.APPLYING)
    failed = claim.but(state=keys.RelayoutState.FAILED)
    recommended = claim.but(state=keys.RelayoutState.RECOMMENDED)

    def phase(**kw: Any) -> m.Phase | None:
        run = m.adopt(record_of(node(**kw)))
        return None if run is None else run.phase

    assert phase(taints=[TAINT], record=claim) is m.Phase.CHECK
    assert phase(record=claim) is m.Phase.RELEASE  # someone removed the taint: abort
    assert phase(taints=[TAINT], record=applying) is m.Phase.WAIT
    assert phase(record=applying) is m.Phase.WAIT
    assert phase(taints=[TAINT], record=failed) is None
    assert phase(taints=[TAINT], annotations={keys.ANNOTATION_RELAYOUT_FAILED: "{}"}) is None
    assert phase(record=recommended) is None and phase() is None
    # The taint without a record in flight: recorded as failed, for an operator.
    orphan = m.adopt(record_of(node(taints=[TAINT], record=recommended)))
    assert orphan is not None and orphan.phase is m.Phase.FAIL
    step = m.advance(orphan, None, at())
    assert isinstance(step.action, m.Patch)
    assert keys.ANNOTATION_RELAYOUT_FAILED in step.action.body["metadata"]["annotations"]


def test_the_bound_counts_every_node_in_flight_and_this_replicas_runs() -> None:
    claim = keys.RelayoutRecord(state=keys.RelayoutState.TAINTED, target="x")
    # d failed and an operator removed its taint (not yet its annotations): it serves pods,
    # holds no slot, and is not started again.
    nodes = [record_of(node(name="a", taints=[TAINT], record=claim)),
             record_of(node(name="b")), record_of(node(name="c")),
             record_of(node(name="d", annotations={keys.ANNOTATION_RELAYOUT_FAILED: "{}"}))]
    recs = [recommendation("b"), recommendation("c")]
    two = dataclasses.replace(SETTINGS, max_concurrent=2)
    plan = m.plan(nodes, running=(), recommendations=recs, settings=two)
    assert [r.node for r in plan.adopt] == ["a"] and [r.node for r in plan.start] == ["b"]
    assert plan.in_flight == {"a", "b"} and plan.failed == 1
    plan = m.plan(nodes, running=("a",), recommendations=recs, settings=two)
    assert plan.adopt == () and [r.node for r in plan.start] == ["b"]
    plan = m.plan(nodes, running=("c",), recommendations=recs, settings=two)
    assert [r.node for r in plan.start] == []  # a (cluster) + c (here) = 2
    assert m.plan(nodes, running=(), recommendations=recs, settings=SETTINGS).start == ()


def test_a_failed_node_still_tainted_holds_its_slot_until_an_operator_clears_it() -> None:
    # One failure that fails every change (a config the MIG Manager's file lacks) took one
    # recommended node out of service after another: a failed node did not count.
    failure = keys.RelayoutRecord(state=keys.RelayoutState.FAILED, target="x",
                                  result="failed", reason="mig.config.state=failed")
    broken = node(name="bad", taints=[TAINT], record=failure,
                  annotations={keys.ANNOTATION_RELAYOUT_FAILED: "{}"})
    recs = [recommendation("b"), recommendation("c"), recommendation("bad")]
    nodes = [record_of(broken), record_of(node(name="b")), record_of(node(name="c"))]
    plan = m.plan(nodes, running=(), recommendations=recs, settings=SETTINGS)
    assert plan.start == () and plan.holding == ("bad",) and plan.limit == 1
    assert plan.failed == 1 and plan.in_flight == frozenset()
    two = dataclasses.replace(SETTINGS, max_concurrent=2)
    plan = m.plan(nodes, running=(), recommendations=recs, settings=two)
    assert [r.node for r in plan.start] == ["b"]
    # This replica still recording the failure: counted once, not twice.
    plan = m.plan(nodes, running=("bad",), recommendations=recs, settings=two)
    assert [r.node for r in plan.start] == ["b"] and plan.holding == ()
    # A share of the GPU nodes: the failed node is one of them, and holds one of the slots.
    share = dataclasses.replace(SETTINGS, max_share=0.5)
    assert m.plan(nodes, running=(), recommendations=recs, settings=share).start == ()
    # Untainted by an operator (annotations not yet removed): it serves pods again, frees
    # its slot, and is still not retried.
    untainted = node(name="bad", record=failure,
                     annotations={keys.ANNOTATION_RELAYOUT_FAILED: "{}"})
    plan = m.plan([record_of(untainted), *nodes[1:]], running=(), recommendations=recs,
                  settings=SETTINGS)
    assert [r.node for r in plan.start] == ["b"] and plan.holding == ()
    # Cleared as the Warning Event says (taint and both annotations).
    plan = m.plan([record_of(node(name="bad")), *nodes[1:]], running=(),
                  recommendations=recs[2:], settings=SETTINGS)
    assert [r.node for r in plan.start] == ["bad"]


def test_the_failure_event_says_the_slot_is_held_and_how_to_clear_it() -> None:
    run = labelled()
    step = m.advance(run, _applying_node(run, config="all-1g.10gb", state="failed"), at(1))
    step = m.advance(step.run, m.Written(), at(1))
    (event,) = step.emits
    assert "holds one of the --max-relayouts slots" in event.message
    assert (f"kubectl taint node n {keys.TAINT_RELAYOUT}- && kubectl annotate node n "
            f"{keys.ANNOTATION_RELAYOUT}- {keys.ANNOTATION_RELAYOUT_FAILED}-") in event.message


# ---------------------------------------------------------------- VERIFY, right before LABEL


def _verifying(run: m.Run | None = None, now: float = 0.0) -> m.Step:
    """A run whose pod check passed: VERIFY reads the node."""
    step = m.advance(run or claimed()[0], m.PodsSeen(()), at(now))
    assert step.run.phase is m.Phase.VERIFY and isinstance(step.action, m.ReadNode)
    return step


def _claimed_node(run: m.Run, **kw: Any) -> dict[str, Any]:
    return node(taints=[TAINT], record=run.record.but(state=keys.RelayoutState.TAINTED), **kw)


@pytest.mark.parametrize("kw, needle", [
    # someone set the label since the taint; the MIG Manager may not have reacted yet
    ({"config": "all-disabled"}, "changed from 'all-3g.40gb' to 'all-disabled' by someone"),
    # ... or has: it is applying theirs (or re-applying the same config)
    ({"config": "all-disabled", "state": "pending"}, "changed from 'all-3g.40gb'"),
    ({"state": "pending"}, "mig.config.state=pending"),
    ({"state": "rebooting"}, "mig.config.state=rebooting"),
])
def test_a_label_or_a_mig_manager_at_work_since_the_taint_aborts_before_the_label(
        kw: dict[str, Any], needle: str) -> None:
    step = _verifying()
    step = m.advance(step.run, seen(_claimed_node(step.run, **kw)), at(1))
    # Nothing of migfit's was set: taint and record go (RELEASE), an Aborted Event says why.
    assert step.run.phase is m.Phase.RELEASE and isinstance(step.action, m.ReadNode)
    assert step.run.ending is not None and step.run.ending.result == "aborted"
    assert needle in step.run.ending.reason
    obj = _claimed_node(step.run, **kw)
    step = m.advance(step.run, seen(obj), at(1))
    assert isinstance(step.action, m.Patch)
    body = step.action.body
    assert body["metadata"]["annotations"] == {keys.ANNOTATION_RELAYOUT: None}
    assert body["spec"]["taints"] == [] and "labels" not in body  # theirs stays
    step = m.advance(step.run, m.Written(), at(1))
    assert [e.reason for e in step.emits] == [m.REASON_ABORTED]
    assert isinstance(step.action, m.Done) and step.action.outcome.result == "aborted"


def test_a_taint_or_record_removed_before_the_label_aborts() -> None:
    step = _verifying()
    gone = m.advance(step.run, seen(node()), at(1))  # an operator cleared it
    assert gone.run.ending is not None and gone.run.ending.result == "aborted"
    assert "removed or changed before the label was set" in gone.run.ending.reason


def test_the_label_patch_carries_verifys_version_and_a_conflict_reads_again() -> None:
    step = _verifying()
    obj = _claimed_node(step.run)
    obj["metadata"]["resourceVersion"] = "42"
    step = m.advance(step.run, seen(obj), at(1))
    assert isinstance(step.action, m.Patch) and step.run.phase is m.Phase.LABEL
    assert step.action.body["metadata"]["resourceVersion"] == "42"
    # Someone wrote the node in between: no overwrite, a new read and a new decision.
    again = m.advance(step.run, m.CallFailed("HTTP 409", conflict=True), at(2))
    assert again.run.phase is m.Phase.VERIFY and isinstance(again.action, m.ReadNode)
    theirs = m.advance(again.run, seen(_claimed_node(again.run, config="all-disabled")), at(2))
    assert theirs.run.ending is not None and theirs.run.ending.result == "aborted"
    # The write in between was unrelated: the label goes with the new version.
    fine = _claimed_node(again.run)
    fine["metadata"]["resourceVersion"] = "43"
    step = m.advance(again.run, seen(fine), at(2))
    assert isinstance(step.action, m.Patch)
    assert step.action.body["metadata"]["resourceVersion"] == "43"
    # The 409 answered a retry of a patch of ours that landed: wait as if it had answered.
    landed = node(config="all-1g.10gb", state="pending", taints=[TAINT], record=step.run.record)
    waiting = m.advance(again.run, seen(landed), at(2))
    assert waiting.run.phase is m.Phase.WAIT
    assert [e.reason for e in waiting.emits] == [m.REASON_STARTED]
    # Conflicts for longer than write_retry_s: left for a later pass (taint and record kept).
    late = m.advance(step.run, m.CallFailed("HTTP 409", conflict=True), at(30))
    assert isinstance(late.action, m.Done) and late.action.outcome.result == "interrupted"


def test_a_label_changed_after_a_lost_label_answer_fails_and_keeps_the_taint() -> None:
    step = verified(_verifying())
    step = m.advance(step.run, m.CallFailed("timeout", retryable=True), at(1))
    step = m.advance(step.run, m.Slept(), at(3))
    step = m.advance(step.run, seen(_claimed_node(step.run)), at(3))  # did not land
    step = _verifying(step.run, 3)
    out = m.advance(step.run, seen(_claimed_node(step.run, config="all-disabled")), at(4))
    assert out.run.phase is m.Phase.FAIL and out.run.ending is not None
    assert "whose answer was lost" in out.run.ending.reason
    assert "spec" not in out.action.body  # type: ignore[union-attr]


def test_only_safe_recommendations_to_named_configs_start() -> None:
    nodes = [record_of(node(name="b")), record_of(node(name="c"))]
    recs = [recommendation("b", disrupts=("t/p",)), recommendation("c", config=None)]
    many = dataclasses.replace(SETTINGS, max_concurrent=5)
    assert m.plan(nodes, running=(), recommendations=recs, settings=many).start == ()


def test_adoption_is_confirmed_by_a_fresh_read() -> None:
    # The view (a cache) still shows a re-layout this replica has just finished or failed.
    applying = keys.RelayoutRecord(state=keys.RelayoutState.APPLYING, target="all-1g.10gb",
                                   started=keys.rfc3339(WALL), expected={"1g.10gb": 7})
    stale = record_of(node(taints=[TAINT], record=applying))
    plan = m.plan([stale], running=(), recommendations=(), settings=SETTINGS)
    (run,) = plan.adopt
    step = m.advance(run, None, at())
    assert isinstance(step.action, m.ReadNode) and step.run.phase is m.Phase.ADOPT
    for fresh in (node(config="all-1g.10gb", alloc={"1g.10gb": 7}),
                  node(taints=[TAINT], record=applying.but(state=keys.RelayoutState.FAILED),
                       annotations={keys.ANNOTATION_RELAYOUT_FAILED: "{}"})):
        done = m.advance(step.run, seen(fresh), at())
        assert isinstance(done.action, m.Done) and done.action.outcome.result == "skipped"
    # Still in flight: it resumes where the fresh read says, from that read.
    going = m.advance(step.run, seen(node(config="all-1g.10gb", state="pending",
                                          taints=[TAINT], record=applying)), at(1))
    assert going.run.phase is m.Phase.WAIT and isinstance(going.action, m.ListPods)


def test_waiting_stops_when_the_record_is_cleared() -> None:
    run = labelled()
    step = m.advance(run, seen(node(config="all-1g.10gb", taints=[TAINT])), at(1))
    assert isinstance(step.action, m.Done) and step.action.outcome.result == "skipped"
    assert "is gone" in step.action.outcome.reason


def test_a_node_at_the_target_already_is_not_claimed() -> None:
    step = m.advance(m.advance(m.begin(recommendation()), None, at()).run,
                     seen(node(config="all-1g.10gb")), at())
    assert isinstance(step.action, m.Done) and step.action.outcome.result == "skipped"


def _busy_checking(settings: m.Settings = SETTINGS) -> m.Run:
    """A busy-node run (t/keeps runs on the node) that has tainted the node: in CHECK."""
    rec = dataclasses.replace(recommendation(), running=("t/keeps",))
    run = m.advance(m.begin(rec), None, at()).run
    step = m.advance(run, seen(node()), at())
    assert written_record(step).running == ("t/keeps",)  # type: ignore[union-attr]
    return m.advance(step.run, m.Written(), at()).run


def test_a_busy_node_run_keeps_the_running_pods_on_profiles_it_does_not_re_create() -> None:
    # GPU 0 goes from 2 x 3g.40gb to 7 x 1g.10gb; t/keeps uses a 1g.10gb, which the GPU the
    # change re-creates does not have: it is on another GPU, and the run goes on.
    step = verified(m.advance(_busy_checking(), m.PodsSeen((gpu_pod("keeps", "1g.10gb"),),
                                                           restarts={"keeps": 4}), at()))
    assert step.run.phase is m.Phase.LABEL
    record = written_record(step)
    assert record is not None and record.state is keys.RelayoutState.APPLYING
    assert record.kept == (keys.KeptPod(pod="t/keeps", uid="keeps", restarts=4,
                                        profiles={"1g.10gb": 1}),)


def test_a_busy_node_run_aborts_on_a_pod_whose_gpu_it_cannot_tell() -> None:
    stop = m.advance(_busy_checking(), m.PodsSeen((gpu_pod("keeps", "3g.40gb"),)), at())
    assert stop.run.phase is m.Phase.RELEASE and stop.run.ending is not None
    assert stop.run.ending.result == "aborted"
    assert "t/keeps (3g.40gb)" in stop.run.ending.reason
    assert "--gpu-usage-from dcgm" in stop.run.ending.reason


USAGE = dataclasses.replace(SETTINGS, gpu_usage=True, usage_wait_s=60.0, poll_s=1.0,
                            exporter_collect_s=30.0)
THREE_G = ("3g.40gb", frozenset[str]())
ONE_G = ("1g.10gb", frozenset[str]())


def usage_clock(now: float) -> m.Context:
    return m.Context(now=now, wall=WALL + now, settings=USAGE)


def report(*gpus: tuple[tuple[str, frozenset[str]], ...], at: float
           ) -> m.UsageSeen:
    return m.UsageSeen(dict(enumerate(gpus)), at)


def _placed_pod(name: str) -> tuple[str, frozenset[str]]:
    return ("3g.40gb", frozenset({f"t/{name}"}))


def _waiting_for_usage() -> m.Step:
    """t/keeps uses a 3g.40gb; GPU 0 (2 x 3g.40gb) is re-created, so only a report can say
    whether it is on GPU 1 (kept: the report must show GPU 0 as the advice had it)."""
    pods = m.PodsSeen((gpu_pod("keeps", "3g.40gb"),))
    step = m.advance(_busy_checking(USAGE), pods, usage_clock(10.0))  # listed at 10
    assert step.run.phase is m.Phase.USAGE and isinstance(step.action, m.ReadUsage)
    return step


def test_with_gpu_usage_a_report_collected_after_the_list_places_the_pod() -> None:
    step = _waiting_for_usage()
    # The record's GPU 0 only; GPU 1 holds keeps. A report scraped before the list was
    # collected (dcgm-exporter serves its last collection, 30 s) is waited out, by poll_s.
    fresh = report((THREE_G, THREE_G), (_placed_pod("keeps"),), at=40.0)
    stale = report((THREE_G, THREE_G), (_placed_pod("keeps"),), at=39.0)
    old = m.advance(step.run, stale, usage_clock(41.0))
    assert old.action == m.Sleep(1.0) and old.run.phase is m.Phase.USAGE
    again = m.advance(old.run, m.Slept(), usage_clock(42.0))
    assert isinstance(again.action, m.ReadUsage)
    # A fresh one that puts the pod on GPU 1: the pods are listed once more ...
    relist = m.advance(again.run, fresh, usage_clock(42.0))
    assert relist.run.phase is m.Phase.CHECK and isinstance(relist.action, m.ListPods)
    # ... the same pods: the label at once, keeps recorded.
    ok = m.advance(relist.run, m.PodsSeen((gpu_pod("keeps", "3g.40gb"),)), usage_clock(43.0))
    ok = verified(ok, usage_clock(43.0))
    assert ok.run.phase is m.Phase.LABEL
    assert [k.pod for k in written_record(ok).kept] == ["t/keeps"]  # type: ignore[union-attr]
    # Another pod bound since the list the report judged: it is judged afresh (USAGE again
    # with the new list; here it is a late pod, so the run is aborted).
    late = m.advance(relist.run, m.PodsSeen((gpu_pod("keeps", "3g.40gb"),
                                             gpu_pod("late", "3g.40gb"))), usage_clock(43.0))
    assert late.run.ending is not None and late.run.ending.result == "aborted"
    assert "after the advice: t/late" in late.run.ending.reason


@pytest.mark.parametrize(("gpus", "needle"), [
    # on the GPU the change re-creates
    (((_placed_pod("keeps"), THREE_G), ()), "puts pods on a GPU the change re-creates: t/keeps"),
    # named nowhere
    (((THREE_G, THREE_G), (THREE_G,)), "does not name all the instances of t/keeps (0 of 1)"),
    # GPU 0 not reported, or laid out otherwise than the advice assumed (another index?)
    (({},), "shows GPU 0 with nothing"),
    (((ONE_G,) * 7, (_placed_pod("keeps"),)), "shows GPU 0 with 1g.10gb"),
])
def test_with_gpu_usage_a_report_that_does_not_place_the_pod_aborts(
        gpus: tuple[Any, ...], needle: str) -> None:
    step = _waiting_for_usage()
    placed = {i: tuple(g) for i, g in enumerate(gpus) if g != {}}
    out = m.advance(step.run, m.UsageSeen(placed, 45.0), usage_clock(45.0))
    assert out.run.ending is not None and out.run.ending.result == "aborted"
    assert needle in out.run.ending.reason


def test_with_gpu_usage_no_fresh_report_in_time_aborts() -> None:
    step = _waiting_for_usage()
    late = m.advance(step.run, m.UsageSeen(None, None), usage_clock(70.0))
    assert late.run.ending is not None and late.run.ending.result == "aborted"
    assert "no DCGM exporter report" in late.run.ending.reason


def test_a_lost_label_answer_keeps_the_first_baseline() -> None:
    # The label patch landed but its answer was lost; meanwhile the MIG Manager began and
    # keeps restarted once: the second CHECK must not make that the new baseline.
    first = m.PodsSeen((gpu_pod("keeps", "1g.10gb"),), restarts={"keeps": 0})
    step = verified(m.advance(_busy_checking(), first, at(1)), at(1))
    assert step.run.phase is m.Phase.LABEL
    step = m.advance(step.run, m.CallFailed(brief="HTTP 503", retryable=True), at(2))
    step = m.advance(step.run, m.Slept(), at(12))
    assert isinstance(step.action, m.ReadNode)  # did it land? (here: no)
    step = m.advance(step.run, seen(node(taints=[TAINT], record=step.run.record.but(
        state=keys.RelayoutState.TAINTED))), at(12))
    assert isinstance(step.action, m.ListPods)
    restarted = m.PodsSeen((gpu_pod("keeps", "1g.10gb"),), restarts={"keeps": 1})
    step = verified(m.advance(step.run, restarted, at(13)), at(13))
    assert [k.restarts for k in written_record(step).kept] == [0]  # type: ignore[union-attr]
    # and the first check in WAIT sees the harm
    step = m.advance(step.run, m.Written(), at(14))
    step = m.advance(step.run, seen(node(config="all-1g.10gb", state="pending",
                                         record=step.run.record)), at(15))
    assert isinstance(step.action, m.ListPods)  # pods on every poll, not only at the end
    harmed = m.advance(step.run, restarted, at(16))
    assert harmed.run.ending is not None and harmed.run.ending.result == "failed"
    assert "t/keeps restarted or lost a container 1 time(s)" in harmed.run.ending.reason


def test_a_refusal_after_a_lost_label_answer_fails_and_keeps_the_taint() -> None:
    # The label may have landed and the MIG Manager be at work: never untaint then.
    first = m.PodsSeen((gpu_pod("keeps", "1g.10gb"),))
    step = verified(m.advance(_busy_checking(), first, at(1)), at(1))
    step = m.advance(step.run, m.CallFailed(brief="timeout", retryable=True), at(2))
    step = m.advance(step.run, m.Slept(), at(12))
    step = m.advance(step.run, seen(node(taints=[TAINT], record=step.run.record.but(
        state=keys.RelayoutState.TAINTED))), at(12))
    late = m.PodsSeen((gpu_pod("keeps", "1g.10gb"), gpu_pod("late", "1g.10gb")))
    step = m.advance(step.run, late, at(13))
    assert step.run.phase is m.Phase.FAIL and step.run.ending is not None
    assert step.run.ending.result == "failed" and "t/late" in step.run.ending.reason
    assert "whose answer was lost" in step.run.ending.reason
    assert "spec" not in step.action.body  # type: ignore[union-attr]


def _kept_and_waiting(obj: dict[str, Any]) -> m.Run:
    p = decoding.pod_from_api(obj)
    assert p is not None
    step = verified(m.advance(_busy_checking(), m.PodsSeen((p,), restarts={
        p.uid: decoding.restart_count(obj)}), at(1)), at(1))
    step = m.advance(step.run, m.Written(), at(2))
    step = m.advance(step.run, seen(node(config="all-1g.10gb", state="pending",
                                         record=step.run.record)), at(3))
    assert isinstance(step.action, m.ListPods)
    return step.run


def _keeps(status: dict[str, Any], *, deleting: bool = False,
           sidecar: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "keeps", "namespace": "t", "uid": "keeps"}
    if deleting:
        meta["deletionTimestamp"] = "2033-05-18T03:33:20Z"
    spec: dict[str, Any] = {"nodeName": "n", "containers": [{"name": "c", "resources": {
        "limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}
    if sidecar:
        spec["initContainers"] = [{"name": "proxy", "restartPolicy": "Always"}]
    return {"metadata": meta, "spec": spec, "status": status}


RUNNING = {"phase": "Running", "containerStatuses": [
    {"name": "c", "restartCount": 0, "state": {"running": {}}}]}


@pytest.mark.parametrize("after", [
    # deleted by its user or a Job's TTL: SIGTERM's exit code, a terminal phase
    _keeps({"phase": "Failed", "containerStatuses": [{"name": "c", "restartCount": 0, "state": {
        "terminated": {"exitCode": 143}}}]}, deleting=True),
    # completed, its native sidecar stopped after it with a non-zero code
    _keeps({"phase": "Succeeded", "initContainerStatuses": [{"name": "proxy", "restartCount": 0,
            "state": {"terminated": {"exitCode": 143}}}], "containerStatuses": [
        {"name": "c", "restartCount": 0, "state": {"terminated": {"exitCode": 0}}}]},
        sidecar=True),
])
def test_a_kept_pod_deleted_or_completed_during_the_change_is_not_harm(
        after: dict[str, Any]) -> None:
    run = _kept_and_waiting(_keeps(RUNNING))
    p = decoding.pod_from_api(after)
    assert p is not None
    step = m.advance(run, m.PodsSeen((p,), restarts={p.uid: decoding.restart_count(after)}),
                     at(4))
    assert step.run.ending is None and isinstance(step.action, m.Sleep)


def test_usage_time_does_not_spend_the_label_retries() -> None:
    shipped = dataclasses.replace(m.Settings(), gpu_usage=True, apply_busy_nodes=True)

    def clock(now: float) -> m.Context:
        return m.Context(now=now, wall=WALL + now, settings=shipped)

    pods = m.PodsSeen((gpu_pod("keeps", "3g.40gb"),))
    step = m.advance(_busy_checking(shipped), pods, clock(0.0))
    step = m.advance(step.run, report((THREE_G, THREE_G), (_placed_pod("keeps"),), at=61.0),
                     clock(65.0))
    step = verified(m.advance(step.run, pods, clock(66.0)), clock(66.0))
    assert step.run.phase is m.Phase.LABEL
    step = m.advance(step.run, m.CallFailed(brief="HTTP 503", retryable=True), clock(67.0))
    assert isinstance(step.action, m.Sleep)  # retried, not "interrupted"


def test_pods_that_keep_changing_under_usage_end_the_run() -> None:
    step = _waiting_for_usage()
    t = 10.0
    for k in range(20):
        t += 40.0
        fresh = report((THREE_G, THREE_G), (_placed_pod("keeps"),), at=t - 5.0)
        step = m.advance(step.run, fresh, usage_clock(t))
        if step.run.ending is not None:
            break
        assert step.run.phase is m.Phase.CHECK
        # the same name, another pod each time (a StatefulSet replacing it)
        other = dataclasses.replace(gpu_pod("keeps", "3g.40gb"), uid=f"keeps-{k}")
        step = m.advance(step.run, m.PodsSeen((other,)), usage_clock(t + 1.0))
        if step.run.ending is not None:
            break
    assert step.run.ending is not None and step.run.ending.result == "aborted"
    assert "kept changing" in step.run.ending.reason
    assert t <= 10.0 + 2 * USAGE.usage_wait_s + 80.0


def test_a_busy_node_whose_config_changed_since_the_advice_is_skipped() -> None:
    rec = dataclasses.replace(recommendation(), running=("t/keeps",))
    run = m.advance(m.begin(rec), None, at()).run
    step = m.advance(run, seen(node(config="something-else")), at())
    assert step.run.ending is not None and step.run.ending.result == "skipped"
    assert "changed since the advice (all-3g.40gb -> something-else)" in step.run.ending.reason


def test_a_share_of_the_gpu_nodes_bounds_the_re_layouts_at_once() -> None:
    # 20 GPU nodes and a cpu-only one: 10 % allows two at once, 1 % still one.
    nodes = [record_of(node(name=f"n{i:02d}")) for i in range(20)]
    cpu_only = dataclasses.replace(nodes[0], name="cpu", model=None, allocatable={})
    recs = [recommendation(f"n{i:02d}") for i in range(5)]
    tenth = dataclasses.replace(SETTINGS, max_share=0.1)
    assert tenth.limit([*nodes, cpu_only]) == 2
    plan = m.plan([*nodes, cpu_only], running=(), recommendations=recs, settings=tenth)
    assert [r.node for r in plan.start] == ["n00", "n01"]
    assert dataclasses.replace(SETTINGS, max_share=0.01).limit(nodes) == 1
    assert dataclasses.replace(SETTINGS, max_share=0.29).limit(
        [record_of(node(name=f"m{i:03d}")) for i in range(100)]) == 29
    assert SETTINGS.limit(nodes) == SETTINGS.max_concurrent == 1


def test_the_extender_reads_max_relayouts_as_nodes_or_a_share() -> None:
    assert cli_options.relayout_limit("4") == (4, None)
    assert cli_options.relayout_limit(" 10% ") == (1, 0.1)
    assert cli_options.relayout_limit("100%") == (1, 1.0)


CUSTOM_DOC = {"version": "v1", "mig-configs": {"migfit-7x1g.10gb": [
    {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}
CUSTOM = dataclasses.replace(SETTINGS, custom_configs=("gpu-operator", "mine"),
                             config_sync_s=120.0, config_keep_s=3600.0)
BASE = "version: v1\nmig-configs:\n  all-3g.40gb:\n    - devices: all\n" \
       "      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 2}\n"


def custom_run() -> m.Run:
    """A custom-config run adopted in ``tainted`` (the pod check comes first)."""
    rec = dataclasses.replace(recommendation(config=None), mig_parted=CUSTOM_DOC)
    record = m.planned(rec).but(state=keys.RelayoutState.TAINTED, from_config="all-3g.40gb")
    return m.Run(node="n", phase=m.Phase.CHECK, record=record)


def custom_at(now: float = 0.0, settings: m.Settings = CUSTOM) -> m.Context:
    return m.Context(now=now, wall=WALL + now, settings=settings)


def test_a_custom_config_already_written_waits_only_the_rest_of_the_sync() -> None:
    text = migparted.with_config(BASE, CUSTOM_DOC)
    step = m.advance(custom_run(), m.PodsSeen(()), custom_at())
    assert isinstance(step.action, m.ReadConfigMap) and step.run.phase is m.Phase.CONFIG
    # Written 100 s ago by a replica that lost the Lease: 20 s left, no second write.
    cm = m.ConfigMapSeen(text=text, added={"migfit-7x1g.10gb": WALL - 100.0},
                         resource_version="3", in_use=frozenset())
    step = m.advance(step.run, cm, custom_at())
    assert step.action == m.Sleep(20.0) and step.run.phase is m.Phase.SYNC
    step = m.advance(step.run, m.Slept(), custom_at(20.0))
    assert isinstance(step.action, m.ListPods)  # the pods once more, then the label
    step = verified(m.advance(step.run, m.PodsSeen(()), custom_at(20.0)), custom_at(20.0))
    assert isinstance(step.action, m.Patch)
    assert step.action.body["metadata"]["labels"] == {keys.LABEL_CONFIG: "migfit-7x1g.10gb"}


def test_a_custom_config_is_written_with_a_precondition_and_old_unused_ones_go() -> None:
    old = {"version": "v1", "mig-configs": {"migfit-old": CUSTOM_DOC["mig-configs"][
        "migfit-7x1g.10gb"]}}
    text = migparted.with_config(BASE, old)
    step = m.advance(custom_run(), m.PodsSeen(()), custom_at())
    cm = m.ConfigMapSeen(text=text, added={"migfit-old": WALL - 7200.0},
                         resource_version="3", in_use=frozenset({"all-3g.40gb"}))
    step = m.advance(step.run, cm, custom_at())
    assert isinstance(step.action, m.PatchConfigMap)
    body = step.action.body
    assert body["metadata"]["resourceVersion"] == "3"
    written = migparted.parse(body["data"][migparted.CONFIGMAP_KEY])
    assert set(written.configs) == {"all-3g.40gb", "migfit-7x1g.10gb"}
    assert keys.decode_configs(body["metadata"]["annotations"][keys.ANNOTATION_CONFIGS]) == {
        "migfit-7x1g.10gb": WALL}
    # In use (a node's label names it): kept however old.
    used = dataclasses.replace(cm, in_use=frozenset({"migfit-old"}))
    step = m.advance(m.advance(custom_run(), m.PodsSeen(()), custom_at()).run, used,
                     custom_at())
    assert isinstance(step.action, m.PatchConfigMap)
    assert "migfit-old" in migparted.parse(step.action.body["data"]["config.yaml"]).configs
    # Written: a Normal Event, then the whole sync.
    done = m.advance(step.run, m.Written(), custom_at())
    assert done.action == m.Sleep(120.0)
    assert [e.reason for e in done.emits] == [m.REASON_CONFIG]
    # A conflict reads it again (after a backoff).
    again = m.advance(step.run, m.CallFailed("409", conflict=True), custom_at())
    assert isinstance(again.action, m.Sleep) and again.run.phase is m.Phase.CONFIG
    assert isinstance(m.advance(again.run, m.Slept(), custom_at(1.0)).action,
                      m.ReadConfigMap)


def test_a_custom_run_adopted_with_the_flag_off_is_aborted_unchanged() -> None:
    step = m.advance(custom_run(), m.PodsSeen(()), custom_at(settings=SETTINGS))
    assert step.run.phase is m.Phase.RELEASE and isinstance(step.action, m.ReadNode)
    assert step.run.ending is not None and "--apply-custom-configs" in step.run.ending.reason


def test_custom_recommendations_start_only_with_the_flag() -> None:
    nodes = [record_of(node(name="c"))]
    recs = [recommendation("c", config=None)]
    assert m.plan(nodes, running=(), recommendations=recs, settings=SETTINGS).start == ()
    started = m.plan(nodes, running=(), recommendations=recs, settings=CUSTOM).start
    assert [r.node for r in started] == ["c"]


def test_a_named_config_migfit_wrote_lately_also_waits_out_the_sync() -> None:
    # The advice reads the ConfigMap every minute: a config written 30 s ago is named there
    # already, but the MIG Managers' volumes may not have it yet.
    text = migparted.with_config(BASE, CUSTOM_DOC)
    rec = recommendation(config="migfit-7x1g.10gb")
    run = m.Run(node="n", phase=m.Phase.CHECK,
                record=m.planned(rec).but(state=keys.RelayoutState.TAINTED,
                                          from_config="all-3g.40gb"))
    step = m.advance(run, m.PodsSeen(()), custom_at())
    assert isinstance(step.action, m.ReadConfigMap)
    cm = m.ConfigMapSeen(text=text, added={"migfit-7x1g.10gb": WALL - 30.0},
                         resource_version="3", in_use=frozenset())
    assert m.advance(step.run, cm, custom_at()).action == m.Sleep(90.0)
    # One an operator added (not in migfit.io/configs): the label at once (after the pods).
    step = m.advance(step.run, dataclasses.replace(cm, added={}), custom_at())
    assert isinstance(step.action, m.ListPods)
    assert isinstance(verified(m.advance(step.run, m.PodsSeen(()), custom_at()),
                               custom_at()).action, m.Patch)
    # Without --apply-custom-configs a named config is labelled straight away, as before.
    plain = m.advance(run, m.PodsSeen(()), custom_at(settings=SETTINGS))
    assert isinstance(verified(plain, custom_at(settings=SETTINGS)).action, m.Patch)


def test_a_config_text_that_would_outgrow_a_configmap_is_not_written() -> None:
    # 100 configs with 8,000-character names: 800 kB of text, quick to parse.
    many = {"version": "v1", "mig-configs": {
        f"op-{i:03d}-" + "x" * 8000: CUSTOM_DOC["mig-configs"]["migfit-7x1g.10gb"]
        for i in range(100)}}
    text = migparted.with_config(BASE, many)
    assert len(text.encode()) > m.CONFIG_TEXT_MAX
    step = m.advance(custom_run(), m.PodsSeen(()), custom_at())
    cm = m.ConfigMapSeen(text=text, added={}, resource_version="3", in_use=frozenset())
    step = m.advance(step.run, cm, custom_at())
    assert step.run.phase is m.Phase.RELEASE and isinstance(step.action, m.ReadNode)
    assert step.run.ending is not None and "remove configs no node uses" in \
        step.run.ending.reason


def test_staging_writes_new_configs_at_once_and_names_the_ready_ones() -> None:
    other = {"version": "v1", "mig-configs": {"migfit-other": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"2g.20gb": 3}}]}}
    text = migparted.with_config(BASE, other)
    seen = m.ConfigMapSeen(text=text, added={"migfit-other": WALL - 200.0,
                                             "migfit-stale": WALL - 7200.0},
                           resource_version="9", in_use=frozenset())
    targets = {"migfit-7x1g.10gb": CUSTOM_DOC, "migfit-other": other}
    out = m.stage(seen, targets, wall=WALL, settings=CUSTOM)
    # The one written 200 s ago is ready; the new one is written now, ready in 120 s.
    assert out.ready == frozenset({"migfit-other"}) and out.added == ("migfit-7x1g.10gb",)
    assert out.next_ready == WALL + 120.0 and out.problems == ()
    assert out.body is not None and out.body["metadata"]["resourceVersion"] == "9"
    written = migparted.parse(out.body["data"][migparted.CONFIGMAP_KEY])
    assert set(written.configs) == {"all-3g.40gb", "migfit-other", "migfit-7x1g.10gb"}
    assert keys.decode_configs(out.body["metadata"]["annotations"][keys.ANNOTATION_CONFIGS]) \
        == {"migfit-other": WALL - 200.0, "migfit-7x1g.10gb": WALL}
    # 60 s later: nothing to write, still waiting, and when it will be ready.
    later = m.ConfigMapSeen(text=migparted.with_config(text, CUSTOM_DOC),
                            added={"migfit-7x1g.10gb": WALL, "migfit-other": WALL - 200.0},
                            resource_version="10", in_use=frozenset())
    out = m.stage(later, targets, wall=WALL + 60.0, settings=CUSTOM)
    assert out.body is None and out.ready == frozenset({"migfit-other"})
    assert out.next_ready == WALL + 120.0
    assert m.stage(later, targets, wall=WALL + 120.0, settings=CUSTOM).ready == frozenset(
        targets)
    # Someone else's config under the name: not written, not ready, said why.
    clash = m.ConfigMapSeen(text=migparted.with_config(BASE, {"version": "v1", "mig-configs": {
        "migfit-7x1g.10gb": other["mig-configs"]["migfit-other"]}}), added={},
        resource_version="1", in_use=frozenset())
    out = m.stage(clash, {"migfit-7x1g.10gb": CUSTOM_DOC}, wall=WALL, settings=CUSTOM)
    assert out.body is None and out.ready == frozenset() and "other entries" in out.problems[0]


def test_custom_recommendations_start_only_once_staged() -> None:
    nodes = [record_of(node(name="c"))]
    recs = [dataclasses.replace(recommendation("c", config=None), mig_parted=CUSTOM_DOC)]
    target = recs[0].target
    assert m.plan(nodes, running=(), recommendations=recs, settings=CUSTOM,
                  staged=frozenset()).start == ()
    assert [r.node for r in m.plan(nodes, running=(), recommendations=recs, settings=CUSTOM,
                                   staged=frozenset({target})).start] == ["c"]


@pytest.mark.parametrize(("spec", "verdict", "why"), [
    ({"migManager": {"config": {"name": "mine"}}}, True, ""),
    ({"migManager": {"enabled": True, "config": {"name": "mine", "default": "all-disabled"}}},
     True, ""),
    ({"migManager": {"config": {"name": "default-mig-parted-config"}}}, False,
     "read ConfigMap default-mig-parted-config"),
    ({"migManager": {}}, False, "read ConfigMap default-mig-parted-config"),  # unset: default
    ({}, False, "read ConfigMap default-mig-parted-config"),
    ({"migManager": {"enabled": False, "config": {"name": "mine"}}}, False,
     "MIG Manager disabled"),
])
def test_the_cluster_policy_must_have_the_mig_managers_read_the_configmap(
        spec: dict[str, Any], verdict: bool, why: str) -> None:
    policy = {"metadata": {"name": "cluster-policy"}, "spec": spec}
    got, text = m.policy_reads([policy], ("gpu-operator", "mine"))
    assert got is verdict and why in text
    assert m.policy_reads([], ("gpu-operator", "mine"))[0] is None


def test_the_taint_comes_off_at_success_only_once_the_mig_manager_was_at_work() -> None:
    """The operands' DaemonSets create no pod on a node whose NoSchedule taint they do not
    tolerate, so the taint comes off at the MIG Manager's success, with no instance
    advertised (its device plugin paused). The success the node showed before the MIG
    Manager saw the label does not count (a review: an old layout with no instances looked
    the same), unless ``untaint_after_s`` has passed since the label."""
    run = labelled()
    applying = run.record
    early = node(taints=[TAINT, {"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                 record=applying, config="all-1g.10gb", alloc={"3g.40gb": 0})
    step = m.advance(run, seen(early), at(1))
    assert isinstance(step.action, m.ListPods) and not step.run.untainted
    working = node(taints=[TAINT], record=applying, config="all-1g.10gb", state="pending")
    step = m.advance(step.run, seen(working), at(2))
    assert step.run.acted
    step = m.advance(step.run, seen(early), at(3))
    assert isinstance(step.action, m.Patch)
    assert step.action.body == {"metadata": {"resourceVersion": "7"}, "spec": {"taints": [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}}
    step = m.advance(step.run, m.Written(), at(3))
    assert step.run.untainted and isinstance(step.action, m.ListPods)
    # Never seen at work, but long after the label: off as well.
    late = m.advance(labelled(), seen(early), at(SETTINGS.untaint_after_s + 1))
    assert isinstance(late.action, m.Patch)


def test_a_failure_after_the_taint_came_off_puts_it_back() -> None:
    run = dataclasses.replace(labelled(), untainted=True, acted=True)
    bare = node(taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}], record=run.record,
                config="all-1g.10gb", state="failed")
    step = m.advance(run, seen(bare), at(1))
    assert step.run.phase is m.Phase.FAIL and isinstance(step.action, m.ReadNode)
    step = m.advance(step.run, seen(bare), at(1))
    assert isinstance(step.action, m.Patch)
    assert step.action.body["spec"] == {"taints": [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"}, keys.relayout_taint()]}
    assert step.action.body["metadata"]["resourceVersion"] == "7"
