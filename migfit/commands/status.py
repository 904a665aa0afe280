"""``migfit status``: per node and MIG profile, what is allocatable, used and free right now.

The table an operator wants instead of reading ``kubectl describe node`` for every GPU node:
free = allocatable - instances held by bound, non-terminated pods (never the ``.count`` label).
The table and the JSON document say the same: each node's notes (``node_notes``) and the
summary under the table (``summary``) are computed once and printed by both.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TypedDict

from migfit import advisor, cluster, keys, migparted, profiles, records, sources
from migfit.commands import workstation


class ProfileJson(TypedDict):
    allocatable: int
    used: int
    free: int


class NodeJson(TypedDict):
    name: str
    model: str | None
    strategy: str | None
    config: str | None
    config_state: str | None
    profiles: dict[str, ProfileJson]
    cordoned: bool  # spec.unschedulable
    ready: bool  # the Ready condition is True
    model_error: str | None  # why the GPU model is unknown ("model" is null then)
    overcommitted: dict[str, int]  # instances used beyond allocatable, per profile
    notes: list[str]  # the table's NOTES, one entry each


class SummaryJson(TypedDict):
    """The lines under the table, as figures."""

    nodes: int
    mig_nodes: int
    free_on_schedulable_nodes: int  # MIG instances free on nodes neither cordoned nor
    # being re-partitioned
    pending_pods: int  # GPU pods pending
    unschedulable_pods: int  # of them, marked Unschedulable by the scheduler
    waiting_beside_free: list[str]  # of them, those beside free instances of their profiles
    # that no node they can go to has (advisor.stranded; migfit explain POD says why)


class StatusJson(TypedDict):
    nodes: list[NodeJson]
    summary: SummaryJson


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sources.add_source_arguments(parser, once=True)
    workstation.add_catalog_argument(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table "
                        "(the same as -o json)")
    workstation.add_output_argument(parser)


def _profile_names(state: records.NodeState, catalog: profiles.Catalog) -> list[str]:
    names = set(state.node.allocatable) | set(state.used)
    model = catalog.get(state.node.model) if state.node.model else None

    def order(name: str) -> tuple[int, tuple[int, int, bool, str] | tuple[()], str]:
        if model is not None and model.has_profile(name):
            return (0, profiles.profile_order(model.profile(name)), name)
        return (1, (), name)

    return sorted(names, key=order)


def status_json(model: cluster.Cluster) -> StatusJson:
    """The ``--json`` document: every node, sorted by name, and the summary."""
    out: list[NodeJson] = []
    for state in sorted(model.nodes(), key=lambda s: s.name):
        node = state.node
        out.append(NodeJson(
            name=node.name,
            model=node.model,
            strategy=node.strategy,
            config=node.config,
            config_state=node.config_state,
            profiles={
                p: ProfileJson(allocatable=node.allocatable.get(profiles.ProfileName(p), 0),
                               used=state.used.get(profiles.ProfileName(p), 0),
                               free=state.free.get(profiles.ProfileName(p), 0))
                for p in _profile_names(state, model.catalog)
            },
            cordoned=node.unschedulable,
            ready=node.ready,
            model_error=node.model_error,
            overcommitted=dict(sorted(state.overcommit.items())),
            notes=node_notes(state, model.catalog),
        ))
    return StatusJson(nodes=out, summary=summary(model))


def node_notes(state: records.NodeState, catalog: profiles.Catalog) -> list[str]:
    """What the NOTES column says of a node (joined by ", " there), one entry each."""
    node = state.node
    notes: list[str] = []
    if node.unschedulable:
        notes.append("cordoned")
    if node.config_state in keys.REPARTITIONING_STATES:
        notes.append(f"re-partitioning ({node.config_state})")
    elif (failure := records.relayout_failure(node)) is not None:
        # It keeps the taint until an operator clears it: not "in progress" (README, the
        # apply mode's "Failed" state).
        notes.append(f"migfit re-layout failed ({failure}): fix the node, then remove the "
                     f"taint {keys.TAINT_RELAYOUT} and the annotations")
    elif records.relayout_under_way(node):
        notes.append("migfit re-layout in progress")
    if node.config_state == "failed":
        notes.append("MIG config failed")
    if not node.ready:
        notes.append("NotReady")
    for p, n in sorted(state.overcommit.items()):
        notes.append(f"overcommitted {p} by {n}")
    if node.model_error:
        notes.append(f"unknown GPU: {node.model_error.split(';')[0]}")
    if node.strategy is not None and node.strategy not in keys.STRATEGY_LABEL_VALUES:
        # A cluster file with it is refused (snapshots); a live node is shown, read as mixed.
        notes.append(f"unknown {keys.LABEL_STRATEGY} {node.strategy!r} (valid: "
                     f"{' | '.join(keys.STRATEGY_LABEL_VALUES)})")
    gpu = catalog.get(node.model) if node.model else None
    if gpu is not None and node.strategy != "single":  # issue 13: allocation spread
        hint = migparted.spread_note(gpu, node.allocatable, state.used, node.gpu_count,
                                     replicas=node.replicas)
        odd = profiles.unknown_profiles_note(gpu, node.allocatable, catalog=catalog,
                                             labels=node.all_labels)
        notes.extend(n for n in (hint, odd) if n)
    return notes


def summary(model: cluster.Cluster) -> SummaryJson:
    """The figures of the lines under the table."""
    pending = model.pending_pods()
    return SummaryJson(
        nodes=len(model),
        mig_nodes=sum(1 for s in model.nodes() if s.node.allocatable),
        free_on_schedulable_nodes=sum(s.free_total for s in model.nodes()
                                      if not s.node.unschedulable and not s.repartitioning),
        pending_pods=len(pending),
        unschedulable_pods=sum(1 for p in pending if p.unschedulable),
        waiting_beside_free=advisor.stranded(model),
    )


def render_table(model: cluster.Cluster) -> str:
    header = ("NODE", "MODEL", "STRATEGY", "CONFIG", "STATE", "PROFILE", "ALLOC", "USED",
              "FREE", "NOTES")
    rows: list[tuple[str, ...]] = []
    for state in sorted(model.nodes(), key=lambda s: s.name):
        node = state.node
        first = (node.name, node.model or "-", node.strategy or "-", node.config or "-",
                 node.config_state or "-")
        names = _profile_names(state, model.catalog)
        notes = ", ".join(node_notes(state, model.catalog))
        if not names:
            rows.append((*first, "-", "", "", "", notes))
            continue
        for i, p in enumerate(names):
            pn = profiles.ProfileName(p)
            rows.append((*(first if i == 0 else ("",) * 5), p,
                         str(node.allocatable.get(pn, 0)), str(state.used.get(pn, 0)),
                         str(state.free.get(pn, 0)), notes if i == 0 else ""))
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    numeric = {6, 7, 8}

    def line(r: tuple[str, ...]) -> str:
        cells = [c.rjust(widths[i]) if i in numeric else c.ljust(widths[i])
                 for i, c in enumerate(r)]
        return "  ".join(cells).rstrip()

    lines = [line(header), *(line(r) for r in rows)]
    figures = summary(model)
    lines.append("")
    lines.append(
        f"{figures['nodes']} node{'' if figures['nodes'] == 1 else 's'} "
        f"({figures['mig_nodes']} with MIG), "
        f"{figures['free_on_schedulable_nodes']} MIG instances free on schedulable nodes; "
        f"{figures['pending_pods']} GPU pods pending ({figures['unschedulable_pods']} marked "
        "Unschedulable)")
    beside = figures["waiting_beside_free"]
    if beside:
        shown = ", ".join(beside[:3]) + (f" and {len(beside) - 3} more" if len(beside) > 3
                                         else "")
        lines.append(
            f"{len(beside)} of them wait beside free instances of their profiles that no node "
            f"they can go to has (cpu, memory, selectors, taints, or not as many free on one "
            f"node as they ask for): {shown}; migfit explain POD says why, and names a larger "
            f"free profile with room where there is one")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    output = workstation.output_of(args, switches={"--json": "json"})
    model = workstation.load_cluster(args)
    if args.json:
        json.dump(status_json(model), sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif output in ("json", "yaml"):
        workstation.print_data(status_json(model), output)
    else:
        print(render_table(model))
    return 0
