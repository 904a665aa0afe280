"""Each watch asks the server for its own timeoutSeconds, at random from the setting to twice
it, so that replicas' watches do not all end and re-open at the same moment."""

from __future__ import annotations

import kmock

from migfit import watching

from .scenery import PODS, RecordingSink, Start, bookmark, pod, store, until


async def test_every_watch_asks_a_jittered_timeout(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, pod("a", "5"))
    # Streams that end at once, as at their timeout: the source watches again each time.
    server[kmock.action.WATCH, PODS][:8] << (bookmark("5"),)

    start()
    await until(lambda: len(server[kmock.action.WATCH, PODS]) >= 8)

    timeouts = [int(w.params["timeoutSeconds"]) for w in server[kmock.action.WATCH, PODS]]
    assert all(300 <= timeout < 600 for timeout in timeouts), timeouts
    assert len(set(timeouts)) > 1, timeouts  # 8 draws from 300 values: never all equal
    assert source.status().consecutive_failures == 0
