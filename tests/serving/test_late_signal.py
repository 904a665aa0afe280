"""A stop signal that comes after a signal-started shutdown has finished, while the process is
torn down, exits at once: one log line, ``before_exit`` run (``migfit serve`` removes its
throwaway key's folder there), exit status 128 + the signal's number, no traceback.

Before: leaving ``on_signals`` gave the signal back to Python's default handler, so under
asyncio's loop a KeyboardInterrupt was raised wherever the teardown was (a traceback, and
``before_exit`` never ran), and under uvloop's the process was ended by the signal itself,
with no line. The window is short in the real commands (the rest of the shutdown), so the
script below widens it: it stops through a real SIGINT, leaves the block, and signals again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from migfit import serving

SCRIPT = textwrap.dedent("""
    import asyncio, logging, os, signal, sys
    from migfit import serving

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    SIG = signal.Signals[sys.argv[1]]

    async def main() -> None:
        stop, hurry = asyncio.Event(), asyncio.Event()
        with serving.on_signals(stop, hurry, before_exit=lambda: print("cleaned up", flush=True)):
            os.kill(os.getpid(), SIG)  # the first signal: a graceful shutdown
            await stop.wait()
        print("shutdown finished", flush=True)
        os.kill(os.getpid(), SIG)  # after the block, while the rest is torn down
        await asyncio.sleep(5)
        print("still running", flush=True)

    serving.run(main())
""")


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_after_the_shutdown_exits_at_once_after_cleaning_up(
        loop: str, sig: signal.Signals) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, sig.name], capture_output=True, text=True, timeout=60,
        env={**os.environ, serving.EVENT_LOOP_ENV: loop, "PYTHONUNBUFFERED": "1"})
    output = done.stdout + done.stderr
    assert done.returncode == 128 + sig, output
    assert "shutdown finished" in output and "still running" not in output, output
    assert "cleaned up" in done.stdout, output
    assert f"WARNING {sig.name} after the shutdown: exiting now" in done.stderr, output
    assert "Traceback" not in output, output


def test_a_shutdown_not_started_by_a_signal_leaves_the_default_handlers() -> None:
    """A server stopped by its owner (tests, embedding code) changes no process-wide handler."""
    script = textwrap.dedent("""
        import asyncio, signal
        from migfit import serving

        async def main() -> None:
            stop, hurry = asyncio.Event(), asyncio.Event()
            with serving.on_signals(stop, hurry, before_exit=lambda: None):
                stop.set()
        serving.run(main())
        print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,
              signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
    """)
    for loop in ("asyncio", "uvloop"):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=60, env={**os.environ, serving.EVENT_LOOP_ENV: loop})
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["True", "True"], (loop, done.stdout, done.stderr)
