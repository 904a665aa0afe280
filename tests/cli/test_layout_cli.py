"""``migfit layout check`` and ``migfit layout list``, run as the installed command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from migfit import layouts, profiles

MIGFIT = shutil.which("migfit")
pytestmark = pytest.mark.skipif(MIGFIT is None, reason="the migfit command is not installed")


def migfit(*args: str) -> subprocess.CompletedProcess[str]:
    assert MIGFIT is not None
    return subprocess.run([MIGFIT, *args], capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize(("gpu", "names", "placement"), [
    ("A100-80GB", ["4g.40gb", "3g.40gb"], "4g.40gb@0 3g.40gb@4"),
    ("NVIDIA-A100-SXM4-80GB", ["3g.40gb", "2g.20gb", "2g.20gb"],
     "2g.20gb@0 2g.20gb@2 3g.40gb@4"),
    ("NVIDIA-A100-80GB-PCIe", ["1g.10gb"] * 7,
     " ".join(f"1g.10gb@{i}" for i in range(7))),
    ("A30-24GB", ["2g.12gb", "1g.6gb", "1g.6gb"], "2g.12gb@0 1g.6gb@2 1g.6gb@3"),
])
def test_check_valid_exits_0_and_prints_the_placement(
        gpu: str, names: list[str], placement: str) -> None:
    out = migfit("layout", "check", "--gpu", gpu, *names)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == placement


def test_check_seed_layout() -> None:
    out = migfit("layout", "check", "--gpu", "A100-80GB",
                 "3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")
    assert out.returncode == 0
    # 7/7 compute and 8/8 memory slices; the 2g and the 1g share the half the 3g leaves.
    assert out.stdout.strip() == "2g.20gb@0 1g.10gb@2 1g.10gb@3 3g.40gb@4"


@pytest.mark.parametrize(("gpu", "names", "needle"), [
    ("A100-80GB", ["3g.40gb", "3g.40gb", "1g.10gb"], "9 of 8"),
    ("A30-24GB", ["2g.12gb", "2g.12gb", "1g.6gb"], "5 of 4"),
    ("A100-80GB", ["1g.10gb+me", "1g.10gb+me"], "limit of 1"),
    ("A100-80GB", ["3g.40gb@0", "2g.20gb", "2g.20gb"], "2g.20gb"),
    # A start the GPU cannot use is an answer, not a usage error (it was exit 2).
    ("A100-80GB", ["4g.40gb@4"], "4g.40gb@4 is not a valid position for 4g.40gb"),
    ("A100-80GB", ["1g.10gb@7", "2g.20gb"], "(starts 0, 1, 2, 3, 4, 5, 6, size 1)"),
])
def test_check_invalid_exits_1_with_the_reason(gpu: str, names: list[str], needle: str) -> None:
    out = migfit("layout", "check", "--gpu", gpu, *names)
    assert out.returncode == 1
    assert needle in out.stdout
    assert "Traceback" not in out.stdout + out.stderr


def test_check_with_a_fixed_instance() -> None:
    out = migfit("layout", "check", "--gpu", "A100-80GB", "3g.40gb@0", "2g.20gb")
    assert out.returncode == 0
    assert out.stdout.strip() == "3g.40gb@0 2g.20gb@4"


def test_check_json_valid() -> None:
    out = migfit("layout", "check", "--gpu", "A100-80GB", "--json", "3g.40gb", "4g.40gb")
    assert out.returncode == 0
    assert json.loads(out.stdout) == {
        "valid": True,
        "placement": [{"profile": "4g.40gb", "start": 0, "size": 4},
                      {"profile": "3g.40gb", "start": 4, "size": 4}],
        "reason": None,
    }


def test_check_json_invalid() -> None:
    out = migfit("layout", "check", "--gpu", "A100-80GB", "3g.40gb", "3g.40gb", "1g.10gb",
                 "--json")
    assert out.returncode == 1
    doc = json.loads(out.stdout)
    assert set(doc) == {"valid", "placement", "reason"}
    assert doc["valid"] is False and doc["placement"] == []
    assert isinstance(doc["reason"], str) and "9 of 8" in doc["reason"]
    start = migfit("layout", "check", "--gpu", "A100-80GB", "--json", "4g.40gb@4")
    assert start.returncode == 1 and json.loads(start.stdout)["valid"] is False


@pytest.mark.parametrize("args", [
    ["check", "--gpu", "T4", "1g.10gb"],
    ["check", "--gpu", "A100-80GB", "1g.5gb"],
    ["check", "--gpu", "A100-80GB", "--json", "1g.5gb"],
    ["check", "--gpu", "A100-80GB", "3g.40gb@one"],
    ["check", "--gpu", "A100-80GB", "3g.40gb@²"],  # a digit to str.isdigit, not to int()
    ["check", "--gpu", "A100-80GB", "3g.40gb@٣"],  # an Arabic-Indic 3, once read as 3
    ["check", "--gpu", "A100-80GB", "3g.40gb@" + "4" * 5000],  # past int()'s digit limit
    ["list", "--gpu", "NVIDIA-A100-SXM4"],  # ambiguous without gpu.memory
    ["list", "--gpu", "A100-80GB", "--catalog", "/nonexistent.yaml"],
])
def test_bad_arguments_exit_2_with_one_line(args: list[str]) -> None:
    out = migfit("layout", *args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.startswith("migfit: error:")
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("args", [["layout"], ["layout", "check", "--gpu", "A100-80GB"],
                                  ["layout", "list"]])
def test_missing_arguments_exit_2(args: list[str]) -> None:
    out = migfit(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr


def test_help() -> None:
    out = migfit("layout", "--help")
    assert out.returncode == 0
    assert "check" in out.stdout and "list" in out.stdout


def test_list_json_is_every_layout_as_sorted_names() -> None:
    out = migfit("layout", "list", "--gpu", "A100-80GB", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert all(isinstance(lay, list) and lay == sorted(lay) for lay in doc)
    model = profiles.builtin().get("A100-80GB")
    expected = {tuple(lay.profile_names()) for lay in layouts.of(model).all}
    assert {tuple(lay) for lay in doc} == expected and len(doc) == len(expected)
    assert ["3g.40gb", "4g.40gb"] in doc and ["1g.10gb", "3g.40gb", "3g.40gb"] not in doc


def test_list_maximal_json() -> None:
    out = migfit("layout", "list", "--gpu", "NVIDIA-A30", "--maximal", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    model = profiles.builtin().get("A30-24GB")
    assert sorted(doc) == sorted(lay.profile_names() for lay in layouts.of(model).maximal)
    assert ["1g.6gb", "1g.6gb", "1g.6gb", "1g.6gb"] in doc
    assert ["1g.6gb", "1g.6gb"] not in doc


def test_list_text_one_layout_per_line_with_a_placement() -> None:
    out = migfit("layout", "list", "--gpu", "A100-80GB", "--maximal")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    model = profiles.builtin().get("A100-80GB")
    assert len(lines) == len(layouts.of(model).maximal)
    assert any(line.split() == ["3g.40gb", "4g.40gb", "4g.40gb@0", "3g.40gb@4"]
               for line in lines)
    assert "maximal layouts" in out.stderr


def test_list_with_catalog_override(tmp_path: Path) -> None:
    path = tmp_path / "extra.yaml"
    path.write_text(
        "version: v1\nmodels:\n- id: TOY-2\n  memory_slices: 2\n  compute_slices: 2\n"
        "  memory_mib: 2048\n  profiles:\n"
        "  - {name: 1g.1gb, compute_slices: 1, memory_slices: 1, memory_mib: 1000,"
        " max_instances: 2, starts: [0, 1]}\n"
        "  - {name: 2g.2gb, compute_slices: 2, memory_slices: 2, memory_mib: 2000,"
        " max_instances: 1, starts: [0]}\n", encoding="utf-8")
    out = migfit("layout", "list", "--gpu", "toy-2", "--catalog", str(path), "--json")
    assert out.returncode == 0, out.stderr
    assert sorted(json.loads(out.stdout)) == [["1g.1gb"], ["1g.1gb", "1g.1gb"], ["2g.2gb"]]
    out = migfit("layout", "check", "--gpu", "TOY-2", "--catalog", str(path), "1g.1gb", "2g.2gb")
    assert out.returncode == 1 and "3 of 2" in out.stdout


def test_a_reader_that_goes_away_ends_it_quietly() -> None:
    # `migfit layout list ... | head -3`: the pipe's reader is gone before the output is
    # written. No "Broken pipe" error, no traceback, exit 0.
    assert MIGFIT is not None
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([MIGFIT, "layout", "list", "--gpu", "A100-80GB"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, "")


# layout plan (DESIGN.md §8: `--need PROFILE=N... [--keep PROFILE...]`)

def test_plan_keeps_an_instance_where_it_is() -> None:
    out = migfit("layout", "plan", "--gpu", "A100-80GB", "--need", "1g.10gb=3",
                 "--keep", "3g.40gb@4")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 3g.40gb@4",
        "A100-80GB: 4×1g.10gb 3g.40gb serves 3×1g.10gb"]


def test_plan_with_a_kept_profile_and_no_start_says_which_start_it_assumed() -> None:
    """DESIGN.md's `--keep PROFILE`: the plan takes the start that serves the need best (a
    3g.40gb at 4 leaves room for four 1g.10gb, at 0 for three) and says it assumed it."""
    out = migfit("layout", "plan", "--gpu", "A100-80GB", "--need", "1g.10gb=4",
                 "--keep", "3g.40gb", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["kept"] == ["3g.40gb@4"] and doc["assumed"] == ["3g.40gb@4"]
    assert doc["served"] == {"1g.10gb": 4} and doc["unserved"] == {}
    text = migfit("layout", "plan", "--gpu", "A100-80GB", "--need", "1g.10gb=4",
                  "--keep", "3g.40gb")
    assert text.stdout.splitlines()[0] == "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 3g.40gb@4"
    assert "assumed the kept 3g.40gb@4" in text.stdout
    assert "--keep PROFILE@START" in text.stdout


def test_plan_places_loose_kept_instances_beside_exact_ones() -> None:
    out = migfit("layout", "plan", "--gpu", "A100-80GB", "--need", "2g.20gb=1",
                 "--keep", "3g.40gb@4", "--keep", "1g.10gb", "--keep", "1g.10gb", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert sorted(doc["kept"]) == sorted(["3g.40gb@4", *doc["assumed"]])
    # Beside 3g.40gb@4, the two 1g's at 0-1 or at 2-3 leave the 2g its room; the lower wins.
    assert doc["assumed"] == ["1g.10gb@0", "1g.10gb@1"]
    assert doc["served"] == {"2g.20gb": 1}
    exact = json.loads(migfit("layout", "plan", "--gpu", "A100-80GB", "--need", "2g.20gb=1",
                              "--keep", "3g.40gb@4", "--json").stdout)
    assert exact["assumed"] == []


def test_plan_exits_1_when_the_need_is_not_served_on_one_gpu() -> None:
    out = migfit("layout", "plan", "--gpu", "A100-80GB", "--need", "1g.10gb=3",
                 "--keep", "7g.80gb")
    assert out.returncode == 1
    assert "not served on one GPU: 3×1g.10gb" in out.stdout


@pytest.mark.parametrize(("keep", "needle"), [
    (["4g.40gb", "4g.40gb"], "do not fit one A100-80GB GPU together at any start"),
    (["3g.40gb@4", "4g.40gb@0", "1g.10gb"], "at any start"),
    (["3g.40gb@1"], "cannot start at memory slice 1"),
    (["1g.5gb"], "has no MIG profile '1g.5gb'"),
])
def test_plan_keeps_that_cannot_be_exit_2_with_one_line(keep: list[str], needle: str) -> None:
    out = migfit("layout", "plan", "--gpu", "A100-80GB", "--need", "1g.10gb=1",
                 *(a for k in keep for a in ("--keep", k)))
    assert out.returncode == 2
    assert out.stdout == ""
    assert needle in out.stderr and len(out.stderr.strip().splitlines()) == 1
