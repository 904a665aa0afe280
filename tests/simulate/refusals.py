"""One check for the simulate tests: a command line refused with one error line."""

from __future__ import annotations

import re

import pytest

from migfit import cli


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *words: str) -> str:
    """Run ``migfit simulate ARGV``: exit 2, one ``migfit: error:`` line holding every one of
    ``words``, no traceback and no run; that line."""
    assert cli.main(["simulate", *argv]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    lines = [line for line in captured.err.splitlines() if line.startswith("migfit: error: ")]
    assert len(lines) == 1, captured.err
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert not re.search(r"^\d+ runs? in ", captured.out, re.M)
    return lines[0]
