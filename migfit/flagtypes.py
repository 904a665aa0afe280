"""Numbers given on the command line: the argparse types of every numeric flag, in one place.

Python's ``float`` reads ``nan``, ``inf`` and ``1e999`` (infinity), and a flag's later range
check compares with ``<`` or ``<=``: NaN passes every such check (each comparison with it is
false) and infinity defeats the flag (``now - start >= inf`` never holds, so a re-layout given
``--relayout-timeout inf`` or ``nan`` never timed out). A numeric flag therefore takes
``number`` (or ``positive_seconds``), never ``float``: a value that is not a finite number is
a usage error at parse time, naming the flag, before anything starts. The flags' own ranges
are still checked where they are used.

Used by every layer that adds flags (the commands, ``serving``'s connection bounds, the
extender's DCGM scraper), so it sits in the core.
"""

from __future__ import annotations

import argparse
import math


def number(text: str) -> float:
    """A finite number (argparse turns the error into a usage message naming the flag)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a finite number: write it in digits, such as 60 or 0.25")
    return value


def share(text: str) -> float:
    """A finite number for a flag that is a share (``--waste-warning``, ``--node-share``: 0.5
    is half): the example its error gives is one such a flag takes, and a percentage
    (``50%``) is told the fraction it means."""
    try:
        return number(text)
    except argparse.ArgumentTypeError:
        percent = text.strip().removesuffix("%")
        try:
            fraction = float(percent) / 100 if percent != text.strip() else math.nan
        except ValueError:
            fraction = math.nan
        example = (f"write the share as a fraction, such as {shown(fraction)} for {text.strip()}"
                   if math.isfinite(fraction) else "write it in digits, such as 0.25")
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number: {example}") from None


def shown(value: float) -> str:
    """A number flag's value for a message, as it was typed: ``-1`` for ``-1`` (``-1.0`` is a
    float's spelling, not the user's), ``0.25`` for ``0.25``, ``3000000`` for ``3000000``."""
    text = repr(float(value))
    return text.removesuffix(".0")


def positive_seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse turns the error into a usage message)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text}: use a positive number of seconds")
    return value
