"""The simulator's modules import each other without a circle (engine, metrics and scheduler
did), each at module level (no import hidden behind TYPE_CHECKING to break one)."""

from __future__ import annotations

import ast
from pathlib import Path

import migfit.simulate

FOLDER = Path(migfit.simulate.__file__).parent


def _imports() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in FOLDER.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "migfit.simulate":
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "migfit.simulate."):
                deps.add((node.module or "").rsplit(".", 1)[1])
        out[path.stem] = deps - {path.stem}
    return out


def test_no_import_circle() -> None:
    graph = _imports()
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        if state.get(name) == 2:
            return
        assert state.get(name) != 1, " -> ".join([*trail, name])
        state[name] = 1
        for dep in sorted(graph.get(name, ())):
            visit(dep, [*trail, name])
        state[name] = 2

    for name in sorted(graph):
        visit(name, [])
    assert "engine" not in graph["metrics"] | graph["scheduler"] | graph["world"]


def test_no_type_checking_imports() -> None:
    for path in FOLDER.glob("*.py"):
        assert "TYPE_CHECKING" not in path.read_text(encoding="utf-8"), path.name
