"""The wheel carries what `migfit serve` needs on a machine without this checkout."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_the_catalog_the_example_cluster_and_every_package(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("migfit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("migfit/data/catalog.yaml", "migfit/data/example-cluster.yaml",
                     "migfit/cli.py", "migfit/webhook/server.py",
                     "migfit/commands/serve.py", "migfit/extender/server.py",
                     "migfit/certs/reloading.py", "migfit/py.typed"):
        assert required in names, required
    example = zipfile.ZipFile(wheel).read("migfit/data/example-cluster.yaml")
    assert example == (ROOT / "examples" / "cluster.yaml").read_bytes()
    assert not any(n.startswith("tests/") for n in names)


def test_one_top_level_import_package(tmp_path: Path) -> None:
    """A plain install adds ``migfit`` only: no generic ``webhook``, ``extender``, ``certs``."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("migfit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"migfit"}
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
         str(wheel)], check=True, capture_output=True, timeout=300)
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}
    for name in ("webhook", "extender", "certs"):
        done = subprocess.run([sys.executable, "-S", "-c", f"import {name}"], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and "No module named" in done.stderr, name
    done = subprocess.run(
        [sys.executable, "-c", "import migfit.webhook.decision, migfit.extender.filtering, "
         "migfit.certs.certificates, migfit.cli; print(migfit.cli.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(target))


def test_the_license_pyproject_names_ships(tmp_path: Path) -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0" in text
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("migfit-*.whl")
    archive = zipfile.ZipFile(wheel)
    assert any(n.endswith("licenses/LICENSE") for n in archive.namelist())
    metadata = next(n for n in archive.namelist() if n.endswith("METADATA"))
    assert "License-Expression: Apache-2.0" in archive.read(metadata).decode()
