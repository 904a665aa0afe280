"""``migfit profiles``, run as the installed command."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

MIGFIT = shutil.which("migfit")
pytestmark = pytest.mark.skipif(MIGFIT is None, reason="the migfit command is not installed")

MODEL_IDS = {"A100-40GB", "A100-80GB", "A30-24GB", "H100-80GB", "H100-94GB", "H100-96GB",
             "H200-141GB", "GH200-144GB", "B200-180GB", "GB200-186GB", "B300-288GB",
             "GB300-288GB", "RTX-PRO-6000-96GB", "RTX-PRO-5000-48GB", "RTX-PRO-4500-32GB"}
PROFILE_KEYS = {"name", "resource", "gi_profile_id", "compute_slices", "memory_slices",
                "memory_mib", "max_instances", "starts", "media", "provisional"}
MODEL_KEYS = {"id", "memory_slices", "compute_slices", "memory_mib", "products", "device_ids",
              "variants", "provisional", "source", "profiles"}


def migfit(*args: str) -> subprocess.CompletedProcess[str]:
    assert MIGFIT is not None
    return subprocess.run([MIGFIT, *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_table_shows_every_model_and_marks_provisional_values() -> None:
    out = migfit("profiles")
    assert out.returncode == 0, out.stderr
    for mid in MODEL_IDS:
        assert f"\n{mid}" in "\n" + out.stdout
    lines = out.stdout.splitlines()
    assert lines[-1].startswith("* provisional")
    row = next(line.split() for line in lines if line.split()[:1] == ["1g.20gb*"])
    assert row == ["1g.20gb*", "15", "1", "2", "19968", "4", "0,2,4,6"]
    row = next(line.split() for line in lines if line.split()[:1] == ["1g.10gb+me"])
    assert row == ["1g.10gb+me", "20", "1", "1", "9728", "1", "0,1,2,3,4,5,6", "yes"]
    # B300's values are not seen on hardware yet (issue 13); B200's lgip outputs are.
    assert any(line.startswith("B300-288GB*:") for line in lines)
    assert any(line.startswith("B200-180GB:") for line in lines)


def test_one_model_by_product_label() -> None:
    out = migfit("profiles", "--gpu", "NVIDIA-A30")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("A30-24GB:")
    assert "A100" not in out.stdout
    # 2g.12gb+me is GI profile 6 (issue 13); its memory is not seen on hardware.
    row = next(line.split() for line in out.stdout.splitlines() if "2g.12gb+me" in line)
    assert row[:2] == ["2g.12gb+me*", "6"]


def test_json_lists_models_with_all_fields() -> None:
    out = migfit("profiles", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert isinstance(doc, list) and {m["id"] for m in doc} == MODEL_IDS
    for m in doc:
        assert set(m) == MODEL_KEYS
        for p in m["profiles"]:
            assert set(p) == PROFILE_KEYS
            assert isinstance(p["provisional"], bool) and isinstance(p["starts"], list)
    by_id = {m["id"]: m for m in doc}
    a40 = {p["name"]: p for p in by_id["A100-40GB"]["profiles"]}
    assert (a40["1g.10gb"]["memory_slices"], a40["1g.10gb"]["gi_profile_id"]) == (2, 15)
    assert by_id["B300-288GB"]["provisional"] is True
    assert by_id["H200-141GB"]["variants"] == [
        {"products": ["H200(-SXM5)?(-141GB)?(-HBM3E)?"], "device_ids": ["0x233510DE"]},
        {"products": ["H200-NVL(-141GB)?(-HBM3E)?"], "device_ids": ["0x233B10DE"]}]
    assert by_id["A100-80GB"]["provisional"] is False


def test_json_one_model() -> None:
    out = migfit("profiles", "--gpu", "h100-nvl", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [m["id"] for m in doc] == ["H100-94GB"]


def test_catalog_file_adds_a_model(tmp_path: Path) -> None:
    path = tmp_path / "extra.yaml"
    path.write_text(
        "version: v1\nmodels:\n- id: A800-80GB\n  memory_slices: 8\n  compute_slices: 7\n"
        "  memory_mib: 81920\n  products: [A800-SXM4-80GB]\n  profiles:\n"
        "  - {name: 7g.80gb, compute_slices: 7, memory_slices: 8, memory_mib: 80896,"
        " max_instances: 1, starts: [0]}\n", encoding="utf-8")
    out = migfit("profiles", "--catalog", str(path), "--gpu", "NVIDIA-A800-SXM4-80GB", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["profiles"][0]["gi_profile_id"] is None


@pytest.mark.parametrize("args", [
    ["--gpu", "T4"],
    ["--catalog", "/nonexistent/catalog.yaml"],
])
def test_bad_arguments_exit_2_with_one_line(args: list[str]) -> None:
    out = migfit("profiles", *args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1
    assert out.stderr.startswith("migfit: error:")
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_model_name_is_unknown_not_every_model(name: str) -> None:
    """`--gpu "$GPU"` with GPU unset printed the whole catalog."""
    out = migfit("profiles", "--gpu", name)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"migfit: error: unknown GPU model {name!r}; known models: "
                                 "A100-40GB, A100-80GB,")
    assert len(out.stderr.strip().splitlines()) == 1


def test_bad_catalog_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: v1\nmodels: []\nextra: 1\n", encoding="utf-8")
    out = migfit("profiles", "--catalog", str(path))
    assert out.returncode == 2
    assert "extra" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
