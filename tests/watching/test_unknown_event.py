"""Unknown event types and lines that are not events are logged and skipped."""

from __future__ import annotations

import kmock

from migfit import watching

from .scenery import (
    PODS,
    RecordingSink,
    Start,
    assert_matches_fresh_lists,
    event,
    pod,
    store,
    until,
)


async def test_unknown_and_malformed_events_are_skipped(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    # The change the stream reports, made in the emulator as the stream starts.
    changed = pod("a", "7", nodeName="n1")
    server[kmock.action.WATCH, PODS][:1] >> (lambda: store(server, changed)) << (
        event("RESIZED", pod("a", "6", nodeName="elsewhere")),
        b"not json at all\n",
        b"[1, 2, 3]\n",
        b"\n",
        event("MODIFIED", changed),
    )

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 2)

    assert [entry for entry in sink.applied if entry[0] == "Pod"] == [("Pod", "MODIFIED", "a", "7")]
    assert source.status().relists == 0
    await assert_matches_fresh_lists(server, sink)
