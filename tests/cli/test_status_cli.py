"""``migfit status`` as installed: the table and the JSON document for the bundled example,
and the JSON saying what the table says (each node's notes, the summary under it)."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from migfit import builders, keys

ROOT = pathlib.Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "cluster.yaml"


def migfit(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("migfit")
    if exe is None:
        pytest.fail("the migfit console script is not installed (pip install -e .)")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          check=False)


def test_status_json_has_the_documented_shape() -> None:
    done = migfit("status", "--cluster", str(EXAMPLE), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert list(doc) == ["nodes", "summary"]
    for node in doc["nodes"]:
        assert list(node) == ["name", "model", "strategy", "config", "config_state", "profiles",
                              "cordoned", "ready", "model_error", "overcommitted", "notes"]
        for figures in node["profiles"].values():
            assert list(figures) == ["allocatable", "used", "free"]
            assert figures["free"] == max(0, figures["allocatable"] - figures["used"])
    by_name = {n["name"]: n for n in doc["nodes"]}
    assert [n["name"] for n in doc["nodes"]] == sorted(by_name)
    assert by_name["gpu-a100-0"] == {
        "name": "gpu-a100-0", "model": "A100-80GB", "strategy": "mixed",
        "config": "all-3g.40gb", "config_state": "success",
        "profiles": {"3g.40gb": {"allocatable": 2, "used": 0, "free": 2}},
        "cordoned": False, "ready": True, "model_error": None, "overcommitted": {},
        "notes": [],
    }
    assert by_name["gpu-a30-0"]["cordoned"] is True
    assert by_name["gpu-a30-0"]["notes"] == ["cordoned"]
    assert by_name["gpu-h100-1"]["notes"] == ["re-partitioning (pending)"]
    assert doc["summary"] == {"nodes": 8, "mig_nodes": 7, "free_on_schedulable_nodes": 12,
                              "pending_pods": 2, "unschedulable_pods": 1,
                              "waiting_beside_free": []}
    assert by_name["gpu-a100-1"]["profiles"] == {
        "1g.10gb": {"allocatable": 7, "used": 7, "free": 0}}
    assert by_name["gpu-h100-1"]["config_state"] == "pending"
    assert by_name["gpu-a100-40-0"]["strategy"] == "single"
    assert by_name["gpu-a100-40-0"]["profiles"] == {
        "1g.5gb": {"allocatable": 7, "used": 3, "free": 4}}
    assert by_name["gpu-h200-0"]["profiles"]["1g.18gb"]["used"] == 2  # init container max
    assert by_name["cpu-0"]["model"] is None
    assert by_name["cpu-0"]["profiles"] == {}


def test_status_table_shows_each_node_and_profile() -> None:
    done = migfit("status", "--cluster", str(EXAMPLE))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["NODE", "MODEL", "STRATEGY", "CONFIG", "STATE", "PROFILE",
                                "ALLOC", "USED", "FREE", "NOTES"]
    seed = next(line for line in lines if line.startswith("gpu-a100-0 "))
    assert seed.split() == ["gpu-a100-0", "A100-80GB", "mixed", "all-3g.40gb", "success",
                            "3g.40gb", "2", "0", "2"]
    assert "cordoned" in next(line for line in lines if line.startswith("gpu-a30-0 "))
    assert "re-partitioning (pending)" in next(
        line for line in lines if line.startswith("gpu-h100-1 "))
    assert "2 GPU pods pending (1 marked Unschedulable)" in lines[-1]


def test_status_reports_a_broken_file_without_a_traceback(tmp_path: pathlib.Path) -> None:
    broken = tmp_path / "cluster.yaml"
    broken.write_text("apiVersion: v1\nkind: List\nitems:\n- kind: Pod\n  metadata: {}\n")
    done = migfit("status", "--cluster", str(broken))
    assert done.returncode == 2
    assert "item 1 (Pod ?)" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_status_refuses_two_sources() -> None:
    done = migfit("status", "--cluster", str(EXAMPLE), "--kubeconfig", "x")
    assert done.returncode == 2
    assert "not allowed with" in done.stderr


def _mig_node(name: str, instances: dict[str, int], **kw: Any) -> dict[str, Any]:
    node_kw = {k: kw.pop(k) for k in ("taints", "annotations") if k in kw}
    return builders.node(name, labels=builders.mig_labels(instances=instances, **kw),
                         resources=builders.mig_resources(instances), **node_kw)


A100 = "NVIDIA-A100-SXM4-80GB"


def _noted_cluster(path: pathlib.Path) -> pathlib.Path:
    """A node for each note the table can show, and pods for the summary's figures."""
    down = _mig_node("gpu-down", {"3g.40gb": 2}, product=A100, config="all-3g.40gb",
                     config_state="success")
    down["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    stranded = builders.pod("pinned", [{"nvidia.com/mig-3g.40gb": "1"}], namespace="ml",
                            unschedulable_since="2030-01-01T00:00:00Z")
    stranded["spec"]["nodeSelector"] = {"example.com/zone": "nowhere"}
    items = [
        _mig_node("gpu-ok", {"3g.40gb": 2}, product=A100, config="all-3g.40gb",
                  config_state="success"),
        _mig_node("gpu-odd", {"1g.10gb": 7}, product="NVIDIA-Quux-9000"),
        _mig_node("gpu-failed", {"1g.10gb": 7}, product=A100, config="all-1g.10gb",
                  config_state="failed"),
        _mig_node("gpu-stuck", {"3g.40gb": 2}, product=A100, config="all-3g.40gb",
                  config_state="success", taints=[keys.relayout_taint()],
                  annotations={keys.ANNOTATION_RELAYOUT_FAILED: keys.encode_failure(
                      result="timeout", reason="no success in 900 s")}),
        down,
        *(builders.pod(f"run-{i}", [{"nvidia.com/mig-3g.40gb": "1"}], node_name="gpu-ok")
          for i in range(3)),
        stranded,
        builders.pod("queued", [{"nvidia.com/mig-1g.10gb": "1"}], namespace="ml"),
    ]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def test_status_json_says_what_the_table_notes(tmp_path: pathlib.Path) -> None:
    # The table's NOTES (cordoned, NotReady, unknown GPU, MIG config failed, a failed re-layout,
    # overcommitted) and its summary line were missing from -o json / --json.
    snapshot = str(_noted_cluster(tmp_path / "cluster.json"))
    table = migfit("status", "--cluster", snapshot)
    assert table.returncode == 0, table.stderr
    for flags in (["--json"], ["-o", "json"]):
        done = migfit("status", "--cluster", snapshot, *flags)
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        by_name = {n["name"]: n for n in doc["nodes"]}
        lines = table.stdout.splitlines()
        at = lines[0].index("NOTES")
        for name, node in by_name.items():
            row = next(line for line in lines if line.startswith(name + " "))
            assert ", ".join(node["notes"]) == row[at:].strip(), name
        assert by_name["gpu-odd"]["model"] is None
        assert by_name["gpu-odd"]["model_error"].startswith(
            "GPU product 'NVIDIA-Quux-9000' is not a known MIG-capable model")
        assert by_name["gpu-odd"]["notes"] == [
            "unknown GPU: GPU product 'NVIDIA-Quux-9000' is not a known MIG-capable model"]
        assert by_name["gpu-down"]["ready"] is False and by_name["gpu-down"]["notes"] == [
            "NotReady"]
        assert by_name["gpu-failed"]["notes"] == ["MIG config failed"]
        assert by_name["gpu-stuck"]["notes"] == [
            "migfit re-layout failed (timeout): fix the node, then remove the taint "
            "migfit.io/relayout and the annotations"]
        assert by_name["gpu-ok"]["overcommitted"] == {"3g.40gb": 1}
        assert by_name["gpu-ok"]["notes"] == ["overcommitted 3g.40gb by 1"]
        assert all(n["cordoned"] is False for n in doc["nodes"])
        figures = doc["summary"]
        assert figures == {"nodes": 5, "mig_nodes": 5, "free_on_schedulable_nodes": 16,
                           "pending_pods": 2, "unschedulable_pods": 1,
                           "waiting_beside_free": ["ml/pinned"]}
        assert (f"{figures['nodes']} nodes ({figures['mig_nodes']} with MIG), "
                f"{figures['free_on_schedulable_nodes']} MIG instances free on schedulable "
                f"nodes; {figures['pending_pods']} GPU pods pending "
                f"({figures['unschedulable_pods']} marked Unschedulable)") in table.stdout
        assert table.stdout.splitlines()[-1].startswith(
            "1 of them wait beside free instances of their profiles") and \
            "ml/pinned" in table.stdout.splitlines()[-1]


def test_a_cluster_of_one_node_says_one_node(tmp_path: pathlib.Path) -> None:
    """It said "1 nodes (1 with MIG)" (an outside check)."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    first = next(i for i in doc["items"] if i["kind"] == "Node")
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [first]}))
    done = migfit("status", "--cluster", str(one))
    assert done.returncode == 0, done.stderr
    assert "\n1 node (" in done.stdout, done.stdout
