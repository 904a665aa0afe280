"""Arguments shared by the commands: types that make a bad value a usage error at parse time,
and the advisor's switches."""

from __future__ import annotations

import argparse
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
