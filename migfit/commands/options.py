"""Argument types shared by the server commands, so a bad value is a usage error at parse time."""

from __future__ import annotations

import argparse


def port(text: str) -> int:
    """A TCP port to listen on: 1..65535 (argparse turns the error into a usage message)."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number: use 1..65535") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port: use 1..65535")
    return value
