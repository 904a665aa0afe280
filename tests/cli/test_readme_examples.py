"""Every console example in the README is what the command really prints (run, not quoted)."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from readme import README, console_examples

ROOT = README.parent


def test_the_readme_has_console_examples() -> None:
    assert len(console_examples()) >= 3


@pytest.mark.parametrize(("command", "expected"), console_examples())
def test_a_console_example_matches_real_output(command: str, expected: str) -> None:
    argv = shlex.split(command)
    assert argv[0] == "migfit", command
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    printed = (done.stdout + done.stderr).rstrip("\n")
    assert printed == expected, (
        f"README.md's example `{command}` is stale; the command prints:\n{printed}")
