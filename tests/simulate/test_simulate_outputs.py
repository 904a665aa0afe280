"""``--json`` and ``--report`` are checked before the simulation, by opening the file as it
will be written (left as it was), and a write that fails after it names the flag and the
path in one line; before, an unwritable file failed after the whole run with the raw errno
text (a traceback) and no flag named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from migfit import cli

RUN = ["simulate", "--example", "--synthetic", "20", "--policies", "default"]


def _error(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    lines = [line for line in captured.err.splitlines() if line.startswith("migfit: error: ")]
    assert len(lines) == 1, captured.err
    return lines[0], captured.out


@pytest.mark.parametrize(("flag", "path", "why"), [
    ("--report", "/proc/x.html", "No such file or directory"),
    ("--json", "/proc/version", "Invalid argument"),
])
def test_an_output_that_cannot_be_written_is_refused_before_the_run(
        flag: str, path: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/proc/version").exists():
        pytest.skip("needs Linux's /proc")
    assert cli.main([*RUN, flag, path]) == 2
    line, out = _error(capsys)
    assert line == f"migfit: error: {flag} {path}: cannot write it: {why}"
    assert not re.search(r"^\d+ runs? in ", out, re.M)


def test_a_write_failing_after_the_run_names_the_flag_and_the_path(
        capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    assert cli.main([*RUN, "--json", "/dev/full"]) == 2
    line, out = _error(capsys)
    assert line.startswith("migfit: error: --json /dev/full: cannot write it: No space left")
    assert re.search(r"^\d+ runs? in ", out, re.M)


def test_the_check_leaves_an_existing_file_as_it_was_and_creates_none(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kept, new = tmp_path / "kept.json", tmp_path / "new.html"
    kept.write_text("earlier results\n")
    # Refused after the outputs' check (--snapshot-at is checked once the pods are read).
    assert cli.main([*RUN, "--mode", "events", "--snapshot-at", "-1", "--json", str(kept),
                     "--report", str(new)]) == 2
    assert "--snapshot-at -1" in _error(capsys)[0]
    assert kept.read_text() == "earlier results\n"
    assert not new.exists()


def test_json_and_report_naming_one_file_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The report overwrote the JSON.
    out = tmp_path / "out"
    assert cli.main([*RUN, "--json", str(out), "--report", str(out)]) == 2
    assert "are the same file" in _error(capsys)[0]
