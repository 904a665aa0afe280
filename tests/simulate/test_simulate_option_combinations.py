"""Options that would do nothing with the others given are refused, naming both (exit 2, one
line); before, each was silently ignored. Also the remaining inputs' messages that named no
flag or file, and --synthetic's bound."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from refusals import refused

from migfit import cli

NODES = "sn,cpu_milli,memory_mib,gpu,model\na1,64000,262144,2,V100M32\n"
PODS = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        + "".join(f"p{i},1000,1024,1,250,,LS,Running,{i},{i + 500},{i}\n" for i in range(8)))


def _files(tmp_path: Path) -> tuple[str, str, str]:
    nodes, pods, spec = tmp_path / "nodes.csv", tmp_path / "pods.csv", tmp_path / "c.yaml"
    nodes.write_text(NODES)
    pods.write_text(PODS)
    spec.write_text("version: v1\nnodes:\n- {name: a, count: 1, model: A100-80GB, gpus: 2, "
                    "cpu: '64', memory: 256Gi}\n")
    return str(nodes), str(pods), str(spec)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *words: str) -> str:
    return refused(["--policies", "default", *argv], capsys, *words)


@pytest.mark.parametrize(("argv", "words"), [
    (["--example", "--pods", "{pods}"], ("--pods and --example",)),
    (["--example", "--nodes", "{nodes}"], ("--nodes and --example",)),
    (["--cluster", "{spec}", "--nodes", "{nodes}", "--pods", "{pods}"],
     ("--nodes and --cluster",)),
    (["--nodes", "{nodes}", "--synthetic", "20", "--pods", "{pods}"],
     ("--pods and --synthetic",)),
    (["--cluster", "{spec}", "--synthetic", "20", "--model-map", "V100M32=A30-24GB"],
     ("--model-map with --cluster",)),
    (["--example", "--model-map", "V100M32=A30-24GB"], ("--model-map with --example",)),
    (["--example", "--model", "A30-24GB"], ("--model with --example",)),
    (["--example", "--arrival-scale", "0.5"], ("--arrival-scale with --mode fill",)),
    (["--example", "--snapshot-at", "10"], ("--snapshot-at with --mode fill",)),
    (["--example", "--mode", "events", "--target", "2"], ("--target with --mode events",)),
    (["--example", "--mode", "events", "--order", "trace"],
     ("--order with --mode events",)),
    (["--example", "--mode", "events", "--fill-interval", "2"],
     ("--fill-interval with --mode events",)),
    (["--example", "--history-share", "0.3"],
     ("--history-share with --layout from the spec", "--layout history")),
    (["--nodes", "{nodes}", "--pods", "{pods}", "--layout", "all-balanced",
      "--history-share", "0.3"], ("--history-share with --layout all-balanced",)),
    # Read nowhere, silently: the trace folder of a run that reads neither of its lists,
    # and the pictures of a run that writes neither the report nor the JSON.
    (["--example", "--trace-dir", "{tmp}"],
     ("--trace-dir with --example: --example replaces both of the trace's lists, so its "
      "folder is never read; leave --trace-dir out",)),
    (["--cluster", "{spec}", "--synthetic", "20", "--trace-dir", "{tmp}"],
     ("--trace-dir with --cluster and --synthetic: --cluster and --synthetic replace both",)),
    (["--nodes", "{nodes}", "--synthetic", "20", "--trace-dir", "{tmp}"],
     ("--trace-dir with --nodes and --synthetic",)),
    (["--example", "--picture", "default"],
     ("--picture without --report or --json: it picks the policies whose GPU pictures the "
      "report draws (and --json keeps); add --report FILE.html or leave it out",)),
    (["--example", "--mode", "events", "--snapshot-at", "10"],
     ("--snapshot-at without --report or --json: it sets when the GPU picture of the report "
      "(and of --json) is taken; add --report FILE.html or leave it out",)),
])
def test_options_that_would_do_nothing_are_refused_naming_both(
        argv: list[str], words: tuple[str, ...], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods, spec = _files(tmp_path)
    _refused([a.format(nodes=nodes, pods=pods, spec=spec, tmp=tmp_path) for a in argv], capsys,
             *words)


@pytest.mark.parametrize("argv", [
    ["--example", "--target", "1.3", "--order", "trace", "--fill-interval", "1"],
    ["--example", "--mode", "events", "--arrival-scale", "1", "--snapshot-at", "0",
     "--json", "{tmp}/out.json"],
    ["--nodes", "{nodes}", "--pods", "{pods}", "--history-share", "0.5",
     "--model", "A100-80GB", "--model-map", "V100M32=A30-24GB"],
    ["--example", "--cluster", "{spec}"],
    ["--cluster", "{spec}", "--pods", "pods.csv", "--trace-dir", "{tmp}"],
    ["--example", "--picture", "default", "--json", "{tmp}/out.json"],
])
def test_the_same_options_where_they_apply_run(argv: list[str], tmp_path: Path) -> None:
    nodes, pods, spec = _files(tmp_path)
    argv = [a.format(nodes=nodes, pods=pods, spec=spec, tmp=tmp_path) for a in argv]
    assert cli.main(["simulate", "--policies", "default", *argv]) == 0


@pytest.mark.parametrize(("argv", "words"), [
    (["--example", "--layout", "nonsense"],  # said "A100-80GB has no MIG profile 'nonsense'"
     ("--layout 'nonsense': A100-80GB has no MIG profile 'nonsense'", "Use history, ")),
    (["--example", "--limit-pods", "0"], ("--limit-pods 0: use 1 or more",)),
    (["--example", "--synthetic", "1000001"], ("--synthetic 1000001: use 1 to 1,000,000",)),
    (["--example", "--synthetic", "99999999999999999999", "--limit-pods", "5"],  # hung
     ("--synthetic 99999999999999999999: use 1 to 1,000,000",)),
    (["--nodes", "{nodes}", "--pods", "{nodes}", "--model", "NOPE"],  # no flag named
     ("--model NOPE: unknown GPU model 'NOPE'",)),
])
def test_messages_name_the_flag(argv: list[str], words: tuple[str, ...], tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods, spec = _files(tmp_path)
    _refused([a.format(nodes=nodes, pods=pods, spec=spec) for a in argv], capsys, *words)


def test_a_header_only_pod_list_is_named(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    # It said "the workload has no pods".
    nodes, pods, _ = _files(tmp_path)
    Path(pods).write_text(PODS.splitlines()[0] + "\n")
    _refused(["--nodes", nodes, "--pods", pods], capsys,
             f"{pods}: the pod list has no pods (a header line only)")


def test_limit_pods_makes_only_the_synthetic_pods_it_keeps(
        capsys: pytest.CaptureFixture[str]) -> None:
    started = time.perf_counter()
    assert cli.main(["simulate", "--example", "--policies", "default", "--synthetic",
                     "1000000", "--limit-pods", "40"]) == 0
    assert time.perf_counter() - started < 20  # making 1,000,000 pods took about a minute
    assert capsys.readouterr().err.startswith("replaying 40 of 1,000,000 synthetic pods")
