"""`migfit advise --defrag` against an API server: the PodDisruptionBudgets are listed from
policy/v1 with the nodes and pods, the advice is the snapshot file's, and a user whom RBAC
denies the PDB list gets one line naming it."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import kmock
import pytest
import scene
from test_defrag import EXPECTED

from tests.workstation import kubeconfig, migfit

PDBS = kmock.resource("policy", "v1", "poddisruptionbudgets")


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/pods", "v1/nodes", "v1/configmaps", "policy/v1/poddisruptionbudgets"):
        kmock.resources[res] = {}  # type: ignore[assignment]
    for obj in scene.objects():
        meta = obj["metadata"]
        res = {"Node": kmock.resource("v1", "nodes"), "Pod": kmock.resource("v1", "pods"),
               "PodDisruptionBudget": PDBS}[obj["kind"]]
        kmock.objects[res, meta.get("namespace"), meta["name"]] = obj
    return kmock


def _args(*more: str) -> list[str]:
    return ["advise", "--now", str(scene.NOW), "--defrag", "--max-move-share", "0.7", *more]


async def test_the_advice_from_the_api_is_the_snapshot_files(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    kc = kubeconfig(tmp_path / "kc", str(server.url).rstrip("/"))
    done, _ = await migfit(*_args(), kubeconfig=kc, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == EXPECTED
    data, _ = await migfit(*_args("-o", "json"), kubeconfig=kc, home=tmp_path)
    (drain,) = json.loads(data.stdout)["defrag"]["drains"]
    assert drain["pdbs"] == [{"pdb": "ml/train", "disruptions_allowed": 2, "used": 2}]
    # Without --defrag no PDB is listed: plain advice needs no more RBAC than before.
    plain, _ = await migfit("advise", "--now", str(scene.NOW), kubeconfig=kc, home=tmp_path)
    assert plain.returncode == 0, plain.stderr
    pdb_lists = [u for u in (str(r.url) for r in server[kmock.action.LIST])
                 if "poddisruptionbudgets" in u]
    assert len(pdb_lists) == 2, pdb_lists  # the two --defrag runs


async def test_a_pdb_list_denied_by_rbac_is_one_line_naming_it(
        server: kmock.KubernetesEmulator, tmp_path: pathlib.Path) -> None:
    denied: dict[str, Any] = {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
        "code": 403, "message": 'poddisruptionbudgets.policy is forbidden: User "dev" cannot '
        'list resource "poddisruptionbudgets" in API group "policy" at the cluster scope'}
    server[kmock.method.GET, kmock.path("/apis/policy/v1/poddisruptionbudgets")] << 403 << denied
    kc = kubeconfig(tmp_path / "kc", str(server.url).rstrip("/"))
    done, took = await migfit(*_args(), kubeconfig=kc, home=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "403" in line and "PodDisruptionBudgets" in line and "RBAC" in line, line
    assert took < 5.0
