"""A list or watch answered 429 with Retry-After (API Priority and Fairness shedding load)
is tried again no sooner than the server asked, and never later than the backoff's cap."""

from __future__ import annotations

import time

import kmock
import pytest

from migfit import watching

from .scenery import PODS, RecordingSink, Start, node, pod, status, store, until

# A base far below the server's Retry-After: the gap measured is the server's, not the backoff.
QUICK = watching.WatchSettings(backoff_base_s=0.01, backoff_cap_s=5.0, read_timeout_s=5.0)
# A cap below the server's Retry-After: a server asking for an hour is not waited an hour.
CAPPED = watching.WatchSettings(backoff_base_s=0.01, backoff_cap_s=0.3, read_timeout_s=5.0)
TOO_MANY = status(429, "TooManyRequests", "too many requests, please try again later")


def _answer_429_once(server: kmock.KubernetesEmulator, action: kmock.action,
                     retry_after: str, stamps: list[float]) -> None:
    """The first ``action`` on pods is answered 429; every call is time-stamped."""
    server[action, PODS][:1] >> (lambda: stamps.append(time.monotonic())) << 429 \
        << kmock.headers({"Retry-After": retry_after}) << TOO_MANY
    server[action, PODS] >> (lambda: stamps.append(time.monotonic()))


@pytest.mark.parametrize("settings", [QUICK])
@pytest.mark.parametrize("action", [kmock.action.LIST, kmock.action.WATCH])
async def test_retry_waits_for_the_servers_retry_after(
    server: kmock.KubernetesEmulator, sink: RecordingSink,
    source: watching.KubernetesSource, start: Start, action: kmock.action,
) -> None:
    store(server, node("n1", "3"))
    store(server, pod("a", "5"))
    stamps: list[float] = []
    _answer_429_once(server, action, "1", stamps)

    start()
    await until(lambda: len(stamps) >= 2, limit_s=10)

    assert stamps[1] - stamps[0] >= 0.95  # the backoff alone: 5-10 ms
    await until(source.synced.is_set, limit_s=10)
    assert "429" in (source.status().last_error or "")
    assert [obj["metadata"]["name"] for obj in sink.objects["Pod"].values()] == ["a"]


@pytest.mark.parametrize("settings", [CAPPED])
async def test_retry_after_beyond_the_cap_waits_the_cap(
    server: kmock.KubernetesEmulator, source: watching.KubernetesSource, start: Start,
) -> None:
    store(server, pod("a", "5"))
    stamps: list[float] = []
    _answer_429_once(server, kmock.action.LIST, "3600", stamps)

    start()
    await until(lambda: len(stamps) >= 2, limit_s=10)

    assert 0.25 <= stamps[1] - stamps[0] < 2.0
