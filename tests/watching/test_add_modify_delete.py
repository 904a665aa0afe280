"""Nodes and pods created, changed and deleted through the API reach the sink as events."""

from __future__ import annotations

import kmock

from migfit import watching

from .scenery import (
    RecordingSink,
    Start,
    assert_matches_fresh_lists,
    node,
    pod,
    store,
    until,
    watching_live,
)


async def test_add_modify_delete_nodes_and_pods(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    store(server, node("n1", "3"))
    store(server, pod("keep", "4"))
    start()
    await source.synced.wait()
    await watching_live(source, replayed=2)

    mig = {"nvidia.com/mig-1g.10gb": "7"}
    await server.post("/api/v1/nodes", json=node("n2", "10", capacity=mig))
    await server.post("/api/v1/namespaces/ml/pods", json=pod("train", "11", namespace="ml"))
    await server.patch(
        "/api/v1/namespaces/ml/pods/train",
        json={"metadata": {"resourceVersion": "12"}, "spec": {"nodeName": "n2"}},
    )
    await server.patch(
        "/api/v1/nodes/n1",
        json={"metadata": {"resourceVersion": "13"}, "spec": {"unschedulable": True}},
    )
    await server.delete("/api/v1/namespaces/default/pods/keep")
    await server.delete("/api/v1/nodes/n2")
    await until(lambda: len(sink.applied) == 6)

    assert sorted(sink.applied) == sorted(
        [
            ("Node", "ADDED", "n2", "10"),
            ("Pod", "ADDED", "train", "11"),
            ("Pod", "MODIFIED", "train", "12"),
            ("Node", "MODIFIED", "n1", "13"),
            # The emulator sends a deleted object's last version; a real server a new one.
            ("Pod", "DELETED", "keep", "4"),
            ("Node", "DELETED", "n2", "10"),
        ]
    )
    assert sink.objects["Pod"]["uid-ml-train"]["spec"] == {"nodeName": "n2"}
    assert sink.objects["Node"]["uid-node-n1"]["spec"] == {"unschedulable": True}
    await assert_matches_fresh_lists(server, sink)
    assert source.status().relists == 0


async def test_objects_without_resource_version_are_passed_on(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    # Nothing to compare: the source cannot call such an event stale, so it passes it on.
    unversioned = pod("bare", "0")
    del unversioned["metadata"]["resourceVersion"]
    store(server, unversioned)
    start()
    await source.synced.wait()
    await until(lambda: ("Pod", "ADDED", "bare", None) in sink.applied)

    await assert_matches_fresh_lists(server, sink)
