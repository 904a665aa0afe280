"""A 401 renews the credentials before the source tries again: an exec plugin runs again
although its token has not expired (the server may have revoked it), and a kubeconfig
tokenFile (a service-account token the kubelet rotates) is read again."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import sys
from collections.abc import AsyncIterator

import kmock

from migfit import watching

from .scenery import (
    FAST,
    RecordingSink,
    assert_matches_fresh_lists,
    node,
    pod,
    status,
    store,
    until,
    write_kubeconfig,
)

REFUSED = status(401, "Unauthorized", "Unauthorized")


def kubeconfig(server: kmock.KubernetesEmulator, path: pathlib.Path, user: str) -> pathlib.Path:
    return write_kubeconfig(server, path, user=user)


@contextlib.asynccontextmanager
async def running(source: watching.KubernetesSource) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(source.run())
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def sent(server: kmock.KubernetesEmulator) -> list[str]:
    return [request.headers.get("Authorization", "") for request in server]


async def test_exec_plugin_runs_again_after_a_401(
    server: kmock.KubernetesEmulator, sink: RecordingSink, tmp_path: pathlib.Path
) -> None:
    store(server, node("n1", "3"))
    store(server, pod("a", "5"))
    runs = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    # Token exec-N on the Nth run, each valid for an hour.
    plugin.write_text(
        "import datetime, json, pathlib\n"
        f"runs = pathlib.Path({str(runs)!r})\n"
        "n = int(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text(str(n))\n"
        "later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1',\n"
        "  'kind': 'ExecCredential', 'status': {'token': f'exec-{n}',\n"
        "  'expirationTimestamp': later.strftime('%Y-%m-%dT%H:%M:%SZ')}}))\n")
    config = kubeconfig(
        server, tmp_path / "kubeconfig",
        f'{{exec: {{apiVersion: client.authentication.k8s.io/v1beta1, '
        f'command: "{sys.executable}", args: ["{plugin}"], interactiveMode: Never}}}}')
    # The server has revoked the first token long before its expiry.
    server[kmock.headers({"Authorization": "Bearer exec-1"})] << 401 << REFUSED
    source = watching.KubernetesSource(sink, kubeconfig=config, settings=FAST)

    async with running(source) as task:
        await until(lambda: source.synced.is_set() or task.done(), limit_s=10)

    assert source.synced.is_set()
    assert "Bearer exec-1" in sent(server) and "Bearer exec-2" in sent(server)
    # Both lists were refused, the plugin ran again once: the second 401 found it renewed.
    assert runs.read_text() == "2"
    await assert_matches_fresh_lists(server, sink)


async def test_token_file_is_read_again_after_a_401(
    server: kmock.KubernetesEmulator, sink: RecordingSink, tmp_path: pathlib.Path
) -> None:
    store(server, node("n1", "3"))
    store(server, pod("a", "5"))
    token = tmp_path / "token"
    token.write_text("old")
    config = kubeconfig(server, tmp_path / "kubeconfig", f'{{tokenFile: "{token}"}}')
    # The old token has expired; the kubelet writes the new one a moment later.
    server[kmock.headers({"Authorization": "Bearer old"})] << 401 << REFUSED
    source = watching.KubernetesSource(sink, kubeconfig=config, settings=FAST)

    async with running(source) as task:
        await until(lambda: "Bearer old" in sent(server))
        token.write_text("rotated")
        await until(lambda: source.synced.is_set() or task.done(), limit_s=10)

    assert source.synced.is_set()
    assert "Bearer rotated" in sent(server)
    await assert_matches_fresh_lists(server, sink)
