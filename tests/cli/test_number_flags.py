"""Every numeric flag of every command refuses a number that is not finite, as it is parsed.

Python's float reads ``nan`` and ``inf``; NaN then passes every range check (each comparison
with it is false) and infinity defeats the flag: ``migfit extender --relayout-timeout nan``
started, and a node stuck mid re-layout would never have timed out. The flags are found by
walking each command's real parser, so a flag added later with ``type=float`` fails here.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from migfit import cli, errors

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = str(ROOT / "examples" / "cluster.yaml")
NOT_FINITE = ("nan", "inf", "-inf", "NaN", "1e999")


def _parsers(path: list[str], parser: argparse.ArgumentParser
             ) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    """``parser`` and each (sub)command parser below it, with the words that reach it."""
    yield path, parser
    for action in parser._actions:  # argparse keeps its subparsers there only
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers([*path, name], sub)


def _reads_a_fraction(action: argparse.Action) -> bool:
    """Whether the flag's type reads ``2.5`` as a float: a numeric flag, not an int's."""
    if action.type is None or not callable(action.type):
        return False
    try:
        return isinstance(action.type("2.5"), float)
    except (argparse.ArgumentTypeError, ValueError, TypeError, errors.MigfitError):
        return False


def _numeric_flags() -> list[tuple[list[str], str]]:
    found = []
    for name in cli.COMMANDS:
        top = cli.build_parser(name)
        for path, parser in _parsers([], top):
            if not path:
                continue
            for action in parser._actions:
                if action.option_strings and _reads_a_fraction(action):
                    found.append((path, action.option_strings[0]))
    return found


NUMERIC = _numeric_flags()


def test_the_walk_finds_the_flags_of_the_report() -> None:
    flags = {(" ".join(path), flag) for path, flag in NUMERIC}
    assert {("extender", "--relayout-timeout"), ("extender", "--grace"),
            ("advise", "--grace"), ("explain", "--grace"), ("webhook", "--waste-ceiling"),
            ("serve", "--keepalive-timeout"), ("extender", "--dcgm-collect-interval"),
            ("simulate", "--target"), ("status", "--request-timeout")} <= flags
    assert len(flags) >= 50


@pytest.mark.parametrize(("path", "flag"), NUMERIC, ids=[" ".join(p) + " " + f
                                                        for p, f in NUMERIC])
def test_every_numeric_flag_refuses_a_number_that_is_not_finite(
        path: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = cli.build_parser(path[0])
    for value in NOT_FINITE:
        with pytest.raises((SystemExit, errors.UsageError)) as stop:
            parser.parse_args([*path, f"{flag}={value}"])
        if isinstance(stop.value, SystemExit):  # argparse: the usage, then one error line
            assert stop.value.code == 2
            last = capsys.readouterr().err.strip().splitlines()[-1]
            assert last.startswith("migfit ") and f": error: argument {flag}: " in last, last
            assert (f"{value!r} is not a finite number" in last
                    or f"{value}: use a positive number of seconds" in last), last
        else:  # --request-timeout: kubectl's durations, checked by kube.parse_duration
            assert str(stop.value).startswith(f"{flag} {value!r}: use 0 or more")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # In a child with a time limit: a regression starts a server that serves for ever.
    return subprocess.run([sys.executable, "-m", "migfit.cli", *argv], capture_output=True,
                          text=True, timeout=30, cwd=ROOT, env=env, check=False)


@pytest.mark.parametrize("argv", [
    ["extender", "--cluster", CLUSTER, "--relayout-timeout", "nan"],
    ["extender", "--cluster", CLUSTER, "--relayout-timeout", "inf"],
    ["extender", "--cluster", CLUSTER, "--grace", "nan"],
    ["advise", "--cluster", CLUSTER, "--grace", "nan"],
    ["explain", "--cluster", CLUSTER, "ml-research/finetune-small-0", "--grace", "nan"],
])
def test_the_commands_of_the_report_stop_before_they_start(argv: list[str]) -> None:
    done = _run(*argv)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    flag, value = argv[-2:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"migfit {argv[0]}: error: argument {flag}: {value!r} is not a finite number: write "
        f"it in digits, such as 60 or 0.25")
