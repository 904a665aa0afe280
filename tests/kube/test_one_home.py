"""migfit.kube is the one module that imports the Kubernetes client: every other product
module (core, servers, commands) reaches the API through it (issue 11 item 4)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("migfit", "extender", "webhook", "certs")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_only_migfit_kube_imports_kubernetes_asyncio() -> None:
    offenders = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.is_relative_to(ROOT / "migfit") and path.parts[len(ROOT.parts) + 1] in (
                    "webhook", "extender", "certs"):
                continue  # the links to the top-level folders, scanned there
            rel = path.relative_to(ROOT).as_posix()
            if rel == "migfit/kube.py":
                continue
            if any(m == "kubernetes_asyncio" or m.startswith("kubernetes_asyncio.")
                   for m in _imports(path)):
                offenders.append(rel)
    assert not offenders, f"import migfit.kube instead of kubernetes_asyncio in {offenders}"
