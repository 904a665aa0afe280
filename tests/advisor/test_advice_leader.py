"""Only the replica holding the Lease publishes the advice (node marks and Events), and a new
leader writes no Event its predecessor wrote (kmock, electors on a clock moved by hand)."""

from __future__ import annotations

import json
from typing import Any

import kmock
import pytest
from kubernetes_asyncio import client as k8s
from migmanager_sim import (
    NODES,
    PODS,
    HandClock,
    VersionedEmulator,
    advice_cache,
    events,
    read_node,
    seed,
    sets_label,
    snapshot,
    store,
)

from migfit.extender import advice, leader

Clock = HandClock
LEASE_S = 15.0


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/pods", "v1/nodes", "v1/events", "coordination.k8s.io/v1/leases"):
        kmock.resources[res] = {}  # type: ignore[assignment]
    return kmock


def _elector(api: k8s.ApiClient, identity: str, clock: Clock) -> leader.LeaseElector:
    return leader.LeaseElector(api, namespace="default", identity=identity, lease_s=LEASE_S,
                               renew_s=5.0, clock=clock)


async def _publisher(api: k8s.ApiClient,
                     elector: leader.LeaseElector | None) -> advice.Publisher:
    return advice.Publisher(await snapshot(api), api, cache=advice_cache(), elector=elector)


async def _pass(pub: advice.Publisher, api: k8s.ApiClient) -> None:
    """One publishing pass over what the API holds now (a synced watch's view)."""
    pub.state = await snapshot(api)
    await pub.publish_once()


def _written(found: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return sorted((e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"])
                  for e in found)


ONE_EACH = [("Node", "idle", advice.REASON_NODE), ("Pod", "small", advice.REASON_POD)]


async def _marked(api: k8s.ApiClient) -> bool:
    obj = await read_node(api, "idle")
    return (obj["metadata"].get("labels", {}).get(advice.LABEL) == "true"
            and advice.ANNOTATION in obj["metadata"].get("annotations", {}))


async def test_only_the_lease_holder_publishes(server: kmock.KubernetesEmulator,
                                               api: k8s.ApiClient) -> None:
    seed(server)
    clock = Clock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert await a.try_acquire() and not await b.try_acquire()
    pub_a, pub_b = await _publisher(api, a), await _publisher(api, b)
    await pub_b.publish_once()  # the follower computes the advice and writes nothing
    assert await events(api) == [] and not await _marked(api)
    for _ in range(2):
        await pub_a.publish_once()
        await pub_b.publish_once()
    assert _written(await events(api)) == ONE_EACH
    assert await _marked(api)


async def test_a_second_replica_writes_no_event_twice(server: kmock.KubernetesEmulator,
                                                      api: k8s.ApiClient) -> None:
    """The advice's Events are named by what they say: the same Event written by another
    replica (or by this one before a restart) is refused with 409 AlreadyExists, which counts
    as sent; before, each replica named its Events at random and remembered only its own."""
    seed(server)
    # No elector: the two publish as every replica did before.
    first = advice.Publisher(await snapshot(api), api, cache=advice_cache())
    second = advice.Publisher(await snapshot(api), api, cache=advice_cache())
    await first.publish_once()
    await second.publish_once()
    await second.publish_once()
    found = await events(api)
    assert _written(found) == ONE_EACH
    (pod_event,) = [e for e in found if e["reason"] == advice.REASON_POD]
    assert pod_event["metadata"]["name"].startswith("small.")
    assert pod_event["involvedObject"]["namespace"] == "ml"


async def test_a_new_leader_sends_no_event_its_predecessor_sent(
        server: kmock.KubernetesEmulator, api: k8s.ApiClient) -> None:
    seed(server)
    clock = Clock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert await a.try_acquire() and not await b.try_acquire()
    pub_a, pub_b = await _publisher(api, a), await _publisher(api, b)
    await pub_a.publish_once()
    before = await events(api)
    assert _written(before) == ONE_EACH
    # a stops renewing (hung, or partitioned from the API server): b takes over once a whole
    # lease duration passes with no renewal seen, and a stops calling itself leader by then.
    clock.t += LEASE_S + 0.1
    assert not a.is_leader
    assert await b.try_acquire()
    await pub_b.publish_once()
    await pub_a.publish_once()
    after = await events(api)
    assert sorted(e["metadata"]["name"] for e in after) == \
        sorted(e["metadata"]["name"] for e in before)


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_replica_that_loses_the_lease_mid_pass_writes_no_more(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    seed(server)
    clock = Clock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert await a.try_acquire() and not await b.try_acquire()

    def stall() -> None:  # a's pass takes longer than its Lease, while b waits
        clock.t += LEASE_S + 0.1

    server.after(NODES, "idle", sets_label(advice.LABEL), stall)
    pub_a = await _publisher(api, a)
    await pub_a.publish_once()
    assert await _marked(api)  # written while a still held the Lease
    assert await events(api) == []  # the Events came after: not written
    assert await b.try_acquire()
    await _pass(await _publisher(api, b), api)
    assert _written(await events(api)) == ONE_EACH


async def test_a_replica_leading_again_rewrites_marks_another_leader_removed(
        server: kmock.KubernetesEmulator, api: k8s.ApiClient) -> None:
    """What a replica wrote in an earlier term is no reason to skip a write: meanwhile another
    leader may have removed it."""
    seed(server)
    clock = Clock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert await a.try_acquire() and not await b.try_acquire()
    pub_a, pub_b = await _publisher(api, a), await _publisher(api, b)
    await _pass(pub_a, api)
    assert await _marked(api)
    clock.t += LEASE_S + 0.1
    assert await b.try_acquire()
    assert not await a.try_acquire()  # a sees b's Lease
    waiting = server.objects[PODS, "ml", "small"].raw
    server.objects[PODS, "ml", "small"].delete()
    await _pass(pub_b, api)  # the pod has gone: b removes the marks
    assert not await _marked(api)
    store(server, json.loads(json.dumps(waiting)))  # it comes back
    await _pass(pub_a, api)  # a follows: nothing
    assert not await _marked(api)
    clock.t += LEASE_S + 0.1  # b stops renewing: a leads again
    assert await a.try_acquire()
    await _pass(pub_a, api)
    assert await _marked(api)


def test_event_names_are_valid_for_the_longest_object_names() -> None:
    name = "n" * 250 + "-.x"
    made = advice.event_name(kind="Node", name=name, namespace="", uid=None,
                             reason=advice.REASON_NODE, message="m")
    assert len(made) <= 253 and made.startswith("n") and "-." not in made
    assert made == advice.event_name(kind="Node", name=name, namespace="", uid=None,
                                     reason=advice.REASON_NODE, message="m")
    assert made != advice.event_name(kind="Node", name=name, namespace="", uid=None,
                                     reason=advice.REASON_NODE, message="other")


async def test_an_event_deleted_by_its_ttl_is_sent_again_while_still_true(
        server: kmock.KubernetesEmulator, api: k8s.ApiClient) -> None:
    """kube-apiserver deletes Events after --event-ttl (an hour by default): a pod still
    waiting gets its Event again after EVENT_REFRESH_S (an outside check: the publisher
    remembered every Event it ever sent, and a pod waiting for hours showed nothing)."""
    seed(server)
    clock = Clock()
    pub = advice.Publisher(await snapshot(api), api, cache=advice_cache(), clock=clock)
    await pub.publish_once()
    assert _written(await events(api)) == ONE_EACH
    for key in [k for k in server.objects if k[0] == kmock.resource("", "v1", "events")]:
        del server.objects[key]  # the TTL
    clock.t += advice.EVENT_REFRESH_S - 1
    await pub.publish_once()
    assert await events(api) == []  # not yet: the same message, lately sent
    clock.t += 2
    await pub.publish_once()
    assert _written(await events(api)) == ONE_EACH
    await pub.publish_once()  # still there: nothing more
    assert _written(await events(api)) == ONE_EACH


async def test_a_node_event_carries_the_uid_kubectl_describe_node_searches_by(
        server: kmock.KubernetesEmulator, api: k8s.ApiClient) -> None:
    """kubectl describe node lists Events whose involvedObject.uid is the node's name (the
    kubelet's convention); written without a uid, the advice's node Event was not shown."""
    seed(server)
    pub = advice.Publisher(await snapshot(api), api, cache=advice_cache())
    await pub.publish_once()
    (node_event,) = [e for e in await events(api) if e["involvedObject"]["kind"] == "Node"]
    assert node_event["involvedObject"]["uid"] == "idle"
    assert node_event["involvedObject"]["name"] == "idle"
