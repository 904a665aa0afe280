"""`migfit --help` is instant (it imports no command), and no help text says `(default: None)`."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from migfit import cli

PROBE = """
import sys
from migfit import cli
try:
    cli.main(["--help"])
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules
               if m.startswith(("migfit.commands", "migfit.simulate", "aiohttp",
                                "kubernetes_asyncio", "cryptography", "migfit.extender")))
print("HEAVY", heavy)
"""


def test_top_level_help_lists_every_command_and_imports_none() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60, check=True)
    assert "HEAVY []" in done.stdout, done.stdout.splitlines()[-1]
    for name in cli.COMMANDS:
        assert f"    {name}" in done.stdout, name


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_no_help_text_shows_a_none_default(name: str) -> None:
    parser = cli.build_parser(name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = sub.choices[name].format_help()
    assert "(default: None)" not in text
    assert name in parser.format_help()



@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_no_option_says_its_default_twice(name: str) -> None:
    # "(default 60) (default: 60.0)": the formatter adds one only where the text has none.
    parser = cli.build_parser(name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = sub.choices[name]
    formatter = command._get_formatter()
    for action in command._actions:
        text = formatter._expand_help(action) if action.help else ""
        assert len(re.findall(r"\(default\b", text)) <= 1, (action.option_strings, text)
