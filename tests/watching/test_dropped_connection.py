"""A stream that is cut, or goes silent, is watched again from the last version seen."""

from __future__ import annotations

import dataclasses

import kmock
import pytest

from migfit import watching

from .scenery import (
    FAST,
    PODS,
    RecordingSink,
    Start,
    assert_matches_fresh_lists,
    event,
    pod,
    store,
    until,
)


async def test_stream_cut_mid_event_resumes_from_last_version(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    changed = pod("a", "12", nodeName="n1")
    server[kmock.action.WATCH, PODS][:1] >> (lambda: store(server, changed)) << (
        event("MODIFIED", changed),
        b'{"type": "MODIFIED", "object": {"metadata": {"na',  # then the connection ends
    )

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 2)

    assert server[kmock.action.WATCH, PODS][1].params["resourceVersion"] == "12"
    assert len(server[kmock.action.LIST, PODS]) == 1
    assert source.status().relists == 0
    assert ("Pod", "MODIFIED", "a", "12") in sink.applied
    await assert_matches_fresh_lists(server, sink)


async def test_stream_ended_by_server_is_watched_again(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    added = pod("b", "8")
    # As at timeoutSeconds: the server ends the response cleanly.
    server[kmock.action.WATCH, PODS][:1] >> (lambda: store(server, added)) << (
        event("ADDED", added),
    )

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 2)

    assert server[kmock.action.WATCH, PODS][1].params["resourceVersion"] == "8"
    assert source.status().retries == 0
    await assert_matches_fresh_lists(server, sink)


@pytest.mark.parametrize(
    "settings", [dataclasses.replace(FAST, watch_read_timeout_s=0.2)], ids=["short-read-timeout"]
)
async def test_silent_stream_is_dropped_and_watched_again(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    server[kmock.action.LIST, PODS][:1] << {
        "kind": "PodList",
        "metadata": {"resourceVersion": "10"},
        "items": [pod("a", "5")],
    }

    # The emulator's watch replays the stored pod (older than the list), then sends nothing.
    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 2)

    report = source.status()
    assert report.retries >= 1
    assert report.last_error is not None and "Timeout" in report.last_error
    assert report.relists == 0
    watches = server[kmock.action.WATCH, PODS]
    assert [watch.params["resourceVersion"] for watch in watches][:2] == ["10", "10"]
    await assert_matches_fresh_lists(server, sink)
