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


async def test_skipped_lines_do_not_count_as_a_failed_stream(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    changed = pod("a", "7", nodeName="n1")
    # Real changes around one unknown type and one undecodable line; then the stream ends.
    server[kmock.action.WATCH, PODS][:1] >> (lambda: store(server, changed)) << (
        event("RESIZED", pod("a", "6", nodeName="elsewhere")),
        event("MODIFIED", changed),
        b"not json at all\n",
    )

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 2)

    report = source.status()
    # The stream made progress: no backoff, and the two lines are counted as skipped.
    assert report.consecutive_failures == 0
    assert report.retries == 0 and report.last_error is None
    assert report.skipped_events >= 2
    assert server[kmock.action.WATCH, PODS][1].params["resourceVersion"] == "7"
    await assert_matches_fresh_lists(server, sink)


async def test_a_stream_of_nothing_usable_backs_off(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    server[kmock.action.WATCH, PODS][:1] << (event("RESIZED", pod("a", "6")), b"[1, 2]\n")

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 2)

    assert source.status().consecutive_failures == 1
    await assert_matches_fresh_lists(server, sink)
