"""Tombstones of deleted objects guard against stale events, and stay bounded under churn."""

from __future__ import annotations

from typing import Any

from migfit import watching

from .scenery import RecordingSink


def _pod(i: int, rv: int) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}",
                                        "resourceVersion": str(rv)}}


def test_tombstones_block_stale_events_and_are_bounded() -> None:
    sink = RecordingSink()
    source = watching.KubernetesSource(sink, kubeconfig="unused")
    churn = watching.MAX_TOMBSTONES + 500
    rv = 1
    for i in range(churn):
        source._apply("Pod", "ADDED", _pod(i, rv))
        source._apply("Pod", "DELETED", _pod(i, rv + 1))
        rv += 2
    # A late, stale MODIFIED for a recently deleted pod must not bring it back.
    source._apply("Pod", "MODIFIED", _pod(churn - 1, rv - 2))
    assert f"u{churn - 1}" not in sink.objects["Pod"]
    assert not sink.objects["Pod"]
    held = source._versions["Pod"]
    assert len(held) <= watching.MAX_TOMBSTONES
