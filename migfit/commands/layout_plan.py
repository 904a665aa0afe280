"""``migfit layout plan``: the best valid layout of one GPU for the instances needed (the planner).

Registered by ``migfit.commands.layout`` as its ``plan`` subcommand.
"""

from __future__ import annotations

import argparse
import json
from typing import TypedDict

from migfit import errors, placements, planner, profiles
from migfit.commands import gpu_args

HELP = "a best valid layout of one GPU for the instances needed, keeping those in use"


class PlanJson(TypedDict):
    model: str
    layout: list[str]
    placement: list[gpu_args.InstanceJson]
    kept: list[str]
    served: dict[str, int]
    unserved: dict[str, int]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    gpu_args.add_model_arguments(parser)
    parser.add_argument("--need", metavar="PROFILE=N", action="append", required=True,
                        help="N instances of PROFILE are wanted (repeatable), e.g. 1g.10gb=3")
    parser.add_argument("--keep", metavar="PROFILE@START", action="append", default=[],
                        help="an instance in use that must stay where it is (repeatable), "
                             "e.g. 3g.40gb@4")
    parser.add_argument("--json", action="store_true",
                        help='print {"model", "layout", "placement", "kept", "served", '
                             '"unserved"} as JSON')


def parse_need(model: profiles.GpuModel, tokens: list[str]) -> dict[str, int]:
    """``["1g.10gb=3", ...]`` -> ``{"1g.10gb": 3}``; a UsageError naming the bad token."""
    out: dict[str, int] = {}
    for token in tokens:
        name, sep, count = token.partition("=")
        if not sep or not count.isdigit() or int(count) < 1:
            raise errors.UsageError(
                f"--need {token!r} is not of the form PROFILE=N with N >= 1, e.g. 1g.10gb=2")
        prof = model.profile(name.strip())
        out[prof.name] = out.get(prof.name, 0) + int(count)
    return out


def run(args: argparse.Namespace) -> int:
    model = gpu_args.model_from_args(args)
    need = parse_need(model, list(args.need))
    keep = [placements.parse_instance(model, t) for t in args.keep]
    bad = placements.check_fixed(model, keep)
    if bad is not None:
        raise errors.UsageError(f"--keep: {bad.message}")
    plan = planner.plan_gpu(model, demand=planner.Demand.of_counts(need), fixed=keep)
    unserved = {p: n - plan.served.get(profiles.ProfileName(p), 0) for p, n in need.items()
                if n - plan.served.get(profiles.ProfileName(p), 0) > 0}
    if args.json:
        doc = PlanJson(
            model=model.id,
            layout=list(plan.after.profile_names()),
            placement=[gpu_args.InstanceJson(profile=i.profile, start=i.start, size=i.size)
                       for i in plan.after.placement.instances],
            kept=[str(i) for i in plan.fixed],
            served={str(p): n for p, n in plan.served.items()},
            unserved=unserved,
        )
        print(json.dumps(doc))
    else:
        print(plan.after.placement)
        served = ", ".join(f"{n}×{p}" for p, n in plan.served.items()) or "nothing"
        print(f"{model.id}: {plan.after} serves {served}"
              + (f"; not served on one GPU: "
                 f"{', '.join(f'{n}×{p}' for p, n in unserved.items())}" if unserved else ""))
    return 0 if not unserved else 1
