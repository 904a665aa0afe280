"""A leader that stops releases the Lease (as client-go's ReleaseOnCancel), so that another
replica takes over at its next try instead of a whole lease duration later: the elector's run
cancelled, and ``migfit extender`` stopped by SIGTERM (kmock)."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import socket
import sys
import time
from typing import Any

import kmock
import pytest
from kubernetes_asyncio import client as k8s
from migmanager_sim import HandClock as Clock
from migmanager_sim import VersionedEmulator

from migfit.extender import leader

LEASES = kmock.resource("coordination.k8s.io", "v1", "leases")
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/pods", "v1/nodes", "v1/events", "v1/configmaps",
                "coordination.k8s.io/v1/leases"):
        kmock.resources[res] = {}  # type: ignore[assignment]
    return kmock


def _lease(server: kmock.KubernetesEmulator) -> dict[str, Any] | None:
    try:
        raw: dict[str, Any] = server.objects[LEASES, "default", leader.DEFAULT_LEASE].raw
    except KeyError:
        return None
    return raw


def _free(server: kmock.KubernetesEmulator) -> None:
    """A Lease nobody holds, as the API server stores it (with a resourceVersion, which
    kmock adds to updates only)."""
    server.objects[LEASES, "default", leader.DEFAULT_LEASE] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": leader.DEFAULT_LEASE, "namespace": "default",
                     "resourceVersion": "7"},
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 15, "leaseTransitions": 0}}


def _elector(api: k8s.ApiClient, identity: str, clock: Clock) -> leader.LeaseElector:
    return leader.LeaseElector(api, namespace="default", identity=identity, lease_s=15.0,
                               renew_s=5.0, clock=clock)


async def _run_then_cancel(elector: leader.LeaseElector) -> None:
    task = asyncio.create_task(elector.run())
    while not elector.is_leader:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_leader_that_stops_releases_the_lease(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    _free(server)
    clock = Clock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    await _run_then_cancel(a)
    assert not a.is_leader
    lease = _lease(server)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == ""
    assert lease["spec"]["leaseDurationSeconds"] == 1
    # b takes it at its first try: no lease duration to wait (the clock has not moved).
    assert await b.try_acquire() and b.is_leader
    assert _lease(server)["spec"]["holderIdentity"] == "b"  # type: ignore[index]
    assert _lease(server)["spec"]["leaseTransitions"] == 2  # type: ignore[index]


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_replica_that_does_not_hold_the_lease_releases_nothing(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    _free(server)
    clock = Clock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert await a.try_acquire()
    await _run_then_cancel_follower(b)
    assert _lease(server)["spec"]["holderIdentity"] == "a"  # type: ignore[index]
    assert a.is_leader and await a.try_acquire()


async def _run_then_cancel_follower(elector: leader.LeaseElector) -> None:
    task = asyncio.create_task(elector.run())
    await asyncio.sleep(0.3)  # its first round has seen another holder
    assert not elector.is_leader
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_release_after_another_took_over_changes_nothing(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    """The release is conditional on this replica's last write: a Lease someone else wrote
    since (a took too long to stop) is not cleared."""
    _free(server)
    clock = Clock()
    a = _elector(api, "a", clock)
    assert await a.try_acquire()
    server.race(LEASES, "default", leader.DEFAULT_LEASE, {"spec": {"holderIdentity": "b"}})
    await a.release()
    assert not a.is_leader
    assert _lease(server)["spec"]["holderIdentity"] == "b"  # type: ignore[index]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kubeconfig(server: kmock.KubernetesEmulator, path: pathlib.Path) -> str:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": str(server.url).rstrip("/")}}],
        "users": [{"name": "tester", "user": {"token": "t0k3n"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "tester"}}],
        "current-context": "kmock",
    }))
    return str(path)


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_the_extender_releases_the_lease_on_sigterm(
        server: VersionedEmulator, tmp_path: pathlib.Path) -> None:
    """SIGTERM: drain, stop the writers, then the elector's release, before the process
    exits (the API client is closed only after it)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env.update(HOME=str(tmp_path), POD_NAME="replica-a")
    _free(server)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "migfit.cli", "extender", "--host", "127.0.0.1",
        "--port", str(_free_port()), "--kubeconfig", _kubeconfig(server, tmp_path / "kc"),
        "--grace", "0", "--drain-delay", "0.2", "--log-level", "info",
        "--lease-namespace", "default", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while ((_lease(server) or {}).get("spec", {}).get("holderIdentity") != "replica-a"
               and time.monotonic() < deadline):
            await asyncio.sleep(0.1)
        assert _lease(server)["spec"]["holderIdentity"] == "replica-a"  # type: ignore[index]
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    spec = _lease(server)["spec"]  # type: ignore[index]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1, err.decode()
    assert b"released lease" in err and b"Traceback" not in err, err.decode()
