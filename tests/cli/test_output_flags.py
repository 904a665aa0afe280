"""``--json`` and ``--details`` stand for an ``-o`` value: given with another, the command
refuses rather than print one of them silently (`status --json -o text` printed JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = str(ROOT / "examples" / "cluster.yaml")


def _migfit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "migfit.cli", *args, "--cluster", CLUSTER],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)


@pytest.mark.parametrize(("args", "expected"), [
    (["status", "--json", "-o", "text"], "--json and -o text disagree: pass one"),
    (["status", "--json", "--output", "yaml"], "--json and -o yaml disagree: pass one"),
    (["advise", "--json", "-o", "yaml"], "--json and -o yaml disagree: pass one"),
    (["advise", "--json", "-o", "wide"], "--json and -o wide disagree: pass one"),
    (["advise", "--details", "-o", "json"], "--details and -o json disagree: pass one"),
    (["advise", "--details", "-o", "text"], "--details and -o text disagree: pass one"),
    (["advise", "--json", "--details"], "--json and --details disagree: pass one"),
])
def test_output_flags_that_disagree_are_refused(args: list[str], expected: str) -> None:
    done = _migfit(*args)
    assert done.returncode == 2, done.stdout[:300]
    assert done.stdout == ""
    assert done.stderr == f"migfit: error: {expected}\n"


@pytest.mark.parametrize("args", [["status", "--json", "-o", "json"],
                                  ["advise", "--json", "-o", "json"]])
def test_json_twice_is_json(args: list[str]) -> None:
    done = _migfit(*args)
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)


def test_details_and_wide_agree() -> None:
    done = _migfit("advise", "--details", "-o", "wide")
    assert done.returncode == 0, done.stderr
    assert done.stdout == _migfit("advise", "--details").stdout


@pytest.mark.parametrize("command", [["explain", "ml-research/finetune-small-0"], ["advise"],
                                     ["status"]])
def test_yaml_is_the_json_data_and_readable(command: list[str]) -> None:
    """`explain -o yaml` wrote its explanation as one double-quoted scalar with `\\xD7` for
    "×" and backslash-continued lines (an outside check): text with line breaks is now a
    block, and the data is the same as -o json's."""
    as_json, as_yaml = _migfit(*command, "-o", "json"), _migfit(*command, "-o", "yaml")
    assert as_json.returncode == as_yaml.returncode == 0, as_yaml.stderr
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)
    assert "\\x" not in as_yaml.stdout and "\\\n" not in as_yaml.stdout
    if command[0] == "explain":
        assert "explanation: |" in as_yaml.stdout and "needs 1 × 1g.10gb" in as_yaml.stdout


def test_status_advise_and_explain_read_the_catalog_the_servers_are_given(
        tmp_path: Path) -> None:
    """A node of a model only a --catalog file knows: the servers given the file advise it,
    while `status`, `advise` and `explain` had no --catalog and called it an unknown GPU
    (an outside check)."""
    catalog = yaml.safe_load((ROOT / "migfit" / "data" / "catalog.yaml").read_text())
    (model,) = [dict(m) for m in catalog["models"] if m["id"] == "A100-80GB"]
    model.update(id="A100-LAB-80GB", products=["A100-LAB-80GB"])
    model.pop("variants", None)
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump(
        {"version": catalog["version"], "models": [model]}))
    objects = yaml.safe_load((ROOT / "examples" / "cluster.yaml").read_text())
    for item in objects["items"]:
        if item["kind"] == "Node" and item["metadata"]["name"] == "gpu-a100-0":
            item["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-LAB-80GB"
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(objects))

    def run(*args: str) -> Any:
        done = subprocess.run([sys.executable, "-m", "migfit.cli", *args, "--cluster",
                               str(tmp_path / "cluster.yaml"), "-o", "json"],
                              capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert done.returncode in (0, 1), done.stderr
        return json.loads(done.stdout)

    with_file = ["--catalog", str(tmp_path / "catalog.yaml")]
    models = {n["name"]: n["model"] for n in run("status", *with_file)["nodes"]}
    assert models["gpu-a100-0"] == "A100-LAB-80GB"
    assert {n["name"]: n["model"] for n in run("status")["nodes"]}["gpu-a100-0"] != models[
        "gpu-a100-0"]
    advised = [r["node"] for r in run("advise", *with_file)["recommendations"]]
    assert advised == ["gpu-a100-0"]
    assert "gpu-a100-0" not in [r["node"] for r in run("advise")["recommendations"]]
    explained = run("explain", "ml-research/finetune-small-0", *with_file)
    assert explained["recommendation"]["node"] == "gpu-a100-0"
