"""``migfit layout check|list|plan``: ask the placement engine whether MIG instances fit one GPU.

``check`` and ``list`` live here; ``plan`` (the advisor's best-layout search) lives in
``migfit.commands.layout_plan``, which uses ``add_model_arguments`` and ``model_from_args``
below for its ``--gpu``/``--catalog`` flags.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TypedDict

from migfit import layouts, placements, profiles
from migfit.commands import layout_plan
from migfit.commands.gpu_args import InstanceJson, add_model_arguments, model_from_args


class CheckJson(TypedDict):
    valid: bool
    placement: list[InstanceJson]
    reason: str | None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="layout_command", metavar="SUBCOMMAND", required=True)

    check = sub.add_parser(
        "check", help="exit 0 and print a placement if the instances fit one GPU, 1 if not",
        description="Exit 0 and print a placement (PROFILE@START ...) when the instances fit "
                    "one GPU; exit 1 and print the reason when they do not. PROFILE@START "
                    "pins an instance that already exists at that memory slice.",
    )
    add_model_arguments(check)
    check.add_argument("profiles", nargs="+", metavar="PROFILE",
                       help="a MIG profile (1g.10gb), repeated per instance; PROFILE@START "
                            "for an instance fixed at a start")
    check.add_argument("--json", action="store_true",
                       help='print {"valid", "placement", "reason"} as JSON')
    check.set_defaults(_layout_run=run_check)

    lst = sub.add_parser("list", help="every valid layout of a model (or only the maximal ones)",
                         description="List every valid layout of one GPU of a model.")
    add_model_arguments(lst)
    lst.add_argument("--maximal", action="store_true",
                     help="only layouts to which no further instance can be added")
    lst.add_argument("--json", action="store_true",
                     help="print a JSON list of layouts, each a sorted list of profile names")
    lst.set_defaults(_layout_run=run_list)

    plan_parser = sub.add_parser("plan", help=layout_plan.HELP, description=layout_plan.HELP)
    layout_plan.add_arguments(plan_parser)
    plan_parser.set_defaults(_layout_run=layout_plan.run)


def run(args: argparse.Namespace) -> int:
    handler: Callable[[argparse.Namespace], int] = args._layout_run
    return handler(args)


def check_json(fit: placements.Fit) -> CheckJson:
    """The ``layout check --json`` document for a fit."""
    insts = fit.placement.instances if fit.placement is not None else ()
    return CheckJson(
        valid=fit.placement is not None,
        placement=[InstanceJson(profile=i.profile, start=i.start, size=i.size) for i in insts],
        reason=None if fit.reason is None else fit.reason.message,
    )


def check_names(model: profiles.GpuModel, tokens: list[str]) -> placements.Fit:
    """Fit ``tokens`` (PROFILE or PROFILE@START) on one GPU; a UsageError for unknown names."""
    fixed: list[placements.Instance] = []
    wanted: list[str] = []
    for token in tokens:
        if "@" in token:
            # A start the GPU cannot use is an answer (invalid, exit 1), not a usage error.
            fixed.append(placements.parse_instance(model, token, any_start=True))
        else:
            wanted.append(model.profile(token).name)
    if fixed:
        return placements.fit(model, wanted, fixed=fixed)
    return layouts.check(model, wanted)


def run_check(args: argparse.Namespace) -> int:
    model = model_from_args(args)
    fit = check_names(model, list(args.profiles))
    if args.json:
        print(json.dumps(check_json(fit)))
    elif fit.placement is not None:
        print(fit.placement)
    else:
        reason = fit.reason.message if fit.reason is not None else "does not fit"
        print(f"invalid on {model.id}: {reason}")
    return 0 if fit.placement is not None else 1


def run_list(args: argparse.Namespace) -> int:
    model = model_from_args(args)
    found = layouts.of(model)
    chosen = found.maximal if args.maximal else found.all
    if args.json:
        json.dump([lay.profile_names() for lay in chosen], sys.stdout)
        sys.stdout.write("\n")
        return 0
    rows = [(" ".join(lay.profile_names()), str(lay.placement)) for lay in chosen]
    width = max((len(r[0]) for r in rows), default=0)
    for names, where in rows:
        print(f"{names.ljust(width)}  {where}")
    kind = "maximal layouts" if args.maximal else "layouts"
    print(f"{model.id}: {len(rows)} {kind}", file=sys.stderr)
    return 0

