"""A Lease write whose answer is lost: the client retries it with the resourceVersion it has
itself replaced and gets 409 Conflict; the replica goes on leading when the Lease, read again,
names it, and stops only when it names another (kmock, a clock moved by hand)."""

from __future__ import annotations

from typing import Any

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
    return kmock


def _hold(server: kmock.KubernetesEmulator, holder: str, *, rv: str) -> None:
    server.objects[LEASES, "default", leader.DEFAULT_LEASE] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": leader.DEFAULT_LEASE, "namespace": "default",
                     "resourceVersion": rv},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                 "leaseTransitions": 2}}


def _stored(server: kmock.KubernetesEmulator) -> dict[str, Any]:
    spec: dict[str, Any] = server.objects[LEASES, "default", leader.DEFAULT_LEASE].raw["spec"]
    return spec


def _elector(api: k8s.ApiClient, identity: str, clock: Clock) -> leader.LeaseElector:
    return leader.LeaseElector(api, namespace="default", identity=identity, lease_s=15.0,
                               renew_s=5.0, clock=clock)


def _lost_answer(server: VersionedEmulator) -> None:
    """The next Lease write reaches the store, and its answer is lost on the way back (a
    proxy's 504): the client retries it as it was sent."""
    server.fail(LEASES, leader.DEFAULT_LEASE, lambda data: True, status=504, after_write=True)


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_renewal_whose_answer_is_lost_keeps_the_lease(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    _hold(server, "a", rv="7")
    clock = Clock()
    a = _elector(api, "a", clock)
    assert await a.try_acquire()
    a.changed.clear()
    clock.t += 5
    _lost_answer(server)
    assert await a.try_acquire() and a.is_leader  # was: False, the Lease given up
    assert not a.changed.is_set()  # no lost-then-regained flap for the publisher/applier
    clock.t += 12  # the renewal counts: valid past the first term (5000 + 15)
    assert a.is_leader
    assert _stored(server)["holderIdentity"] == "a"
    assert _stored(server)["leaseTransitions"] == 2


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_takeover_whose_answer_is_lost_is_held(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    _hold(server, "gone", rv="7")
    clock = Clock()
    b = _elector(api, "b", clock)
    assert not await b.try_acquire()
    clock.t += 15.1  # "gone" renewed nothing for a lease duration
    _lost_answer(server)
    assert await b.try_acquire() and b.is_leader
    spec = _stored(server)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 3


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_conflict_with_another_holder_is_still_a_loss(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    _hold(server, "a", rv="7")
    clock = Clock()
    a = _elector(api, "a", clock)
    assert await a.try_acquire()
    clock.t += 5
    # Between a's read and its write, b takes the Lease: a's write is answered 409.
    server.race(LEASES, "default", leader.DEFAULT_LEASE,
                {"spec": {"holderIdentity": "b", "renewTime": "2030-01-01T00:00:00.000000Z"}})
    assert not await a.try_acquire() and not a.is_leader
    assert _stored(server)["holderIdentity"] == "b"
