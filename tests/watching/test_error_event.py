"""A watch ERROR event other than 410 is reported and skipped; the watch goes on."""

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
    status,
    store,
    until,
)


async def test_error_event_is_reported_and_skipped(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    # The change the stream reports, made in the emulator as the stream starts.
    changed = pod("a", "9", nodeName="n1")
    server[kmock.action.WATCH, PODS][:1] >> (lambda: store(server, changed)) << (
        event("ERROR", status(500, "InternalError", "etcd leader changed")),
        event("MODIFIED", changed),
    )

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 2)

    assert ("Pod", "MODIFIED", "a", "9") in sink.applied
    report = source.status()
    assert report.last_error is not None
    assert "500" in report.last_error and "etcd leader changed" in report.last_error
    assert report.relists == 0
    # An ERROR from the server backs off before the next watch, though a change came too.
    assert report.consecutive_failures == 1
    # The stream ended after an error: the source resumes from the last version it saw.
    assert server[kmock.action.WATCH, PODS][1].params["resourceVersion"] == "9"
    await assert_matches_fresh_lists(server, sink)


async def test_http_error_on_watch_is_retried_from_the_same_version(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    server[kmock.action.LIST, PODS][:1] << {
        "kind": "PodList",
        "metadata": {"resourceVersion": "20"},
        "items": [pod("a", "5")],
    }
    server[kmock.action.WATCH, PODS][:2] << 503 << status(503, "ServiceUnavailable", "try later")

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 3)

    watches = server[kmock.action.WATCH, PODS]
    assert [request.params["resourceVersion"] for request in watches][:3] == ["20"] * 3
    report = source.status()
    assert report.retries == 2 and report.relists == 0
    assert report.last_error is not None and "try later" in report.last_error
    assert len(server[kmock.action.LIST, PODS]) == 1
    await assert_matches_fresh_lists(server, sink)
