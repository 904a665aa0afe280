"""`migfit serve` end to end: the installed command, real sockets and TLS, the README requests."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = ROOT / "examples" / "requests"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _interrupt(proc: subprocess.Popen[str]) -> None:
    """Ctrl-C, as a user stops `migfit serve`; killed should it not end within 15 s."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()


class Served:
    def __init__(self, proc: subprocess.Popen[str], ca: Path, hook: str, ext: str,
                 banner: str) -> None:
        self.proc, self.ca, self.hook, self.ext, self.banner = proc, ca, hook, ext, banner
        self.context = ssl.create_default_context(cafile=str(ca))

    def post(self, url: str, body: bytes) -> Any:
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=self.context, timeout=10) as resp:
            return json.loads(resp.read())

    def get(self, url: str) -> Any:
        with urllib.request.urlopen(url, context=self.context, timeout=10) as resp:
            return json.loads(resp.read())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    hook_port, ext_port = _free_port(), _free_port()
    cert_dir = tmp_path_factory.mktemp("serve-certs")
    proc = subprocess.Popen(
        ["migfit", "serve", "--webhook-port", str(hook_port), "--extender-port", str(ext_port),
         "--cert-dir", str(cert_dir)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "Stop with Ctrl-C" in line:
            break
    banner = "".join(lines)
    if "Stop with Ctrl-C" not in banner:
        proc.kill()
        pytest.fail(f"migfit serve did not start:\n{banner}")
    try:
        yield Served(proc, cert_dir / "ca.crt", f"https://127.0.0.1:{hook_port}",
                     f"https://127.0.0.1:{ext_port}", banner)
    finally:
        _interrupt(proc)


def test_banner_prints_urls_and_curl_commands(served: Served) -> None:
    assert f"{served.hook}/mutate" in served.banner
    assert f"{served.ext}/filter" in served.banner
    commands = re.findall(r"curl .*", served.banner)
    assert len(commands) >= 5
    for cmd in commands:
        for ref in re.findall(r"@(\S+\.json)", cmd):
            assert (ROOT / ref).is_file(), f"the walk-through names a missing file: {ref}"


def test_webhook_patches_the_12gi_pod(served: Served) -> None:
    review = served.post(f"{served.hook}/mutate", (REQUESTS / "create-12gi.json").read_bytes())
    response = review["response"]
    assert response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    # The example cluster has an H200, whose 1g.18gb (16384 MiB) is the smallest fit for 12Gi.
    assert "nvidia.com~1mig-1g.18gb" in json.dumps(patch)


def test_extender_explains_the_seed_node(served: Served) -> None:
    result = served.post(f"{served.ext}/filter",
                         (REQUESTS / "filter-1g10gb.json").read_bytes())
    assert "re-layout" in result["FailedAndUnresolvableNodes"]["gpu-a100-0"]
    assert "gpu-a100-1" in result["FailedNodes"]


def test_prioritize_scores_every_feasible_node(served: Served) -> None:
    body = (REQUESTS / "prioritize-3g40gb.json").read_bytes()
    names = json.loads(body)["NodeNames"]
    scores = served.post(f"{served.ext}/prioritize", body)
    assert sorted(s["Host"] for s in scores) == sorted(names)
    assert all(0 <= s["Score"] <= 10 for s in scores)


def test_advice_flags_the_seed_node(served: Served) -> None:
    advice = served.get(f"{served.ext}/advice")
    nodes = [r["node"] for r in advice["recommendations"]]
    assert "gpu-a100-0" in nodes


def test_serve_refuses_a_busy_port(served: Served) -> None:
    port = served.hook.rsplit(":", 1)[1]
    proc = subprocess.run(
        [sys.executable, "-m", "migfit.cli", "serve", "--webhook-port", port,
         "--extender-port", str(_free_port())],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "cannot listen" in proc.stderr


# The README's walk-through shows real answers of this server (tests/cli/readme.py reads them).

def test_the_readme_filter_example_is_the_real_answer(served: Served) -> None:
    from readme import block_after
    shown = block_after("**A filter result.**").text
    real = served.post(f"{served.ext}/filter", (REQUESTS / "filter-1g10gb.json").read_bytes())
    # as the walkthrough's `python3 -m json.tool --indent 2 --no-ensure-ascii` prints it
    printed = json.dumps(real, indent=2, ensure_ascii=False)
    assert printed.strip() == shown.strip(), (
        f"README.md's filter example is stale; the answer is:\n{printed}")
    assert "python3 -m json.tool --indent 2 --no-ensure-ascii" in served.banner


def _next_line_with(proc: subprocess.Popen[str], text: str, timeout_s: float) -> str:
    """The next line of the server's output containing ``text`` (read on a helper thread:
    the pipe's text buffer may already hold it, which select() would not see)."""
    import threading
    assert proc.stdout is not None
    stream = proc.stdout
    found: list[str] = []

    def read() -> None:
        for line in stream:
            if text in line:
                found.append(line.rstrip("\n"))
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    assert found, f"migfit serve printed no line with {text!r}"
    return found[0]


def test_the_readme_scoring_line_is_the_real_one(served: Served) -> None:
    from readme import block_after
    shown = block_after("**Scoring log lines.**").text.strip()
    served.post(f"{served.ext}/prioritize", (REQUESTS / "prioritize-3g40gb.json").read_bytes())
    real = _next_line_with(served.proc, "prioritize ", timeout_s=10)
    real = real[real.index("prioritize "):]
    def durationless(line: str) -> str:
        return re.sub(r"\d+\.\d+ ms$", "N ms", line)
    assert durationless(real) == durationless(shown), (
        f"README.md's scoring line is stale; the server prints:\n{real}")


def test_sigterm_while_starting_removes_the_throwaway_certificates(tmp_path: Path) -> None:
    # Without --cert-dir the CA key sits in a temporary folder. SIGTERM before the servers
    # had taken it over killed the process outright and left that folder (and key) behind.
    proc = subprocess.Popen(
        ["migfit", "serve", "--webhook-port", str(_free_port()), "--extender-port",
         str(_free_port())], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob("migfit-serve-*")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert list(tmp_path.glob("migfit-serve-*")), "serve made no certificate folder"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (0, 128 + signal.SIGTERM), out
    assert "Traceback" not in out
    assert list(tmp_path.glob("migfit-serve-*")) == []


@pytest.mark.parametrize("host, url_host", [("0.0.0.0", "127.0.0.1"), ("::1", "[::1]")])
def test_the_printed_commands_work_on_any_host_and_from_any_folder(
        tmp_path: Path, host: str, url_host: str) -> None:
    """With `--host 0.0.0.0` the commands sent curl to https://0.0.0.0:..., which the
    throwaway certificate does not name; with `--host ::1` to https://::1:..., no URL at all;
    started outside the checkout, they read `@<migfit checkout>/examples/...` (an outside
    check). Each printed request, sent as printed, is answered."""
    hook_port, ext_port = _free_port(), _free_port()
    proc = subprocess.Popen(
        ["migfit", "serve", "--host", host, "--webhook-port", str(hook_port),
         "--extender-port", str(ext_port), "--cert-dir", str(tmp_path / "certs")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    try:
        lines: list[str] = []
        while not lines or "Stop with Ctrl-C" not in lines[-1]:
            line = proc.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        sent = [re.search(r"--data @(\S+) (https://\S+)", ln) for ln in lines]
        requests = [(Path(m[1]), m[2]) for m in sent if m]
        assert len(requests) == 5, "".join(lines)
        context = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.crt"))
        for path, url in requests:
            assert path.is_absolute() and path.parent == REQUESTS, path
            assert url.startswith((f"https://{url_host}:{hook_port}/",
                                   f"https://{url_host}:{ext_port}/")), url
            req = urllib.request.Request(url, data=path.read_bytes(), method="POST",
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, context=context, timeout=10) as resp:
                assert resp.status == 200, url
    finally:
        _interrupt(proc)
