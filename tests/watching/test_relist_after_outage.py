"""After 410 Gone the source re-lists at once: the backoff that failures accumulated while the
API server was down does not delay the re-list once the server answers (issue 12 item 8)."""

from __future__ import annotations

import time

import kmock
import pytest

from migfit import watching

from .scenery import PODS, RecordingSink, Start, pod, status, store, until

GONE = status(410, "Expired", "too old resource version: 5 (42)")
DOWN = status(503, "ServiceUnavailable", "etcd is down")


@pytest.fixture()
def settings() -> watching.WatchSettings:
    # Slow enough that sleeping out the outage's backoff (2-4 s after one failure) shows.
    return watching.WatchSettings(backoff_base_s=2.0, backoff_cap_s=30.0, read_timeout_s=5.0)


async def test_relist_follows_a_410_at_once_after_failures(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("p1", "5"))
    answered: list[float] = []
    server[kmock.action.WATCH, PODS][:1] << 503 << DOWN
    server[kmock.action.WATCH, PODS][1:2] >> (lambda: answered.append(time.monotonic())) \
        << 410 << GONE

    start()
    await until(lambda: sink.replaces("Pod") == 2, limit_s=10.0)
    relisted = time.monotonic()

    assert answered, "the second watch never got its 410"
    assert relisted - answered[0] < 1.0, f"re-listed {relisted - answered[0]:.2f}s after 410"
    assert source.status().relists == 1
    assert source.status().consecutive_failures == 0


async def test_410_right_after_a_relist_still_backs_off(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    # A server that answers every watch with 410 must not be re-listed in a hot loop.
    store(server, pod("p1", "5"))
    server[kmock.action.WATCH, PODS] << 410 << GONE

    start()
    began = time.monotonic()
    await until(lambda: sink.replaces("Pod") >= 3, limit_s=10.0)

    # The second expiry in a row waits backoff(0) = 1-2 s with these settings.
    assert time.monotonic() - began >= 0.9
