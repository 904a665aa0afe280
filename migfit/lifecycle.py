"""Process lifecycle shared by the servers: stop cleanly on SIGTERM (Kubernetes) and SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM or SIGINT while the block runs (the running loop's handlers).

    Where signal handlers cannot be installed (not the main thread, another platform) the
    block runs without them and ``stop`` is set only by its owner.
    """
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
