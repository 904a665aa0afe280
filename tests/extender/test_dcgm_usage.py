"""--gpu-usage-from dcgm: the scraper (extender/usage.py) against real local HTTP servers that
serve dcgm-exporter text. The usage reaches the advice; an exporter that is too large, not the
format, slow or failing is bounded and counted, the last good report kept until it is stale;
the exporter pods are found through the API (kmock); `migfit extender` wires it end to end."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import socket
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import kmock
import prometheus_client
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client as k8s

from migfit import builders, cli, cluster, errors, migparted, profiles
from migfit.commands import extender as extender_cli
from migfit.extender import advice, usage

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
ONE = profiles.ProfileName("1g.10gb")
T0 = 1_700_000_000.0
STAMP = "2023-11-14T22:13:20Z"  # T0
CONFIG_TEXT = """
version: v1
mig-configs:
  all-1g:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""
UNIFORM = migparted.parse(CONFIG_TEXT)


def _instance(gpu: int, gi: int, pod: str | None = None) -> str:
    labels = (f'gpu="{gpu}",UUID="GPU-{gpu}",pci_bus_id="00000000:0{gpu}:00.0",'
              f'device="nvidia{gpu}",modelName="NVIDIA A100-SXM4-80GB",'
              f'GPU_I_PROFILE="1g.10gb",GPU_I_ID="{gi}",Hostname="n"')
    if pod is not None:
        labels += f',container="main",namespace="t",pod="{pod}"'
    return f"DCGM_FI_DEV_FB_USED{{{labels}}} {12000 if pod else 13}"


def exporter_text(busy: dict[int, list[str]]) -> str:
    """Two A100s of seven 1g.10gb each; ``busy``: GPU -> pods holding its first instances."""
    lines = ["# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).",
             "# TYPE DCGM_FI_DEV_FB_USED gauge"]
    for gpu in (0, 1):
        pods = busy.get(gpu, [])
        for k in range(7):
            lines.append(_instance(gpu, 7 + k, pods[k] if k < len(pods) else None))
    return "\n".join(lines) + "\n"


def scene_objects(running: int = 1) -> list[dict[str, Any]]:
    """Node n (two A100s, 14 × 1g.10gb, config all-1g), ``running`` 1g pods bound, a
    7g.80gb pod waiting."""
    alloc = {"1g.10gb": 14}
    labels = builders.mig_labels(product="NVIDIA-A100-SXM4-80GB", instances=alloc, gpus=2,
                                 config="all-1g", config_state="success", count_labels=False)
    objs = [builders.node("n", labels=labels, resources=builders.mig_resources(
        alloc, whole_gpus=None), cpu="64", memory="512Gi")]
    for i in range(running):
        objs.append(builders.pod(f"r{i}", [{profiles.resource_name("1g.10gb"): "1"}],
                                 namespace="t", node_name="n", phase="Running", image="x",
                                 container_names=["main"]))
    objs.append(builders.pod("big", [{profiles.resource_name("7g.80gb"): "1"}],
                             namespace="ml", unschedulable_since=STAMP, image="x",
                             container_names=["main"]))
    return objs


def scene(running: int = 1) -> cluster.Cluster:
    c = cluster.Cluster()
    cluster.load_objects(c, scene_objects(running))
    return c


class Exporter:
    """A real HTTP server answering /<node> with what ``reply`` says."""

    def __init__(self) -> None:
        self.text = exporter_text({0: ["r0"]})
        self.handler: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None
        self.hits = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        if self.handler is not None:
            return await self.handler(request)
        return web.Response(text=self.text, content_type="text/plain")


@pytest.fixture()
async def exporter() -> Any:
    ex = Exporter()
    app = web.Application()
    app.router.add_get("/{node}", ex.handle)
    srv = TestServer(app, host="127.0.0.1")
    await srv.start_server()
    ex.url = f"http://127.0.0.1:{srv.port}/{{node}}"  # type: ignore[attr-defined]
    ex.port = srv.port  # type: ignore[attr-defined]
    yield ex
    await srv.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _scraper(state: cluster.Cluster, exporter: Any, registry: Any = None, **kw: Any
             ) -> tuple[usage.UsageScraper, Clock]:
    clock = Clock()
    settings = usage.Settings(url_template=exporter.url, interval_s=10.0, **kw)
    return usage.UsageScraper(state, settings=settings, registry=registry, clock=clock), clock


def _errors(registry: prometheus_client.CollectorRegistry, reason: str) -> float:
    return registry.get_sample_value("migfit_gpu_usage_scrape_errors_total",
                                     {"reason": reason}) or 0.0


BUSY = advice.advisor.Settings(grace_s=0, busy_nodes=True, allow_disruptive=False)


async def test_the_exporters_usage_reaches_the_advice(exporter: Any) -> None:
    state = scene()
    without = advice.AdviceCache(settings=BUSY, config=UNIFORM)
    # Counts alone: the one 1g.10gb in use may be on either GPU, so both are busy.
    assert without.get(state, now=T0 + 600).recommendations == ()
    scraper, _ = _scraper(state, exporter)
    got = await scraper.scrape_once()
    assert got.nodes == {"n": (Counter({ONE: 1}), Counter())}
    cache = advice.AdviceCache(settings=BUSY, config=UNIFORM, usage=scraper)
    (rec,) = cache.get(state, now=T0 + 600).recommendations
    assert rec.unblocks == ("ml/big",) and not rec.disruptive
    assert not rec.gpus[0].changed and rec.gpus[1].changed  # GPU 0 holds r0's instance
    # The pod moves to GPU 1 (a new report): the advice follows within the same time bucket.
    exporter.text = exporter_text({1: ["r0"]})
    await scraper.scrape_once()
    (rec,) = cache.get(state, now=T0 + 600).recommendations
    assert rec.gpus[0].changed and not rec.gpus[1].changed


async def test_a_report_that_disagrees_with_the_pods_is_not_trusted(exporter: Any) -> None:
    state = scene(running=2)  # two pods bound, the exporter names one: stale or partial
    scraper, _ = _scraper(state, exporter)
    await scraper.scrape_once()
    cache = advice.AdviceCache(settings=BUSY, config=UNIFORM, usage=scraper)
    assert cache.get(state, now=T0 + 600).recommendations == ()


@pytest.mark.parametrize(("reason", "reply"), [
    ("too_large", lambda: web.Response(text="# pad\n" * 400_000)),  # 2.8 MB, cap 1 MiB
    ("parse", lambda: web.Response(text="<html><body>Service Unavailable</body></html>")),
    ("parse", lambda: web.Response(body=b"\xff\xfe\x00garbage")),
    ("status", lambda: web.Response(status=503, text="busy")),
])
async def test_a_bad_exporter_is_counted_and_the_last_report_kept(
        exporter: Any, reason: str, reply: Callable[[], web.Response]) -> None:
    registry = prometheus_client.CollectorRegistry()
    state = scene()
    scraper, clock = _scraper(state, exporter, registry, max_bytes=1024 * 1024)
    good = await scraper.scrape_once()

    async def bad(request: web.Request) -> web.StreamResponse:
        return reply()

    exporter.handler = bad
    clock.now += 10
    after = await scraper.scrape_once()
    assert _errors(registry, reason) == 1
    assert after.nodes == good.nodes and scraper.age("n") == 10  # kept, with its age
    assert registry.get_sample_value("migfit_gpu_usage_nodes") == 1


async def test_a_streamed_oversized_body_is_cut_off(exporter: Any) -> None:
    """No Content-Length (chunked): the cap holds while reading, not after."""
    registry = prometheus_client.CollectorRegistry()
    scraper, _ = _scraper(scene(), exporter, registry, max_bytes=256 * 1024)
    sent = 0

    async def endless(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for _ in range(10_000):  # 640 MB if nobody stopped reading
            await resp.write(b"# x\n" * 16384)
            sent += 65536
        return resp

    exporter.handler = endless
    await scraper.scrape_once()
    assert _errors(registry, "too_large") == 1 and scraper.current().nodes == {}
    assert sent < 64 * 1024 * 1024


async def test_a_slow_exporter_times_out_within_the_bound(exporter: Any) -> None:
    registry = prometheus_client.CollectorRegistry()
    scraper, _ = _scraper(scene(), exporter, registry, timeout_s=0.3)

    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(5)
        return web.Response(text=exporter.text)

    exporter.handler = slow
    started = time.monotonic()
    got = await scraper.scrape_once()
    assert time.monotonic() - started < 2.0
    assert _errors(registry, "timeout") == 1 and got.nodes == {}


async def test_no_exporter_listening_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    registry = prometheus_client.CollectorRegistry()
    settings = usage.Settings(url_template=f"http://127.0.0.1:{port}/{{node}}")
    scraper = usage.UsageScraper(scene(), settings=settings, registry=registry)
    assert (await scraper.scrape_once()).nodes == {}
    assert _errors(registry, "connection") == 1


async def test_stale_reports_are_dropped_after_three_intervals(exporter: Any) -> None:
    state = scene()
    scraper, clock = _scraper(state, exporter)
    cache = advice.AdviceCache(settings=BUSY, config=UNIFORM, usage=scraper)
    first = await scraper.scrape_once()
    assert cache.get(state, now=T0 + 600).recommendations
    exporter.handler = lambda request: _fail()
    clock.now += 25
    await scraper.scrape_once()
    assert scraper.current().nodes == first.nodes  # 25 s old: kept
    clock.now += 10  # 35 s > 3 × 10 s
    dropped = scraper.current()
    assert dropped.nodes == {} and dropped.version != first.version
    assert scraper.age("n") is None
    # Back to the counts: no GPU is known free.
    assert cache.get(state, now=T0 + 600).recommendations == ()


async def _fail() -> web.StreamResponse:
    return web.Response(status=500)


async def test_concurrency_is_bounded(exporter: Any) -> None:
    """Many nodes, few at once."""
    state = cluster.Cluster()
    objs = [o for i in range(12) for o in _renamed(scene_objects(0)[0], f"n{i}")]
    cluster.load_objects(state, objs)
    inflight = peak = 0

    async def counted(request: web.Request) -> web.StreamResponse:
        nonlocal inflight, peak
        inflight += 1
        peak = max(peak, inflight)
        await asyncio.sleep(0.05)
        inflight -= 1
        return web.Response(text=exporter_text({}))

    exporter.handler = counted
    scraper, _ = _scraper(state, exporter, concurrency=3)
    got = await scraper.scrape_once()
    assert len(got.nodes) == 12 and peak == 3


async def test_each_report_is_stamped_when_its_request_is_sent(exporter: Any) -> None:
    """The apply mode trusts a report only if it was collected after a pod list
    (relayout_machine USAGE): a slow round must not make early answers look newer."""
    state = cluster.Cluster()
    cluster.load_objects(state, [o for i in range(3)
                                 for o in _renamed(scene_objects(0)[0], f"n{i}")])
    scraper, clock = _scraper(state, exporter, concurrency=1)

    async def slow(request: web.Request) -> web.StreamResponse:
        clock.now += 10.0  # each answer takes ten seconds
        return web.Response(text=exporter_text({0: ["r0"]}))

    exporter.handler = slow
    await scraper.scrape_once()
    stamps = []
    for node in ("n0", "n1", "n2"):
        got = scraper.placed(node)
        assert got is not None
        gpus, at = got
        assert ("1g.10gb", frozenset({"t/r0"})) in gpus[0] and len(gpus[0]) == 7
        stamps.append(at)
    assert stamps == [1000.0, 1010.0, 1020.0]


def _renamed(obj: dict[str, Any], name: str) -> list[dict[str, Any]]:
    copy = json.loads(json.dumps(obj))
    copy["metadata"]["name"] = name
    return [copy]


# ---------------------------------------------------------------- discovery through the API


def _exporter_pod(name: str, node: str, ip: str, *, ready: bool = True,
                  phase: str = "Running") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "gpu-operator",
                         "labels": {"app": "nvidia-dcgm-exporter"}},
            "spec": {"nodeName": node, "containers": [{"name": "nvidia-dcgm-exporter"}]},
            "status": {"phase": phase, "podIP": ip,
                       "conditions": [{"type": "Ready", "status": str(ready)}]}}


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    kmock.resources["v1/pods"] = {}  # type: ignore[assignment]
    return kmock


async def test_exporter_pods_are_found_through_the_api(
        server: kmock.KubernetesEmulator, exporter: Any) -> None:
    pods = kmock.resource("", "v1", "pods")
    server.objects[pods, "gpu-operator", "dcgm-n"] = _exporter_pod("dcgm-n", "n", "127.0.0.1")
    # Not ready, or not running: not scraped.
    server.objects[pods, "gpu-operator", "dcgm-m"] = _exporter_pod("dcgm-m", "m", "127.0.0.2",
                                                                  ready=False)
    server.objects[pods, "gpu-operator", "dcgm-k"] = _exporter_pod("dcgm-k", "k", "127.0.0.3",
                                                                  phase="Pending")
    exporter.handler = None
    api = k8s.ApiClient(k8s.Configuration(host=str(server.url).rstrip("/")))
    try:
        settings = usage.Settings(port=exporter.port, path="/n")
        scraper = usage.UsageScraper(scene(), settings=settings, api=api)
        got = await scraper.scrape_once()
    finally:
        await api.close()
    assert got.nodes == {"n": (Counter({ONE: 1}), Counter())} and exporter.hits == 1
    (listed,) = [r for r in server[kmock.action.LIST]]
    assert "/api/v1/namespaces/gpu-operator/pods" in str(listed.url)
    assert "labelSelector=app%3Dnvidia-dcgm-exporter" in str(listed.url)


def test_targets_from_pods_ipv6_and_one_per_node() -> None:
    pods = [_exporter_pod("a", "n", "fd00::5"), _exporter_pod("b", "n", "10.0.0.9")]
    assert usage.targets_from_pods(pods, port=9400, path="/metrics") == [
        usage.Target(node="n", url="http://[fd00::5]:9400/metrics")]


# ---------------------------------------------------------------- command line


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster", dest="cluster_file")
    usage.add_arguments(parser, apply_mode=True)
    return parser.parse_args(argv)


def test_flags() -> None:
    assert usage.settings_from(_args()) is None  # off by default
    s = usage.settings_from(_args("--gpu-usage-from", "dcgm"))
    assert s is not None and s.url_template is None and s.namespace == "gpu-operator"
    assert (s.collect_s, s.report_wait_s) == (30.0, 95.0)  # dcgm-exporter's default -c
    for bad in (("--dcgm-exporter-url", "http://{node}:9400/metrics"),  # without the flag
                ("--gpu-usage-from", "dcgm", "--dcgm-exporter-url", "http://x:9400/"),
                ("--gpu-usage-from", "dcgm", "--dcgm-interval", "0"),
                ("--gpu-usage-from", "dcgm", "--dcgm-collect-interval", "0"),
                # milliseconds, as dcgm-exporter's own -c takes them: refused
                ("--gpu-usage-from", "dcgm", "--dcgm-collect-interval", "30000"),
                ("--gpu-usage-from", "dcgm", "--cluster", "c.yaml")):  # no API to discover
        with pytest.raises(errors.UsageError):
            usage.settings_from(_args(*bad))
    # Not a finite number: refused as the flag is parsed (flagtypes.number).
    for flag in ("--dcgm-interval", "--dcgm-timeout", "--dcgm-collect-interval"):
        for value in ("nan", "inf"):
            with pytest.raises(SystemExit):
                _args("--gpu-usage-from", "dcgm", flag, value)


def test_collect_interval_reaches_the_apply_mode() -> None:
    """An exporter run with ``-c 60000`` collects every minute: the apply mode then trusts a
    busy node's report only if scraped 60 s after the pod list, and waits for one 60 s
    more than by default (collection + two scrapes' interval + a timeout)."""
    parser = cli.build_parser("extender")
    argv = ["extender", "--apply-relayout", "--apply-busy-nodes", "--gpu-usage-from", "dcgm",
            "--dcgm-interval", "20", "--dcgm-timeout", "4"]
    args = parser.parse_args([*argv, "--dcgm-collect-interval", "60"])
    applied = extender_cli.relayout_settings(args, usage.settings_from(args))
    assert (applied.gpu_usage, applied.exporter_collect_s, applied.usage_wait_s) == (
        True, 60.0, 60.0 + 2 * 20.0 + 4.0)
    plain = parser.parse_args(argv)
    default = extender_cli.relayout_settings(plain, usage.settings_from(plain))
    assert (default.exporter_collect_s, default.usage_wait_s) == (30.0, 30.0 + 40.0 + 4.0)
    # `migfit serve` has no apply mode, so no such flag
    with pytest.raises(SystemExit):
        cli.build_parser("serve").parse_args(["serve", "--dcgm-collect-interval", "60"])
    off = parser.parse_args(["extender", "--apply-relayout"])
    assert extender_cli.relayout_settings(off, usage.settings_from(off)).gpu_usage is False


async def test_migfit_extender_process_uses_the_exporter(
        exporter: Any, tmp_path: pathlib.Path) -> None:
    """`migfit extender --cluster F --gpu-usage-from dcgm --dcgm-exporter-url ...`: /advice
    re-lays out the GPU the exporter shows idle; /metrics counts scrape errors."""
    (tmp_path / "c.json").write_text(json.dumps(scene_objects()))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "migfit.cli", "extender", "--host", "127.0.0.1",
        "--port", str(port), "--cluster", str(tmp_path / "c.json"), "--grace", "0",
        "--gpu-usage-from", "dcgm", "--dcgm-exporter-url", exporter.url,
        "--dcgm-interval", "0.5", "--log-level", "warning", cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        body: Any = None
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                try:
                    async with session.get(f"http://127.0.0.1:{port}/advice") as resp:
                        body = await resp.json()
                    # Counts alone give a disruptive change (r0 may be on either GPU); the
                    # exporter's report turns it into one that disrupts nobody.
                    recs = body["recommendations"]
                    if recs and not recs[0]["disrupts"]:
                        break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)
            assert body and body["recommendations"], body
            (rec,) = body["recommendations"]
            assert rec["disrupts"] == [] and rec["running"] == ["t/r0"], rec
            before = [g["before"] == g["after"] for g in rec["gpus"]]
            assert before == [True, False], rec["gpus"]  # GPU 0 holds r0: kept
            async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                metrics = await resp.text()
        assert "migfit_gpu_usage_nodes 1.0" in metrics
    finally:
        proc.terminate()
        _, err = await proc.communicate()
    assert b"Traceback" not in err, err.decode()
