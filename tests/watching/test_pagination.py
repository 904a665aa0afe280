"""Lists are read in pages of ``limit`` objects, following ``continue`` to the end."""

from __future__ import annotations

import dataclasses

import kmock
import pytest

from migfit import watching

from .scenery import FAST, PODS, RecordingSink, Start, assert_matches_fresh_lists, pod, store, until


@pytest.mark.parametrize("settings", [dataclasses.replace(FAST, page_size=2)], ids=["limit-2"])
async def test_pages_are_followed_to_the_end(
    server: kmock.KubernetesEmulator,
    sink: RecordingSink,
    source: watching.KubernetesSource,
    start: Start,
) -> None:
    pods = [pod(f"p{index}", str(10 + index)) for index in range(5)]
    for obj in pods:
        store(server, obj)

    def page(items: list[dict[str, object]], token: str | None) -> dict[str, object]:
        # Every page carries the first page's resourceVersion: one snapshot.
        metadata = {"resourceVersion": "30", **({"continue": token} if token else {})}
        return {"kind": "PodList", "metadata": metadata, "items": items}

    server[kmock.action.LIST, PODS, {"continue": "t1"}] << page(pods[2:4], "t2")
    server[kmock.action.LIST, PODS, {"continue": "t2"}] << page(pods[4:], None)
    server[kmock.action.LIST, PODS][:1] << page(pods[:2], "t1")

    start()
    await source.synced.wait()

    lists = list(server[kmock.action.LIST, PODS])
    assert [request.params.get("continue") for request in lists] == [None, "t1", "t2"]
    assert {request.params["limit"] for request in lists} == {"2"}
    assert sink.replaces("Pod") == 1
    assert len(sink.objects["Pod"]) == 5
    # handed over page by page, as they came: the raw JSON of the whole list (32 KiB a pod)
    # is never held at once (it took 1 GiB at 30,000 pods)
    assert [n for kind, n in sink.pages if kind == "Pod"] == [2, 2, 1]
    assert source.status().resource_versions["Pod"] == "30"
    await until(lambda: len(server[kmock.action.WATCH, PODS]) > 0)
    assert server[kmock.action.WATCH, PODS][0].params["resourceVersion"] == "30"
    await assert_matches_fresh_lists(server, sink)
