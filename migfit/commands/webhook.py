"""``migfit webhook``: run the mutating admission webhook (what deploy/ runs in the cluster)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from migfit import cluster, errors, flagtypes, logs, profiles, schedulerconfig, serving, sources
from migfit.webhook import decision, memo, server, view


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tls-cert", type=Path, required=True, metavar="FILE",
                        help="serving certificate (PEM); re-read when it changes")
    parser.add_argument("--tls-key", type=Path, required=True, metavar="FILE",
                        help="its private key (PEM)")
    parser.add_argument("--host", default="",
                        help="address to listen on (default: every address, IPv4 and "
                             "IPv6)")
    parser.add_argument("--port", type=int, default=server.DEFAULT_PORT,
                        help=f"HTTPS port (default {server.DEFAULT_PORT})")
    sources.add_source_arguments(parser)
    add_policy_arguments(parser)
    parser.add_argument("--max-body", type=int, default=server.DEFAULT_MAX_BODY,
                        metavar="BYTES", help="largest accepted request body (default 3 MiB, "
                                              "kube-apiserver's own limit)")
    parser.add_argument("--reload-interval", type=flagtypes.number, default=10.0,
                        metavar="SECONDS",
                        help="how often the TLS files are checked for changes (default 10)")
    parser.add_argument("--shutdown-timeout", type=flagtypes.number, default=10.0,
                        metavar="SECONDS",
                        help="how long in-flight requests get to finish on shutdown")
    parser.add_argument("--drain-delay", type=flagtypes.number, default=3.0, metavar="SECONDS",
                        help="on SIGTERM keep serving this long with /readyz failing, so that "
                             "the Service stops routing here first (default 3)")
    parser.add_argument("--access-log", action="store_true", help="log every HTTP request")
    parser.add_argument("--decision-memo", type=int, default=memo.DEFAULT_CAPACITY,
                        metavar="N", help="answers remembered for repeated requests against "
                        f"an unchanged supply, at most {memo.DEFAULT_MAX_BYTES // 2**20} MiB "
                        f"in all and none over {memo.DEFAULT_MAX_ENTRY_BYTES // 1024} KiB "
                        f"(0: none; default {memo.DEFAULT_CAPACITY})")
    serving.add_limit_arguments(parser.add_argument_group(
        "connections", "bounds on what clients may hold (kube-apiserver reconnects cheaply)"))
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"],
                        help="how much to log; debug also logs failed TLS handshakes and "
                             "clients gone mid-body (default info)")
    parser.add_argument("--log-format", choices=logs.LOG_STYLES, default="text",
                        help="json: every log line one JSON object; text: human lines "
                             "(default text)")


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """The decision's flags (shared with ``migfit serve``); read back with ``policy_from``."""
    parser.add_argument("--catalog", type=Path, metavar="FILE",
                        help="MIG catalog file adding or overriding GPU models")
    parser.add_argument("--gpu-models", default="", metavar="MODEL,...",
                        help="GPU models to decide against while there is no cluster view "
                             "(e.g. A100-80GB,H100-80GB)")
    parser.add_argument("--memory-match", choices=decision.MEMORY_MATCHES, default="label",
                        help="usable memory of a profile: label = the node's "
                             "nvidia.com/mig-<p>.memory label, else the catalog (default); "
                             "catalog = the catalog only; nominal = the GB in the name as GiB")
    parser.add_argument("--strategy", choices=decision.STRATEGY_CHOICES, default="auto",
                        help="device-plugin MIG strategy: auto follows the nodes' "
                             "nvidia.com/mig.strategy label (default)")
    parser.add_argument("--waste-warning", type=flagtypes.share, default=0.5, metavar="FRACTION",
                        help="warn when more than this share of an instance's memory is unused")
    parser.add_argument("--choice", choices=decision.CONTENTIONS,
                        default=decision.Policy().contention,
                        help="which fitting profile when the smallest has no free instance "
                             "(free: in no pending pod's request): "
                             "smallest = it anyway (the pod waits); free = the smallest with "
                             "a free instance; ceiling = as free, within --waste-ceiling; "
                             "usable = as free, counting only free instances on nodes with "
                             "the pod's cpu and memory left (not memoised) "
                             "(default %(default)s; measured in docs/simulation.md)")
    parser.add_argument("--waste-ceiling", type=flagtypes.share,
                        default=decision.Policy().waste_ceiling,
                        metavar="FRACTION",
                        help="--choice ceiling: never a larger profile with more than this "
                             "share of its memory unused (default %(default)s)")
    parser.add_argument("--scheduler-name", metavar="NAME",
                        help="set spec.schedulerName of annotated pods that use the default "
                             "scheduler (e.g. migfit-scheduler of the second-scheduler overlay)")


def policy_from(args: argparse.Namespace) -> tuple[profiles.Catalog, decision.Policy]:
    """The catalog and the decision policy from ``add_policy_arguments``' flags."""
    catalog = profiles.load(args.catalog)
    names = [n.strip() for n in str(args.gpu_models).split(",") if n.strip()]
    models = tuple(dict.fromkeys(catalog.get(n) for n in names))
    if not 0 <= args.waste_warning <= 1:
        raise errors.UsageError(f"--waste-warning {flagtypes.shown(args.waste_warning)}: use a "
                                f"fraction 0..1")
    if not 0 <= args.waste_ceiling <= 1:
        raise errors.UsageError(f"--waste-ceiling {flagtypes.shown(args.waste_ceiling)}: use a "
                                f"fraction 0..1")
    if args.scheduler_name and not schedulerconfig.is_dns1123_subdomain(args.scheduler_name):
        # The API server would refuse every pod the webhook gave it (spec.schedulerName).
        raise errors.UsageError(
            f"--scheduler-name {args.scheduler_name!r}: not a valid scheduler name (lower-case "
            "letters, digits, '-' and '.', starting and ending with a letter or digit, at most "
            "253 characters); give the profile's schedulerName in the "
            "KubeSchedulerConfiguration, e.g. migfit-scheduler")
    return catalog, decision.Policy(
        fallback_models=models,
        memory_match=args.memory_match,
        strategy=args.strategy,
        waste_warning=args.waste_warning,
        contention=args.choice,
        waste_ceiling=args.waste_ceiling,
        scheduler_name=args.scheduler_name or None,
    )


def run(args: argparse.Namespace) -> NoReturn:
    logs.configure(level=args.log_level, style=args.log_format, access_log=args.access_log)
    catalog, policy = policy_from(args)
    for path, what in ((args.tls_cert, "--tls-cert"), (args.tls_key, "--tls-key")):
        why = errors.not_a_file(path)
        if why is not None:
            raise errors.UsageError(f"{what} {path}: {why}")
    if not 0 < args.port < 65536:
        raise errors.UsageError(f"--port {args.port}: use 1..65535")
    try:
        limits = serving.limits_from(args)  # the body budget: server._check
    except ValueError as exc:
        raise errors.UsageError(str(exc)) from None
    settings = server.Settings(
        limits=limits,
        policy=policy,
        host=args.host,
        port=args.port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        max_body_bytes=args.max_body,
        reload_interval=args.reload_interval,
        shutdown_timeout=args.shutdown_timeout,
        drain_delay=args.drain_delay,
        access_log=args.access_log,
    )
    if args.decision_memo < 0:
        raise errors.UsageError(f"--decision-memo {args.decision_memo}: use 0 or more")
    model = cluster.Cluster(catalog)
    source = sources.source_from_args(model, args)
    serving.run_until_signal(server.serve(settings, model, source_run=source.run,
                                          tracker=view.SupplyTracker(model),
                                          decisions=memo.DecisionMemo(args.decision_memo)))
