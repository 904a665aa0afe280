"""Lease expiry judged by this replica's monotonic clock, not the holder's wall clock (kmock)."""

from __future__ import annotations

import re
from typing import Any

import kmock
import pytest
from kubernetes_asyncio import client as k8s
from migmanager_sim import HandClock as Clock

from migfit.extender import leader

LEASES = kmock.resource("coordination.k8s.io", "v1", "leases")
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    kmock.resources["coordination.k8s.io/v1/leases"] = {}  # type: ignore[assignment]
    return kmock


def _hold(server: kmock.KubernetesEmulator, *, renew: str, rv: str) -> None:
    """Holder "a" (re)writes the Lease with its own idea of the time."""
    server.objects[LEASES, "default", leader.DEFAULT_LEASE] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": leader.DEFAULT_LEASE, "namespace": "default",
                     "resourceVersion": rv},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": renew,
                 "renewTime": renew, "leaseTransitions": 3}}


def _stored(server: kmock.KubernetesEmulator) -> dict[str, Any]:
    spec: dict[str, Any] = server.objects[LEASES, "default", leader.DEFAULT_LEASE].raw["spec"]
    return spec


def _elector(api: k8s.ApiClient, clock: Clock) -> leader.LeaseElector:
    return leader.LeaseElector(api, namespace="default", identity="b", lease_s=15.0,
                               renew_s=5.0, clock=clock)


async def test_a_holder_whose_clock_is_behind_keeps_its_lease_for_the_duration(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    # By b's wall clock, a's renewTime is 25 years old; a renewed just now by its own clock.
    _hold(server, renew="2001-01-01T00:00:00.000000Z", rv="7")
    clock = Clock()
    b = _elector(api, clock)
    assert not await b.try_acquire()
    clock.t += 14.9
    assert not await b.try_acquire() and _stored(server)["holderIdentity"] == "a"
    clock.t += 0.2  # 15 s without a change seen by b: expired
    assert await b.try_acquire() and b.is_leader
    spec = _stored(server)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 4
    assert MICRO.match(spec["renewTime"]) and MICRO.match(spec["acquireTime"])


async def test_a_holder_whose_clock_is_ahead_loses_its_lease_once_it_stops_renewing(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    clock = Clock()
    b = _elector(api, clock)
    for i in range(6):  # a renews every 10 s (b's clock): held, though 60 s pass
        _hold(server, renew=f"2100-01-01T00:00:{i:02d}.000000Z", rv=str(10 + i))
        assert not await b.try_acquire()
        clock.t += 10
    # a stops renewing; its renewTime stays 75 years in b's future.
    clock.t += 5
    assert await b.try_acquire()
    assert _stored(server)["holderIdentity"] == "b"


async def test_the_holder_renews_and_keeps_leading(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    clock = Clock()
    b = _elector(api, clock)
    assert await b.try_acquire()  # created
    first = _stored(server)["renewTime"]
    clock.t += 10
    assert b.is_leader and await b.try_acquire()
    clock.t += 10
    assert b.is_leader
    spec = _stored(server)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 0
    assert MICRO.match(spec["renewTime"]) and spec["renewTime"] >= first
