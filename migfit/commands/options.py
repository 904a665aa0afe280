"""Arguments shared by the commands: types that make a bad value a usage error at parse time,
and the advisor's switches."""

from __future__ import annotations

import argparse
import math
from typing import Any

from migfit import advisor


def port(text: str) -> int:
    """A TCP port to listen on: 1..65535 (argparse turns the error into a usage message)."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number: use 1..65535") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port: use 1..65535")
    return value


def relayout_limit(text: str) -> tuple[int, float | None]:
    """``--max-relayouts``: N nodes at once (1 or more), or P% of the GPU nodes (at least
    one), as (N, None) or (1, P / 100)."""
    t = text.strip()
    try:
        if t.endswith("%"):
            share = float(t[:-1]) / 100
            if math.isfinite(share) and 0 < share <= 1:
                return (1, share)
        else:
            n = int(t)
            if n >= 1:
                return (n, None)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        f"{text!r}: use a number of nodes, 1 or more, or a share of the GPU nodes above 0 "
        f"and at most 100%, such as 10%")


def add_ahead_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--no-ahead`` and ``--no-balance``: the advisor's re-layouts ahead of demand."""
    parser.add_argument("--no-ahead", action="store_true",
                        help="re-lay out only for waiting pods, never idle nodes ahead of "
                             "demand (toward the profiles the demand mix will lack; "
                             "docs/relayout.md)")
    parser.add_argument("--no-balance", action="store_true",
                        help="never have idle nodes trade GPU layouts so that each node's cpu "
                             "and memory can feed its instances (docs/relayout.md)")


def advisor_settings(args: argparse.Namespace, **fields: Any) -> advisor.Settings:
    """``advisor.Settings`` from ``fields`` and the switches of ``add_ahead_arguments`` (on
    when a command lacks them)."""
    return advisor.Settings(
        ahead_from=None if getattr(args, "no_ahead", False) else advisor.AHEAD_FROM,
        balance_gain=None if getattr(args, "no_balance", False) else advisor.BALANCE_GAIN,
        **fields)
