"""``migfit extender``: run the scheduler extender (what deploy/ runs next to kube-scheduler)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path
from typing import Any, NoReturn

from migfit import (
    advisor,
    cluster,
    errors,
    flagtypes,
    kube,
    logs,
    migparted,
    profiles,
    schedulerconfig,
    serving,
    sources,
)
from migfit import metrics as common_metrics
from migfit.commands import options
from migfit.extender import advice, figures, relayout_machine, scoring_log, server, usage

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="",
                        help="address to listen on (default: every address, IPv4 and "
                             "IPv6)")
    parser.add_argument("--port", type=options.port, default=8443,
                        help="port to listen on (default 8443)")
    sources.add_source_arguments(parser)
    parser.add_argument("--catalog", type=Path, metavar="FILE",
                        help="MIG catalog file adding or overriding GPU models")
    tls = parser.add_argument_group("TLS", "without --tls-cert/--tls-key the extender speaks "
                                           "plain HTTP")
    tls.add_argument("--tls-cert", type=Path, metavar="FILE",
                     help="serving certificate (PEM); re-read when it changes")
    tls.add_argument("--tls-key", type=Path, metavar="FILE", help="its private key (PEM)")
    tls.add_argument("--client-ca", type=Path, metavar="FILE",
                     help="require a client certificate signed by this CA (kube-scheduler's "
                          "tlsConfig.certFile) for /filter, /prioritize and /advice; the "
                          "probes and /metrics answer any client")
    tls.add_argument("--reload-interval", type=flagtypes.positive_seconds, default=10.0,
                     metavar="SECONDS",
                     help="how often the TLS files are checked for changes (default 10)")
    parser.add_argument("--log-format", choices=scoring_log.LOG_FORMATS, default="both",
                        help="json: every log line one JSON object (the scoring log's too); "
                             "text: human lines; both: human lines plus the scoring log's "
                             "JSON line per prioritize call (default both)")
    parser.add_argument("--log-nodes", type=int, default=50, metavar="N",
                        help="nodes written in full per scoring-log JSON line, best first "
                             "(0: all; default 50)")
    parser.add_argument("--score-all-pods", action="store_true",
                        help="also score pods without MIG requests, toward nodes where their "
                             "cpu and memory strand no GPU instance the pending and running "
                             "pods' mix needs; for an extender registered without "
                             "managedResources (README, \"Pods without MIG requests\")")
    parser.add_argument("--max-body", type=int, default=server.DEFAULT_MAX_BODY, metavar="BYTES",
                        help="largest accepted request body (default 32 MiB)")
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"],
                        help="debug also logs every filter verdict with its reasons")
    conn = parser.add_argument_group(
        "connections", "bounds on what clients may hold (kube-scheduler reconnects cheaply)")
    serving.add_limit_arguments(conn)
    conn.add_argument("--drain-delay", type=flagtypes.number, default=3.0, metavar="SECONDS",
                      help="on SIGTERM keep answering this long with /readyz failing, so that "
                           "the Service drops the pod first (default %(default)s)")
    adv = parser.add_argument_group(
        "advisor", "re-layout advice (GET /advice always; with a Kubernetes API, written by "
                   "the replica holding the Lease: node annotation and label, Events) and the "
                   "optional apply mode")
    adv.add_argument("--grace", type=flagtypes.number, default=60.0, metavar="SECONDS",
                     help="a pending pod counts as demand after this long unschedulable "
                          "(default 60)")
    adv.add_argument("--configmap", default="gpu-operator/default-mig-parted-config",
                     metavar="NS/NAME", help="the MIG Manager's mig-parted ConfigMap "
                                            "(default %(default)s)")
    adv.add_argument("--no-publish", action="store_true",
                     help="do not write advice to nodes and Events, and take no Lease "
                          "(GET /advice only)")
    adv.add_argument("--apply-relayout", action="store_true",
                     help="let the leader apply safe re-layouts through the MIG Manager "
                          "(off by default)")
    adv.add_argument("--apply-busy-nodes", action="store_true",
                     help="with --apply-relayout, also re-lay out the idle GPUs of nodes where "
                          "pods run (their GPUs kept exactly; the node is tainted meanwhile; "
                          "see docs/relayout.md; off by default)")
    adv.add_argument("--apply-custom-configs", action="store_true",
                     help="with --apply-relayout, also apply custom configs: write each, as "
                          "soon as it is advised, into the ConfigMap --configmap names (one "
                          "of your own, named in the ClusterPolicy's migManager.config.name; "
                          "see docs/relayout.md), and re-lay out the node once it has reached "
                          "the MIG Managers (off by default)")
    adv.add_argument("--config-sync", type=flagtypes.number,
                     default=relayout_machine.Settings().config_sync_s, metavar="SECONDS",
                     help="with --apply-custom-configs, wait this long after writing a config "
                          "before re-laying out a node to it: kubelet's ConfigMap volume "
                          "refresh (default %(default)s)")
    options.add_ahead_arguments(adv)
    adv.add_argument("--max-relayouts", type=options.relayout_limit, default="1", metavar="N|P%",
                     help="nodes re-laid out at once in apply mode: a number, or a share of "
                          "the GPU nodes such as 10%% (at least one) (default 1)")
    adv.add_argument("--relayout-timeout", type=flagtypes.number, default=1200.0, metavar="SECONDS",
                     help="give up on a re-layout after this long (default 1200)")
    adv.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE",
                                                                 "migfit-system"),
                     metavar="NS", help="namespace of the leader-election Lease: only its "
                                        "holder publishes advice and applies re-layouts "
                                        "(default $POD_NAMESPACE or migfit-system)")
    usage.add_arguments(parser, apply_mode=True)


def settings_from(args: argparse.Namespace) -> server.ExtenderSettings:
    """The server settings of a parsed command line; UsageError for bad values."""
    if not 0 <= args.port < 65536:
        raise errors.UsageError(f"--port {args.port}: use 0 (any free port) to 65535")
    if args.log_nodes < 0:
        raise errors.UsageError(f"--log-nodes {args.log_nodes}: use 0 (all) or more")
    if args.max_body < 1024:
        raise errors.UsageError(f"--max-body {args.max_body}: use at least 1024 bytes")
    for path, flag in ((args.tls_cert, "--tls-cert"), (args.tls_key, "--tls-key"),
                       (args.client_ca, "--client-ca")):
        why = None if path is None else errors.not_a_file(path)
        if why is not None:
            raise errors.UsageError(f"{flag} {path}: {why}")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise errors.UsageError("give both --tls-cert and --tls-key for HTTPS")
    if args.client_ca is not None and args.tls_cert is None:
        raise errors.UsageError("--client-ca needs --tls-cert and --tls-key")
    try:
        limits = serving.limits_from(args)
        limits.body_budget(args.max_body)
    except ValueError as exc:
        raise errors.UsageError(str(exc)) from None
    if not args.drain_delay >= 0:
        raise errors.UsageError(f"--drain-delay {flagtypes.shown(args.drain_delay)}: use 0 or "
                                "more seconds")
    return server.ExtenderSettings(
        limits=limits,
        drain_delay=args.drain_delay,
        max_body_bytes=args.max_body,
        log_format=args.log_format,
        log_nodes=args.log_nodes,
        score_all_pods=args.score_all_pods,
        host=args.host,
        port=args.port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        client_ca=args.client_ca,
        reload_interval=args.reload_interval,
    )


async def _serve(args: argparse.Namespace, settings: server.ExtenderSettings,
                 view: cluster.Cluster, source: sources.Source) -> None:
    registry = common_metrics.registry()
    # The composition root: the cluster (built by run), its figures index and the advice
    # cache are made here and handed to the server and the publisher; nothing is global.
    index = figures.Index(view)
    # Busy nodes' idle GPUs are advised on; the apply mode acts on such advice only with
    # --apply-busy-nodes (docs/relayout.md).
    # --gpu-usage-from dcgm: which GPU holds each instance in use (extender/usage.py).
    scraper = usage.from_args(args, view, registry=registry)
    cache = advice.AdviceCache(
        settings=advice_settings(args), usage=scraper)
    # Computed at scrape time from the cache /advice reads: they agree with /advice, with a
    # publisher (API mode) or without one (--cluster FILE, --no-publish).
    metrics = advice.Metrics(registry, state=view, cache=cache)
    background: list[tuple[str, Any]] = []
    waiting = server.Waiting()
    stop = asyncio.Event()
    refused: list[errors.MigfitError] = []
    if getattr(args, "cluster_file", None) is None and not args.no_publish:
        # Connected while the server serves (/healthz answers; /readyz is 503 and says why
        # until the client is had): retrying credentials before listening left the kubelet's
        # liveness probe nothing to reach, and it killed the pod while the identity provider
        # was down. A kubeconfig that cannot work was refused at start (sources.open_source
        # checks it); a ConfigError only connecting finds still ends the command (exit 2).
        waiting.wait(_PUBLISHING, "the advice publisher is connecting to the Kubernetes API")

        async def publishing() -> None:
            try:
                await _publish(args, view=view, cache=cache, metrics=metrics, scraper=scraper,
                               waiting=waiting)
            except errors.MigfitError as exc:  # no retry can mend it (a ConfigError)
                refused.append(exc)
                stop.set()

        background.append(("advice publishing", publishing))
    elif args.apply_relayout:
        raise errors.UsageError("--apply-relayout needs a Kubernetes API (--kubeconfig or "
                                "in-cluster), and advice publishing on")
    elif scraper is not None:
        # No client of ours: it opens its own when it discovers exporters.
        background.append(("gpu usage", scraper.run))
    await server.serve(settings, view, index=index, advice_cache=cache, source=source,
                       registry=registry, background=background, waiting=waiting, stop=stop)
    if refused:
        raise refused[0]


_PUBLISHING = "advice publishing"  # what the extender waits for (server.Waiting)


async def _publish(args: argparse.Namespace, *, view: cluster.Cluster,
                   cache: advice.AdviceCache, metrics: advice.Metrics,
                   scraper: usage.UsageScraper | None,
                   waiting: server.Waiting) -> None:
    """Advice publishing (node marks and Events, the Lease, the apply mode, the exporters'
    discovery): one client for all their writes, found as kubectl finds it, with its
    credentials kept fresh (exec/OIDC) and --request-timeout, then each of them until
    cancelled. Credentials that cannot be had now (an exec plugin that failed, an identity
    provider down) are retried with backoff, as the cluster source retries them, each try a
    warning and /readyz's reason (``waiting``), cleared once the client and the mig-parted
    configs are had. ConfigError when the kubeconfig cannot work (no retry can mend it)."""
    from migfit.extender import leader

    def failed(exc: kube.CredentialsError, delay: float) -> None:
        log.warning("%s; retrying in %.1fs", exc, delay)
        waiting.wait(_PUBLISHING, f"the advice publisher has no Kubernetes credentials yet: "
                                  f"{exc}")

    client = await kube.connect_retrying(kube.Connection(
        kubeconfig=args.kubeconfig, context=args.context,
        request_timeout_s=args.request_timeout), failed=failed)
    async with client:  # the one client of every write: advice, apply mode and Lease
        ns, _, name = str(args.configmap).partition("/")
        # The shared ConfigMap and the MIG Manager's per-node ones, read again every minute.
        configs = advice.ConfigSource(client, cache, namespace=ns, name=name)
        await configs.refresh()
        runs: list[tuple[str, Any]] = [("mig-parted configs", configs.run)]
        # Every replica serves the advice; only the Lease's holder writes it (and applies it):
        # two replicas publishing wrote each Event twice and raced on the node marks.
        elector = leader.LeaseElector(client, namespace=args.lease_namespace)
        runs += [
            ("leader election", elector.run),
            ("advice publisher", advice.Publisher(view, client, cache=cache, metrics=metrics,
                                                  elector=elector).run)]
        if args.apply_relayout:
            from migfit.extender import relayout

            applier = relayout.Relayouter(
                view, client, elector=elector, cache=cache, metrics=metrics,
                settings=relayout_settings(args, None if scraper is None else scraper.settings))
            runs.append(("re-layout", applier.run))
        if scraper is not None:
            scraper.api = client
            runs.append(("gpu usage", scraper.run))
        waiting.done(_PUBLISHING)
        # Stopped last first: the Lease is released once the writers have stopped.
        await serving.together(runs)


def advice_settings(args: argparse.Namespace) -> advisor.Settings:
    """The advisor's settings of a parsed command line: busy nodes' idle GPUs advised on
    (the apply mode acts on them only with --apply-busy-nodes), and the burst reserve's
    window the time a re-layout takes to serve, which custom configs lengthen by
    --config-sync when the apply mode writes them."""
    return options.advisor_settings(
        args, grace_s=args.grace, busy_nodes=True,
        ahead_reserve_s=advisor.AHEAD_RESERVE_S
        + (args.config_sync if args.apply_custom_configs else 0.0))


def relayout_settings(args: argparse.Namespace,
                      usage_settings: usage.Settings | None) -> relayout_machine.Settings:
    """The apply mode's settings of a parsed command line (``--apply-relayout``), with
    ``usage_settings`` those of ``--gpu-usage-from dcgm`` (None when off)."""
    ns, _, name = str(args.configmap).partition("/")
    # A busy node's DCGM report: how old a scrape's samples may be, and how long one
    # collected after the pod list may take to arrive (--dcgm-collect-interval, ...).
    timing = usage.Settings() if usage_settings is None else usage_settings
    return relayout_machine.Settings(
        max_concurrent=args.max_relayouts[0], max_share=args.max_relayouts[1],
        timeout_s=args.relayout_timeout, apply_busy_nodes=args.apply_busy_nodes,
        gpu_usage=usage_settings is not None, exporter_collect_s=timing.collect_s,
        usage_wait_s=timing.report_wait_s,
        custom_configs=(ns, name) if args.apply_custom_configs else None,
        config_sync_s=args.config_sync)


def run(args: argparse.Namespace) -> NoReturn:
    settings = settings_from(args)
    usage.settings_from(args)  # its flags checked before anything starts
    # Checked before anything starts (it was checked after the API client was opened, which
    # then leaked, and not at all with --cluster or --no-publish).
    ns, _, name = str(args.configmap).partition("/")
    if not ns or not name or "/" in name:
        raise errors.UsageError(f"--configmap {args.configmap!r}: give NAMESPACE/NAME, e.g. "
                                "gpu-operator/default-mig-parted-config")
    # Whatever the other flags: a Lease there could never be created, and with --cluster or
    # --no-publish it is not used yet, but the same command line would fail in API mode.
    schedulerconfig.check_namespace_flag(
        "--lease-namespace", args.lease_namespace,
        give="give the extender's own namespace, e.g. migfit-system")
    if args.grace < 0:
        raise errors.UsageError(f"--grace {flagtypes.shown(args.grace)}: use 0 or more seconds")
    if args.apply_busy_nodes and not args.apply_relayout:
        raise errors.UsageError("--apply-busy-nodes needs --apply-relayout")
    if args.apply_custom_configs and not args.apply_relayout:
        raise errors.UsageError("--apply-custom-configs needs --apply-relayout")
    if args.apply_custom_configs and name == migparted.DEFAULT_CONFIGMAP:
        raise errors.UsageError(
            f"--apply-custom-configs writes into --configmap {args.configmap}, the GPU "
            "Operator's own ConfigMap, which it creates from its assets and may rewrite: copy "
            "it to one of your own, name that in the ClusterPolicy's migManager.config.name "
            "and pass it as --configmap NS/NAME (docs/relayout.md, custom configs)")
    if not 0 <= args.config_sync <= 3600:
        raise errors.UsageError(f"--config-sync {flagtypes.shown(args.config_sync)}: use 0 to "
                                "3600 seconds (kubelet refreshes ConfigMap volumes within about "
                                "2 minutes)")
    if args.relayout_timeout <= 0:
        raise errors.UsageError(f"--relayout-timeout {flagtypes.shown(args.relayout_timeout)}: "
                                "use more than 0 seconds")
    logs.configure(level=args.log_level, style=logs.style_of(args.log_format))
    view = cluster.Cluster(profiles.load(args.catalog))
    source = sources.source_from_args(view, args)
    serving.run_until_signal(_serve(args, settings, view, source))
