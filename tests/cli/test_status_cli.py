"""``migfit status`` as installed: the table and the JSON document for the bundled example."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import pytest

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
    assert list(doc) == ["nodes"]
    for node in doc["nodes"]:
        assert list(node) == ["name", "model", "strategy", "config", "config_state", "profiles"]
        for figures in node["profiles"].values():
            assert list(figures) == ["allocatable", "used", "free"]
            assert figures["free"] == max(0, figures["allocatable"] - figures["used"])
    by_name = {n["name"]: n for n in doc["nodes"]}
    assert [n["name"] for n in doc["nodes"]] == sorted(by_name)
    assert by_name["gpu-a100-0"] == {
        "name": "gpu-a100-0", "model": "A100-80GB", "strategy": "mixed",
        "config": "all-3g.40gb", "config_state": "success",
        "profiles": {"3g.40gb": {"allocatable": 2, "used": 0, "free": 2}},
    }
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
