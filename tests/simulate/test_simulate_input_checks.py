"""``migfit simulate`` refuses bad input with one line that says what to change (exit 2, no
traceback), before any run: numeric flags out of range, malformed pod and node lists, a
model map naming models the node list lacks, duplicate policies."""

from __future__ import annotations

import re
from pathlib import Path

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
    assert "seed 0" not in err and not re.search(r"^\d+ runs? in ", captured.out, re.M)
    return lines[0]


@pytest.mark.parametrize("value", ["0", "-1", "1e4", "10.5"])
def test_target_out_of_range_is_refused(value: str, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    # 1e4 ran for minutes (nan and inf: test_numbers_that_are_not_finite_are_refused).
    _refused(["--example", f"--target={value}"], capsys, "--target ", "above 0 and at most 10")


def test_target_at_the_bound_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--example", "--policies", "default", "--target", "10"]) == 0


@pytest.mark.parametrize("value", ["-100"])
def test_relayout_seconds_out_of_range_is_refused(value: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # -100 raised an IndexError in the advisor's burst window.
    _refused(["--example", "--policies", "migfit+advisor", f"--relayout-seconds={value}"],
             capsys, "--relayout-seconds", "0 or more seconds")


@pytest.mark.parametrize("share", ["nan", "inf", "-5"])
def test_layout_share_not_a_finite_share_is_refused(share: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # nan raised a ValueError (NaN to integer).
    _refused(["--example", "--layout", f"all-balanced={share}%"], capsys,
             f"--layout 'all-balanced={share}%'", "CONFIG=SHARE%")


NODES = "sn,cpu_milli,memory_mib,gpu,model\na1,64000,262144,2,V100M32\nt1,64000,262144,2,T4\n"
POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time\n")
PODS = POD_HEADER + "".join(f"p{i},1000,1024,1,{250 if i % 2 else 1000},,LS,Running,{i},"
                            f"{i + 500},{i}\n" for i in range(8))


def _trace(tmp_path: Path, *, nodes: str = NODES, pods: str = PODS, bom: bool = False
           ) -> list[str]:
    """A small trace folder; the arguments that replay it."""
    encoding = "utf-8-sig" if bom else "utf-8"
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(nodes, encoding=encoding)
    (tmp_path / "openb_pod_list_default.csv").write_text(pods, encoding=encoding)
    return ["--trace-dir", str(tmp_path), "--policies", "default"]


def test_the_small_trace_runs(tmp_path: Path) -> None:
    assert cli.main(["simulate", *_trace(tmp_path)]) == 0


def test_a_short_pod_row_is_refused_with_its_line(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # It raised a TypeError in workload.load_trace.
    args = _trace(tmp_path, pods=PODS + "short-pod,1000\n")
    _refused(args, capsys, "openb_pod_list_default.csv, line 10:", "no memory_mib")


@pytest.mark.parametrize(("row", "field"), [
    ("p9,1000,1024,one,1000,,LS,Running,9,509,9", "num_gpu 'one'"),
    ("p9,1000,1024,1,1000,,LS,Running,soon,,", "creation_time 'soon'")])
def test_a_pod_row_with_a_bad_value_is_refused_with_its_line(
        row: str, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _trace(tmp_path, pods=PODS + row + "\n")
    _refused(args, capsys, "openb_pod_list_default.csv, line 10:", field)


def test_a_short_node_row_is_refused_with_its_line(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # It raised a TypeError at int(row["gpu"]).
    args = _trace(tmp_path, nodes=NODES + "bad-node,abc\n")
    _refused(args, capsys, "openb_node_list_gpu_node.csv, line 4:", "no memory_mib")


def test_a_node_row_with_a_bad_value_is_refused_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _trace(tmp_path, nodes=NODES + "bad-node,64000,262144,two,T4\n")
    _refused(args, capsys, "openb_node_list_gpu_node.csv, line 4:", "gpu 'two'")


@pytest.mark.parametrize("mode", ["events", "fill"])
def test_history_layouts_that_leave_nothing_to_replay_are_refused(
        mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Events mode printed a table of zeros and exited 0.
    _refused([*_trace(tmp_path), "--limit-pods", "1", "--mode", mode], capsys,
             "--layout history: all 1 pod of", "none is left to replay", "--limit-pods")


@pytest.mark.parametrize(("flag", "value", "allowed"), [
    ("--fill-interval", "-1", "0 or more seconds"),
    ("--advise-interval", "-30", "0 or more seconds"),
    ("--advisor-grace", "-1", "0 or more seconds"),
    ("--advisor-free-grace", "-1", "0 or more seconds"),
    ("--history-share", "1.5", "between 0 and 1"),
    ("--samples", "0", "2 to 10,000"),
    ("--samples", "1", "2 to 10,000"),
    ("--samples", "10001", "2 to 10,000"),
    ("--percentage-of-nodes-to-score", "101", "0 (adaptive) to 100"),
    ("--percentage-of-nodes-to-score", "-1", "0 (adaptive) to 100"),
    ("--jobs", "0", "1 or more"),
    ("--jobs", "-2", "1 or more"),
    ("--extender-weight", "-5", "1 or more"),
    ("--extender-weight", "0", "1 or more"),
    ("--gpu-weight", "-3", "1 to 100"),
    ("--gpu-weight", "101", "1 to 100"),
])
def test_numeric_flags_out_of_range_are_refused(
        flag: str, value: str, allowed: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Each ran (--samples 0 or 1 with the idle-while-pending figure silently 0, a negative
    # --extender-weight inverting the extender's score); --history-share is checked even
    # where the layout is not history.
    _refused(["--example", "--policies", "default", f"{flag}={value}"], capsys,
             f"{flag} {value}", allowed)


# NaN passed every range check (each comparison with it is false): --target nan ran and printed
# a table of zeros, --snapshot-at nan broke the event heap's order; inf ran for minutes or for
# ever. A number that is not finite is refused as the flag is parsed (migfit.flagtypes), as in
# every command (tests/cli/test_number_flags.py).
@pytest.mark.parametrize(("flag", "value"), [
    ("--target", "nan"), ("--target", "inf"), ("--target", "-inf"),
    ("--relayout-seconds", "nan"), ("--relayout-seconds", "inf"),
    ("--fill-interval", "nan"), ("--advise-interval", "inf"), ("--advisor-grace", "nan"),
    ("--advisor-free-grace", "nan"), ("--history-share", "nan"), ("--arrival-scale", "nan"),
    ("--ahead-from", "nan"), ("--config-sync-seconds", "nan"), ("--snapshot-at", "nan"),
    ("--snapshot-at", "inf"), ("--node-share", "nan")])
def test_numbers_that_are_not_finite_are_refused(
        flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.main(["simulate", "--example", f"{flag}={value}"])
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "seed 0" not in captured.out
    # A share's example is one it takes (60 is no share).
    example = "0.25" if flag in SHARES else "60 or 0.25"
    assert captured.err.splitlines()[-1] == (
        f"migfit simulate: error: argument {flag}: {value!r} is not a finite number: write it "
        f"in digits, such as {example}")


SHARES = {"--target", "--history-share", "--ahead-from", "--node-share"}


@pytest.mark.parametrize(("flag", "value"), [
    ("--fill-interval", "0"), ("--advise-interval", "0"), ("--advisor-grace", "0"),
    ("--samples", "2"), ("--percentage-of-nodes-to-score", "100"), ("--gpu-weight", "100"),
    ("--extender-weight", "1"), ("--relayout-seconds", "0")])
def test_numeric_flags_at_their_bounds_run(flag: str, value: str) -> None:
    assert cli.main(["simulate", "--example", "--synthetic", "60", "--policies",
                     "binpack-gpu,migfit+advisor", f"{flag}={value}"]) == 0


@pytest.mark.parametrize(("given", "words"), [
    ("t4=A30-24GB", ("--model-map t4=A30-24GB", "did you mean T4?", "T4, V100M32")),
    ("XYZ=A100-80GB", ("--model-map XYZ=A100-80GB", "no GPU model XYZ", "T4, V100M32")),
    ("T4=A100-80GB,T4=A30-24GB", ("--model-map names T4 twice",)),
])
def test_a_model_map_naming_models_the_node_list_lacks_is_refused(
        given: str, words: tuple[str, ...], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Each ran as an all-A100 cluster (the duplicate: the last one won).
    _refused([*_trace(tmp_path), "--model-map", given], capsys, *words)


def test_a_model_map_of_the_node_lists_models_runs(tmp_path: Path) -> None:
    assert cli.main(["simulate", *_trace(tmp_path), "--model-map",
                     "T4=A30-24GB,*=A100-80GB"]) == 0


def _pod(name: str, cpu: int = 1000, num_gpu: int = 1, gpu_milli: int = 1000,
         spec: str = "") -> str:
    return f"{name},{cpu},1024,{num_gpu},{gpu_milli},{spec},LS,Running,9,509,9\n"


@pytest.mark.parametrize(("row", "words"), [
    (_pod("neg", gpu_milli=-500), ("gpu_milli -500: use 0 to 1000",)),  # was a cpu-only pod
    (_pod("big", gpu_milli=1500), ("gpu_milli 1500: use 0 to 1000",)),  # was a whole GPU
    (_pod("neg-cpu", cpu=-1000), ("cpu_milli -1000: use at least 0",)),
    (_pod("neg-gpus", num_gpu=-2), ("num_gpu -2: use at least 0",)),
])
def test_bad_pod_values_are_refused_with_their_line(
        row: str, words: tuple[str, ...], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    _refused(_trace(tmp_path, pods=PODS + row), capsys,
             "openb_pod_list_default.csv, line 10:", *words)


@pytest.mark.parametrize(("row", "words"), [
    ("n,0,262144,2,T4", ("line 4: cpu_milli 0: use at least 1",)),
    ("n,64000,0,2,T4", ("line 4: memory_mib 0: use at least 1",)),
    ("n,64000,262144,-2,T4", ("line 4: gpu -2: use at least 0",)),
])
def test_bad_node_values_are_refused_with_their_line(
        row: str, words: tuple[str, ...], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    _refused(_trace(tmp_path, nodes=NODES + row + "\n"), capsys,
             "openb_node_list_gpu_node.csv, ", *words)


def test_lists_with_a_byte_order_mark_are_read(tmp_path: Path) -> None:
    # The first column was read as '\ufeffname': the error was ": 'name'".
    assert cli.main(["simulate", *_trace(tmp_path, bom=True)]) == 0


def test_pods_no_node_can_take_are_said_once_with_their_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = (PODS + _pod("x1", num_gpu=4) + _pod("x2", num_gpu=8) + _pod("v1", spec="V100M32")
            + _pod("a1", spec="A100|H100") + _pod("a2", spec="H100"))
    assert cli.main(["simulate", *_trace(tmp_path, pods=pods), "--layout",
                     "all-balanced=100%"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[1:3] == [
        "migfit simulate: warning: 2 of the 13 pods replayed ask for more GPUs (up to 8) than "
        "any node has (2): no policy can place them",
        "migfit simulate: warning: 2 of the 13 pods replayed ask (gpu_spec) only for GPU "
        "models no node has (A100, H100; the nodes have T4, V100M32): no policy can place "
        "them"]


def test_pods_too_big_for_any_nodes_cpu_or_memory_are_said_once_with_their_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Said for GPU counts and gpu_spec, not for cpu or memory: they waited for ever unsaid.
    big = (PODS + _pod("cpu", cpu=128000)
           + "mem,1000,300000,1,1000,,LS,Running,9,509,9\n")
    assert cli.main(["simulate", *_trace(tmp_path, pods=big), "--layout",
                     "all-balanced=100%"]) == 0
    assert capsys.readouterr().err.splitlines()[1] == (
        "migfit simulate: warning: 2 of the 10 pods replayed ask for more cpu or memory (up "
        "to 128,000 cpu_milli, 300,000 memory_mib) than any node that could take them has: "
        "no policy can place them")


SPEC = """\
version: v1
nodes:
- name: a100
  count: 2
  model: A100-80GB
  gpus: 2
  cpu: {cpu}
  memory: {memory}
"""


@pytest.mark.parametrize(("cpu", "memory", "words"), [
    ('"0"', "128Gi", ('cpu 0: a node needs cpu',)),
    ('"32"', "0", ("memory 0: a node needs at least 1Mi",)),
    ('"32"', "100Ki", ("memory 100Ki: a node needs at least 1Mi",)),
])
def test_a_cluster_spec_without_cpu_or_memory_is_refused(
        cpu: str, memory: str, words: tuple[str, ...], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # It ran and printed 100 % unallocated.
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC.format(cpu=cpu, memory=memory))
    _refused(["--cluster", str(spec), "--synthetic", "20", "--policies", "default"], capsys,
             "nodes[0] (a100)", *words)


@pytest.mark.parametrize(("argv", "notice"), [
    (["--example", "--layout", "history"], "replaying 300 of 600 synthetic pods on "),
    (["--synthetic", "40"], "replaying 20 of 40 synthetic pods on the trace's 2 nodes"),
    (["--example", "--synthetic", "40"], "replaying 40 synthetic pods on "),
])
def test_the_notice_counts_the_synthetic_pods_replayed(
        argv: list[str], notice: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # --layout history sizes the layouts on the first half: the notice said 600 (or 2000)
    # where the header said 300 (1000). --example reads no trace (--trace-dir is refused).
    trace = _trace(tmp_path) if "--example" not in argv else ["--policies", "default"]
    assert cli.main(["simulate", *trace, *argv]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0].startswith(notice)
    count = notice.split()[1]
    assert f"); {count} pods, mapping=" in captured.out


@pytest.mark.parametrize("value", ["1e9", "0", "-1"])
def test_arrival_scale_out_of_range_says_the_range(value: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # 1e9 was told "use a positive factor", the limit unsaid.
    _refused(["--example", "--mode", "events", f"--arrival-scale={value}"], capsys,
             "--arrival-scale", "above 0 and at most 1,000,000")


def test_node_share_says_it_keeps_one_node_of_each_shape(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --node-share 0.001 kept 15 of the trace's 1,213 nodes (one per shape), unsaid.
    nodes = NODES + "a2,32000,262144,2,V100M32\n"  # two shapes: cpu differs
    assert cli.main(["simulate", *_trace(tmp_path, nodes=nodes), "--node-share", "0.001"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith("2 nodes (--node-share 0.001: 2 of 3 nodes, at least one of each "
                             "of the 2 node shapes), 4 GPUs")
    with pytest.raises(SystemExit):
        cli.main(["simulate", "--help"])
    assert "at least one node of each" in " ".join(capsys.readouterr().out.split())


def test_a_policy_named_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # Its runs were merged into one row.
    _refused(["--example", "--policies", "default,migfit,default"], capsys,
             "--policies names default twice")


def test_a_picture_of_a_policy_not_run_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # It was accepted and drew nothing.
    _refused(["--example", "--policies", "default,migfit", "--picture", "nonexist"], capsys,
             "--picture nonexist: not a policy of this run", "default, migfit")


def test_markdown_has_the_gpu_wait_p50_of_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--example", "--policies", "default", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "GPU wait p50 s" in out.splitlines()[2]  # the terminal table's header
    assert "| GPU wait p50 s | GPU wait p95 s |" in out
    row = next(line for line in out.splitlines() if line.startswith("| default |"))
    assert len(row.split("|")) == len(next(line for line in out.splitlines()
                                           if line.startswith("| policy |")).split("|"))
