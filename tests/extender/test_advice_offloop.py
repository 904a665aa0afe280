"""The re-layout advice is computed off the event loop, in a forked child: filter and
prioritize never wait behind it.

Before, ``AdviceCache.get`` ran the advisor on the event loop for every /metrics scrape,
GET /advice and publisher pass: on 5,000 nodes with 3,000 pending pods a scrape took 8-9 s
and a /filter sent meanwhile waited as long (kube-scheduler's httpTimeout is 2 s). These
tests use a real extender on a real socket over a generated 800-node cluster, where the
advisor takes about a second, and observe the child (``/proc/PID/task/PID/children``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from migfit import advisor, cluster
from migfit.extender import advice, server

ROOT = Path(__file__).resolve().parents[2]
NODES, PODS = 800, 8000
T = 1_800_000_000.0  # the clock of the in-process caches


@pytest.fixture(scope="module")
def cluster_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("advice") / "cluster.json"
    subprocess.run([sys.executable, str(ROOT / "examples" / "generate_cluster.py"),
                    "--nodes", str(NODES), "--pods", str(PODS), "--format", "json",
                    "-o", str(path)], check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def objects(cluster_file: Path) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(cluster_file.read_text())["items"]
    return items


@pytest.fixture(scope="module")
def filter_body(objects: list[dict[str, Any]]) -> bytes:
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    pod = next(o for o in objects if o["kind"] == "Pod" and not o["spec"].get("nodeName"))
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()


@pytest.fixture(scope="module")
def model(objects: list[dict[str, Any]]) -> cluster.Cluster:
    """The cluster in this process (computing advice does not change it: shared)."""
    state = cluster.Cluster()
    cluster.load_objects(state, objects)
    state.mark_synced()
    return state


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    """The processes ``pid``'s main thread (the event loop's) forked and has not reaped."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process still running (a zombie is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as resp:
        body: bytes = resp.read()
        return body


def _post(url: str, body: bytes) -> bytes:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        answer: bytes = resp.read()
        return answer


class Extender:
    """``migfit extender --cluster FILE`` as a process."""

    def __init__(self, cluster_file: Path, log: Path) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        with log.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from migfit.cli import main; "
                 "sys.exit(main())", "extender", "--cluster", str(cluster_file),
                 "--host", "127.0.0.1", "--port", str(self.port), "--drain-delay", "0"],
                stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, log.read_text()
            try:
                if json.loads(_get(f"{self.base}/readyz")).get("ready"):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("the extender did not get ready")

    def child(self, until: threading.Thread, timeout: float = 30.0) -> int | None:
        """The child computing the advice, once there is one; None if ``until`` (the request
        that should start it) ends first, or none appears within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            alive = until.is_alive()  # before the look: a child it started is seen
            kids = _children(self.proc.pid)
            if kids:
                return kids[0]
            if not alive:
                return None
            time.sleep(0.002)
        return None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture()
def extender(cluster_file: Path, tmp_path: Path) -> Iterator[Extender]:
    ext = Extender(cluster_file, tmp_path / "err")
    try:
        yield ext
    finally:
        ext.stop()


def _in_thread(order: list[str], what: str, call: Any) -> threading.Thread:
    def run() -> None:
        call()
        order.append(what)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_filter_is_answered_while_get_advice_computes_the_advice(
        extender: Extender, filter_body: bytes) -> None:
    """GET /advice computes in a child; a /filter sent meanwhile is answered first, while
    the child still computes. Before: /advice computed on the event loop and the /filter
    was answered only after it (order ["advice", "filter"])."""
    base = extender.base
    _post(f"{base}/filter", filter_body)  # warm
    order: list[str] = []
    get_advice = _in_thread(order, "advice", lambda: _get(f"{base}/advice"))
    child = extender.child(until=get_advice)  # before: none; /advice has answered then
    answer = json.loads(_post(f"{base}/filter", filter_body))
    order.append("filter")
    computing = child is not None and _running(child)
    get_advice.join(60)
    assert answer["Error"] == "" and answer["NodeNames"]
    assert order == ["filter", "advice"]
    assert computing, "the advice was computed before the filter was answered"


def test_a_scrape_never_computes_the_advice(extender: Extender, filter_body: bytes) -> None:
    """/metrics answers at once with the advice computed last (none yet: zero) and starts
    the computation in the background; /advice awaits that one; the next scrape shows it.
    Before: the scrape computed it on the event loop (no child)."""
    base = extender.base
    order: list[str] = []
    scrape = _in_thread(order, "metrics", lambda: _get(f"{base}/metrics"))
    child = extender.child(until=scrape)
    scrape.join(30)
    assert order == ["metrics"]
    assert child is not None and _running(child), "the scrape computed the advice itself"
    doc = json.loads(_get(f"{base}/advice"))
    assert not _running(child)
    text = _get(f"{base}/metrics").decode()
    assert doc["waiting"]
    assert f"migfit_relayout_waiting_pods {float(len(doc['waiting']))}" in text


def test_no_child_is_left_after_the_server_stops(extender: Extender) -> None:
    """SIGTERM while a scrape's computation runs: the server kills and reaps the child."""
    order: list[str] = []
    scrape = _in_thread(order, "metrics", lambda: _get(f"{extender.base}/metrics"))
    child = extender.child(until=scrape)
    assert child is not None, "no child computed the advice"
    scrape.join(30)
    assert order == ["metrics"] and _running(child)
    extender.stop()
    assert extender.proc.returncode == 0, extender.log.read_text()
    assert not Path(f"/proc/{child}").exists(), "the advice's child outlived the server"


def test_a_killed_server_takes_its_child_along(extender: Extender) -> None:
    """SIGKILL leaves the server no time to clean up: the child dies with it
    (PR_SET_PDEATHSIG) rather than computing on as an orphan."""
    order: list[str] = []
    scrape = _in_thread(order, "metrics", lambda: _get(f"{extender.base}/metrics"))
    child = extender.child(until=scrape)
    assert child is not None, "no child computed the advice"
    scrape.join(30)
    extender.stop(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _running(child)


async def _get_advice(model: cluster.Cluster, cache: advice.AdviceCache
                      ) -> tuple[int, Any]:
    """``GET /advice`` once from a real extender serving ``model`` with ``cache``, then
    stopped: the status and the JSON body."""
    stop = asyncio.Event()
    port: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve(
        server.ExtenderSettings(host="127.0.0.1", port=0), model, advice_cache=cache,
        stop=stop, on_started=port.set_result))
    try:
        async with aiohttp.ClientSession() as session, \
                session.get(f"http://127.0.0.1:{await port}/advice") as resp:
            return resp.status, await resp.json()
    finally:
        stop.set()
        await task


async def test_get_advice_equals_the_synchronous_advice(model: cluster.Cluster) -> None:
    """What the child computed and sent back is what ``AdviceCache.get`` computes here."""
    cache = advice.AdviceCache(clock=lambda: T)
    status, served = await _get_advice(model, cache)
    assert status == 200
    assert cache.child is None
    expected = advice.AdviceCache(clock=lambda: T, off_loop=False).get(model)
    assert expected.recommendations and expected.waiting
    assert served == json.loads(json.dumps(expected.to_json()))
    assert cache.last() == expected  # the unpickled Advice itself, records included


def _advice_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == advice.log.name and r.levelno >= logging.WARNING]


async def test_a_child_killed_keeps_the_advice_before_and_logs_one_line(
        model: cluster.Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """A child that dies (the OOM killer, say) gives nothing: the advice computed before
    is kept and served, one line says why (no traceback), and the child is reaped."""
    now = [T]
    cache = advice.AdviceCache(clock=lambda: now[0])
    first = await cache.fresh(model)
    now[0] += cache.bucket_s  # the next time bucket: stale
    caplog.clear()
    pending = asyncio.create_task(cache.fresh(model))
    while cache.child is None:
        await asyncio.sleep(0)
    child = cache.child.pid
    os.kill(child, signal.SIGKILL)
    assert await pending is first
    assert cache.current(model) is first  # the gauges too; no new child for the same state
    assert cache.child is None
    (line,) = _advice_lines(caplog)
    assert line.levelno == logging.ERROR and line.exc_info is None
    message = line.getMessage()
    assert "\n" not in message and "killed (SIGKILL)" in message
    assert "the advice computed before is kept" in message
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)  # reaped already


async def test_a_child_past_its_timeout_is_killed_and_no_advice_is_an_error(
        model: cluster.Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """With no advice before, a computation past the timeout leaves none: /advice says so
    (503), the gauges show nothing, and the child is killed and reaped."""
    cache = advice.AdviceCache(clock=lambda: T, timeout_s=0.2)
    status, body = await _get_advice(model, cache)
    assert status == 503
    assert "took longer than 0.2s (killed)" in body["Error"]
    assert cache.current(model) is None and cache.child is None
    (line,) = _advice_lines(caplog)
    assert line.exc_info is None and "there is no advice yet" in line.getMessage()
    assert not _children(os.getpid())


async def test_a_computation_that_raises_is_one_line(
        model: cluster.Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """The advisor raising in the child (here: a setting of the wrong type) is a line with
    the error, no traceback; nothing is computed again for the same state and time."""
    broken = advisor.Settings(grace_s="soon")  # type: ignore[arg-type]
    cache = advice.AdviceCache(clock=lambda: T, settings=broken)
    with pytest.raises(advice.AdviceUnavailable, match="TypeError"):
        await cache.fresh(model)
    with pytest.raises(advice.AdviceUnavailable, match="TypeError"):
        await cache.fresh(model)  # the same key: not tried again
    (line,) = _advice_lines(caplog)
    assert line.exc_info is None and "TypeError" in line.getMessage()
    with pytest.raises(TypeError):
        advice.AdviceCache(clock=lambda: T, settings=broken).get(model)  # the same, inline


class _Unsendable(str):
    """A pod key of a class pickle cannot name (it is not reachable from its module by
    name, as a class defined in a function is not): an advice holding it cannot be sent."""


_Unsendable.__qualname__ = "nowhere.Unsendable"

# What the child's computation does, read by the child at the fork (the parent sets it).
_SEND, _UNSENDABLE, _RAISE = "send", "unsendable", "raise"


def _advise_as(how: list[str]) -> advice.Advise:
    """``advisor.advise``, whose result is, as ``how[0]`` says when the child is forked: sent
    back, unsendable (it cannot be pickled), or an exception."""

    def advise(state: cluster.Cluster, *, now: float, settings: advisor.Settings | None = None,
               config: Any = None, recent: Any = None, usage: Any = None) -> advisor.Advice:
        if how[0] == _RAISE:
            raise RuntimeError("the catalog has no\nsuch model")
        got = advisor.advise(state, now=now, settings=settings, config=config, recent=recent,
                             usage=usage)
        if how[0] == _UNSENDABLE:
            return dataclasses.replace(got, unserved=(_Unsendable("ns/pod"),))
        return got

    return advise


@pytest.mark.parametrize(("how", "said"), [
    (_UNSENDABLE, "the result cannot be sent back (PicklingError: Can't pickle"),
    (_RAISE, "RuntimeError: the catalog has no such model"),
])
async def test_a_child_without_a_result_keeps_the_advice_before_and_the_next_one_works(
        how: str, said: str, model: cluster.Cluster, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    """A computation whose result cannot be pickled, or that raises, in its child: one line
    says why (no traceback, here or on the child's stderr), the advice computed before is
    kept (GET /advice, the gauges), the child is reaped, and the next computation (the next
    time bucket) is computed and served."""
    now, behaviour = [T], [_SEND]
    cache = advice.AdviceCache(clock=lambda: now[0], advise=_advise_as(behaviour))
    first = await cache.fresh(model)
    assert first.waiting
    now[0] += cache.bucket_s
    behaviour[0] = how
    caplog.clear()
    pending = asyncio.create_task(cache.fresh(model))
    while cache.child is None:
        await asyncio.sleep(0)
    child = cache.child.pid
    assert await pending is first
    assert cache.current(model) is first and cache.child is None  # not tried again
    (line,) = _advice_lines(caplog)
    assert line.levelno == logging.ERROR and line.exc_info is None
    message = line.getMessage()
    assert "\n" not in message and said in message, message
    assert "the advice computed before is kept" in message
    assert all(r.exc_info is None and "Traceback" not in r.getMessage()
               for r in caplog.records)
    assert "Traceback" not in capfd.readouterr().err
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)  # reaped: no zombie
    assert not _children(os.getpid())
    now[0] += cache.bucket_s
    behaviour[0] = _SEND
    caplog.clear()
    second = await cache.fresh(model)
    assert second is not first
    assert second == advice.AdviceCache(clock=lambda: now[0], off_loop=False).get(model)
    assert cache.last() is second and not _advice_lines(caplog)
    assert not _children(os.getpid())


def _histogram(text: str, name: str) -> dict[str, dict[str, float]]:
    """Per ``step`` label, the histogram's ``count``, ``sum`` and buckets (``le``)."""
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        assert family.type == "histogram"
        for sample in family.samples:
            row = out.setdefault(sample.labels["step"], {})
            if sample.name.endswith("_bucket"):
                row[sample.labels["le"]] = sample.value
            else:
                row[sample.name.rpartition("_")[2]] = sample.value
    return out


def test_metrics_say_how_long_the_loop_spent_forking_and_unpickling(
        extender: Extender) -> None:
    """/metrics of ``migfit extender`` shows the event loop's time per computation of the
    advice: none before the first, then one fork and one unpickling, each some milliseconds
    (the figures on the loop had been measured only outside the server)."""
    base = extender.base
    name = "migfit_extender_advice_loop_blocked_duration_seconds"
    before = _histogram(_get(f"{base}/metrics").decode(), name)  # (starts one)
    assert set(before) == {"fork", "unpickle"}, "no such histogram in /metrics"
    assert all(before[s]["count"] == 0 for s in before)
    _get(f"{base}/advice")  # awaits the one the scrape started
    after = _histogram(_get(f"{base}/metrics").decode(), name)
    for step in ("fork", "unpickle"):
        assert after[step]["count"] == 1, after
        assert 0 < after[step]["sum"] < 5, after
        assert after[step]["+Inf"] == 1
    assert name == advice.LOOP_BLOCKED
