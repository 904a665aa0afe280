"""What an operator scrapes and reads: the real `migfit extender`, `webhook` and `serve` processes.

Each server runs as the installed command over real TLS; the tests scrape its ``/metrics``
and read its log stream (stderr) after it stops.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

import migfit
from migfit.certs import certificates

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = ROOT / "examples" / "requests"
CLUSTER = ROOT / "examples" / "cluster.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tls:
    def __init__(self, directory: Path) -> None:
        ca = certificates.create_ca(common_name="test CA")
        serving = certificates.issue_serving(ca=ca, sans=("localhost", "127.0.0.1"))
        self.ca, self.cert, self.key = (directory / "ca.crt", directory / "tls.crt",
                                        directory / "tls.key")
        self.ca.write_bytes(ca.cert_pem)
        self.cert.write_bytes(serving.cert_pem)
        self.key.write_bytes(serving.key_pem)
        self.expiry = x509.load_pem_x509_certificate(
            serving.cert_pem).not_valid_after_utc.timestamp()
        self.context = ssl.create_default_context(cafile=str(self.ca))


class Server:
    """A running command; ``stop()`` ends it and returns what it logged on stderr."""

    def __init__(self, args: list[str], *, tls: Tls, log: Path,
                 env: dict[str, str] | None = None) -> None:
        self.tls, self.log = tls, log
        self._err = log.open("w")
        self.proc = subprocess.Popen(["migfit", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=self._err, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})

    def wait_ready(self, base: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the server exited ({self.proc.returncode}):\n"
                            f"{self.log.read_text()}")
            try:
                with urllib.request.urlopen(f"{base}/readyz", context=self.tls.context,
                                            timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        pytest.fail(f"the server did not get ready:\n{self.log.read_text()}")

    def get(self, url: str) -> str:
        with urllib.request.urlopen(url, context=self.tls.context, timeout=10) as resp:
            return str(resp.read().decode())

    def post(self, url: str, body: bytes) -> Any:
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=self.tls.context, timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self) -> list[str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._err.close()
        return [line for line in self.log.read_text().splitlines() if line.strip()]


@pytest.fixture
def tls(tmp_path: Path) -> Tls:
    return Tls(tmp_path)


def _samples(text: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of one metric in a text exposition."""
    out: dict[str, float] = {}
    for m in re.finditer(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", text, re.M):
        out[m.group(1) or ""] = float(m.group(2))
    return out


def _check_common(text: str) -> None:
    # No `_created` series (they doubled every counter and histogram).
    assert "_created" not in text
    # migfit_build_info{python=...,version=...} 1
    (labels, value), = _samples(text, "migfit_build_info").items()
    assert value == 1.0 and f'version="{migfit.__version__}"' in labels and "python=" in labels
    # Every histogram is a `_duration_seconds` one.
    histograms = re.findall(r"^# TYPE (\S+) histogram$", text, re.M)
    assert histograms and all(h.endswith("_duration_seconds") for h in histograms), histograms


def _json_lines(lines: list[str]) -> list[dict[str, Any]]:
    records = []
    for line in lines:
        record = json.loads(line)  # every line of the stream is one JSON object
        assert isinstance(record, dict)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["time"]), line
        records.append(record)
    return records


class Scraped:
    def __init__(self, tls: Tls, text: str, advice: dict[str, Any], lines: list[str]) -> None:
        self.tls, self.text, self.advice, self.lines = tls, text, advice, lines


@pytest.fixture(scope="module")
def extender(tmp_path_factory: pytest.TempPathFactory) -> Scraped:
    """One `migfit extender --cluster` run over TLS with --log-format json: one prioritize
    call, then /metrics and /advice; its stderr once stopped."""
    directory = tmp_path_factory.mktemp("extender")
    tls = Tls(directory)
    port = _free_port()
    base = f"https://127.0.0.1:{port}"
    server = Server(["extender", "--cluster", str(CLUSTER), "--host", "127.0.0.1",
                     "--port", str(port), "--tls-cert", str(tls.cert), "--tls-key",
                     str(tls.key), "--log-format", "json"], tls=tls, log=directory / "err")
    try:
        server.wait_ready(base)
        server.post(f"{base}/prioritize", (REQUESTS / "prioritize-3g40gb.json").read_bytes())
        # /advice first: a scrape shows the advice computed last and never computes it
        # (that would stall filter and prioritize), so it follows /advice.
        advice = json.loads(server.get(f"{base}/advice"))
        text = server.get(f"{base}/metrics")
    finally:
        lines = server.stop()
    return Scraped(tls, text, advice, lines)


def test_extender_exports_its_certificate_expiry(extender: Scraped) -> None:
    # It exported none (README says both servers do).
    assert _samples(extender.text, "migfit_certificate_expiry_timestamp_seconds") == {
        '{server="extender"}': extender.tls.expiry}


def test_extender_metrics_have_build_info_no_created_and_duration_histograms(
        extender: Scraped) -> None:
    _check_common(extender.text)
    assert _samples(extender.text, "migfit_extender_request_duration_seconds_count") == {
        '{verb="prioritize"}': 1.0}


def test_no_fragmentation_gauge_for_a_cpu_only_node(extender: Scraped) -> None:
    fragmentation = _samples(extender.text, "migfit_extender_node_fragmentation")
    assert '{node="cpu-0"}' not in fragmentation
    assert '{node="gpu-a100-0"}' in fragmentation and len(fragmentation) == 7  # the MIG nodes


def test_relayout_gauges_agree_with_advice_without_a_publisher(extender: Scraped) -> None:
    # With --cluster nothing published the advice, and the gauges stayed 0.
    recs = extender.advice["recommendations"]
    assert recs
    disruptive = sum(bool(r["disruptive"]) for r in recs)
    assert _samples(extender.text, "migfit_relayout_recommendations") == {
        '{disruptive="false"}': len(recs) - disruptive, '{disruptive="true"}': disruptive}
    assert _samples(extender.text, "migfit_relayout_waiting_pods") == {
        "": len(extender.advice["waiting"])}
    assert _samples(extender.text, "migfit_relayout_unserved_pods") == {
        "": len(extender.advice["unserved"])}


def test_extender_json_log_is_one_stream_of_objects(extender: Scraped) -> None:
    # Operational lines and the scoring log's line together, each one JSON object.
    records = _json_lines(extender.lines)
    assert any(r.get("event") == "prioritize" and "weights" in r for r in records)
    assert any(r.get("logger") == "migfit.extender.server" and "serving https" in r["message"]
               for r in records)
    assert all({"time", "level", "logger"} <= set(r) for r in records)


def test_extender_text_log_keeps_both_scoring_lines_on_the_one_stream(
        tmp_path: Path, tls: Tls) -> None:
    port = _free_port()
    base = f"https://127.0.0.1:{port}"
    server = Server(["extender", "--cluster", str(CLUSTER), "--host", "127.0.0.1",
                     "--port", str(port), "--tls-cert", str(tls.cert), "--tls-key",
                     str(tls.key), "--log-format", "both"], tls=tls, log=tmp_path / "err")
    try:
        server.wait_ready(base)
        server.post(f"{base}/prioritize", (REQUESTS / "prioritize-3g40gb.json").read_bytes())
    finally:
        lines = server.stop()
    serving = [line for line in lines if "extender serving https" in line]
    assert len(serving) == 1
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO migfit\.extender", serving[0])
    assert any(line.startswith("prioritize batch/eval-queued-x7k2p 3g.40gb: ")
               for line in lines)
    assert any(json.loads(line).get("event") == "prioritize"
               for line in lines if line.startswith("{"))


def test_webhook_metrics_and_json_log(tmp_path: Path, tls: Tls) -> None:
    port = _free_port()
    base = f"https://127.0.0.1:{port}"
    server = Server(["webhook", "--cluster", str(CLUSTER), "--host", "127.0.0.1",
                     "--port", str(port), "--tls-cert", str(tls.cert), "--tls-key",
                     str(tls.key), "--log-format", "json", "--drain-delay", "0"],
                    tls=tls, log=tmp_path / "err")
    try:
        server.wait_ready(base)
        server.post(f"{base}/mutate", (REQUESTS / "create-12gi.json").read_bytes())
        text = server.get(f"{base}/metrics")
    finally:
        lines = server.stop()
    _check_common(text)
    assert _samples(text, "migfit_certificate_expiry_timestamp_seconds") == {
        '{server="webhook"}': tls.expiry}
    assert _samples(text, "migfit_webhook_admission_duration_seconds_count") == {"": 1.0}
    records = _json_lines(lines)
    assert any(r.get("logger") == "migfit.webhook.server" for r in records)


def test_serve_metrics_and_json_log(tmp_path: Path) -> None:
    hook_port, ext_port = _free_port(), _free_port()
    cert_dir = tmp_path / "certs"
    proc = subprocess.Popen(
        ["migfit", "serve", "--webhook-port", str(hook_port), "--extender-port", str(ext_port),
         "--cert-dir", str(cert_dir), "--log-format", "json"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=(tmp_path / "err").open("w"), text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    try:
        banner = ""
        deadline = time.monotonic() + 60
        while "Stop with Ctrl-C" not in banner and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            banner += line
        assert "Stop with Ctrl-C" in banner, (tmp_path / "err").read_text()
        context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
        body = (REQUESTS / "prioritize-3g40gb.json").read_bytes()
        req = urllib.request.Request(f"https://127.0.0.1:{ext_port}/prioritize", data=body,
                                     method="POST")
        with urllib.request.urlopen(req, context=context, timeout=10):
            pass
        # /advice first: the gauges show the advice computed last (a scrape never computes).
        with urllib.request.urlopen(f"https://127.0.0.1:{ext_port}/advice", context=context,
                                    timeout=10) as resp:
            advice = json.loads(resp.read())
        texts = {}
        for name, port in (("webhook", hook_port), ("extender", ext_port)):
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context,
                                        timeout=10) as resp:
                texts[name] = resp.read().decode()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    cert = x509.load_pem_x509_certificate((cert_dir / "tls.crt").read_bytes())
    expiry = cert.not_valid_after_utc.timestamp()
    for name, text in texts.items():
        _check_common(text)
        assert _samples(text, "migfit_certificate_expiry_timestamp_seconds") == {
            f'{{server="{name}"}}': expiry}
    assert sum(_samples(texts["extender"], "migfit_relayout_recommendations").values()) == \
        len(advice["recommendations"]) > 0
    lines = [line for line in (tmp_path / "err").read_text().splitlines() if line.strip()]
    records = _json_lines(lines)
    assert any(r.get("event") == "prioritize" for r in records)
    assert datetime.datetime.fromisoformat(records[0]["time"]).tzinfo is not None


def test_the_extenders_debug_log_has_each_refused_nodes_free_counts(
        tls: Tls, tmp_path: Path) -> None:
    """README: the filter's messages leave the free counts out, and they are in the debug
    log. The debug lines only repeated the messages ("every 1g.10gb instance is in use")."""
    port = _free_port()
    server = Server(["extender", "--host", "127.0.0.1", "--port", str(port), "--cluster",
                     str(CLUSTER), "--no-publish", "--tls-cert", str(tls.cert), "--tls-key",
                     str(tls.key), "--log-level", "debug"], tls=tls, log=tmp_path / "err")
    try:
        base = f"https://127.0.0.1:{port}"
        server.wait_ready(base)
        server.post(f"{base}/filter", (REQUESTS / "filter-1g10gb.json").read_bytes())
    finally:
        lines = server.stop()
    verdicts = {m.group(1): m.group(2) for m in (
        re.search(r" filter \S+: (\S+): (.*)$", line) for line in lines) if m}
    assert verdicts["gpu-a100-1"] == "every 1g.10gb instance is in use (free 1g.10gb 0/7)"
    assert verdicts["gpu-h100-0"] == ("every 1g.10gb instance is in use "
                                      "(free 1g.10gb 0/4, 2g.20gb 0/2, 3g.40gb 1/2)")
    assert verdicts["gpu-a100-0"].endswith("(see migfit advise) (free 3g.40gb 2/2)")


@pytest.mark.skipif(not shutil.which("openssl"), reason="needs the openssl command")
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_server_name_that_is_not_ascii_is_no_traceback(tmp_path: Path, tls: Tls,
                                                          loop: str) -> None:
    # With the certificate reloader's SNI callback, Python fails such a handshake (RFC 6066:
    # host names are ASCII) and printed the decoding error with a traceback on stderr, past
    # the JSON log, once per connection any peer could open.
    port = _free_port()
    base = f"https://127.0.0.1:{port}"
    server = Server(["webhook", "--cluster", str(CLUSTER), "--host", "127.0.0.1",
                     "--port", str(port), "--tls-cert", str(tls.cert), "--tls-key",
                     str(tls.key), "--log-format", "json", "--drain-delay", "0"],
                    tls=tls, log=tmp_path / "err", env={"MIGFIT_EVENT_LOOP": loop})
    try:
        server.wait_ready(base)
        for _ in range(3):
            subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}",
                            "-servername", b"caf\xc3\xa9.example".decode("utf-8")],
                           input=b"", capture_output=True, timeout=20, check=False)
        assert server.get(f"{base}/readyz")  # still serving
    finally:
        lines = server.stop()
    assert not [line for line in lines if not line.startswith("{")], lines
    assert "Traceback" not in "\n".join(lines)
