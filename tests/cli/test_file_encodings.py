"""Files that are not UTF-8 (a cluster export, a catalog, a mig-parted config) end in one line
that says what the file looks like and what to do: no traceback (the real command).

Windows PowerShell's ``>`` writes UTF-16: ``kubectl get nodes,pods -A -o yaml > cluster.yaml``
there made a file that ``migfit status`` called "not UTF-8 text (byte 0)", and a catalog or
mig-parted config in it ended in a UnicodeDecodeError traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workstation import one_line_error

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster.yaml"
CATALOG = ROOT / "migfit" / "data" / "catalog.yaml"
MIG_PARTED = ("version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n"
              "    mig-enabled: false\n")
POWERSHELL = "(Windows PowerShell's > writes UTF-16: pipe to Out-File -Encoding utf8 instead)"


def migfit(*args: str | Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("migfit")
    command = [exe] if exe else [sys.executable, "-m", "migfit.cli"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env=env, check=False)


def _saved(path: Path, text: str, encoding: str) -> Path:
    path.write_bytes(text.encode(encoding))
    return path


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_utf16_cluster_file_is_told_for_what_it_is(tmp_path: Path, encoding: str) -> None:
    path = _saved(tmp_path / "u16.yaml", CLUSTER.read_text(encoding="utf-8"), encoding)
    assert one_line_error(migfit("status", "--cluster", path)) == (
        f"{path}: looks like UTF-16 text, not UTF-8: save it as UTF-8, or export it again "
        f"with `kubectl get nodes,pods -A -o yaml` {POWERSHELL}")


def test_a_utf32_cluster_file_is_told_for_what_it_is(tmp_path: Path) -> None:
    path = _saved(tmp_path / "u32.yaml", CLUSTER.read_text(encoding="utf-8"), "utf-32")
    assert one_line_error(migfit("status", "--cluster", path)) == (
        f"{path}: looks like UTF-32 text, not UTF-8: save it as UTF-8, or export it again "
        f"with `kubectl get nodes,pods -A -o yaml`")


def test_other_bytes_are_told_by_line_and_column(tmp_path: Path) -> None:
    text = CLUSTER.read_text(encoding="utf-8").replace("gpu-a100-0", "gpu-a100-é", 1)
    path = _saved(tmp_path / "latin1.yaml", text, "latin-1")
    line = one_line_error(migfit("status", "--cluster", path))
    number = next(i for i, row in enumerate(text.splitlines(), 1) if "gpu-a100-é" in row)
    column = text.splitlines()[number - 1].index("é") + 1
    assert line == (f"{path}, line {number}, column {column}: not UTF-8 (byte 0xe9); save it "
                    f"as UTF-8, or export it again with `kubectl get nodes,pods -A -o yaml`")


def test_a_cluster_file_with_a_utf8_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = _saved(tmp_path / "bom.yaml", CLUSTER.read_text(encoding="utf-8"), "utf-8-sig")
    done = migfit("status", "--cluster", path)
    assert done.returncode == 0, done.stderr
    assert "gpu-a100-0" in done.stdout


@pytest.mark.parametrize("encoding", ["utf-16", "latin-1"])
def test_a_catalog_file_that_is_not_utf8(tmp_path: Path, encoding: str) -> None:
    text = CATALOG.read_text(encoding="utf-8").replace("version: v1", "# é\nversion: v1", 1)
    path = _saved(tmp_path / "catalog.yaml", text, encoding)
    line = one_line_error(migfit("profiles", "--catalog", path))
    if encoding == "utf-16":
        assert line == (f"{path}: looks like UTF-16 text, not UTF-8: save it as UTF-8 "
                        f"{POWERSHELL}")
    else:
        number = text.splitlines().index("# é") + 1
        assert line == (f"{path}, line {number}, column 3: not UTF-8 (byte 0xe9); save it "
                        f"as UTF-8")


def test_a_mig_parted_config_that_is_utf16(tmp_path: Path) -> None:
    path = _saved(tmp_path / "config.yaml", MIG_PARTED, "utf-16")
    line = one_line_error(migfit("advise", "--cluster", CLUSTER, "--mig-parted-config", path))
    assert line == f"{path}: looks like UTF-16 text, not UTF-8: save it as UTF-8 {POWERSHELL}"
    path.write_text(MIG_PARTED, encoding="utf-8")  # the same config in UTF-8 is read
    assert migfit("advise", "--cluster", CLUSTER, "--mig-parted-config", path).returncode == 0
