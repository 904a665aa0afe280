"""Scenery for the watch-source tests: a recording sink, API objects, emulator helpers."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Callable
from typing import Any

import kmock

from migfit import watching

PODS = kmock.resource("v1", "pods")
NODES = kmock.resource("v1", "nodes")
RESOURCES = {"Pod": PODS, "Node": NODES}
PATHS = {"Pod": "/api/v1/pods", "Node": "/api/v1/nodes"}

# Small enough that every retry in a test costs milliseconds.
FAST = watching.WatchSettings(backoff_base_s=0.01, backoff_cap_s=0.05, read_timeout_s=5.0)


class RecordingSink:
    """A sink that holds objects by kind and uid, and records every call."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = {"Node": {}, "Pod": {}}
        self.calls: list[tuple[str, ...]] = []
        self.applied: list[tuple[str, str, str, str | None]] = []
        self.pages: list[tuple[str, int]] = []  # (kind, objects) of every list page
        self._listing: dict[str, dict[str, dict[str, Any]]] = {}

    def begin_list(self, kind: watching.Kind) -> None:
        self._listing[kind] = {}

    def list_page(self, kind: watching.Kind, objects: list[dict[str, Any]]) -> None:
        self.pages.append((kind, len(objects)))
        self._listing[kind].update((obj["metadata"]["uid"], obj) for obj in objects)

    def end_list(self, kind: watching.Kind) -> None:
        # a complete list replaces what the sink held ("replace", as the calls record it)
        self.calls.append(("replace", kind))
        self.objects[kind] = self._listing.pop(kind)

    def apply(
        self, kind: watching.Kind, event_type: watching.EventType, obj: dict[str, Any]
    ) -> None:
        self.calls.append(("apply", kind, event_type))
        meta = obj["metadata"]
        self.applied.append((kind, event_type, meta["name"], meta.get("resourceVersion")))
        if event_type == "DELETED":
            self.objects[kind].pop(meta["uid"], None)
        else:
            self.objects[kind][meta["uid"]] = obj

    def mark_synced(self) -> None:
        self.calls.append(("mark_synced",))

    def replaces(self, kind: str) -> int:
        return self.calls.count(("replace", kind))


def write_kubeconfig(server: kmock.KubernetesEmulator, path: pathlib.Path, *,
                     user: str = "{token: t0k3n}",
                     context: str = "{cluster: kmock, user: tester}") -> pathlib.Path:
    """A kubeconfig at ``path`` for the emulator: one cluster, the user ``tester`` with the
    ``user`` entry given (flow YAML), and the context ``kmock`` (``context``) in use."""
    path.write_text(f"""
apiVersion: v1
kind: Config
clusters:
- {{name: kmock, cluster: {{server: "{str(server.url).rstrip('/')}"}}}}
users:
- name: tester
  user: {user}
contexts:
- {{name: kmock, context: {context}}}
current-context: kmock
""")
    return path


def pod(name: str, rv: str, *, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": rv,
        },
        "spec": spec,
    }


def node(name: str, rv: str, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-node-{name}", "resourceVersion": rv},
        "status": status,
    }


def store(server: kmock.KubernetesEmulator, obj: dict[str, Any]) -> None:
    """Put an object into the emulator silently: no watch event is sent for it."""
    meta = obj["metadata"]
    server.objects[RESOURCES[obj["kind"]], meta.get("namespace"), meta["name"]] = obj


def forget(server: kmock.KubernetesEmulator, obj: dict[str, Any]) -> None:
    """Delete an object from the emulator silently: no watch event is sent for it."""
    meta = obj["metadata"]
    server.objects[RESOURCES[obj["kind"]], meta.get("namespace"), meta["name"]].delete()


def event(event_type: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": event_type, "object": obj}


def bookmark(rv: str, kind: str = "Pod") -> dict[str, Any]:
    return {
        "type": "BOOKMARK",
        "object": {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": rv}},
    }


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


async def fresh(server: kmock.KubernetesEmulator, kind: str) -> dict[str, dict[str, Any]]:
    """What a fresh list from the API server returns, by uid."""
    response = await server.get(PATHS[kind])
    assert response.status == 200
    body = await response.json()
    return {obj["metadata"]["uid"]: obj for obj in body["items"]}


async def assert_matches_fresh_lists(
    server: kmock.KubernetesEmulator, sink: RecordingSink
) -> None:
    assert sink.objects["Node"] == await fresh(server, "Node")
    assert sink.objects["Pod"] == await fresh(server, "Pod")


async def until(predicate: Callable[[], object], *, limit_s: float = 5.0) -> None:
    """Wait for a condition the source reaches on its own; the limit only guards a hang."""
    async with asyncio.timeout(limit_s):
        while not predicate():
            await asyncio.sleep(0.002)



Start = Callable[[], asyncio.Task[None]]


async def watching_live(source: watching.KubernetesSource, *, replayed: int) -> None:
    """Wait until both live watches are open: the emulator replays every stored object as
    ADDED when a watch starts, and the source drops each replay as a duplicate."""
    await until(lambda: source.status().skipped_events >= replayed)
