"""``migfit advise --json`` and ``migfit explain`` as a user runs them, on examples/cluster.yaml."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cluster.yaml"


def _migfit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "migfit.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_advise_json_on_the_example_cluster() -> None:
    out = _migfit("advise", "--cluster", str(EXAMPLE), "--json", "--now", "2000000000")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    recs = doc["recommendations"]
    assert recs
    for rec in recs:
        assert {"node", "config", "mig_parted", "gpus", "unblocks", "disrupts"} <= set(rec)
        assert isinstance(rec["node"], str)
        assert (rec["config"] is None) != (rec["mig_parted"] is None)
        for g in rec["gpus"]:
            assert isinstance(g["index"], int) and isinstance(g["after"], list)
        assert all("/" in k for k in rec["unblocks"] + rec["disrupts"])
    flagged = {r["node"]: r for r in recs}
    assert "gpu-a100-0" in flagged
    assert "1g.10gb" in flagged["gpu-a100-0"]["gpus"][0]["after"]


def test_advise_text_and_explain() -> None:
    text = _migfit("advise", "--cluster", str(EXAMPLE), "--now", "2000000000")
    assert text.returncode == 0 and "kubectl label node" in text.stdout
    # the example's target is custom: the label alone would fail the node
    assert "(custom)" in text.stdout
    assert "not in the MIG Manager's ConfigMap yet: add its mig-parted config" in text.stdout
    why = _migfit("explain", "ml-research/finetune-small-0", "--cluster", str(EXAMPLE),
                  "--now", "2000000000")
    assert why.returncode == 0, why.stderr
    assert "1g.10gb" in why.stdout and "Fix:" in why.stdout


def test_details_say_where_the_custom_config_goes() -> None:
    # The summary promises "migfit advise --details prints it and where"; --details said only
    # "the mig-parted ConfigMap's config.yaml", not which ConfigMap (the one the ClusterPolicy
    # names, not default-mig-parted-config) as -o json's command and explain say.
    now = ("--now", "2000000000")
    summary = _migfit("advise", "--cluster", str(EXAMPLE), *now)
    assert "(migfit advise --details prints it and where)" in summary.stdout
    doc = json.loads(_migfit("advise", "--cluster", str(EXAMPLE), "-o", "json", *now).stdout)
    rec = next(r for r in doc["recommendations"] if r["config"] is None)
    found = re.search(r"\(printed by migfit advise --details; mig_parted in GET /advice\) to "
                      r"(.+), then: kubectl label node ", rec["command"])
    assert found is not None, rec["command"]
    where = found.group(1)
    assert "migManager.config.name" in where and "not that one" in where
    details = _migfit("advise", "--cluster", str(EXAMPLE), "--details", *now)
    assert details.returncode == 0, details.stderr
    block = details.stdout[details.stdout.index(f"node {rec['node']} "):]
    assert f"\n  add to the config.yaml of {where}:\n    version: v1\n" in block, block
    why = _migfit("explain", "ml-research/finetune-small-0", "--cluster", str(EXAMPLE), *now)
    assert f" to {where}, then: " in why.stdout, why.stdout

def test_bad_arguments_are_one_line_errors() -> None:
    bad = _migfit("advise", "--cluster", str(EXAMPLE), "--grace", "-1")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    missing = _migfit("explain", "nope/nothing", "--cluster", str(EXAMPLE))
    assert missing.returncode == 1 and "not in migfit's view" in missing.stdout
    # Read from a file, the answer names the file's pods, not a kubectl command.
    assert f"{EXAMPLE} has none in namespace nope." in missing.stdout, missing.stdout
    near = _migfit("explain", "ml-research/finetune-small", "--cluster", str(EXAMPLE))
    assert near.returncode == 1 and "kubectl" not in near.stdout
    assert (f"those of {EXAMPLE} in namespace ml-research: finetune-small-0, "
            f"llm-warmup-0.") in near.stdout, near.stdout


def test_explain_of_a_bare_name_in_another_namespace_asks_whether_that_was_meant() -> None:
    """With --cluster a bare name is looked up in default; the pod was in ml-research and the
    answer only said default had none."""
    missing = _migfit("explain", "finetune-small-0", "--cluster", str(EXAMPLE))
    assert missing.returncode == 1, missing.stderr
    assert missing.stdout.rstrip().endswith(
        f"{EXAMPLE} has none in namespace default. Did you mean "
        f"ml-research/finetune-small-0?"), missing.stdout
    data = _migfit("explain", "finetune-small-0", "--cluster", str(EXAMPLE), "-o", "json")
    assert data.returncode == 1
    assert json.loads(data.stdout)["explanation"].endswith(
        "Did you mean ml-research/finetune-small-0?")


def test_explain_of_a_pod_named_wrong_in_a_namespace_of_many_pods_ends_its_list_once() -> None:
    """The list of the namespace's pods is cut after a few with "…": the sentence ended
    "…. Did you mean ...?" (an outside check)."""
    missing = _migfit("explain", "-n", "inference", "llm-warmup-0", "--cluster", str(EXAMPLE))
    assert missing.returncode == 1, missing.stderr
    assert "…." not in missing.stdout, missing.stdout
    assert ", …  Did you mean" not in missing.stdout
    assert ", … Did you mean ml-research/llm-warmup-0?" in missing.stdout, missing.stdout
