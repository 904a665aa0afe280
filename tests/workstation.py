"""Run a migfit command as a person would, against a test's kmock emulator: a kubeconfig
naming the emulator, the command as a real process (the emulator keeps serving on the test's
event loop meanwhile), no ~/.kube/config of the machine running the tests."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]


def kubeconfig(path: pathlib.Path, url: str, *, namespace: str | None = None) -> pathlib.Path:
    context: dict[str, Any] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t0k3n"}}],
        "contexts": [{"name": "c", "context": context}], "current-context": "c"}))
    return path


def env(kubeconfig: pathlib.Path | None, home: pathlib.Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    out["HOME"] = str(home)  # no ~/.kube/config of the machine running the tests
    if kubeconfig is not None:
        out["KUBECONFIG"] = str(kubeconfig)
    return out


async def migfit(*args: str, kubeconfig: pathlib.Path | None, home: pathlib.Path,
                 ) -> tuple[subprocess.CompletedProcess[str], float]:
    """The command as a real process, and how long it took."""
    began = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "migfit.cli", *args, cwd=ROOT, env=env(kubeconfig, home),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    done = subprocess.CompletedProcess(list(args), proc.returncode or 0, out.decode(),
                                       err.decode())
    return done, time.monotonic() - began


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The message of a command that failed on its arguments or input as migfit should: exit
    2, one ``migfit: error: ...`` line on stderr, no traceback."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("migfit: error: "), done.stderr
    return lines[0].removeprefix("migfit: error: ")
