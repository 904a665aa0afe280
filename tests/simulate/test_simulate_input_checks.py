"""``migfit simulate`` refuses bad input with one line that says what to change (exit 2, no
traceback), before any run: numeric flags out of range, malformed pod and node lists, a
model map naming models the node list lacks, duplicate policies."""

from __future__ import annotations

import pytest

from migfit import cli


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *words: str) -> str:
    """Runs ``migfit simulate ARGV``; it must exit 2 with one error line holding ``words``,
    before any run."""
    assert cli.main(["simulate", *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("migfit: error: ")]
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert "seed 0" not in err and "runs in" not in captured.out
    return lines[0]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "1e4", "10.5"])
def test_target_out_of_range_is_refused(value: str, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    # nan ran and printed a table of zeros; inf and 1e4 ran for minutes.
    _refused(["--example", f"--target={value}"], capsys, "--target ", "above 0 and at most 10")


def test_target_at_the_bound_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--example", "--policies", "default", "--target", "10"]) == 0
