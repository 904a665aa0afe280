"""``migfit advise``: which nodes to re-partition so that waiting MIG pods can run.

A summary by default (one line per recommended node: what it becomes, whom it unblocks, the
command); ``--details`` or ``-o wide`` adds each GPU's change and the mig-parted config to add;
``-o json|yaml`` prints the data.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from migfit import (
    advisor,
    cluster,
    decoding,
    defrag,
    errors,
    flagtypes,
    keys,
    migparted,
    profiles,
    records,
    snapshots,
    sources,
    strictfiles,
)
from migfit.commands import options, workstation


def _config_lines(config: Any) -> list[str]:
    """The lines that show a recommendation's mig-parted config to add (none without one)."""
    if config is None:
        return []
    return [f"  add to the config.yaml of {advisor.CUSTOM_CONFIG_WHERE}:",
            *("    " + line for line in migparted.dump(config).rstrip().splitlines())]

def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Source, ConfigMap and grace flags shared by ``advise`` and ``explain``."""
    sources.add_source_arguments(parser, once=True)
    workstation.add_catalog_argument(parser)
    parser.add_argument("--grace", metavar="SECONDS", type=flagtypes.number, default=60.0,
                        help="a pod counts once it has been unschedulable this long "
                             "(default 60)")
    parser.add_argument("--mig-parted-config", metavar="FILE",
                        help="the mig-parted config (a ConfigMap manifest or the config.yaml "
                             "itself); default with --kubeconfig: read the ConfigMap")
    parser.add_argument("--configmap", metavar="NAMESPACE/NAME",
                        help="the mig-parted ConfigMap to read from the API (default "
                             f"{DEFAULT_CONFIGMAP})")
    parser.add_argument("--no-disruptive", action="store_true",
                        help="never recommend a change that disrupts a running pod (the idle "
                             "GPUs of busy nodes may still be re-laid out; see "
                             "--no-busy-nodes)")
    parser.add_argument("--no-busy-nodes", action="store_true",
                        help="never re-lay out the idle GPUs of nodes where pods run "
                             "(docs/relayout.md)")
    options.add_ahead_arguments(parser)
    parser.add_argument("--now", metavar="EPOCH", type=flagtypes.number, help=argparse.SUPPRESS)


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
    parser.add_argument("--defrag", action="store_true",
                        help="also advise draining busy nodes (advice only: migfit evicts "
                             "nothing): which pods would move where, within their "
                             "PodDisruptionBudgets, so that the node's GPUs can be re-laid "
                             "out for pods the other re-layouts leave waiting; replaces the "
                             "unbounded disruptive re-layouts")
    parser.add_argument("--max-move-share", metavar="F", type=flagtypes.share,
                        default=defrag.DEFAULT_MAX_MOVE_SHARE,
                        help="with --defrag: move at most this share (0 < F <= 1) of the "
                             "bound MIG pods")


def settings_from_args(args: argparse.Namespace) -> advisor.Settings:
    if args.grace < 0:
        raise errors.UsageError(f"--grace must be 0 or more seconds, got {args.grace:g}")
    # --defrag's drains (bounded, within PDBs, with a place for every moved pod) take the
    # place of the unbounded disruptive re-layouts.
    disruptive = not args.no_disruptive and not getattr(args, "defrag", False)
    return options.advisor_settings(args, grace_s=args.grace, allow_disruptive=disruptive,
                                    busy_nodes=not getattr(args, "no_busy_nodes", False))


def _config_file(path: str) -> migparted.Config:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise errors.ConfigError(f"cannot read {p}: {exc.strerror}") from None
    text = strictfiles.text(data, where=str(p))
    try:
        raw: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise errors.ConfigError(f"{p}: not valid YAML {strictfiles.yaml_problem(exc)}; pass "
                                 "--mig-parted-config a mig-parted config file or the "
                                 "ConfigMap holding one") from None
    if raw is None:
        # mig-parted reads an empty document as no config; a file named on the command line
        # and empty (or only comments) is a wrong file, and every layout read as missing
        # from it. Refused as an empty --cluster or --catalog file is.
        raise errors.ConfigError(f"{p}: the file is empty; {migparted.CONFIG_FILE} (pass "
                                 f"--mig-parted-config that file, or the ConfigMap holding one)")
    if isinstance(raw, dict) and raw.get("kind") == "List":
        # what `kubectl get configmap ... -o yaml` prints for a selector or several names
        listed = raw.get("items")
        items: list[Any] = listed if isinstance(listed, list) else []
        maps = [i for i in items if isinstance(i, dict) and i.get("kind") == "ConfigMap"]
        if len(maps) != 1 or len(items) != 1:
            names = ", ".join(str((i.get("metadata") or {}).get("name", "?")) for i in maps)
            raise errors.ConfigError(
                f"{p}: a List of {len(items)} object(s), {len(maps)} of them ConfigMaps"
                f"{' (' + names + ')' if names else ''}; pass --mig-parted-config one "
                f"ConfigMap (kubectl get configmap NAME -o yaml) or a mig-parted config file")
        raw = maps[0]
    if isinstance(raw, dict) and raw.get("kind") == "ConfigMap":
        return migparted.parse_configmap(raw)
    return migparted.parse_data(raw, where=str(p))


DEFAULT_CONFIGMAP = f"{migparted.DEFAULT_NAMESPACE}/{migparted.DEFAULT_CONFIGMAP}"


def configmap_ref(args: argparse.Namespace) -> tuple[str, str]:
    given = DEFAULT_CONFIGMAP if args.configmap is None else args.configmap
    ns, _, name = str(given).partition("/")
    if not ns or not name or "/" in name:
        raise errors.UsageError(f"--configmap {given!r} is not NAMESPACE/NAME")
    return ns, name


Reader = Callable[[Any, profiles.Catalog], Awaitable[cluster.Cluster]]


def load(args: argparse.Namespace, *, reader: Reader | None = None,
         ) -> tuple[cluster.Cluster, migparted.Config | None]:
    """The cluster and the mig-parted config for one run of advise/explain.

    Against an API server both come through one connection: ``reader(client)`` reads the
    cluster (default: one list of every Node and Pod), then the ConfigMap is read unless
    ``--mig-parted-config`` gives the config.
    """
    _check_config_args(args)
    catalog = workstation.catalog_of(args)
    file_config = _config_file(args.mig_parted_config) if args.mig_parted_config else None
    if getattr(args, "cluster_file", None) is not None:
        return sources.load_snapshot(args.cluster_file, catalog=catalog), file_config
    ref = configmap_ref(args)

    async def work(client: Any) -> tuple[cluster.Cluster, migparted.Config | None,
                                         str | None]:
        from migfit import watching
        from migfit.extender import advice

        if reader is not None:
            state = await reader(client, catalog)
        else:
            state = cluster.Cluster(catalog)
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
    # Of the pods no node can give an instance: not those that fit free ones already
    # (``_unserved`` names them) nor those a change in flight serves (``_awaiting``).
    short_keys = {w.key for w in advice.waiting
                  if not w.fits_free and w.key not in advice.awaiting}
    served = len({k for r in recs for k in r.unblocks if k in short_keys})
    ahead = sum(r.ahead for r in recs)
    traded = sum(bool(r.balance) for r in recs)
    lines = [f"{len(short_keys)} pod(s) wait for a MIG instance no node can give them; "
             f"{len(recs) - ahead} re-layout(s) ({len(recs) - ahead - disruptive - busy} "
             "safe, " + (f"{busy} of busy nodes' idle GPUs, " if busy else "")
             + f"{disruptive} disruptive) would unblock {served} of them."
             + (f" {ahead - traded} idle node(s) re-laid out ahead of demand, for the "
                "instances the demand mix will lack." if ahead - traded else "")
             + (f" {traded} idle node(s) trade GPU layouts, so that each node's cpu and "
                "memory can feed its instances." if traded else "")]
    lines.extend(_held(advice))
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
    if any(rec.config is None for rec in recs):
        lines.append("A (custom) target is not in the MIG Manager's ConfigMap yet: add its "
                     "mig-parted config there first (migfit advise --details prints it and "
                     "where), or the label fails the node; the extender's "
                     "--apply-custom-configs does both.")
    lines.append("Each GPU's change and the mig-parted config to add: migfit advise --details "
                 "(or -o wide, -o json)")
    return lines


def _kind(rec: advisor.Recommendation) -> str:
    if rec.balance:
        return "balance"
    if rec.ahead:
        return "ahead"
    if rec.disruptive:
        return "DISRUPTIVE"
    return "busy node" if rec.running else "safe"


def _held(advice: advisor.Advice) -> list[str]:
    """The free instances the burst reserve keeps from re-layouts ahead of demand (why idle
    GPUs of a profile the mix seems not to need stay as they are), as one line or none."""
    held = [f"{model}: " + ", ".join(f"{k} × {q}" for q, k in sorted(fall.held.items()))
            for model, fall in sorted(advice.ahead.items()) if fall.held]
    if not held:
        return []
    return ["Kept free for bursts of pods as large as the largest seen (re-layouts ahead of "
            "demand leave them): " + "; ".join(held) + "."]


def _first(keys_: Sequence[str], limit: int = 10) -> str:
    """``a, b, c ...``: the first ``limit`` of ``keys_``, then "..." when there are more."""
    return ", ".join(keys_[:limit]) + (" ..." if len(keys_) > limit else "")


def _unserved(advice: advisor.Advice) -> list[str]:
    """The waiting pods no re-layout serves, as up to two lines: those that fit free
    instances already (waiting for something migfit does not model; before, they were
    counted among the pods "no node can give" an instance), and the rest."""
    fits = {w.key for w in advice.waiting if w.fits_free}
    lines = []
    for keys_, text in (
            ([k for k in advice.unserved if k in fits],
             "waiting pod(s) fit free instances on a node they may use, yet kube-scheduler "
             "has not placed them: something migfit does not model keeps them off (pod "
             "affinity, topology spread, volumes; migfit explain POD)"),
            ([k for k in advice.unserved if k not in fits],
             "waiting pod(s) no re-layout can serve now")):
        if keys_:
            lines.append(f"{len(keys_)} {text}: {_first(keys_)}")
    return lines


def _cooling(advice: advisor.Advice) -> list[str]:
    """The nodes cooling down after a re-layout, as one line or none: the advice re-lays them
    out again only for pods that became unschedulable since (docs/relayout.md, 6)."""
    if not advice.cooling:
        return []
    shown = [f"{n} (changed {keys.rfc3339(t, micro=False)})"
             for n, t in sorted(advice.cooling.items())]
    return [f"{len(shown)} node(s) cool down after a re-layout and are re-laid out again only "
            f"for pods unschedulable since: {_first(shown)}"]


def _awaiting(advice: advisor.Advice) -> list[str]:
    """The waiting pods a re-layout in flight will serve (no node is advised for them), as one
    line or none."""
    if not advice.awaiting:
        return []
    shown = [f"{k} ({n})" for k, n in sorted(advice.awaiting.items())]
    return [f"{len(shown)} waiting pod(s) can run on a node being re-laid out now once its "
            f"change is done, so no other node is re-laid out for them: {_first(shown)}"]


def render_text(advice: advisor.Advice, *, details: bool = True) -> str:
    """The advice for people: every node in full (``details``), or a summary table."""
    if not advice.waiting and not advice.recommendations:
        return "\n".join(["No pod waits for a MIG instance that no node can give it: nothing "
                          "to re-lay out.", *_held(advice)])
    if not details:
        lines = _summary(advice)
        lines.extend(_awaiting(advice))
        lines.extend(_cooling(advice))
        lines.extend(_unserved(advice))
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
        if rec.balance:
            lines.append(f"  ahead of demand: {rec.balance}")
        elif rec.ahead:
            lines.append(f"  ahead of demand: the demand mix will lack {rec.lacking}")
        else:
            lines.append(f"  unblocks: {', '.join(rec.unblocks) or 'none'}")
        lines.append(f"  disrupts: {', '.join(rec.disrupts) or 'none'}")
        if rec.running:
            lines.append(f"  keeps running (their GPUs unchanged; the MIG Manager pauses the "
                         f"node's GPU operands meanwhile, docs/relayout.md): "
                         f"{', '.join(rec.running)}")
        lines.extend(_config_lines(rec.mig_parted))
        lines.append(f"  apply: kubectl label node {rec.node} "
                     f"{advisor.LABEL_CONFIG}={rec.target} --overwrite")
    lines.extend(_awaiting(advice))
    lines.extend(_cooling(advice))
    lines.extend(_unserved(advice))
    lines.extend(_held(advice))
    return "\n".join(lines)


def _check_config_args(args: argparse.Namespace) -> None:
    """The source's flags, and the mig-parted config given one way only."""
    sources.check_source_args(args)
    if getattr(args, "cluster_file", None) is not None and args.configmap is not None:
        raise errors.UsageError("--configmap reads the ConfigMap from a Kubernetes API; with "
                                "--cluster FILE, pass --mig-parted-config FILE (the ConfigMap's "
                                "manifest or its config.yaml) instead")
    if args.mig_parted_config and args.configmap is not None:
        raise errors.UsageError("--configmap and --mig-parted-config both give the mig-parted "
                                "config: drop one of them")


def load_disruption(args: argparse.Namespace) -> tuple[
        cluster.Cluster, migparted.Config | None, records.Disruption]:
    """``load`` for ``--defrag``: also the PodDisruptionBudgets and the bound GPU pods'
    labels and owners (from the snapshot file, or one more list from the API)."""
    cluster_file = getattr(args, "cluster_file", None)
    if cluster_file is not None:
        _check_config_args(args)
        state = cluster.Cluster(workstation.catalog_of(args))
        snap = snapshots.read(cluster_file, disruption=True, catalog=state.catalog)
        snapshots.install(state, snap)
        state.mark_synced()
        config = _config_file(args.mig_parted_config) if args.mig_parted_config else None
        assert snap.disruption is not None
        return state, config, snap.disruption
    seen: list[records.Disruption] = []

    async def reader(client: Any, catalog: profiles.Catalog) -> cluster.Cluster:
        import asyncio

        (nodes, _), (pods, _), (pdbs, _) = await asyncio.gather(
            client.list_nodes(), client.list_pods(), client.list_pod_disruption_budgets())
        state = cluster.Cluster(catalog)
        state.replace("Node", nodes)
        state.replace("Pod", pods)
        state.mark_synced()
        seen.append(decoding.disruption(pods, pdbs))
        return state

    state, config = load(args, reader=reader)
    return state, config, seen[0]


def _share(args: argparse.Namespace) -> float:
    share = float(args.max_move_share)
    if not 0 < share <= 1:
        raise errors.UsageError(f"--max-move-share must be more than 0 and at most 1, got "
                                f"{share:g}")
    if not args.defrag and share != defrag.DEFAULT_MAX_MOVE_SHARE:
        raise errors.UsageError("--max-move-share needs --defrag")
    return share


def render_defrag(result: defrag.Defrag, *, details: bool = True) -> str:
    """The drains for people: every move, the PDBs consulted, the new layout."""
    lines = [f"Defragmentation (advice only: migfit evicts nothing): {len(result.drains)} "
             f"node(s) to drain, moving {result.moved} of {result.bound_pods} bound MIG "
             f"pod(s) (at most {result.max_moves}: --max-move-share "
             f"{result.max_move_share:g})."]
    for d in result.drains:
        rec = d.recommendation
        lines.append(f"drain node {d.node} ({rec.model}): move {len(d.moves)} pod(s), then "
                     f"-> {rec.target}" + ("" if rec.config else " (custom config)"))
        for m in d.moves:
            want = " ".join(f"{n} × {p}" if n > 1 else p for p, n in sorted(m.profiles.items()))
            lines.append(f"  move {m.pod} ({want}) -> free instance on {m.to}"
                         + (f" (PDB {m.pdb})" if m.pdb else ""))
        for u in d.pdbs:
            lines.append(f"  PDB {u.pdb}: allows {u.allowed} disruption(s), the advice uses "
                         f"{u.used}")
        lines.append(f"  unblocks: {', '.join(rec.unblocks) or 'none'}")
        if details:
            for g in rec.gpus:
                mark = "" if g.changed else " (unchanged)"
                lines.append(f"  GPU {g.index}: {' '.join(g.before) or '(none)'} -> "
                             f"{' '.join(g.after) or '(none)'}{mark}")
            lines.extend(_config_lines(rec.mig_parted))
        # A custom target must be in the MIG Manager's ConfigMap before the label names it,
        # or the node fails (an outside check: only the plain summary said so).
        first = ("" if rec.config else
                 f"add config {rec.target} (printed by migfit advise --defrag --details) to "
                 f"the ConfigMap the ClusterPolicy's migManager.config.name names; ")
        lines.append(f"  steps: {first}kubectl cordon {d.node}; evict the pods above (the "
                     f"eviction API honours their PDBs); once no MIG pod runs there: kubectl "
                     f"label node {d.node} {advisor.LABEL_CONFIG}={rec.target} --overwrite; "
                     f"after {advisor.LABEL_CONFIG}.state=success: kubectl uncordon {d.node}")
    for b in result.blocked:
        lines.append(f"not drained: {b.node}: {b.reason}")
    if result.unserved:
        lines.append(f"{len(result.unserved)} waiting pod(s) still unserved: "
                     f"{_first(result.unserved)}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    output = workstation.output_of(args, switches={"--json": "json", "--details": "wide"})
    settings = settings_from_args(args)
    share = _share(args)
    disruption: records.Disruption | None = None
    if args.defrag:
        state, config, disruption = load_disruption(args)
    else:
        state, config = load(args)
    now = time.time() if args.now is None else args.now
    result = advisor.advise(state, now=now, settings=settings, config=config)
    drains = None if disruption is None else defrag.advise_defrag(
        state, result, disruption, max_move_share=share, config=config)
    doc: dict[str, Any] = dict(result.to_json())
    if drains is not None:
        doc["defrag"] = drains.to_json()
    details = output == "wide"
    if output in ("json", "yaml"):
        workstation.print_data(doc, output)
    else:
        print(render_text(result, details=details))
        if drains is not None and result.waiting:
            print(render_defrag(drains, details=details))
    return 0
