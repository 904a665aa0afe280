"""The advisor's flags with no ``+advisor`` policy are refused, naming the flag and what to add
(exit 2, one line); before, ``--policies default --max-relayouts 3`` ran and ignored it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from refusals import refused

from migfit import cli
from migfit.simulate import cli as simulate_cli

# Every flag that only the +advisor policies read (engine.Simulation.advise and the
# re-layouts it starts), each with a value it takes; a default value given is still given.
ADVISOR_FLAGS = [
    ("--relayout-seconds", "0"), ("--relayout-seconds", "180"),
    ("--config-sync-seconds", "120"), ("--advise-interval", "10"),
    ("--max-relayouts", "3"), ("--max-relayouts", "16"), ("--max-relayouts", "10%"),
    ("--advisor", "planner"), ("--advisor", "advisor"), ("--advisor-grace", "0"),
    ("--advisor-free-grace", "60"), ("--busy-nodes", None), ("--no-busy-nodes", None),
    ("--ahead-from", "0.5"), ("--no-ahead", None), ("--balance", None), ("--no-balance", None),
    ("--gpu-usage", None), ("--no-gpu-usage", None),
]


def _argv(flag: str, value: str | None) -> list[str]:
    return [flag] if value is None else [flag, value]


@pytest.mark.parametrize(("flag", "value"), ADVISOR_FLAGS)
@pytest.mark.parametrize("chosen", ["default", "migfit,binpack-gpu,upper-bound"])
def test_an_advisor_flag_without_an_advisor_policy_is_refused(
        flag: str, value: str | None, chosen: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(["--example", "--policies", chosen, *_argv(flag, value)], capsys,
                   f"{flag} with --policies {chosen}: it is for the advisor's re-layouts",
                   "add one (such as migfit+advisor) to --policies", "leave it out")
    assert "they are" not in line


def test_several_are_named_together(capsys: pytest.CaptureFixture[str]) -> None:
    refused(["--example", "--policies", "fgd", "--max-relayouts", "3", "--advisor-grace",
             "10", "--no-ahead"], capsys,
            "--max-relayouts, --advisor-grace and --no-ahead with --policies fgd: they are "
            "for the advisor's re-layouts", "leave them out")


def test_every_flag_the_help_marks_advisor_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The list above is every option whose help says ``+advisor`` (a new one is covered
    here before anyone adds it to the list)."""
    parser = argparse.ArgumentParser()
    simulate_cli.add_arguments(parser)
    marked = [a for a in parser._actions if a.help and a.help.startswith("+advisor")]
    assert len(marked) >= 11
    for action in marked:
        flag = action.option_strings[0]
        value = None if action.nargs == 0 else (
            next(iter(action.choices)) if action.choices else "1")
        refused(["--example", "--policies", "default", *_argv(flag, value)], capsys,
                f"{flag} with --policies default")
    listed = {f for f, _ in ADVISOR_FLAGS}
    assert {a.option_strings[0] for a in marked} <= listed


def test_not_given_they_are_not_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Their defaults are no reason to refuse: a run without an advisor policy runs."""
    assert cli.main(["simulate", "--example", "--synthetic", "60", "--policies",
                     "default,migfit"]) == 0
    assert "error" not in capsys.readouterr().err


def test_with_an_advisor_policy_they_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--example", "--synthetic", "60", "--policies",
                     "default,migfit+advisor", "--max-relayouts", "3", "--advisor-grace",
                     "10", "--relayout-seconds", "60", "--no-balance", "--busy-nodes",
                     "--gpu-usage", "--ahead-from", "0.5"]) == 0
    assert "error" not in capsys.readouterr().err


def test_ahead_from_and_no_ahead_together_are_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--no-ahead has its own dest now (so that it counts as given): with --ahead-from,
    which used to win by being last, the pair is refused."""
    refused(["--example", "--policies", "migfit+advisor", "--ahead-from", "0.5",
             "--no-ahead"], capsys, "--ahead-from and --no-ahead", "give one of them")


def test_no_ahead_still_turns_off_the_ahead_relayouts(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert cli.main(["simulate", "--example", "--synthetic", "40", "--policies",
                     "migfit+advisor", "--no-ahead", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["setup"]["ahead_from"] is None
