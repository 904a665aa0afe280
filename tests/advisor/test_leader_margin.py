"""A leader stops acting a margin before its Lease may expire for a follower, so that a write
it begins just before the end still lands first, and one failed renewal does not end its term
(kmock, a clock moved by hand)."""

from __future__ import annotations

import kmock
import pytest
from kubernetes_asyncio import client as k8s
from migmanager_sim import HandClock as Clock
from migmanager_sim import VersionedEmulator

from migfit.extender import leader

LEASES = kmock.resource("coordination.k8s.io", "v1", "leases")


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    kmock.resources["coordination.k8s.io/v1/leases"] = {}  # type: ignore[assignment]
    server = kmock
    server.objects[LEASES, "default", leader.DEFAULT_LEASE] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": leader.DEFAULT_LEASE, "namespace": "default",
                     "resourceVersion": "7"},
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 15, "leaseTransitions": 0}}
    return server


def _elector(api: k8s.ApiClient, identity: str, clock: Clock) -> leader.LeaseElector:
    return leader.LeaseElector(api, namespace="default", identity=identity, lease_s=15.0,
                               renew_s=5.0, clock=clock)


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_leader_stops_acting_before_a_follower_may_take_over(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    clock = Clock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert await a.try_acquire()
    assert not await b.try_acquire()  # b sees a's write at once: the earliest it can
    clock.t += 14.5  # a has not renewed since (hung, or cut off from the API server)
    # Before, a still led here: a write it began now would land after b took over, 0.5 s on.
    assert not a.is_leader
    assert not await b.try_acquire()
    clock.t += 0.6
    assert await b.try_acquire()


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_one_failed_renewal_does_not_end_the_term(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    clock = Clock()
    a = _elector(api, "a", clock)
    assert await a.try_acquire()
    a.changed.clear()
    clock.t += 5
    # Every try of this renewal (the client's retries included) is refused.
    server.fail(LEASES, leader.DEFAULT_LEASE, lambda data: True, status=503, times=3)
    assert await a.try_acquire()  # still within its term
    clock.t += 5.5  # the next renewal, a little late
    assert a.is_leader
    assert await a.try_acquire() and not a.changed.is_set()
