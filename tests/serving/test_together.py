"""``serving.together``: tasks run side by side, one failing stops only itself, and on
cancellation they stop last first, each finished before the one before it is cancelled (the
extender's leader election releases its Lease once the writers have stopped)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from migfit import serving


async def test_tasks_stop_last_first_and_a_failure_stops_only_itself(
        caplog: pytest.LogCaptureFixture) -> None:
    events: list[str] = []
    started = asyncio.Event()

    def runs_until_cancelled(name: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            try:
                events.append(f"{name} started")
                if name == "writer":
                    started.set()
                await asyncio.Event().wait()
            finally:
                await asyncio.sleep(0.01)  # a last write, or the Lease's release
                events.append(f"{name} stopped")

        return run

    async def fails() -> None:
        raise RuntimeError("no answer")

    task = asyncio.create_task(serving.together([
        ("leader election", runs_until_cancelled("elector")), ("broken", fails),
        ("publisher", runs_until_cancelled("writer"))]))
    await started.wait()
    await asyncio.sleep(0.01)
    assert not task.done()  # the failure stopped only itself
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events == ["elector started", "writer started", "writer stopped", "elector stopped"]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "broken stopped: no answer"]
