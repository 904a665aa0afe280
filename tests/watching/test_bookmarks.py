"""BOOKMARK events move the watch position and touch no object."""

from __future__ import annotations

import kmock

from migfit import watching

from .scenery import (
    PODS,
    RecordingSink,
    Start,
    assert_matches_fresh_lists,
    bookmark,
    pod,
    store,
    until,
)


async def test_bookmarks_move_the_resume_position(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    server[kmock.action.WATCH, PODS][:1] << (bookmark("50"), bookmark("60"))

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 2)

    assert server[kmock.action.WATCH, PODS][0].params["allowWatchBookmarks"] == "true"
    assert server[kmock.action.WATCH, PODS][1].params["resourceVersion"] == "60"
    assert [entry for entry in sink.applied if entry[0] == "Pod"] == []
    report = source.status()
    assert report.resource_versions["Pod"] == "60"
    assert report.relists == 0 and report.retries == 0
    await assert_matches_fresh_lists(server, sink)


async def test_an_older_bookmark_does_not_move_the_position_back(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    server[kmock.action.WATCH, PODS][:1] << (bookmark("90"), bookmark("100"), bookmark("95"))

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 2)

    assert server[kmock.action.WATCH, PODS][1].params["resourceVersion"] == "100"
    await assert_matches_fresh_lists(server, sink)
