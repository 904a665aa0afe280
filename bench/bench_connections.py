"""RSS per idle TLS connection to the webhook: aiohttp's defaults against ``migfit.serving``.

    python bench/bench_connections.py [--connections 1000]

Starts the webhook twice as its own process over the bundled example cluster: once served
the way it was before (``web.TCPSite`` with its defaults: no connection cap, asyncio's 256 KiB
TLS buffer per connection, an hour's keep-alive), once as ``migfit webhook`` serves it now.
Opens N idle TLS connections to each and prints the RSS growth per connection.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from migfit import snapshots
from migfit.certs import certificates

REPO = Path(__file__).resolve().parents[1]

# The webhook app as it was served before migfit.serving: aiohttp's TCPSite and defaults.
BEFORE = """
import asyncio, ssl, sys
from aiohttp import web
from migfit import cluster, snapshots, sources
from migfit.webhook import server
cert, key, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
async def main() -> None:
    view = cluster.Cluster()
    sources.open_source(view, cluster_file=str(snapshots.EXAMPLE_CLUSTER), kubeconfig=None,
                        in_cluster=False, context=None)
    app = server.make_app(server.Settings(tls_cert=cert, tls_key=key), view)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()
    await asyncio.Event().wait()
asyncio.run(main())
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@contextlib.contextmanager
def _process(cmd: list[str], port: int, tls: ssl.SSLContext) -> Iterator[int]:
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[:3]} exited with {proc.returncode}")
            try:
                asyncio.run(_open(port, tls, 1))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def _open(port: int, tls: ssl.SSLContext, n: int) -> list[asyncio.StreamWriter]:
    async def one() -> asyncio.StreamWriter | None:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
            return w
        except (OSError, ssl.SSLError):
            return None
    out = [w for w in await asyncio.gather(*(one() for _ in range(n))) if w is not None]
    if n == 1 and not out:
        raise OSError("not listening yet")
    return out


def _measure(pid: int, port: int, tls: ssl.SSLContext, n: int) -> tuple[int, int]:
    async def run() -> tuple[int, int]:
        before = _rss(pid)
        held = await _open(port, tls, n)
        await asyncio.sleep(1.0)
        after = _rss(pid)
        for w in held:
            w.transport.abort()
        return len(held), after - before
    return asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    a = parser.parse_args()
    cert, key, ca = certificates.self_signed_for_localhost()
    tls = ssl.create_default_context(cadata=ca.decode())
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "tls.crt").write_bytes(cert)
        (Path(tmp) / "tls.key").write_bytes(key)
        paths = [str(Path(tmp) / "tls.crt"), str(Path(tmp) / "tls.key")]
        for label, make in (
            ("before (aiohttp defaults)",
             lambda port: [sys.executable, "-c", BEFORE, *paths, str(port)]),
            ("after (migfit.serving)",
             lambda port: ["migfit", "webhook", "--tls-cert", paths[0], "--tls-key", paths[1],
                           "--cluster", str(snapshots.EXAMPLE_CLUSTER), "--host", "127.0.0.1",
                           "--port", str(port), "--log-level", "error"])):
            port = _free_port()
            with _process(make(port), port, tls) as pid:
                opened, growth = _measure(pid, port, tls, a.connections)
            print(f"{label}: {opened} of {a.connections} idle TLS connections open, RSS "
                  f"+{growth / 2**20:.0f} MiB, {growth / max(opened, 1) / 1024:.0f} KiB each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
