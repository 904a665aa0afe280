"""``migfit advise``: which nodes to re-partition so that waiting MIG pods can run."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from migfit import advisor, cluster, errors, migparted, sources

HELP = "re-layout advice: which idle GPUs to re-partition so that waiting MIG pods can run"


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Source, ConfigMap and grace flags shared by ``advise`` and ``explain``."""
    sources.add_source_arguments(parser)
    parser.add_argument("--grace", metavar="SECONDS", type=float, default=60.0,
                        help="a pod counts once it has been unschedulable this long "
                             "(default 60)")
    parser.add_argument("--mig-parted-config", metavar="FILE",
                        help="the mig-parted config (a ConfigMap manifest or the config.yaml "
                             "itself); default with --kubeconfig: read the ConfigMap")
    parser.add_argument("--configmap", metavar="NAMESPACE/NAME",
                        default=f"{migparted.DEFAULT_NAMESPACE}/{migparted.DEFAULT_CONFIGMAP}",
                        help="the mig-parted ConfigMap to read from the API (default "
                             "%(default)s)")
    parser.add_argument("--no-disruptive", action="store_true",
                        help="only recommend nodes where no pod uses a MIG instance")
    parser.add_argument("--now", metavar="EPOCH", type=float, help=argparse.SUPPRESS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--json", action="store_true",
                        help='print {"recommendations": [...]} as JSON')


def settings_from_args(args: argparse.Namespace) -> advisor.Settings:
    if args.grace < 0:
        raise errors.UsageError(f"--grace must be 0 or more seconds, got {args.grace:g}")
    return advisor.Settings(grace_s=args.grace, allow_disruptive=not args.no_disruptive)


def _config_file(path: str) -> migparted.Config:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise errors.ConfigError(f"cannot read {p}: {exc.strerror}") from None
    try:
        raw: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise errors.ConfigError(f"{p}: not valid YAML: {exc}") from None
    if isinstance(raw, dict) and raw.get("kind") == "ConfigMap":
        return migparted.parse_configmap(raw)
    return migparted.parse_data(raw, where=str(p))


async def _read_configmap(args: argparse.Namespace) -> tuple[migparted.Config | None,
                                                              str | None]:
    from migfit.extender import advice, kubeapi

    ns, _, name = str(args.configmap).partition("/")
    if not name:
        raise errors.UsageError(f"--configmap {args.configmap!r} is not NAMESPACE/NAME")
    try:
        api = await kubeapi.api_client(kubeconfig=args.kubeconfig, context=args.context)
    except errors.ConfigError as exc:
        return None, exc.message
    async with api:
        return await advice.read_config(api, name=name, namespace=ns)


def load(args: argparse.Namespace) -> tuple[cluster.Cluster, migparted.Config | None]:
    """The cluster and the mig-parted config for one run of advise/explain."""
    state = sources.load_from_args(args)
    if args.mig_parted_config:
        return state, _config_file(args.mig_parted_config)
    if getattr(args, "cluster_file", None) is not None:
        return state, None
    config, why = asyncio.run(_read_configmap(args))
    if why is not None:
        print(f"migfit: note: {why}; layouts are inferred from allocatable", file=sys.stderr)
    return state, config


def render_text(advice: advisor.Advice) -> str:
    if not advice.waiting:
        return "No pod waits for a MIG profile that no node has free: nothing to re-lay out."
    lines: list[str] = []
    for rec in advice.recommendations:
        kind = "DISRUPTIVE" if rec.disruptive else "safe"
        lines.append(f"node {rec.node} ({rec.model}, {kind}): -> {rec.target}"
                     + ("" if rec.config else " (custom config)"))
        for g in rec.gpus:
            mark = "" if g.changed else " (unchanged)"
            lines.append(f"  GPU {g.index}: {' '.join(g.before) or '(none)'} -> "
                         f"{' '.join(g.after) or '(none)'}{mark}")
        if rec.note:
            lines.append(f"  layout before: {rec.note}")
        lines.append(f"  unblocks: {', '.join(rec.unblocks) or 'none'}")
        lines.append(f"  disrupts: {', '.join(rec.disrupts) or 'none'}")
        if rec.mig_parted is not None:
            lines.append("  add to the mig-parted ConfigMap's config.yaml:")
            lines.extend("    " + line for line in
                         migparted.dump(rec.mig_parted).rstrip().splitlines())
        lines.append(f"  apply: kubectl label node {rec.node} "
                     f"{advisor.LABEL_CONFIG}={rec.target} --overwrite")
    if advice.unserved:
        lines.append(f"{len(advice.unserved)} waiting pod(s) no re-layout can serve now: "
                     f"{', '.join(advice.unserved[:10])}"
                     + (" ..." if len(advice.unserved) > 10 else ""))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    state, config = load(args)
    now = time.time() if args.now is None else args.now
    result = advisor.advise(state, now=now, settings=settings, config=config)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(render_text(result))
    return 0
