"""Memory of the real server processes under hostile load stays bounded (issue 12, items 1-2).

Each test starts ``migfit extender`` or ``migfit webhook`` as its own process, reads its RSS
from /proc, and loads it over real sockets:

- the extender, 30 /filter and /prioritize calls of 50,000 node names it has never seen, grows
  by at most 80 MiB (it grew by 268 MB: memo tables kept every name);
- the webhook, 3,000 idle TLS connections opened at once, grows by at most 150 MiB (2,000 took
  562 MB: no cap, an hour's keep-alive, a 256 KiB TLS buffer each), and a valid admission sent
  during the flood on an already open connection (as kube-apiserver's pool would) still gets
  its answer;
- the extender, 25 slow clients each sending 30 MiB of a 31 MiB call, grows by at most
  200 MiB (it grew by 978 MiB: every body being received was held; now the budget of bodies
  in flight holds 4 of them and answers the rest 503);
- the extender, five connections left idle after a 30 MiB call each, grows by at most 60 MiB
  (210 MiB: each kept its last request's body until the keep-alive timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from migfit import snapshots
from migfit.certs import certificates

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20
pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def rss(pid: int) -> int:
    """Resident set size of ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


@contextlib.contextmanager
def running(args: list[str], port: int, *, tls: ssl.SSLContext | None = None,
            path: str = "/readyz", loop: str | None = None,
            extra_env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``migfit ARGS`` as a process (on event ``loop``, default the servers' own choice;
    ``extra_env`` added to its environment), once ``path`` answers 200; stopped afterwards."""
    env = {**os.environ, **(extra_env or {})}
    if loop is not None:
        env["MIGFIT_EVENT_LOOP"] = loop
    proc = subprocess.Popen(["migfit", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            with contextlib.suppress(OSError):
                status = asyncio.run(_get(port, path, tls))
                if status == 200:
                    break
            assert time.monotonic() < deadline, "the server did not get ready in 60 s"
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def extender(port: int, *more: str, extra_env: dict[str, str] | None = None
             ) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """``migfit extender`` on the example cluster at 127.0.0.1:``port`` (``running``)."""
    return running(["extender", "--cluster", str(snapshots.EXAMPLE_CLUSTER), "--host",
                    "127.0.0.1", "--port", str(port), *more], port, extra_env=extra_env)


# glibc raises its mmap threshold (up to 32 MiB) each time it frees an mmapped block, so after
# the first 30 MiB body the next ones come from the heap, whose freed pages it may keep
# resident: under load the idle-connection test once read +67 MiB with nothing kept. A fixed
# threshold returns every freed body at once; a body kept on a request stays resident anyway.
_MMAP_EVERY_MIB = {"MALLOC_MMAP_THRESHOLD_": str(MIB)}


async def _get(port: int, path: str, tls: ssl.SSLContext | None) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n")
    writer.close()
    return int(head.split()[1])


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str,
                body: bytes) -> tuple[int, bytes]:
    writer.write(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                 f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    return int(head.split()[1]), await reader.readexactly(length)


def test_extender_memory_is_bounded_whatever_names_it_is_sent() -> None:
    port = _free_port()
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
           "spec": {"containers": [{"name": "c", "resources": {
               "limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}}

    async def calls(pid: int) -> tuple[int, int]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        before = 0
        # as many names per call as the extender takes (server.MAX_NODES), 1.5 million in all
        for call in range(101):
            names = [f"unseen-{call}-{i:05d}.nodes.example.com" for i in range(15_000)]
            body = json.dumps({"Pod": pod, "NodeNames": names, "Nodes": None}).encode()
            status, _ = await _post(reader, writer, "/filter" if call % 2 else "/prioritize",
                                    body)
            assert status == 200
            if call == 0:  # the first call's buffers and caches are the baseline
                before = rss(pid)
        writer.close()
        return before, rss(pid)

    with extender(port, "--log-level", "warning") as proc:
        before, after = asyncio.run(calls(proc.pid))
    growth = after - before
    print(f"extender RSS {before / MIB:.0f} -> {after / MIB:.0f} MiB after 100 calls of "
          f"15,000 unseen names (+{growth / MIB:.1f} MiB)")
    assert growth <= 80 * MIB


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_webhook_memory_is_bounded_under_3000_idle_tls_connections(tmp_path: Path,
                                                                  loop: str) -> None:
    cert, key, ca = certificates.self_signed_for_localhost()
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    client = ssl.create_default_context(cadata=ca.decode())
    port = _free_port()
    review = (REPO / "examples" / "requests" / "create-12gi.json").read_bytes()

    async def flood(pid: int) -> tuple[int, int, int, float, float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        t = time.perf_counter()
        status, _ = await _post(reader, writer, "/mutate", review)
        usual = time.perf_counter() - t
        assert status == 200
        before = rss(pid)

        async def idle() -> asyncio.StreamWriter | None:
            try:
                _, w = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port, ssl=client), 30)
                return w
            except (OSError, ssl.SSLError, TimeoutError):
                return None

        held = await asyncio.gather(*(idle() for _ in range(3000)))
        await asyncio.sleep(1.0)
        during = rss(pid)
        t = time.perf_counter()
        status, answer = await _post(reader, writer, "/mutate", review)
        latency = time.perf_counter() - t
        assert status == 200 and json.loads(answer)["response"]["allowed"] is True
        opened = sum(1 for w in held if w is not None)
        for w in held:
            if w is not None:
                w.transport.abort()
        writer.close()
        return before, during, opened, usual, latency

    # keep-alive long enough that the flood stays open while it is measured
    with running(["webhook", "--tls-cert", str(tmp_path / "tls.crt"), "--tls-key",
                  str(tmp_path / "tls.key"), "--cluster", str(snapshots.EXAMPLE_CLUSTER),
                  "--host", "127.0.0.1", "--port", str(port), "--keepalive-timeout", "120",
                  # every connection comes from 127.0.0.1: this measures the global bound
                  "--max-connections-per-client", "1000",
                  "--log-level", "error"], port, tls=client, loop=loop) as proc:
        before, during, opened, usual, latency = asyncio.run(flood(proc.pid))
    growth = during - before
    print(f"{loop}: webhook RSS {before / MIB:.0f} -> {during / MIB:.0f} MiB with {opened} "
          f"of 3,000 "
          f"idle TLS connections open (+{growth / MIB:.1f} MiB, "
          f"{growth / max(opened, 1) / 1024:.0f} KiB each); admission {usual * 1000:.1f} ms "
          f"before, {latency * 1000:.1f} ms during")
    assert growth <= 150 * MIB
    assert opened >= 900  # the cap (1,000 by default, one held by the admission's client)
    assert latency < max(1.0, 20 * usual)



def test_extender_memory_is_bounded_under_25_slow_30_mib_bodies() -> None:
    """25 clients each send 30 MiB of a 31 MiB call, then stall (as slow clients do): the
    extender held every body being received (more than 750 MiB; each body is within
    --max-body, 32 MiB). Now the bodies being received at once are held to
    --max-body-in-flight (by default 4 × --max-body): the calls beyond get 503 before a
    byte of their body is read, and what they send is dropped."""
    port = _free_port()
    chunk = b" " * MIB
    head = (b"POST /filter HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(31 * MIB).encode() + b"\r\n\r\n")

    async def flood(pid: int) -> tuple[int, int, int]:
        before = rss(pid)

        async def slow(client: int) -> tuple[asyncio.StreamWriter, asyncio.Task[bytes]]:
            # 25 clients, each from its own address: this measures the global bound (one
            # address may hold a share of it only)
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=(f"127.0.1.{client}", 0))
            answer = asyncio.create_task(reader.read(200))
            writer.write(head)
            with contextlib.suppress(OSError):  # refused: closed once its 503 was sent
                for _ in range(30):
                    writer.write(chunk)
                    await writer.drain()
            return writer, answer

        sent = await asyncio.gather(*(slow(i + 1) for i in range(25)))
        peak = before
        for _ in range(20):  # what the server holds while the bodies wait for their end
            peak = max(peak, rss(pid))
            await asyncio.sleep(0.05)
        refused = 0
        for writer, answer in sent:
            with contextlib.suppress(OSError, TimeoutError):
                if (await asyncio.wait_for(answer, 0.1)).startswith(b"HTTP/1.1 503"):
                    refused += 1
            writer.transport.abort()
            answer.cancel()
        return before, peak, refused

    with extender(port, "--log-level", "error", "--body-timeout", "60") as proc:
        before, peak, refused = asyncio.run(flood(proc.pid))
    growth = peak - before
    print(f"extender RSS {before / MIB:.0f} -> {peak / MIB:.0f} MiB with 25 slow bodies of "
          f"30 MiB (+{growth / MIB:.0f} MiB); {refused} answered 503")
    assert growth <= 200 * MIB


def test_extender_keeps_no_body_on_an_idle_connection() -> None:
    """aiohttp keeps a keep-alive connection's last request until the next one, and
    ``request.read()`` kept the body on it: five connections left idle after a 30 MiB call
    each held 150 MiB and more until the keep-alive timeout, where the body budget saw
    nothing. ``serving.read_body`` keeps no copy of it on the request."""
    port = _free_port()
    body = b"[" + b" " * (30 * MIB - 2) + b"]"  # 30 MiB, not an ExtenderArgs: a 400

    async def calls(pid: int) -> tuple[int, int]:
        before = rss(pid)
        held = []
        for _ in range(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            status, _ = await _post(reader, writer, "/filter", body)
            assert status == 400
            held.append(writer)
        await asyncio.sleep(0.5)
        after = rss(pid)
        for writer in held:
            writer.close()
        return before, after

    with extender(port, "--log-level", "error", extra_env=_MMAP_EVERY_MIB) as proc:
        before, after = asyncio.run(calls(proc.pid))
    growth = after - before
    print(f"extender RSS {before / MIB:.0f} -> {after / MIB:.0f} MiB with 5 connections idle "
          f"after a 30 MiB call each (+{growth / MIB:.0f} MiB)")
    assert growth <= 60 * MIB
