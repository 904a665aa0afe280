"""A second Ctrl-C during a server's graceful shutdown stops it at once: exit status 130, one
log line, no traceback (the real commands, real sockets, SIGINT sent twice).

Before: ``migfit serve`` left the second SIGINT to Python's default handler, which raised
KeyboardInterrupt wherever the event loop was; asyncio's teardown then cancelled aiohttp's
half-stopped connection handlers, and tracebacks were printed ("unhandled exception during
asyncio.run() shutdown", InvalidStateError). ``migfit extender`` and ``migfit webhook``
ignored it: they drained (--drain-delay) and waited for the requests in flight as if it had
not come.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from migfit.certs import certificates

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = str(ROOT / "examples" / "cluster.yaml")
PROMPT_S = 5.0  # the hurried shutdown and the process's exit, with room for a slow machine


@pytest.fixture(autouse=True)
def _sigint_not_ignored() -> Iterator[None]:
    """The servers started here get SIGINT as a terminal's Ctrl-C would send it. A shell starts
    background jobs (``pytest &``) with SIGINT ignored and children inherit that; Python then
    installs no handler of its own, and a SIGINT before the loop's handlers was lost. A handler
    set here is reset to the default in each child at exec."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A ``migfit`` server process whose output (stdout and stderr) is collected by a thread."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            ["migfit", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, within: float = 60.0) -> None:
        deadline = time.monotonic() + within
        while text not in self.output:
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.output}"
            assert time.monotonic() < deadline, f"no {text!r} within {within}s:\n{self.output}"
            time.sleep(0.05)

    def exit_within(self, seconds: float) -> int:
        try:
            code = self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"still running {seconds}s after the second SIGINT:\n{self.output}")
        self._reader.join(5)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Trickle:
    """Requests whose bodies arrive a few bytes at a time (in flight until the end)."""

    def __init__(self, targets: list[tuple[int, bytes, bool]], per_target: int = 4) -> None:
        self._stop = threading.Event()
        self._socks: list[socket.socket] = []
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE  # a throwaway certificate: only the bytes matter
        for port, path, secure in targets:
            for _ in range(per_target):
                sock = socket.create_connection(("127.0.0.1", port))
                if secure:
                    sock = tls.wrap_socket(sock, server_hostname="localhost")
                sock.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: "
                             b"application/json\r\nContent-Length: 10000000\r\n\r\n{")
                self._socks.append(sock)
        self._threads = [threading.Thread(target=self._send, args=(s,), daemon=True)
                         for s in self._socks]
        for thread in self._threads:
            thread.start()

    def _send(self, sock: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                sock.sendall(b" " * 100)
                time.sleep(0.001)
        except OSError:
            pass

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        for sock in self._socks:
            sock.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Server, int, int]]:
    hook, ext = _free_port(), _free_port()
    # no --cert-dir: the throwaway CA key lives in a temporary folder, which must go
    server = Server(["serve", "--webhook-port", str(hook), "--extender-port", str(ext)],
                    env={"TMPDIR": str(tmp_path)})
    try:
        server.wait_for("Stop with Ctrl-C")
        yield server, hook, ext
    finally:
        server.stop()


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:  # accepted into the backlog as the listener closed: again
        return False
    return False


def _wait_refused(server: Server, port: int, within: float = 10.0) -> None:
    """Until ``port`` refuses connections: the shutdown has begun (its listener closed)."""
    deadline = time.monotonic() + within
    while not _refused(port):
        assert time.monotonic() < deadline, server.output
        time.sleep(0.02)

def _check_quiet_exit(server: Server, code: int) -> None:
    assert code == 130, server.output
    assert "Traceback" not in server.output, server.output
    assert " ERROR " not in server.output, server.output
    hurried = [line for line in server.lines if "SIGINT again" in line]
    assert len(hurried) == 1, server.output


def test_a_second_ctrl_c_stops_serve_at_once_without_a_traceback(
        served: tuple[Server, int, int], tmp_path: Path) -> None:
    server, hook, ext = served
    trickle = Trickle([(hook, b"/mutate", True), (ext, b"/filter", True)])
    try:
        time.sleep(0.3)
        server.proc.send_signal(signal.SIGINT)
        # The shutdown has begun (the extender's listener is closed, the first stopped) and
        # waits for the requests in flight (up to --shutdown-timeout's 10 s).
        _wait_refused(server, ext)
        time.sleep(0.3)
        assert server.proc.poll() is None, server.output
        server.proc.send_signal(signal.SIGINT)
        start = time.monotonic()
        code = server.exit_within(PROMPT_S)
    finally:
        trickle.close()
    _check_quiet_exit(server, code)
    assert time.monotonic() - start < PROMPT_S
    assert list(tmp_path.glob("migfit-serve-*")) == []  # the CA key removed on the way out


@pytest.mark.parametrize("command", ["extender", "webhook"])
def test_a_second_ctrl_c_cuts_the_drain_short(command: str, tmp_path: Path) -> None:
    port = _free_port()
    args = ["--host", "127.0.0.1", "--port", str(port), "--cluster", CLUSTER,
            "--drain-delay", "30"]
    if command == "webhook":
        cert, key, _ = certificates.self_signed_for_localhost()
        (tmp_path / "tls.crt").write_bytes(cert)
        (tmp_path / "tls.key").write_bytes(key)
        args += ["--tls-cert", str(tmp_path / "tls.crt"), "--tls-key", str(tmp_path / "tls.key")]
        ready, path = "webhook serving", b"/mutate"
    else:
        args += ["--no-publish"]
        ready, path = "extender serving", b"/filter"
    server = Server([command, *args])
    trickle = None
    try:
        server.wait_for(ready)
        trickle = Trickle([(port, path, command == "webhook")], per_target=2)
        time.sleep(0.3)
        server.proc.send_signal(signal.SIGINT)
        server.wait_for("draining for 30.0s", within=10)
        server.proc.send_signal(signal.SIGINT)
        start = time.monotonic()
        code = server.exit_within(PROMPT_S)
    finally:
        if trickle is not None:
            trickle.close()
        server.stop()
    _check_quiet_exit(server, code)
    assert time.monotonic() - start < PROMPT_S


def test_a_ctrl_c_while_the_command_loads_is_130_without_a_traceback() -> None:
    """Ctrl-C in the first second, while ``migfit serve`` imports its modules (building the
    parser loads the command's), used to print a KeyboardInterrupt traceback (exit -2). The
    signal is sent at several moments, so that some land while it loads: none prints a
    traceback, and one that stopped it before it served exits 130."""
    early = []
    for delay in (0.1, 0.2, 0.3, 0.45, 0.6, 0.8):
        port_w, port_e = _free_port(), _free_port()
        proc = subprocess.Popen(
            ["migfit", "serve", "--webhook-port", str(port_w), "--extender-port", str(port_e)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            pytest.fail(f"still running 30 s after a SIGINT at {delay} s: {out[-2000:]}")
        assert "Traceback" not in out, (delay, out[-3000:])
        assert proc.returncode in (0, 130, -signal.SIGINT), (delay, proc.returncode, out)
        if proc.returncode == 130 and "Stop with" not in out:
            early.append(delay)
    assert early, "no SIGINT landed before the server started: send them earlier"


def test_a_third_signal_exits_at_once_and_removes_the_throwaway_key(tmp_path: Path) -> None:
    """The third signal exits at once (``os._exit``: 128 + its number), where nothing else
    runs: ``migfit serve`` removes its temporary folder with the CA's private key first (it
    was left behind). Sent right after the second, while the hurried shutdown still runs;
    tried a few times, since the shutdown may finish first (then the usual 130)."""
    thirds = 0
    for attempt in range(4):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        hook, ext = _free_port(), _free_port()
        server = Server(["serve", "--webhook-port", str(hook), "--extender-port", str(ext)],
                        env={"TMPDIR": str(folder)})
        trickle = None
        try:
            server.wait_for("Stop with Ctrl-C")
            assert len(list(folder.glob("migfit-serve-*"))) == 1
            trickle = Trickle([(hook, b"/mutate", True), (ext, b"/filter", True)])
            time.sleep(0.3)
            server.proc.send_signal(signal.SIGINT)
            _wait_refused(server, ext)
            server.proc.send_signal(signal.SIGINT)
            time.sleep(0.002)
            server.proc.send_signal(signal.SIGTERM)
            code = server.exit_within(PROMPT_S)
        finally:
            if trickle is not None:
                trickle.close()
            server.stop()
        assert "Traceback" not in server.output, server.output
        assert list(folder.glob("migfit-serve-*")) == [], (code, server.output)
        if "SIGTERM a third time: exiting now" in server.output:
            assert code == 128 + signal.SIGTERM, server.output
            thirds += 1
        elif "SIGTERM after the shutdown: exiting now" in server.output:
            assert code == 128 + signal.SIGTERM, server.output  # the block had ended
        else:
            assert code == 130, server.output
    assert thirds, "no third signal arrived before the hurried shutdown had finished"


def test_two_ctrl_cs_close_together_never_end_serve_by_the_signal(tmp_path: Path) -> None:
    """Two SIGINTs 5 to 100 ms apart: the first starts the shutdown (one line says so), the
    second either finds the process gone or is answered with a line and exit 130. Before,
    the shutdown was over within a few ms and the interpreter's teardown, which puts the
    default handlers back first, took a fifth of a second more: the second SIGINT ended
    the process by the signal itself (-2), with no line, and the first logged nothing."""
    for attempt, gap in enumerate((0.005, 0.02, 0.05, 0.1)):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        hook, ext = _free_port(), _free_port()
        server = Server(["serve", "--webhook-port", str(hook), "--extender-port", str(ext)],
                        env={"TMPDIR": str(folder)})
        try:
            server.wait_for("Stop with Ctrl-C")
            server.proc.send_signal(signal.SIGINT)
            time.sleep(gap)
            if server.proc.poll() is None:
                server.proc.send_signal(signal.SIGINT)
            code = server.exit_within(PROMPT_S)
        finally:
            server.stop()
        out = server.output
        assert code in (0, 130), (gap, code, out)
        assert "Traceback" not in out and " ERROR " not in out, (gap, out)
        assert out.count("shutting down") == 1, (gap, out)
        if code == 130:
            assert "SIGINT again" in out or "SIGINT after the shutdown" in out, (gap, out)
        assert list(folder.glob("migfit-serve-*")) == [], (gap, out)
