"""The house rules that no linter checks: no string imports, no generic top-level packages."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "migfit"


def _product_files() -> list[Path]:
    # migfit/webhook, migfit/extender and migfit/certs are links to the top-level folders.
    return sorted(Path(d) / f for d, _, files in os.walk(PACKAGE, followlinks=True)
                  for f in files if f.endswith(".py") and "__pycache__" not in d)


def test_the_package_reaches_all_its_parts() -> None:
    names = {p.relative_to(PACKAGE).parts[0] for p in _product_files()}
    assert {"webhook", "extender", "certs", "commands", "simulate"} <= names


def test_no_string_imports_in_the_product() -> None:
    pattern = re.compile(r"\b(import_module|__import__)\s*\(")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in _product_files()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1)
             if pattern.search(line)]
    assert not found, found


def test_no_module_imports_the_servers_by_their_folder_names() -> None:
    pattern = re.compile(r"^\s*(from|import)\s+(webhook|extender|certs)\b", re.MULTILINE)
    files = [*_product_files(), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    found = [str(p.relative_to(ROOT)) for p in files
             if pattern.search(p.read_text(encoding="utf-8"))]
    assert not found, f"import them as migfit.webhook / migfit.extender / migfit.certs: {found}"
