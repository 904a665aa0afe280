"""The rendered deploy/ tree, shared by the deploy tests: `kubectl kustomize` once per target."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
TARGETS = ("base", "overlays/second-scheduler", "overlays/default-scheduler",
           "overlays/cert-manager", "overlays/prometheus-operator",
           "overlays/apply-custom-configs")
NAMESPACE = "migfit-system"
KUBECTL = shutil.which("kubectl")

needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl is not installed: `kubectl kustomize` renders deploy/")

Obj = dict[str, Any]


@functools.cache
def _render_text(target: str) -> str:
    assert KUBECTL is not None
    done = subprocess.run([KUBECTL, "kustomize", str(DEPLOY / target)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, f"kubectl kustomize deploy/{target} failed:\n{done.stderr}"
    return done.stdout


def render(target: str) -> list[Obj]:
    """The objects of ``deploy/<target>`` as `kubectl kustomize` renders them (fresh copies)."""
    return [doc for doc in yaml.safe_load_all(_render_text(target)) if doc]


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def label(obj: Obj) -> str:
    meta = obj.get("metadata", {})
    ns = meta.get("namespace")
    return f"{obj.get('kind')} {ns + '/' if ns else ''}{meta.get('name')}"
