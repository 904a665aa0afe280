"""410 Gone, as an HTTP status or as an ERROR event, makes the source list again; objects
missing from the new list leave the sink."""

from __future__ import annotations

from typing import Any

import kmock
import pytest

from migfit import watching

from .scenery import (
    PODS,
    RecordingSink,
    Start,
    assert_matches_fresh_lists,
    event,
    forget,
    pod,
    status,
    store,
    until,
)

GONE = status(410, "Expired", "too old resource version: 5 (42)")


def change_behind_the_watch(server: kmock.KubernetesEmulator) -> None:
    # What happened while the watch was away: one pod gone, one new, one changed,
    # none of it ever sent as an event.
    forget(server, pod("gone", "5"))
    store(server, pod("new", "40"))
    store(server, pod("kept", "41", nodeName="n1"))


def stored_pods(server: kmock.KubernetesEmulator) -> None:
    store(server, pod("gone", "5"))
    store(server, pod("kept", "6"))


async def relisted(source: watching.KubernetesSource, sink: RecordingSink) -> None:
    await until(lambda: sink.replaces("Pod") == 2)
    assert source.status().relists == 1
    assert "uid-default-gone" not in sink.objects["Pod"]


async def test_http_410_on_watch(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    stored_pods(server)
    server[kmock.action.WATCH, PODS][:1] >> (lambda: change_behind_the_watch(server)) << 410 << GONE

    start()
    await relisted(source, sink)

    await assert_matches_fresh_lists(server, sink)
    assert sink.calls.count(("mark_synced",)) == 1


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(GONE, id="code-410"),
        pytest.param(
            {"kind": "Status", "message": "too old resource version: 5 (42)"}, id="message"
        ),
        pytest.param({"kind": "Status", "reason": "Expired", "message": "gone"}, id="reason"),
    ],
)
async def test_error_event_410_mid_stream(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
    error: dict[str, Any],
) -> None:
    stored_pods(server)
    server[kmock.action.WATCH, PODS][:1] >> (lambda: change_behind_the_watch(server)) << (
        event("ERROR", error),
        # Never read: the source re-lists as soon as it sees the expiry.
        event("ADDED", pod("ghost", "43")),
    )

    start()
    await relisted(source, sink)

    await assert_matches_fresh_lists(server, sink)
    assert ("Pod", "ADDED", "ghost", "43") not in sink.applied


async def test_410_on_a_continue_token_restarts_the_list(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    stored_pods(server)
    first_page = {
        "kind": "PodList",
        "metadata": {"resourceVersion": "7", "continue": "token-1"},
        "items": [pod("gone", "5")],
    }
    server[kmock.action.LIST, PODS, {"continue": "token-1"}][:1] << 410 << GONE
    server[kmock.action.LIST, PODS][:1] << first_page

    start()
    await source.synced.wait()

    lists = server[kmock.action.LIST, PODS]
    assert [request.params.get("continue") for request in lists][:3] == [None, "token-1", None]
    assert source.status().relists == 1
    assert sink.replaces("Pod") == 1
    await assert_matches_fresh_lists(server, sink)


async def test_every_410_relists_again(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    stored_pods(server)
    server[kmock.action.WATCH, PODS][:3] << 410 << GONE

    start()
    await until(lambda: sink.replaces("Pod") == 4)

    assert source.status().relists == 3
    await assert_matches_fresh_lists(server, sink)
