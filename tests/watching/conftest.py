"""Fixtures for the watch source: kmock's Kubernetes emulator, a kubeconfig, a recording sink."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator, Callable

import kmock
import pytest

from migfit import watching

from .scenery import FAST, RecordingSink, write_kubeconfig


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    kmock.resources["v1/pods"] = {}
    kmock.resources["v1/nodes"] = {}
    return kmock


@pytest.fixture()
def kubeconfig(server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> pathlib.Path:
    return write_kubeconfig(server, tmp_path / "kubeconfig")


@pytest.fixture()
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture()
def settings() -> watching.WatchSettings:
    return FAST


@pytest.fixture()
def context() -> str | None:
    return None


@pytest.fixture()
def source(
    sink: RecordingSink,
    kubeconfig: pathlib.Path,
    context: str | None,
    settings: watching.WatchSettings,
) -> watching.KubernetesSource:
    return watching.KubernetesSource(
        sink, kubeconfig=kubeconfig, context=context, settings=settings
    )


@pytest.fixture()
async def start(
    source: watching.KubernetesSource,
) -> AsyncIterator[Callable[[], asyncio.Task[None]]]:
    """Start the source once the test has scripted the server; stop it after the test."""
    tasks: list[asyncio.Task[None]] = []

    def starter() -> asyncio.Task[None]:
        tasks.append(asyncio.create_task(source.run()))
        return tasks[-1]

    yield starter
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
