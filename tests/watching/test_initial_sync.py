"""The first complete list of both kinds fills the sink and only then marks it synced."""

from __future__ import annotations

import asyncio

import kmock
import pytest

from migfit import watching

from .scenery import (
    NODES,
    RecordingSink,
    Start,
    assert_matches_fresh_lists,
    node,
    pod,
    status,
    store,
    until,
)


async def test_lists_both_kinds_then_marks_synced(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    for obj in [node("n1", "3"), node("n2", "4"), pod("a", "5"), pod("b", "6", namespace="ml")]:
        store(server, obj)

    start()
    await source.synced.wait()

    assert sink.calls[:3] in (
        [("replace", "Node"), ("replace", "Pod"), ("mark_synced",)],
        [("replace", "Pod"), ("replace", "Node"), ("mark_synced",)],
    )
    assert source.status().synced
    await assert_matches_fresh_lists(server, sink)


async def test_lists_cluster_wide_and_paginated_with_bearer_token(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5", namespace="ns1"))
    start()
    await source.synced.wait()

    pod_list = server[kmock.action.LIST, kmock.resource("v1", "pods")][0]
    assert pod_list.namespace is None
    assert pod_list.params["limit"] == "500"
    assert pod_list.headers["Authorization"] == "Bearer t0k3n"
    assert pod_list.headers["Accept"] == "application/json"


async def test_synced_waits_for_the_slower_kind(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, node("n1", "3"))
    store(server, pod("a", "5"))
    server[kmock.action.LIST, NODES][:2] << 500 << status(500, "InternalError", "etcd is sad")

    start()
    await source.synced.wait()

    assert sink.calls.index(("mark_synced",)) > sink.calls.index(("replace", "Node"))
    assert sink.calls.count(("mark_synced",)) == 1
    report = source.status()
    assert report.retries == 2
    assert report.last_error is not None and "etcd is sad" in report.last_error
    await assert_matches_fresh_lists(server, sink)


async def test_watch_starts_from_the_list_resource_version(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    server[kmock.action.LIST, kmock.resource("v1", "pods")][:1] << {
        "kind": "PodList",
        "metadata": {"resourceVersion": "77"},
        "items": [pod("a", "5")],
    }
    start()
    await until(lambda: len(server[kmock.action.WATCH, kmock.resource("v1", "pods")]) > 0)

    watch = server[kmock.action.WATCH, kmock.resource("v1", "pods")][0]
    assert watch.params["resourceVersion"] == "77"
    assert watch.params["allowWatchBookmarks"] == "true"
    assert 300 <= int(watch.params["timeoutSeconds"]) < 600  # jittered: test_watch_timeout
    assert source.status().resource_versions["Pod"] == "77"


async def test_cancelling_run_stops_it(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    task = start()
    await source.synced.wait()

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
