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
                     "migfit/cli.py", "webhook/server.py", "extender/serve.py",
                     "certs/reloading.py", "migfit/py.typed"):
        assert required in names, required
    example = zipfile.ZipFile(wheel).read("migfit/data/example-cluster.yaml")
    assert example == (ROOT / "examples" / "cluster.yaml").read_bytes()
    assert not any(n.startswith("tests/") for n in names)
