"""``migfit advise``: which nodes to re-partition so that waiting MIG pods can run.

A summary by default (one line per recommended node: what it becomes, whom it unblocks, the
command); ``--details`` or ``-o wide`` adds each GPU's change and the mig-parted config to add;
``-o json|yaml`` prints the data.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from migfit import advisor, cluster, errors, migparted, sources
from migfit.commands import workstation


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
                        help="never recommend a change that disrupts a running pod (the idle "
                             "GPUs of busy nodes may still be re-laid out; see "
                             "--no-busy-nodes)")
    parser.add_argument("--no-busy-nodes", action="store_true",
                        help="never re-lay out the idle GPUs of nodes where pods run "
                             "(docs/relayout.md)")
    parser.add_argument("--now", metavar="EPOCH", type=float, help=argparse.SUPPRESS)


SUMMARY_ROWS = 50
"""Recommendations the summary lists; the rest are counted (all of them with --details)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument("--json", action="store_true",
                        help='print {"recommendations": [...]} as JSON (the same as -o json)')
    parser.add_argument("--details", action="store_true",
                        help="each GPU's change and the mig-parted config to add, per node "
                             "(the same as -o wide)")
    workstation.add_output_argument(parser, wide="details per node")


def settings_from_args(args: argparse.Namespace) -> advisor.Settings:
    if args.grace < 0:
        raise errors.UsageError(f"--grace must be 0 or more seconds, got {args.grace:g}")
    return advisor.Settings(grace_s=args.grace, allow_disruptive=not args.no_disruptive,
                            busy_nodes=not getattr(args, "no_busy_nodes", False))


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


def configmap_ref(args: argparse.Namespace) -> tuple[str, str]:
    ns, _, name = str(args.configmap).partition("/")
    if not ns or not name or "/" in name:
        raise errors.UsageError(f"--configmap {args.configmap!r} is not NAMESPACE/NAME")
    return ns, name


Reader = Callable[[Any], Awaitable[cluster.Cluster]]


def load(args: argparse.Namespace, *, reader: Reader | None = None,
         ) -> tuple[cluster.Cluster, migparted.Config | None]:
    """The cluster and the mig-parted config for one run of advise/explain.

    Against an API server both come through one connection: ``reader(client)`` reads the
    cluster (default: one list of every Node and Pod), then the ConfigMap is read unless
    ``--mig-parted-config`` gives the config.
    """
    sources.check_source_args(args)
    file_config = _config_file(args.mig_parted_config) if args.mig_parted_config else None
    if getattr(args, "cluster_file", None) is not None:
        return sources.load_snapshot(args.cluster_file), file_config
    ref = configmap_ref(args)

    async def work(client: Any) -> tuple[cluster.Cluster, migparted.Config | None,
                                         str | None]:
        from migfit import watching
        from migfit.extender import advice

        if reader is not None:
            state = await reader(client)
        else:
            state = cluster.Cluster()
            await watching.list_once(state, client)
        if args.mig_parted_config:
            return state, file_config, None
        config, why = await advice.read_config(client, namespace=ref[0], name=ref[1])
        return state, config, why

    state, config, why = workstation.run_api(work, args)
    if why is not None:
        print(f"migfit: note: {why}; layouts are inferred from allocatable", file=sys.stderr)
    return state, config


def _summary(advice: advisor.Advice) -> list[str]:
    recs = advice.recommendations
    disruptive = sum(r.disruptive for r in recs)
    busy = sum(bool(r.running) for r in recs)
    served = len({k for r in recs for k in r.unblocks})
    lines = [f"{len(advice.waiting)} pod(s) wait for a MIG profile no node has free; "
             f"{len(recs)} re-layout(s) ({len(recs) - disruptive - busy} safe, "
             + (f"{busy} of busy nodes' idle GPUs, " if busy else "")
             + f"{disruptive} disruptive) would unblock {served} of them."]
    if not recs:
        return lines
    rows = [("NODE", "MODEL", "KIND", "TARGET", "UNBLOCKS", "DISRUPTS", "APPLY")]
    for rec in recs[:SUMMARY_ROWS]:
        rows.append((rec.node, rec.model, _kind(rec),
                     rec.target + ("" if rec.config else " (custom)"),
                     str(len(rec.unblocks)), str(len(rec.disrupts)),
                     f"kubectl label node {rec.node} {advisor.LABEL_CONFIG}={rec.target} "
                     "--overwrite"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines.append("")
    lines.extend("  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]])
                 for r in rows)
    if len(recs) > SUMMARY_ROWS:
        lines.append(f"... and {len(recs) - SUMMARY_ROWS} more node(s)")
    lines.append("")
    lines.append("Each GPU's change and the mig-parted config to add: migfit advise --details "
                 "(or -o wide, -o json)")
    return lines


def _kind(rec: advisor.Recommendation) -> str:
    if rec.disruptive:
        return "DISRUPTIVE"
    return "busy node" if rec.running else "safe"


def render_text(advice: advisor.Advice, *, details: bool = True) -> str:
    """The advice for people: every node in full (``details``), or a summary table."""
    if not advice.waiting:
        return "No pod waits for a MIG profile that no node has free: nothing to re-lay out."
    if not details:
        lines = _summary(advice)
        if advice.unserved:
            lines.append(f"{len(advice.unserved)} waiting pod(s) no re-layout can serve now: "
                         f"{', '.join(advice.unserved[:10])}"
                         + (" ..." if len(advice.unserved) > 10 else ""))
        return "\n".join(lines)
    lines = []
    for rec in advice.recommendations:
        kind = _kind(rec)
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
        if rec.running:
            lines.append(f"  keeps running (their GPUs unchanged; the MIG Manager pauses the "
                         f"node's GPU operands meanwhile, docs/relayout.md): "
                         f"{', '.join(rec.running)}")
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
    elif args.output in ("json", "yaml"):
        workstation.print_data(result.to_json(), args.output)
    else:
        print(render_text(result, details=args.details or args.output == "wide"))
    return 0
