"""The one-shot list (``migfit status``/``advise --kubeconfig``) whose continue token expires
part way (410 Gone) starts again from the first page, a bounded number of times."""

from __future__ import annotations

import pathlib

import kmock
import pytest

from migfit import kube, watching

from .scenery import PODS, RecordingSink, pod, status, store

EXPIRED = status(410, "Expired", "The provided continue parameter is too old to display a "
                                 "consistent list result.")


def first_page(rv: str) -> dict[str, object]:
    return {"kind": "PodList", "metadata": {"resourceVersion": rv, "continue": "token-1"},
            "items": [pod("a", "5")]}


async def test_expired_continue_token_lists_again(
    server: kmock.KubernetesEmulator, sink: RecordingSink, kubeconfig: pathlib.Path
) -> None:
    store(server, pod("a", "5"))
    store(server, pod("b", "6"))
    server[kmock.action.LIST, PODS, {"continue": "token-1"}][:1] << 410 << EXPIRED
    server[kmock.action.LIST, PODS][:1] << first_page("7")

    async with await kube.connect(kubeconfig) as client:
        await watching.list_once(sink, client, page_size=1)

    lists = server[kmock.action.LIST, PODS]
    assert [request.params.get("continue") for request in lists][:3] == [None, "token-1", None]
    assert sorted(obj["metadata"]["name"] for obj in sink.objects["Pod"].values()) == ["a", "b"]
    assert ("mark_synced",) in sink.calls


async def test_a_token_that_keeps_expiring_is_raised(
    server: kmock.KubernetesEmulator, sink: RecordingSink, kubeconfig: pathlib.Path
) -> None:
    store(server, pod("a", "5"))
    server[kmock.action.LIST, PODS, {"continue": "token-1"}] << 410 << EXPIRED
    server[kmock.action.LIST, PODS] << first_page("7")

    async with await kube.connect(kubeconfig) as client:
        with pytest.raises(kube.ApiError) as caught:
            await watching.list_once(sink, client, page_size=1)

    assert caught.value.gone
    # The first list and LIST_RESTARTS more, each a first page and an expired second one.
    assert len(server[kmock.action.LIST, PODS]) == 2 * (1 + kube.LIST_RESTARTS)
