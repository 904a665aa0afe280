"""The pod list's times and the flags that move the simulated clock: a time out of range or
out of order is refused with its file, line and field, an --arrival-scale that would take the
replay past what a timestamp holds says the most this pod list allows, and --snapshot-at is a
time of the replay (exit 2, one line, no traceback; before, a ValueError or OverflowError
from datetime, or a silently different run)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from refusals import refused

from migfit import cli
from migfit.simulate import cli as simulate_cli

NODES = "sn,cpu_milli,memory_mib,gpu,model\na1,64000,262144,2,V100M32\n"
HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
          "creation_time,deletion_time,scheduled_time\n")


def _pod(name: str, created: str, deleted: str, scheduled: str, *, num_gpu: int = 1,
         gpu_milli: int = 1000) -> str:
    return (f"{name},1000,1024,{num_gpu},{gpu_milli},,LS,Running,{created},{deleted},"
            f"{scheduled}\n")


PODS = HEADER + "".join(_pod(f"p{i}", str(i), str(i + 500), str(i)) for i in range(8))


def _trace(tmp_path: Path, pods: str = PODS) -> list[str]:
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(NODES)
    (tmp_path / "openb_pod_list_default.csv").write_text(pods)
    return ["--trace-dir", str(tmp_path), "--policies", "default", "--layout",
            "all-balanced=100%", "--mode", "events"]


_refused = refused


@pytest.mark.parametrize(("row", "words"), [
    (_pod("big", "300000000000", "300000000020", "300000000000"),  # was year 11532
     ("creation_time 300000000000: use 0 to 10,000,000,000 seconds",)),
    (_pod("huge", "1e300", "1e300", "1e300"),  # was an OverflowError
     ("creation_time 1e300: use 0 to 10,000,000,000 seconds",)),
    (_pod("neg", "-500", "100", "-500"), ("creation_time -500: use 0 to",)),
    (_pod("late", "9", "2e10", "9"), ("deletion_time 2e10: use 0 to",)),
    (_pod("nocreate", "", "500", "9"),  # arrived at 0
     ("creation_time is empty",)),
    (_pod("backwards", "100", "5", "100"),  # was a 1 s run
     ("deletion_time 5 is before creation_time 100",)),
    (_pod("early", "100", "600", "50"),  # ran from 50
     ("scheduled_time 50 is before creation_time 100",)),
    (_pod("after", "100", "600", "700"),  # a 1 s run
     ("scheduled_time 700 is after deletion_time 600",)),
    (_pod("nomilli", "9", "509", "9", num_gpu=1, gpu_milli=0),  # was a cpu-only pod
     ("num_gpu 1 with gpu_milli 0",)),
    (_pod("nogpus", "9", "509", "9", num_gpu=0, gpu_milli=500),  # was a cpu-only pod
     ("num_gpu 0 with gpu_milli 500",)),
])
def test_bad_times_and_gpu_fields_are_refused_with_their_line(
        row: str, words: tuple[str, ...], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    _refused(_trace(tmp_path, PODS + row), capsys, "openb_pod_list_default.csv, line 10:",
             *words)


def _run(argv: list[str], tmp_path: Path) -> dict[str, float]:
    out = tmp_path / "out.json"
    assert cli.main(["simulate", *argv, "--json", str(out)]) == 0
    figures: dict[str, float] = json.loads(out.read_text())["runs"][0]["figures"]
    return figures


def test_a_deletion_time_of_0_is_a_time_and_an_empty_one_a_pod_still_running(
        tmp_path: Path) -> None:
    # deletion_time 0 was read as missing: the pod holding both GPUs never left and the
    # next one waited for ever.
    argv = [*_trace(tmp_path), "--layout", "all-7g.80gb"]
    later = _pod("w", "100", "200", "100")
    (tmp_path / "openb_pod_list_default.csv").write_text(
        HEADER + _pod("z", "0", "0", "0", num_gpu=2) + later)
    zero = _run(argv, tmp_path)
    assert (zero["pods_placed"], zero["pods_pending"]) == (2, 0)
    (tmp_path / "openb_pod_list_default.csv").write_text(
        HEADER + _pod("r", "0", "", "0", num_gpu=2) + later)
    running = _run(argv, tmp_path)
    assert (running["pods_placed"], running["pods_pending"]) == (1, 1)


def test_arrival_scale_past_the_clock_says_the_most_this_pod_list_allows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Arrivals over 10 days: 1e6 (allowed by --arrival-scale's range) raised "year out of
    # range" after the run had started; the most the clock holds now runs.
    pods = HEADER + _pod("a", "0", "500", "0") + _pod("b", "864000", "864500", "864000")
    most = math.floor((simulate_cli.CLOCK_LIMIT_S - 500) / 864000)
    _refused([*_trace(tmp_path, pods), "--arrival-scale", "1e6"], capsys,
             "--arrival-scale 1e+06: the 2 pods replayed arrive over 10.0 days",
             f"use at most {most:,} for this pod list")
    _refused([*_trace(tmp_path, pods), "--arrival-scale", str(most + 1)], capsys,
             f"use at most {most:,}")
    assert cli.main(["simulate", *_trace(tmp_path, pods), "--arrival-scale", str(most)]) == 0


@pytest.mark.parametrize("value", ["-5", "508"])
def test_snapshot_at_outside_the_replay_is_refused(
        value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # -5 was accepted (nan and inf: test_simulate_input_checks, refused as parsed).
    _refused([*_trace(tmp_path), f"--snapshot-at={value}", "--json", str(tmp_path / "o.json")],
             capsys,
             f"--snapshot-at {float(value):g}: use a trace time from 0 to the last arrival, 7 s")


def test_snapshot_at_within_the_replay_runs(tmp_path: Path) -> None:
    assert cli.main(["simulate", *_trace(tmp_path), "--snapshot-at", "7",
                     "--json", str(tmp_path / "o.json")]) == 0


def test_a_clock_past_the_year_9999_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    # --fill-interval 1e12 raised ValueError "year 33714 is out of range".
    _refused(["--example", "--synthetic", "20", "--policies", "default",
              "--fill-interval", "1e12"], capsys, "past the last time a Kubernetes timestamp "
             "holds (year 9999)", "--fill-interval")
