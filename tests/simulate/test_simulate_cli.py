"""``migfit simulate`` end to end on small inputs: spec file, table, JSON and an offline report."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from migfit import cli
from migfit.simulate import cli as simulate_cli

SPEC = """\
version: v1
nodes:
- name: a100
  count: 3
  model: A100-80GB
  gpus: 2
  cpu: "32"
  memory: 128Gi
  layout: all-balanced
- name: big
  count: 1
  model: A100-80GB
  gpus: 2
  cpu_milli: 32000
  memory: 128Gi
  layouts: [["7g.80gb"], ["3g.40gb", "3g.40gb"]]
"""


def test_help_documents_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["simulate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for opt in ("--trace-dir", "--cluster", "--model", "--layout", "--mapping", "--mode",
                "--target", "--policies", "--seeds", "--json", "--report", "--synthetic",
                "--relayout-seconds", "--extender-weight", "--advisor", "--advisor-free-grace",
                "demand-matched"):
        assert opt in out
    # Every option the command accepts, not only those listed above, is shown with a help text.
    parser = argparse.ArgumentParser()
    simulate_cli.add_arguments(parser)
    options = [a for a in parser._actions if a.option_strings]
    assert len(options) > 20
    for action in options:
        assert action.help, action.option_strings
        for flag in action.option_strings:
            assert re.search(rf"(^|\s){re.escape(flag)}\b", out), flag


def test_small_run_writes_json_and_offline_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    rc = cli.main(["simulate", "--cluster", str(spec), "--synthetic", "80", "--seeds", "2",
                   "--policies", "default,migfit+advisor,upper-bound",
                   "--json", str(out_json), "--report", str(out_html)])
    assert rc == 0
    table = capsys.readouterr().out
    assert "migfit+advisor" in table and "mapping=compute" in table
    doc = json.loads(out_json.read_text())
    assert set(doc["summary"]) == {"default", "migfit+advisor", "upper-bound"}
    assert len(doc["runs"]) == 6
    assert doc["summary"]["migfit+advisor"]["pods_disrupted"]["max"] == 0
    page = out_html.read_text()
    assert page.count("<svg") >= 4
    # Offline: no script, no stylesheet or image from anywhere.
    assert "<script" not in page
    assert not re.search(r'(src|href)="https?:', page)


def test_bad_spec_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC.replace("gpus: 2\n  cpu: ", "gpus: 2\n  colour: red\n  cpu: "))
    assert cli.main(["simulate", "--cluster", str(spec), "--synthetic", "5"]) == 2
    err = capsys.readouterr().err
    assert "colour" in err and "Traceback" not in err


@pytest.mark.parametrize(("text", "problem"), [
    ("- name: a100\n  count: 1\n", "holds a YAML list, not a mapping"),
    ("", "the file is empty"),
    ("version: v1\nnodes: [a100]\n", "nodes.0: a string, where a mapping (key: value) belongs"),
])
def test_a_file_that_is_no_spec_says_what_a_spec_is(
        text: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # pydantic said "Input should be a valid dictionary or instance of _Spec".
    spec = tmp_path / "cluster.yaml"
    spec.write_text(text)
    assert cli.main(["simulate", "--cluster", str(spec), "--synthetic", "5"]) == 2
    assert capsys.readouterr().err == (f"migfit: error: {spec}: {problem}; a cluster spec is "
                                       f"YAML with `version: v1` and `nodes:`, a list of node "
                                       f"groups (name, count, model, gpus, cpu, memory, layout "
                                       f"or layouts)\n")


def test_unknown_policy_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--policies", "fastest", "--synthetic", "5"]) == 2
    assert "unknown policy" in capsys.readouterr().err


@pytest.mark.parametrize("share", ["-0.5", "1.5"])  # nan: test_simulate_input_checks
def test_ahead_share_out_of_range_is_a_usage_error(
        share: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--example", "--ahead-from", share]) == 2
    err = capsys.readouterr().err
    assert "--ahead-from" in err and "--no-ahead" in err and "Traceback" not in err


@pytest.mark.parametrize(("value", "count"), [("3", 3), ("50%", 2), ("10%", 1)])
def test_max_relayouts_takes_a_count_or_a_share_of_the_gpu_nodes(
        value: str, count: int, tmp_path: Path) -> None:
    # The spec's four GPU nodes: 50 % is two at once, 10 % still one.
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    out_json = tmp_path / "r.json"
    assert cli.main(["simulate", "--cluster", str(spec), "--synthetic", "40", "--policies",
                     "migfit+advisor", "--mode", "events", "--max-relayouts", value,
                     "--json", str(out_json)]) == 0
    assert json.loads(out_json.read_text())["setup"]["max_relayouts"] == count


def test_max_relayouts_out_of_range_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["simulate", "--example", "--max-relayouts", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--max-relayouts" in err and "such as 10%" in err and "Traceback" not in err


def test_layout_cycle_replaces_the_spec_layouts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    out_json = tmp_path / "r.json"
    rc = cli.main(["simulate", "--cluster", str(spec), "--synthetic", "40", "--policies",
                   "migfit", "--picture", "migfit", "--layout", "7g.80gb;4g.40gb,3g.40gb",
                   "--json", str(out_json)])
    assert rc == 0
    doc = json.loads(out_json.read_text())
    assert "initial layout 7g.80gb;4g.40gb,3g.40gb" in doc["setup"]["cluster"]
    (run,) = doc["runs"]
    first = [sorted(i[2] for i in gpu) for gpu in run["snapshot"][0]["gpus"]]
    assert first == [["7g.80gb"], ["3g.40gb", "4g.40gb"]]


def test_same_seed_same_result_across_processes(tmp_path: Path) -> None:
    """Determinism must not depend on Python's per-process string hashing (set order)."""
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    docs = []
    for hash_seed in ("1", "2"):
        out_json = tmp_path / f"r{hash_seed}.json"
        done = subprocess.run(
            [sys.executable, "-m", "migfit.cli", "simulate", "--cluster", str(spec),
             "--synthetic", "80", "--mode", "events", "--policies", "random,migfit+advisor",
             "--json", str(out_json)],
            capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert done.returncode == 0, done.stderr
        runs = json.loads(out_json.read_text())["runs"]
        for r in runs:
            r["figures"].pop("wall_s")
        docs.append(runs)
    assert docs[0] == docs[1]


def test_history_layouts_on_a_mixed_cluster_use_each_models_profiles(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--model-map T4=A30-24GB`` with the default history layouts: the mapping names the
    reference model's (A100-80GB) profiles, so the A30's layouts are sized from each pod's
    request in A30 profiles, as the webhook reads it (an eighth of a GPU: 1g.6gb there; a
    whole A100 does not fit an A30 and is left out of its mix), not refused."""
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        "a1,64000,262144,1,V100M32\na2,64000,262144,1,V100M32\nt,64000,262144,2,T4\n")
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
            "creation_time,deletion_time,scheduled_time"]
    rows += [f"p{i},1000,1024,1,{1000 if i % 4 == 0 else 125},,LS,Running,{i},{i + 500},{i}"
             for i in range(16)]
    (tmp_path / "openb_pod_list_default.csv").write_text("\n".join(rows) + "\n")
    out_json = tmp_path / "r.json"
    rc = cli.main(["simulate", "--trace-dir", str(tmp_path), "--model-map", "T4=A30-24GB",
                   "--mode", "events", "--policies", "default", "--picture", "default",
                   "--json", str(out_json)])
    assert rc == 0, capsys.readouterr().err
    (run,) = json.loads(out_json.read_text())["runs"]
    layouts = {n["node"]: sorted({i[2] for gpu in n["gpus"] for i in gpu})
               for n in run["snapshot"]}
    # Whole nodes take one layout each: the A100s one 7g.80gb and one seven 1g.10gb.
    assert sorted([layouts["a1"], layouts["a2"]]) == [["1g.10gb"], ["7g.80gb"]]
    assert layouts["t"] == ["1g.6gb"]


@pytest.mark.parametrize("value", ["-1", "3601"])  # nan: test_simulate_input_checks
def test_config_sync_seconds_out_of_range_is_a_usage_error(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--example", "--config-sync-seconds", value]) == 2
    err = capsys.readouterr().err
    assert "--config-sync-seconds" in err and "0 to 3600" in err and "Traceback" not in err


# SciPy is the optional [sim] extra: a Python where it does not import.
WITHOUT_SCIPY = ("import sys; sys.modules['scipy'] = None; from migfit.cli import main; "
                 "sys.exit(main(sys.argv[1:]))")


def test_without_scipy_the_default_policies_run_and_the_bounds_are_left_out() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_SCIPY, "simulate", "--example"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "bound-static and bound left out: they need SciPy" in done.stderr
    assert "pip install -e '.[sim]'" in done.stderr
    rows = [line.split()[0] for line in done.stdout.splitlines() if line[:1].isalpha()]
    assert "migfit+advisor" in rows and "bound" not in rows and "bound-static" not in rows


def test_without_scipy_a_bound_named_is_a_usage_error_before_any_run() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_SCIPY, "simulate", "--example",
                           "--policies", "default,bound"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == ("migfit: error: bound needs SciPy: pip install "
                                   "'migfit[sim]', or in a checkout pip install -e '.[sim]'")
    assert "seed 0" not in done.stdout + done.stderr


@pytest.mark.parametrize("flags", [["--seeds", "0"], ["--jobs", "0"], ["--node-share", "0"],
                                   ["--target", "0"], ["--synthetic", "0"]])
def test_without_scipy_a_refused_command_prints_its_error_line_alone(flags: list[str]) -> None:
    """The note that the bounds are left out came before the error of a command that then
    ran nothing."""
    done = subprocess.run([sys.executable, "-c", WITHOUT_SCIPY, "simulate", "--example",
                           *flags], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"migfit: error: {flags[0]}"), done.stderr


def test_one_run_and_one_model_read_as_english(capsys: pytest.CaptureFixture[str]) -> None:
    """"1 runs in 0.1 s", and "176 GPUs (A100-80GB (176 GPUs))": the count said twice."""
    assert cli.main(["simulate", "--example", "--policies", "default", "--synthetic",
                     "20"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("26 nodes, 176 GPUs (A100-80GB); 20 pods, ")
    assert re.fullmatch(r"1 run in \d+\.\d s", out[-1]), out[-1]


def test_the_table_and_markdown_show_fgds_unit_beside_unallocated(
        capsys: pytest.CaptureFixture[str]) -> None:
    # The README's trace table has FGD's unit (the trace's GPUs left unallocated); neither
    # output printed it, so nobody could reproduce that column.
    assert cli.main(["simulate", "--example", "--policies", "default", "--markdown"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("policy "))
    assert header.split("  ")[0:1] == ["policy"] and "unallocated  FGD's unit" in header
    assert "| unallocated at end | FGD's unit |" in out


def test_a_run_says_first_what_it_replays_and_about_how_long(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With no arguments the full trace's replay ran for minutes with no word of it."""
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\na1,64000,262144,1,V100M32\n")
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
            "creation_time,deletion_time,scheduled_time"]
    rows += [f"p{i},1000,1024,1,1000,,LS,Running,{i},{i + 500},{i}" for i in range(8)]
    (tmp_path / "openb_pod_list_default.csv").write_text("\n".join(rows) + "\n")
    assert cli.main(["simulate", "--trace-dir", str(tmp_path), "--policies", "default,migfit",
                     "--seeds", "2"]) == 0
    first = capsys.readouterr().err.splitlines()[0]
    # A 1-node list was said to take "several minutes on 2 cores"; that is the trace's size.
    assert first == ("replaying 4 pods of openb_pod_list_default.csv on the trace's 1 nodes "
                     "(1 GPUs): 4 runs, a few seconds")
    # The trace's replayed half on its 1,213 nodes, with the same arguments:
    args = argparse.Namespace(example=False, cluster=None, synthetic=None, mode="events")
    info = {"workload": str(tmp_path / "openb_pod_list_default.csv"),
            "pods_in_workload": 4076, "nodes": 1213, "gpus": 6212}
    assert simulate_cli.start_notice(args, info, runs=9) == (
        "replaying 4,076 pods of openb_pod_list_default.csv on the trace's 1,213 nodes (6,212 "
        "GPUs): 9 runs, several minutes on 2 cores (--jobs N runs N at once; --example for a "
        "quick run)")
    assert cli.main(["simulate", "--example", "--policies", "migfit"]) == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert first == (f"replaying {simulate_cli.EXAMPLE_PODS} synthetic pods on "
                     f"migfit/simulate/example-cluster.yaml (26 nodes, 176 GPUs): 1 run, "
                     f"a few seconds")


def test_a_pod_list_named_as_the_trace_names_it_is_found_in_the_trace_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--pods openb_pod_list_gpushare100.csv`` was "no pod list at …" unless run from the
    trace's folder; a relative path not found here is looked up in the trace dir."""
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\na1,64000,262144,1,V100M32\n")
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
            "creation_time,deletion_time,scheduled_time"]
    rows += [f"p{i},1000,1024,1,1000,,LS,Running,{i},{i + 500},{i}" for i in range(3)]
    (trace / "other.csv").write_text("\n".join(rows) + "\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["simulate", "--trace-dir", str(trace), "--pods", "other.csv",
                     "--policies", "default"]) == 0
    assert " of other.csv on the trace" in capsys.readouterr().err
    # One found where it is named wins; a missing one is still said.
    assert cli.main(["simulate", "--trace-dir", str(trace), "--pods", "missing.csv",
                     "--policies", "default"]) == 2
    assert "no pod list at missing.csv" in capsys.readouterr().err


def test_the_example_cluster_is_named_as_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    """--example's help said "the small cluster shipped with migfit (example-cluster.yaml)",
    which users took for migfit/data/example-cluster.yaml, the cluster of migfit serve."""
    import migfit
    from migfit import profiles
    from migfit.simulate import spec

    root = Path(migfit.__file__).resolve().parent.parent
    assert root / simulate_cli.EXAMPLE_NAME == simulate_cli.EXAMPLE_CLUSTER
    nodes = spec.load_spec(simulate_cli.EXAMPLE_CLUSTER, profiles.builtin())
    with_gpus = [n for n in nodes if n.gpus]
    assert (len(nodes), len(with_gpus)) == (26, 24)
    assert {n.model.id for n in with_gpus} == {"A100-80GB"}
    assert {n.gpus for n in with_gpus} == {4, 8}
    assert simulate_cli.EXAMPLE_SHAPE.startswith("26 nodes: 24 with 4 or 8 A100-80GB GPUs")
    with pytest.raises(SystemExit):
        cli.main(["simulate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "migfit/simulate/example-cluster.yaml (26 nodes" in help_text


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_to_a_parallel_run_stops_its_workers_too() -> None:
    """``kill PID`` of a --jobs 2 run: the parent exited 143 and left both pool workers
    running, orphaned, for minutes."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys
    import time

    workers: set[int] = set()
    proc = subprocess.Popen(
        [sys.executable, "-m", "migfit.cli", "simulate", "--example", "--mode", "events",
         "--policies", "migfit+advisor", "--seeds", "6", "--jobs", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith("replaying ")
        deadline = time.monotonic() + 30
        while len(workers) < 2 and time.monotonic() < deadline:
            workers = _children(proc.pid)
            time.sleep(0.05)
        assert len(workers) >= 2, workers
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
        left = workers
        while left and time.monotonic() < deadline:
            left = {w for w in left if Path(f"/proc/{w}").exists()
                    and "Z" not in Path(f"/proc/{w}/stat").read_text().rsplit(")", 1)[1][:3]}
            time.sleep(0.05)
        assert not left, f"workers still running: {left}"
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
        for w in workers:  # on a failure, none left behind
            with contextlib.suppress(OSError):
                os.kill(w, signal.SIGKILL)
