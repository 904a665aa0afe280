"""``migfit explain NAMESPACE/POD``: why one pod is pending, in plain words, with the fix."""

from __future__ import annotations

import argparse
import time

from migfit import advisor, errors
from migfit.commands import advise as advice_cli

HELP = "why a pod is pending, in plain words, and what would fix it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pod", metavar="NAMESPACE/POD",
                        help="the pending pod (a bare name means the default namespace)")
    advice_cli.add_common_arguments(parser)


def run(args: argparse.Namespace) -> int:
    ns, sep, name = str(args.pod).partition("/")
    if not sep:
        ns, name = "default", ns
    if not ns or not name or "/" in name:
        raise errors.UsageError(f"{args.pod!r} is not NAMESPACE/POD")
    settings = advice_cli.settings_from_args(args)
    state, config = advice_cli.load(args)
    now = time.time() if args.now is None else args.now
    print(advisor.explain(state, ns, name, now=now, settings=settings, config=config))
    return 0 if state.find_pod(ns, name) is not None else 1
