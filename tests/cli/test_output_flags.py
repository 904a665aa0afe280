"""``--json`` and ``--details`` stand for an ``-o`` value: given with another, the command
refuses rather than print one of them silently (`status --json -o text` printed JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
