"""What the outputs say about a run: the HTML report's bound rows as the table shows them, the
GPU pictures labelled with when they were taken, a tiny fill target not shown as 0 %, and a
synthetic run replayed alone from the seed it is recorded with."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from migfit import cli

EXAMPLE = ["simulate", "--example", "--synthetic", "60"]


def _cells(page: str, policy: str) -> list[str]:
    row = re.search(rf"<tr><td>{policy}</td>(.*?)</tr>", page, re.DOTALL)
    assert row is not None, policy
    return re.findall(r"<td class='n'>(.*?)</td>", row.group(1))


def test_the_report_shows_bound_rows_as_the_table_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "r.html"
    assert cli.main([*EXAMPLE, "--policies", "default,bound", "--report", str(page)]) == 0
    printed = capsys.readouterr().out
    text = page.read_text()
    bound = _cells(text, "bound")
    assert bound[0] == "(LP)"  # GPU pods placed: the LP's fractional optimum, not a count
    assert bound[4] == "-" and bound[5] == "-"  # fragmentation, idle while pending
    table_row = next(line for line in printed.splitlines() if line.startswith("bound "))
    assert table_row.split()[1:len(bound)] == bound[:-1]  # all but wall s
    assert "bound rows are LP optima, not replays" in text


def test_the_pictures_say_when_they_were_taken(tmp_path: Path) -> None:
    fill, events, at = tmp_path / "f.html", tmp_path / "e.html", tmp_path / "a.html"
    assert cli.main([*EXAMPLE, "--policies", "default", "--report", str(fill)]) == 0
    assert "<p>At the end (after the last arrival and the re-layouts then in flight): " \
        in fill.read_text()
    assert cli.main([*EXAMPLE, "--mode", "events", "--policies", "default",
                     "--report", str(events)]) == 0
    assert "<p>When arrivals stop: " in events.read_text()
    assert cli.main([*EXAMPLE, "--mode", "events", "--policies", "default",
                     "--snapshot-at", "3600", "--report", str(at)]) == 0
    assert "<p>At 3,600 s of trace time (--snapshot-at): " in at.read_text()


def test_a_tiny_target_is_not_shown_as_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*EXAMPLE, "--policies", "default", "--target", "0.0001"]) == 0
    assert "target 0.01% of GPUs requested" in capsys.readouterr().out


def test_a_synthetic_run_is_replayed_alone_from_its_recorded_seeds(tmp_path: Path) -> None:
    both, alone = tmp_path / "both.json", tmp_path / "alone.json"
    assert cli.main([*EXAMPLE, "--policies", "default", "--seeds", "2",
                     "--json", str(both)]) == 0
    second = json.loads(both.read_text())
    assert second["setup"]["synthetic_seed"] == 0
    assert cli.main([*EXAMPLE, "--policies", "default", "--seed", "1",
                     "--synthetic-seed", "0", "--json", str(alone)]) == 0
    replayed = json.loads(alone.read_text())

    def figures(run: dict[str, object]) -> dict[str, object]:
        figs = run["figures"]
        assert isinstance(figs, dict)
        return {k: v for k, v in figs.items() if k != "wall_s"}

    assert figures(second["runs"][1]) == figures(replayed["runs"][0])


def test_a_synthetic_seed_without_synthetic_pods_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--synthetic-seed", "3", "--policies", "default"]) == 2
    assert "--synthetic-seed without --synthetic or --example" in capsys.readouterr().err
