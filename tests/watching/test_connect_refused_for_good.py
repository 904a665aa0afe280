"""What no retry can mend stops the source at once, in one line that says what to change: a
context naming a cluster or user the kubeconfig lacks, an exec credential plugin that is not
installed, not executable, cannot be run or is malformed. Credentials that cannot be had now
are retried (test_connect_retried.py).

Before: every failure to connect was retried for ever (the webhook and ``extender
--no-publish`` served, never Ready), and a plugin that was not installed read "cannot load
kubeconfig ...: [Errno 2] No such file or directory", as if the kubeconfig were missing.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys

import kmock
import pytest

from migfit import errors, watching

from .scenery import FAST, RecordingSink, write_kubeconfig


def _exec(command: str, extra: str = "") -> str:
    return ("{exec: {apiVersion: client.authentication.k8s.io/v1beta1, "
            f"command: '{command}', args: [token]{extra}}}}}")


async def _refused(server: kmock.KubernetesEmulator, kubeconfig: pathlib.Path) -> str:
    source = watching.KubernetesSource(RecordingSink(), kubeconfig=kubeconfig, settings=FAST)
    with pytest.raises(errors.ConfigError) as caught:
        await asyncio.wait_for(source.run(), timeout=5)
    assert not source.synced.is_set()
    assert not server[kmock.action.LIST]  # nothing was asked of the API server
    message = str(caught.value)
    assert "\n" not in message
    return message


async def test_a_context_naming_a_cluster_it_lacks(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    path = write_kubeconfig(server, tmp_path / "kc", user="{token: t0k3n}",
                       context="{cluster: nope, user: tester}")
    message = await _refused(server, path)
    assert message == (f"cannot load kubeconfig {str(path)!r}: context kmock names cluster "
                       "'nope', which it does not have (it has: kmock); fix the context's "
                       "cluster or pass another --context NAME")


async def test_a_context_naming_a_user_it_lacks(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    path = write_kubeconfig(server, tmp_path / "kc", user="{token: t0k3n}",
                       context="{cluster: kmock, user: nobody}")
    assert "context kmock names user 'nobody', which it does not have (it has: tester)" in (
        await _refused(server, path))


async def test_an_exec_plugin_that_is_not_installed_is_named(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path,
        caplog: pytest.LogCaptureFixture) -> None:
    missing = tmp_path / "bin" / "aws-iam-authenticator"
    path = write_kubeconfig(server, tmp_path / "kc", user=_exec(str(missing)))
    message = await _refused(server, path)
    assert message == (f"cannot load kubeconfig {str(path)!r}: user tester: exec credential "
                       f"plugin {missing}: not found; install it or fix the kubeconfig user's "
                       "exec.command")
    assert "No such file or directory" not in message
    # A bare name is looked up in the PATH the plugin would get (exec env over ours).
    path = write_kubeconfig(server, tmp_path / "kc2", user=_exec(
        "kubelogin", f", env: [{{name: PATH, value: '{tmp_path}'}}]"))
    assert "exec credential plugin kubelogin: not found in PATH" in (
        await _refused(server, path))
    assert not [r for r in caplog.records if r.name.startswith("kubernetes_asyncio")]


async def test_an_exec_plugin_that_cannot_be_run(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    plain = tmp_path / "plugin"
    plain.write_text("#!/bin/sh\necho {}\n")
    plain.chmod(0o644)
    path = write_kubeconfig(server, tmp_path / "kc", user=_exec(str(plain)))
    assert f"exec credential plugin {plain}: not executable; make it runnable" in (
        await _refused(server, path))
    # Executable but no program (no #! line): found, then refused by the kernel when run.
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00\x01not a program\n")
    garbage.chmod(0o755)
    path = write_kubeconfig(server, tmp_path / "kc2", user=_exec(str(garbage)))
    message = await _refused(server, path)
    assert f"exec credential plugin {garbage}: cannot be run (Exec format error)" in message


async def test_a_malformed_exec_section(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    path = write_kubeconfig(server, tmp_path / "kc",
                       user=f"{{exec: {{command: '{sys.executable}'}}}}")
    assert f"exec credential plugin {sys.executable}: no apiVersion" in (
        await _refused(server, path))
    assert os.access(sys.executable, os.X_OK)
