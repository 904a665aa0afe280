"""migfit.keys: the JSON annotations' records are versioned, validated, written one way."""

from __future__ import annotations

import json

import pytest

from migfit import keys


def test_a_relayout_record_round_trips_compactly_without_defaults() -> None:
    record = keys.RelayoutRecord(
        state=keys.RelayoutState.APPLYING, target="all-1g.10gb", from_config="all-3g.40gb",
        gpus=(keys.GpuChange(index=0, before=("3g.40gb",), after=("1g.10gb", "1g.10gb")),),
        expected={"1g.10gb": 2}, started=keys.rfc3339(2_000_000_000.0))
    text = keys.encode_relayout(record)
    assert json.loads(text) == {
        "v": 1, "state": "applying", "target": "all-1g.10gb", "from": "all-3g.40gb",
        "gpus": [{"index": 0, "before": ["3g.40gb"], "after": ["1g.10gb", "1g.10gb"]}],
        "expected": {"1g.10gb": 2}, "started": "2033-05-18T03:33:20.000000Z"}
    assert " " not in text and text == keys.encode_relayout(keys.decode_relayout(text))
    assert keys.decode_relayout(text) == record
    assert record.started_at() == 2_000_000_000.0
    assert keys.relayout_of({keys.ANNOTATION_RELAYOUT: text}) == record


def test_records_written_before_the_version_field_still_read() -> None:
    # The apply mode's and the publisher's records of earlier releases.
    old_apply = {"state": "applying", "target": "t", "from": "f", "expected": {"1g.10gb": 7},
                 "gpus": [{"index": 0, "before": [], "after": ["1g.10gb"]}], "unblocks": [],
                 "disrupts": [], "started": "2033-05-18T02:33:20.000000Z"}
    old_advice = {"target": "t", "config": None, "mig_parted": {"version": "v1"},
                  "gpus": [], "unblocks": ["ml/a"], "disrupts": [], "disruptive": False,
                  "command": "kubectl ..."}
    assert keys.decode_relayout(json.dumps(old_apply)).active
    advised = keys.decode_relayout(json.dumps(old_advice))
    assert advised.state is keys.RelayoutState.RECOMMENDED and not advised.active


@pytest.mark.parametrize("text", [
    "", "x", "[]", '{"v": 2}', '{"v": true}', '{"v": "1"}',
    '{"state": "pending"}', '{"state": "in-progress"}', '{"state": "rebooting"}',
    '{"unknown": 1}', '{"expected": {"1g.10gb": "7"}}', '{"gpus": [{"index": true}]}',
    '{"started": "yesterday"}',
])
def test_anything_else_is_not_a_relayout_record(text: str) -> None:
    with pytest.raises(keys.AnnotationError, match="not a migfit re-layout record"):
        keys.decode_relayout(text)
    assert keys.relayout_of({keys.ANNOTATION_RELAYOUT: text}) is None
    assert keys.relayout_of({}) is None


def test_the_in_flight_states_are_tainted_and_applying() -> None:
    active = {s for s in keys.RelayoutState if keys.RelayoutRecord(state=s).active}
    assert active == {keys.RelayoutState.TAINTED, keys.RelayoutState.APPLYING}


def test_the_decision_record_lives_here_and_requests_re_exports_it() -> None:
    from migfit import requests

    assert requests.DecisionRecord is keys.DecisionRecord
    assert requests.decision_of is keys.decision_of
    with pytest.raises(keys.AnnotationError):
        keys.decode_decision('{"v":1,"strategy":"mixed","containers":[],"x":1}')


def test_keys_are_spelled_once() -> None:
    assert keys.relayout_taint() == {"key": "migfit.io/relayout", "value": "pending",
                                     "effect": "NoSchedule"}
    assert keys.mig_memory_label("1g.10gb") == "nvidia.com/mig-1g.10gb.memory"
    assert keys.GPU_MEMORY_PREFIX == "migfit.io/gpu-memory."


def test_a_media_profiles_memory_label_is_spelled_as_gfd_writes_it() -> None:
    assert keys.mig_memory_label("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me.memory"
