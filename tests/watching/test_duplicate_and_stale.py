"""Duplicate and stale events never reach the sink, so they cannot corrupt it."""

from __future__ import annotations

import kmock

from migfit import watching

from .scenery import (
    PODS,
    RecordingSink,
    Start,
    assert_matches_fresh_lists,
    event,
    forget,
    pod,
    store,
    until,
)


async def test_duplicate_and_stale_events_are_dropped(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    store(server, pod("b", "6"))
    a10, b11, c12 = pod("a", "10", nodeName="n1"), pod("b", "11"), pod("c", "12")

    def the_truth() -> None:
        store(server, a10)
        forget(server, b11)
        store(server, c12)

    server[kmock.action.WATCH, PODS][:1] >> the_truth << (
        event("MODIFIED", a10),
        event("MODIFIED", a10),  # duplicate
        event("MODIFIED", pod("a", "8", nodeName="old")),  # stale: "8" > "10" only as text
        event("ADDED", pod("a", "5")),  # stale replay of the listed version
        event("DELETED", b11),
        event("MODIFIED", pod("b", "9")),  # older than the deletion
        event("ADDED", pod("b", "6")),  # replay of a deleted object
        event("DELETED", b11),  # duplicate delete
        event("ADDED", c12),
        event("MODIFIED", c12),  # duplicate
        event("MODIFIED", pod("a", "7")),  # stale, and last: must not move the position back
    )

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 2)

    assert [entry for entry in sink.applied if entry[0] == "Pod"] == [
        ("Pod", "MODIFIED", "a", "10"),
        ("Pod", "DELETED", "b", "11"),
        ("Pod", "ADDED", "c", "12"),
    ]
    assert server[kmock.action.WATCH, PODS][1].params["resourceVersion"] == "12"
    assert source.status().skipped_events >= 8
    await assert_matches_fresh_lists(server, sink)


async def test_opaque_resource_versions_drop_exact_duplicates(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    # Not etcd-backed: versions are opaque, only equality means anything.
    store(server, pod("a", "rv-x"))
    newer = pod("a", "rv-y", nodeName="n1")
    server[kmock.action.WATCH, PODS][:1] >> (lambda: store(server, newer)) << (
        event("MODIFIED", pod("a", "rv-x")),
        event("MODIFIED", newer),
        event("MODIFIED", newer),
    )

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 2)

    assert [entry for entry in sink.applied if entry[0] == "Pod"] == [
        ("Pod", "MODIFIED", "a", "rv-y")
    ]
    assert server[kmock.action.WATCH, PODS][1].params["resourceVersion"] == "rv-y"
    await assert_matches_fresh_lists(server, sink)


async def test_a_relist_is_the_truth_even_for_older_versions(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    # After a re-list the listed versions are what is held, deleted ones included.
    store(server, pod("a", "5"))
    server[kmock.action.WATCH, PODS][:1] << (event("DELETED", pod("a", "9")),)
    server[kmock.action.WATCH, PODS][1:2] << 410 << {"kind": "Status", "code": 410}

    start()
    await until(lambda: sink.replaces("Pod") == 2)

    assert sink.objects["Pod"] == {"uid-default-a": pod("a", "5")}
    await assert_matches_fresh_lists(server, sink)
