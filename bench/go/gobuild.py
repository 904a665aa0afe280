"""Builds the Go floors of ``bench/`` (``bench/go/<command>``, standard library only).

    from gobuild import go_build   # with bench/go on sys.path
    binary = go_build(tmp, "extender")   # None without a Go toolchain or on a failed build
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

GO_DIR = Path(__file__).resolve().parent


def go_build(tmp: Path, command: str) -> Path | None:
    """``go build`` of ``bench/go/<command>`` into ``tmp`` (no network: the module has no
    dependencies); None without ``go`` on PATH or when the build fails (the reason printed)."""
    go = shutil.which("go")
    if go is None:
        return None
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    if "GOCACHE" not in env and not os.environ.get("HOME"):
        env["GOCACHE"] = str(tmp / "gocache")
    out = tmp / command
    done = subprocess.run([go, "build", "-o", str(out), f"./{command}"], cwd=GO_DIR, env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        print(f"  (go build ./{command} failed, no Go floor: {done.stderr.strip()[:500]})")
        return None
    return out


def go_version() -> str:
    """``go version``'s line, or "" without a toolchain."""
    go = shutil.which("go")
    if go is None:
        return ""
    return subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip()
