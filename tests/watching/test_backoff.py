"""Retry delays grow exponentially from the base, are jittered, and stop at the cap."""

from __future__ import annotations

import pytest

from migfit import watching


@pytest.mark.parametrize("attempt", range(12))
def test_delay_is_jittered_within_the_exponential_ceiling(attempt: int) -> None:
    settings = watching.WatchSettings(backoff_base_s=0.5, backoff_cap_s=30.0)
    ceiling = min(30.0, 0.5 * 2**attempt)

    delays = {settings.backoff(attempt) for _ in range(50)}

    assert all(ceiling / 2 <= delay <= ceiling for delay in delays)
    assert len(delays) > 1  # jittered, so replicas do not retry in lockstep


def test_delay_never_exceeds_the_cap_however_many_attempts() -> None:
    settings = watching.WatchSettings(backoff_base_s=0.5, backoff_cap_s=30.0)

    assert all(settings.backoff(attempt) <= 30.0 for attempt in (40, 1000, 10**6))
