"""A stream that delivered events and then failed is watched again from its last event's
version, not from where it began: that one may be compacted by now (410, a full re-list)."""

from __future__ import annotations

import asyncio
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
    bookmark,
    event,
    pod,
    store,
    until,
)


@pytest.mark.parametrize(
    "settings", [dataclasses.replace(FAST, watch_read_timeout_s=0.3)], ids=["short-read-timeout"]
)
async def test_failed_stream_resumes_from_its_last_event(
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
    changed = pod("a", "20", nodeName="n1")
    # Two changes, then silence past the read timeout: the stream fails, it does not end.
    server[kmock.action.WATCH, PODS][:1] >> (lambda: store(server, changed)) << (
        event("MODIFIED", changed),
        bookmark("22"),
        lambda: asyncio.sleep(5),
    )

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 2)

    report = source.status()
    assert report.retries >= 1
    assert report.last_error is not None and "Timeout" in report.last_error
    watches = server[kmock.action.WATCH, PODS]
    assert watches[0].params["resourceVersion"] == "10"
    assert watches[1].params["resourceVersion"] == "22"
    assert report.relists == 0
    assert ("Pod", "MODIFIED", "a", "20") in sink.applied
    await assert_matches_fresh_lists(server, sink)
