"""Per-GPU MIG instances in use, scraped from each node's DCGM exporter, for the advisor.

``--gpu-usage-from dcgm`` (off by default) feeds ``advisor.advise(usage=...)``: with it a busy
node's GPU is busy only when its exporter puts an instance in use there, instead of whenever
one of its profiles is in use on the node (docs/relayout.md §1). The advisor trusts a report
only where it agrees with the pods bound to the node (``advisor.usage_holds``).

Where the exporters are:

- discovered through the API (the default): the pods of the GPU Operator's DaemonSet
  ``nvidia-dcgm-exporter`` (namespace ``gpu-operator``, label ``app=nvidia-dcgm-exporter``),
  running and ready, scraped at ``http://<pod IP>:9400/metrics`` and attributed to their
  ``spec.nodeName`` (one list of that namespace per pass; the extender's ClusterRole already
  lists pods);
- or ``--dcgm-exporter-url`` with ``{node}`` in it (``http://{node}:9400/metrics``), for
  every MIG node of the cluster view.

Every ``interval_s`` each exporter is scraped (at most ``concurrency`` at once), each request
bounded by ``timeout_s`` and its body by ``max_bytes``; the text is parsed by ``migfit.dcgm``
(bounded too). The last good report of each node is kept with when it came; one older than
``stale_after`` intervals is dropped. Failures are logged once per node and reason change and
counted in ``migfit_gpu_usage_scrape_errors_total{reason}``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp
import prometheus_client

from migfit import advisor, cluster, dcgm, errors, flagtypes, kube, schedulerconfig

log = logging.getLogger(__name__)

SOURCES = ("dcgm",)
DEFAULT_NAMESPACE = "gpu-operator"
DEFAULT_SELECTOR = "app=nvidia-dcgm-exporter"
DEFAULT_PORT = 9400  # dcgm-exporter's default listen address :9400, path /metrics
DEFAULT_PATH = "/metrics"
DEFAULT_COLLECT_S = 30.0  # dcgm-exporter's -c/--collect-interval default, 30000 ms


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    interval_s: float = 30.0
    timeout_s: float = 5.0
    # The exporters' own collection interval (dcgm-exporter's -c/--collect-interval, 30,000
    # ms by default): a scrape returns the samples of the last collection, so a report is
    # as old as this at most when it is scraped.
    collect_s: float = DEFAULT_COLLECT_S
    max_bytes: int = 8 * 1024 * 1024
    concurrency: int = 16
    stale_after: float = 3.0  # intervals
    namespace: str = DEFAULT_NAMESPACE
    selector: str = DEFAULT_SELECTOR
    port: int = DEFAULT_PORT
    path: str = DEFAULT_PATH
    url_template: str | None = None  # with "{node}"; None: discover exporter pods

    @property
    def report_wait_s(self) -> float:
        """How long a report collected after a given moment can take to arrive: one
        collection, then two scrapes' interval and one's timeout (the apply mode's USAGE)."""
        return self.collect_s + 2 * self.interval_s + self.timeout_s


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    node: str
    url: str


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    """The fresh reports now: node -> per GPU, the instances in use (``advisor.GpuUse``).
    ``version`` changes whenever the mapping does (the advice cache keys on it)."""

    version: int
    nodes: Mapping[str, advisor.GpuUse]


@dataclasses.dataclass(frozen=True, slots=True)
class _Kept:
    report: dcgm.Report
    at: float
    usage: advisor.GpuUse


class ScrapeError(Exception):
    """One exporter could not be read; ``reason`` is the metric's label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def targets_from_pods(pods: Sequence[Mapping[str, Any]], *, port: int, path: str
                      ) -> list[Target]:
    """The exporters among ``pods``: running, ready, with an IP and a node (one per node)."""
    out: dict[str, Target] = {}
    for p in pods:
        spec, status = p.get("spec") or {}, p.get("status") or {}
        node, ip = spec.get("nodeName"), status.get("podIP")
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or [] if isinstance(c, dict))
        if (not isinstance(node, str) or not node or not isinstance(ip, str) or not ip
                or status.get("phase") != "Running" or not ready
                or (p.get("metadata") or {}).get("deletionTimestamp")):
            continue
        host = f"[{ip}]" if ":" in ip else ip
        out.setdefault(node, Target(node=node, url=f"http://{host}:{port}{path}"))
    return [out[n] for n in sorted(out)]


def targets_from_template(state: cluster.Cluster, template: str) -> list[Target]:
    """``template`` for every node of the view with a known GPU model."""
    return [Target(node=n.name, url=template.replace("{node}", n.name))
            for n in sorted(state.nodes(), key=lambda n: n.name) if n.node.model is not None]


class UsageScraper:
    """Keeps the last good DCGM report of each node; ``current()`` is what the advisor gets."""

    def __init__(
        self,
        state: cluster.Cluster,
        *,
        settings: Settings | None = None,
        api: kube.KubeClient | Any | None = None,
        connection: kube.Connection | None = None,
        registry: prometheus_client.CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.settings = settings or Settings()
        self.api = api
        self.connection = connection
        self.clock = clock
        self._kept: dict[str, _Kept] = {}
        self._version = 0
        self._current = Usage(version=0, nodes={})
        self._failing: dict[str, str] = {}  # node -> reason last logged
        self.errors = prometheus_client.Counter(
            "migfit_gpu_usage_scrape_errors_total",
            "DCGM exporter scrapes that gave no usable per-GPU report, by reason",
            ["reason"], registry=registry)
        self.skipped_lines = prometheus_client.Counter(
            "migfit_gpu_usage_skipped_lines_total",
            "DCGM exporter lines skipped as not in the Prometheus text format",
            registry=registry)
        self.reports = prometheus_client.Gauge(
            "migfit_gpu_usage_nodes", "Nodes with a fresh per-GPU report of MIG instances in use",
            registry=registry)

    # ------------------------------------------------------------ what the advisor reads

    def current(self) -> Usage:
        """The fresh reports (stale ones dropped now)."""
        horizon = self.settings.interval_s * self.settings.stale_after
        now = self.clock()
        stale = [n for n, k in self._kept.items() if now - k.at > horizon]
        if stale:
            for n in stale:
                log.info("gpu usage: node %s: report %.0fs old, dropped", n,
                         now - self._kept[n].at)
                del self._kept[n]
            self._publish()
        return self._current

    def placed(self, node: str
               ) -> tuple[dict[int, tuple[tuple[str, frozenset[str]], ...]], float] | None:
        """``node``'s fresh report as the apply mode reads it: per GPU index, each MIG
        instance as (profile, the pods (namespace/name) the exporter names on it), and when
        the scrape that got it began (this scraper's clock); None when none is kept."""
        self.current()  # drops stale reports
        kept = self._kept.get(node)
        if kept is None:
            return None
        gpus: dict[int, list[tuple[str, frozenset[str]]]] = {i: [] for i in kept.report.gpus}
        for inst in kept.report.instances:
            gpus.setdefault(inst.gpu, []).append((str(inst.profile), inst.pods))
        return {i: tuple(sorted(insts, key=lambda x: (x[0], sorted(x[1]))))
                for i, insts in gpus.items()}, kept.at

    def age(self, node: str) -> float | None:
        """Seconds since ``node``'s kept report came, None when none is kept."""
        kept = self._kept.get(node)
        return None if kept is None else self.clock() - kept.at

    def _publish(self) -> None:
        self._version += 1
        self._current = Usage(version=self._version,
                              nodes={n: k.usage for n, k in sorted(self._kept.items())})
        self.reports.set(len(self._kept))

    # ------------------------------------------------------------ scraping

    async def targets(self, api: kube.KubeClient | None) -> list[Target]:
        s = self.settings
        if s.url_template is not None:
            return targets_from_template(self.state, s.url_template)
        assert api is not None
        pods, _ = await api.list_pods(namespace=s.namespace, label_selector=s.selector)
        return targets_from_pods(pods, port=s.port, path=s.path)

    async def fetch(self, session: aiohttp.ClientSession, target: Target) -> dcgm.Report:
        """One exporter's report; ScrapeError when it gives none that can be used."""
        s = self.settings
        try:
            async with session.get(target.url, allow_redirects=False) as resp:
                if resp.status != 200:
                    raise ScrapeError("status", f"HTTP {resp.status}")
                if (resp.content_length or 0) > s.max_bytes:
                    raise ScrapeError("too_large", f"{resp.content_length} bytes")
                body = bytearray()
                async for chunk in resp.content.iter_chunked(64 * 1024):
                    body += chunk
                    if len(body) > s.max_bytes:
                        raise ScrapeError("too_large", f"more than {s.max_bytes} bytes")
        except TimeoutError:
            raise ScrapeError("timeout", f"no answer within {s.timeout_s:g}s") from None
        except aiohttp.ClientError as exc:
            raise ScrapeError("connection", str(exc) or type(exc).__name__) from None
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise ScrapeError("parse", "not UTF-8 text") from None
        report = dcgm.read(text)
        self.skipped_lines.inc(report.skipped)
        if report.truncated:
            raise ScrapeError("too_large", f"more than {dcgm.DEFAULT_MAX_LINES} lines")
        if report.conflicts:
            raise ScrapeError("conflict", "; ".join(report.conflicts[:3]))
        if not report.gpus:
            raise ScrapeError("parse", f"no GPU series ({report.skipped} bad lines)")
        return report

    def _failed(self, node: str, exc: ScrapeError) -> None:
        self.errors.labels(exc.reason).inc()
        if self._failing.get(node) != exc.reason:
            kept = ("its last report is kept until stale" if node in self._kept
                    else "the advisor uses the counts for it")
            log.warning("gpu usage: node %s: DCGM exporter not usable (%s: %s); %s", node,
                        exc.reason, exc, kept)
            self._failing[node] = exc.reason

    async def scrape_once(self, api: kube.KubeClient | None = None) -> Usage:
        """Scrape every exporter once; returns what the advisor gets now."""
        s = self.settings
        client = api if api is not None or self.api is None else kube.as_client(self.api)
        try:
            targets = await self.targets(client)
        except kube.ApiError as exc:
            self.errors.labels("discovery").inc()
            log.warning("gpu usage: cannot list the DCGM exporter pods in %s: %s",
                        s.namespace, exc)
            return self.current()
        gate = asyncio.Semaphore(s.concurrency)
        timeout = aiohttp.ClientTimeout(total=s.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:

            async def one(t: Target) -> tuple[Target, dcgm.Report | ScrapeError, float]:
                async with gate:
                    # A report is as old as its request: stamped when it is sent (a round
                    # of many exporters, 16 at a time, may take a while).
                    sent = self.clock()
                    try:
                        return t, await self.fetch(session, t), sent
                    except ScrapeError as exc:
                        return t, exc, sent

            results = await asyncio.gather(*(one(t) for t in targets))
        changed = False
        for target, got, sent in results:
            if isinstance(got, ScrapeError):
                self._failed(target.node, got)
                continue
            if self._failing.pop(target.node, None) is not None:
                log.info("gpu usage: node %s: DCGM exporter readable again", target.node)
            use = tuple(got.usage())
            old = self._kept.get(target.node)
            changed = changed or old is None or old.usage != use
            self._kept[target.node] = _Kept(report=got, at=sent, usage=use)
        if changed:
            self._publish()
        return self.current()

    async def run(self) -> None:
        """Scrape every ``interval_s`` until cancelled (the API client opened here when the
        exporters are discovered and none was given)."""
        own: kube.KubeClient | None = None
        if self.settings.url_template is None and self.api is None:
            try:
                # Credentials that cannot be had now (an exec plugin that failed) are
                # retried; what no retry mends is said once.
                own = await kube.connect_retrying(self.connection or kube.Connection())
            except errors.MigfitError as exc:
                log.error("gpu usage: no Kubernetes API to find the DCGM exporters: %s; the "
                          "advisor uses the counts only", exc)
                return
        try:
            while True:
                try:
                    await self.scrape_once(own)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("gpu usage: scraping failed: %s", exc)
                await asyncio.sleep(self.settings.interval_s)
        finally:
            if own is not None:
                await own.close()


# ---------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser | Any, *, apply_mode: bool = False) -> None:
    """``--gpu-usage-from`` and its options (``migfit extender``, ``migfit serve``); with
    ``apply_mode`` (the extender's) also the timing the apply mode gives a busy node's report."""
    group = parser.add_argument_group(
        "GPU usage", "which GPU holds each MIG instance in use, from NVIDIA's DCGM exporter "
                     "(docs/relayout.md; off by default)")
    group.add_argument("--gpu-usage-from", choices=SOURCES, default=None,
                       help="dcgm: scrape each node's dcgm-exporter so that the advisor "
                            "re-lays out the GPUs of busy nodes that hold no pod")
    group.add_argument("--dcgm-exporter-url", metavar="URL",
                       help="the exporter of each node, {node} replaced by the node's name "
                            "(default: the pods labelled app=nvidia-dcgm-exporter in "
                            "--dcgm-namespace, port 9400, /metrics)")
    group.add_argument("--dcgm-namespace", default=DEFAULT_NAMESPACE, metavar="NS",
                       help="namespace of the exporter pods (default %(default)s)")
    group.add_argument("--dcgm-interval", type=flagtypes.number, default=30.0, metavar="SECONDS",
                       help="how often the exporters are scraped (default %(default)s); a "
                            "report older than 3 intervals is dropped")
    group.add_argument("--dcgm-timeout", type=flagtypes.number, default=5.0, metavar="SECONDS",
                       help="time allowed for one exporter's answer (default %(default)s)")
    if not apply_mode:
        return
    group.add_argument("--dcgm-collect-interval", type=flagtypes.number, default=DEFAULT_COLLECT_S,
                       metavar="SECONDS",
                       help="the exporters' own collection interval, in seconds (their "
                            "-c/--collect-interval, given there in milliseconds; default "
                            "%(default)s): the apply mode trusts a report about a busy node "
                            "only if it was scraped this long after the node's pods were "
                            "listed")


def settings_from(args: argparse.Namespace) -> Settings | None:
    """The scraper's settings of a parsed command line, None when off; UsageError."""
    schedulerconfig.check_namespace_flag(
        "--dcgm-namespace", getattr(args, "dcgm_namespace", DEFAULT_NAMESPACE),
        give=f"give the namespace of the dcgm-exporter pods, e.g. {DEFAULT_NAMESPACE}")
    if getattr(args, "gpu_usage_from", None) is None:
        if getattr(args, "dcgm_exporter_url", None) is not None:
            raise errors.UsageError("--dcgm-exporter-url needs --gpu-usage-from dcgm")
        return None
    template = args.dcgm_exporter_url
    if template is not None and (
            "{node}" not in template or not template.startswith(("http://", "https://"))):
        raise errors.UsageError(f"--dcgm-exporter-url {template!r}: give an http(s) URL with "
                                "{node} in it, e.g. http://{node}:9400/metrics")
    if not args.dcgm_interval > 0 or not args.dcgm_timeout > 0:
        raise errors.UsageError("--dcgm-interval and --dcgm-timeout: use more than 0 seconds")
    collect = getattr(args, "dcgm_collect_interval", DEFAULT_COLLECT_S)
    if not 0 < collect <= 3600:
        raise errors.UsageError(f"--dcgm-collect-interval {collect:g}: give the exporters' "
                                "collection interval in seconds, more than 0 and at most "
                                "3600 (dcgm-exporter's -c 30000 is 30)")
    if template is None and getattr(args, "cluster_file", None) is not None:
        raise errors.UsageError("--gpu-usage-from dcgm with --cluster: the exporter pods are "
                                "found through the API; give --dcgm-exporter-url")
    return Settings(interval_s=args.dcgm_interval, timeout_s=args.dcgm_timeout,
                    collect_s=collect, namespace=args.dcgm_namespace, url_template=template)


def from_args(args: argparse.Namespace, state: cluster.Cluster, *,
              registry: prometheus_client.CollectorRegistry | None) -> UsageScraper | None:
    """The scraper a command line asks for (None when off); it opens its own API client
    from ``--kubeconfig``/``--context`` when it discovers the exporters."""
    settings = settings_from(args)
    if settings is None:
        return None
    connection = kube.Connection(kubeconfig=getattr(args, "kubeconfig", None),
                                 context=getattr(args, "context", None),
                                 request_timeout_s=getattr(args, "request_timeout", None))
    return UsageScraper(state, settings=settings, connection=connection, registry=registry)
