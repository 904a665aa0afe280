"""A --catalog file that is not a catalog says what a catalog file is, in every command that
takes one (the real command, in a child: a server that took it would serve for ever).

``migfit simulate --example --catalog /etc/passwd`` said "Input should be a valid dictionary
or instance of _CatalogSpec": pydantic's words, an internal class name, and nothing to change.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from migfit import profiles
from tests.workstation import one_line_error

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = str(ROOT / "examples" / "cluster.yaml")
PASSWD = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n"

COMMANDS = [
    ["serve"],
    ["webhook", "--tls-cert", "tls.crt", "--tls-key", "tls.key"],
    ["extender", "--cluster", CLUSTER],
    ["profiles"],
    ["layout", "check", "--gpu", "A100-80GB", "1g.10gb"],
    ["layout", "list", "--gpu", "A100-80GB"],
    ["layout", "plan", "--gpu", "A100-80GB", "--need", "1g.10gb=1"],
    ["deploy", "render", "--dir", "deploy", "--check"],
    ["simulate", "--example"],
    ["status", "--cluster", CLUSTER],
    ["advise", "--cluster", CLUSTER],
    ["explain", "--cluster", CLUSTER, "ml-research/finetune-small-0"],
]


def migfit(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "migfit.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env=env, check=False)


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
def test_every_catalog_user_says_what_a_catalog_file_is(argv: list[str],
                                                        tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    passwd.write_text(PASSWD, encoding="utf-8")
    assert one_line_error(migfit(*argv, "--catalog", str(passwd))) == (
        f"{passwd}: holds a YAML string, not a mapping; a catalog file is YAML with "
        f"`version: v1` and `models:`, a list of GPU models in the schema of migfit's "
        f"built-in migfit/data/catalog.yaml (README, \"The MIG catalog\")")


def test_the_catalog_file_it_names_exists_and_is_what_it_says() -> None:
    assert "migfit/data/catalog.yaml" in profiles.CATALOG_FILE
    text = (ROOT / "migfit" / "data" / "catalog.yaml").read_text(encoding="utf-8")
    assert "\nversion: v1\nmodels:\n" in text
    assert "\n## The MIG catalog\n" in (ROOT / "README.md").read_text(encoding="utf-8")
