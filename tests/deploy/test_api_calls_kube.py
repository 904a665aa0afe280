"""The RBAC scanner reads calls made through migfit.kube (the one API module): a server needs
exactly the KubeClient methods its code calls, not every call the module could make."""

from __future__ import annotations

from pathlib import Path

from api_calls import Call, server_calls

FAKE = {
    "migfit/__init__.py": "",
    "migfit/kube.py": '''
class KubeClient:
    async def _request(self, method, path, **kw): ...
    async def _list(self, path, what, query, page_size): ...
    async def open_get(self, path, query, *, action): ...
    async def patch_node(self, name, body):
        return await self._request("PATCH", f"/api/v1/nodes/{name}", body=body)
    async def list_nodes(self):
        return await self._list("/api/v1/nodes", "nodes", [], 500)
    async def create_lease(self, namespace, body):
        return await self._request(
            "POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases")
''',
    "migfit/watching.py": '''
from migfit import kube
_PATHS = {"Pod": "/api/v1/pods"}
async def follow(client: kube.KubeClient):
    await client.open_get(_PATHS["Pod"], [("watch", "true")], action="watch")
    await client.list_nodes()
''',
    "migfit/writer.py": '''
from migfit import kube
async def mark(client):
    await client.patch_node("n", {})
''',
}


def _tree(tmp_path: Path) -> Path:
    for rel, text in FAKE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    return tmp_path


def test_a_reader_needs_only_what_it_calls(tmp_path: Path) -> None:
    calls = server_calls(["migfit.watching"], root=_tree(tmp_path))
    assert set(calls) == {Call("", "pods", "list"), Call("", "pods", "watch"),
                          Call("", "nodes", "list")}


def test_a_writer_needs_the_methods_it_calls(tmp_path: Path) -> None:
    calls = server_calls(["migfit.writer"], root=_tree(tmp_path))
    assert set(calls) == {Call("", "nodes", "patch")}
    assert "KubeClient.patch_node" in str(calls[Call("", "nodes", "patch")][0])
