"""Loading the credentials is retried: an exec plugin that fails once at start-up (its identity
provider out of reach) delays the first sync, it does not stop the source for good. Each
failure is one warning of migfit's naming the plugin; the client's own ERROR line, which
said the same thing again, is not shown."""

from __future__ import annotations

import pathlib
import sys

import kmock
import pytest

from migfit import watching

from .scenery import (
    RecordingSink,
    Start,
    assert_matches_fresh_lists,
    node,
    pod,
    store,
    until,
    write_kubeconfig,
)


@pytest.fixture()
def kubeconfig(server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> pathlib.Path:
    """Its user's exec plugin fails the first time it runs, and works from then on."""
    ran = tmp_path / "ran"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib, sys\n"
        f"ran = pathlib.Path({str(ran)!r})\n"
        "if not ran.exists():\n"
        "    ran.touch()\n"
        "    sys.exit('dial tcp: i/o timeout')\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1',\n"
        "  'kind': 'ExecCredential', 'status': {'token': 'from-exec'}}))\n")
    return write_kubeconfig(server, tmp_path / "kubeconfig", user=(
        "{exec: {apiVersion: client.authentication.k8s.io/v1beta1, "
        f'command: "{sys.executable}", args: ["{plugin}"], interactiveMode: Never}}}}'))


async def test_exec_plugin_failing_at_start_up_is_retried(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store(server, node("n1", "3"))
    store(server, pod("a", "5"))

    task = start()
    await until(lambda: source.synced.is_set() or task.done(), limit_s=10)

    assert not task.done()
    report = source.status()
    assert report.retries >= 1 and report.consecutive_failures == 0
    assert report.last_error is not None and report.last_error.startswith("connect: ")
    assert f"exec credential plugin {sys.executable}: process returned 1. dial tcp: i/o " \
        "timeout" in report.last_error
    assert not [r for r in caplog.records if r.name.startswith("kubernetes_asyncio")]
    assert server[kmock.action.LIST][0].headers["Authorization"] == "Bearer from-exec"
    await assert_matches_fresh_lists(server, sink)
