"""Every async test here runs on both event loops the servers may use: asyncio's (its TLS in
Python, ``SmallBufferTLS``) and uvloop's (its TLS in C, behind ``serving._Acceptor``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop


def pytest_asyncio_loop_factories(
        config: pytest.Config, item: pytest.Item,
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
