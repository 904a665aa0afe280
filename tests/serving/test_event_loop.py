"""The servers' event loop: uvloop by default, asyncio's on request, a clear error otherwise."""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest
import uvloop

from migfit import errors, serving, snapshots


def test_uvloop_by_default_and_asyncio_on_request() -> None:
    assert serving.loop_factory("") is uvloop.new_event_loop
    assert serving.loop_factory("uvloop") is uvloop.new_event_loop
    assert serving.loop_factory("asyncio") is None
    assert serving.loop_factory(" AsyncIO ") is None


def test_run_uses_the_chosen_loop() -> None:
    async def kind() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert serving.run(kind()).startswith("uvloop")


def test_an_unknown_loop_is_a_usage_error_naming_the_choices() -> None:
    with pytest.raises(errors.UsageError, match="use uvloop or asyncio"):
        serving.loop_factory("trio")


def test_the_cli_refuses_an_unknown_loop_with_one_line() -> None:
    env = dict(os.environ, MIGFIT_EVENT_LOOP="tokio")
    done = subprocess.run(["migfit", "extender", "--cluster", str(snapshots.EXAMPLE_CLUSTER),
                           "--host", "127.0.0.1", "--port", "18999"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "MIGFIT_EVENT_LOOP='tokio': use uvloop or asyncio" in done.stderr
    assert "Traceback" not in done.stderr
