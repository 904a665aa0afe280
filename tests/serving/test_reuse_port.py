"""--reuse-port: several server processes share one port (one per core), the kernel spreads
new connections over them, and one of them going away leaves the port served."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from migfit import errors, serving

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["migfit", "extender", "--host", "127.0.0.1", "--port", str(port), "--reuse-port",
         "--cluster", str(ROOT / "examples" / "cluster.yaml")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _ready(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing ready on port {port}")


@pytest.fixture
def two_servers() -> Iterator[tuple[int, list[subprocess.Popen[str]]]]:
    port = _free_port()
    procs = [_start(port)]
    _ready(port)
    procs.append(_start(port))
    try:
        yield port, procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_two_processes_serve_one_port(two_servers: tuple[int, list[subprocess.Popen[str]]]
                                      ) -> None:
    port, (first, second) = two_servers
    time.sleep(2.0)  # the second one loads the cluster and binds
    assert second.poll() is None, second.stderr.read() if second.stderr else ""
    first.terminate()
    first.wait(timeout=15)
    _ready(port)  # the second process still serves the port


def test_the_port_check_before_start_lets_reuse_port_share() -> None:
    """`migfit serve` checks its ports before writing --cert-dir (``serving.check_free``); with
    --reuse-port a port that another --reuse-port process serves is not "in use" (the check
    had bound without SO_REUSEPORT, so a second `serve --reuse-port` exited 2)."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = int(other.getsockname()[1])
        shared = serving.Listen(host="127.0.0.1", port=port, port_flag="--webhook-port",
                                limits=serving.Limits(reuse_port=True))
        serving.check_free(shared)  # no error
        alone = serving.Listen(host="127.0.0.1", port=port, port_flag="--webhook-port")
        with pytest.raises(errors.UsageError, match="another process listens there"):
            serving.check_free(alone)
