"""``migfit layout plan``: the best valid layout of one GPU for the instances needed (the planner).

Registered by ``migfit.commands.layout`` as its ``plan`` subcommand.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Iterator, Sequence
from typing import TypedDict

from migfit import errors, placements, planner, profiles
from migfit.commands import gpu_args

HELP = "a best valid layout of one GPU for the instances needed, keeping those in use"


class PlanJson(TypedDict):
    model: str
    layout: list[str]
    placement: list[gpu_args.InstanceJson]
    kept: list[str]
    assumed: list[str]
    served: dict[str, int]
    unserved: dict[str, int]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    gpu_args.add_model_arguments(parser)
    parser.add_argument("--need", metavar="PROFILE=N", action="append", required=True,
                        help="N instances of PROFILE are wanted (repeatable), e.g. 1g.10gb=3")
    parser.add_argument("--keep", metavar="PROFILE[@START]", action="append", default=[],
                        help="an instance in use that must stay where it is (repeatable), "
                             "e.g. 3g.40gb@4 (nvidia-smi mig -lgi shows the start); "
                             "without @START the plan assumes the start that serves the "
                             "need best and says so")
    parser.add_argument("--json", action="store_true",
                        help='print {"model", "layout", "placement", "kept", "assumed", '
                             '"served", "unserved"} as JSON')


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


def _placings(model: profiles.GpuModel, exact: Sequence[placements.Instance],
              loose: Sequence[profiles.ProfileName]
              ) -> Iterator[tuple[placements.Instance, ...]]:
    """Every valid way to place the ``loose`` kept profiles beside the ``exact`` ones,
    instances of one profile taken as interchangeable (so seven 1g's are one way, not 7!)."""
    per_profile = []
    for name in sorted(set(loose)):
        prof = model.profile(name)
        per_profile.append([
            tuple(placements.Instance(start=s, size=prof.size, profile=prof.name)
                  for s in starts)
            for starts in itertools.combinations(prof.starts, loose.count(name))])
    for choice in itertools.product(*per_profile):
        placed = tuple(i for group in choice for i in group)
        if placements.check_fixed(model, [*exact, *placed]) is None:
            yield placed


def _plan(model: profiles.GpuModel, demand: planner.Demand, tokens: Sequence[str]
          ) -> tuple[planner.GpuPlan, tuple[placements.Instance, ...]]:
    """The plan, and the kept instances whose start it assumed (given without @START)."""
    exact = [placements.parse_instance(model, t) for t in tokens if "@" in t]
    loose = [model.profile(t.strip()).name for t in tokens if "@" not in t]
    bad = placements.check_fixed(model, exact)
    if bad is not None:
        raise errors.UsageError(f"--keep: {bad.message}")
    best: tuple[planner.GpuPlan, tuple[placements.Instance, ...]] | None = None
    best_rank: tuple[float, int, int] | None = None
    for placed in _placings(model, exact, loose):
        plan = planner.plan_gpu(model, demand=demand, fixed=[*exact, *placed])
        # As the planner ranks layouts: most of the need served, then the most memory and
        # compute slices laid out; the first (lowest starts) of equals, so it is repeatable.
        names = plan.after_names
        rank = (-round(plan.value, 9),
                -sum(model.profile(n).memory_slices for n in names),
                -sum(model.profile(n).compute_slices for n in names))
        if best_rank is None or rank < best_rank:
            best, best_rank = (plan, placed), rank
    if best is None:
        kept = " ".join([*(str(i) for i in exact), *loose])
        raise errors.UsageError(
            f"--keep: {kept} do not fit one {model.id} GPU together at any start")
    return best


def run(args: argparse.Namespace) -> int:
    model = gpu_args.model_from_args(args)
    need = parse_need(model, list(args.need))
    plan, assumed = _plan(model, planner.Demand.of_counts(need), list(args.keep))
    unserved = {p: n - plan.served.get(profiles.ProfileName(p), 0) for p, n in need.items()
                if n - plan.served.get(profiles.ProfileName(p), 0) > 0}
    if args.json:
        doc = PlanJson(
            model=model.id,
            layout=list(plan.after.profile_names()),
            placement=[gpu_args.InstanceJson(profile=i.profile, start=i.start, size=i.size)
                       for i in plan.after.placement.instances],
            kept=[str(i) for i in plan.fixed],
            assumed=[str(i) for i in assumed],
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
        if assumed:
            print(f"assumed the kept {' '.join(map(str, assumed))}: if an instance sits "
                  f"elsewhere, give --keep PROFILE@START (nvidia-smi mig -lgi shows the start)")
    return 0 if not unserved else 1
