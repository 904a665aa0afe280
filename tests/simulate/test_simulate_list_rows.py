"""The trace's lists are read as written or refused in one line naming the file, the line and
the field (exit 2, no traceback): a header naming a column twice, a row longer than the
header, bytes that are not UTF-8, a node without a name or with another node's name, and a
``--model-map`` that cannot apply."""

from __future__ import annotations

from pathlib import Path

import pytest
from refusals import refused

from migfit import cli

NODES = "sn,cpu_milli,memory_mib,gpu,model\na1,64000,262144,2,V100M32\nt1,64000,262144,2,T4\n"
POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time\n")
PODS = POD_HEADER + "".join(f"p{i},1000,1024,1,{250 if i % 2 else 1000},,LS,Running,{i},"
                            f"{i + 500},{i}\n" for i in range(8))


def _trace(tmp_path: Path, *, nodes: str | bytes = NODES, pods: str | bytes = PODS
           ) -> list[str]:
    for name, text in (("openb_node_list_gpu_node.csv", nodes),
                       ("openb_pod_list_default.csv", pods)):
        data = text.encode() if isinstance(text, str) else text
        (tmp_path / name).write_bytes(data)
    return ["--trace-dir", str(tmp_path), "--policies", "default"]


_refused = refused


def test_the_small_trace_runs(tmp_path: Path) -> None:
    assert cli.main(["simulate", *_trace(tmp_path)]) == 0


def test_a_header_naming_a_column_twice_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The last cpu_milli won, unsaid.
    pods = PODS.replace("gpu_milli,gpu_spec,", "gpu_milli,cpu_milli,", 1)
    _refused(_trace(tmp_path, pods=pods), capsys, "openb_pod_list_default.csv, line 1:",
             "names cpu_milli more than once")


def test_a_pod_row_longer_than_the_header_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A shorter row was refused, a longer one read with its extra field dropped.
    pods = PODS + "p9,1000,1024,1,1000,,LS,Running,9,509,9,surplus\n"
    _refused(_trace(tmp_path, pods=pods), capsys, "openb_pod_list_default.csv, line 10:",
             "12 fields where the header has 11")


def test_a_node_row_longer_than_the_header_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _refused(_trace(tmp_path, nodes=NODES + "x1,64000,262144,2,T4,spare\n"), capsys,
             "openb_node_list_gpu_node.csv, line 4:", "6 fields where the header has 5")


def test_bytes_that_are_not_utf8_are_refused_with_their_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The message gave a byte position in a read chunk ("position 386"), not a line.
    pods = (PODS + "caf\xe9,1000,1024,1,1000,,LS,Running,9,509,9\n").encode("latin-1")
    _refused(_trace(tmp_path, pods=pods), capsys,
             "openb_pod_list_default.csv, line 10, column 4: not UTF-8 (byte 0xe9)")


def test_a_node_with_another_nodes_name_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It said 3 nodes and 6 GPUs and ran with 2 nodes, 4 GPUs (the names collided).
    _refused(_trace(tmp_path, nodes=NODES + "a1,64000,262144,2,V100M32\n"), capsys,
             "openb_node_list_gpu_node.csv, line 4:", "sn a1 is on line 2 too")


def test_a_node_without_a_name_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It printed "skipping Node /" and ran, exit 0.
    _refused(_trace(tmp_path, nodes=NODES + ",64000,262144,2,T4\n"), capsys,
             "openb_node_list_gpu_node.csv, line 4:", "sn is empty")


def test_a_pod_with_another_pods_name_or_none_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Both ran: a list pasted twice replayed every pod twice without a word.
    _refused(_trace(tmp_path, pods=PODS + "p3,1000,1024,1,1000,,LS,Running,9,500,9\n"),
             capsys, "openb_pod_list_default.csv, line 10:", "name p3 is on line 5 too")
    _refused(_trace(tmp_path, pods=PODS + ",1000,1024,1,1000,,LS,Running,9,500,9\n"),
             capsys, "openb_pod_list_default.csv, line 10:", "name is empty")


def test_a_model_map_naming_an_unknown_mig_model_names_the_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The message was --model's ("unknown GPU model 'NOPE'"), no flag named.
    _refused([*_trace(tmp_path), "--model-map", "T4=NOPE"], capsys,
             "--model-map 'T4=NOPE': unknown GPU model 'NOPE'")


def test_a_model_map_on_a_node_list_without_models_says_the_column_is_missing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It said "its models are , and * stands for the others".
    nodes = "sn,cpu_milli,memory_mib,gpu\na1,64000,262144,2\n"
    _refused([*_trace(tmp_path, nodes=nodes), "--model-map", "T4=A30-24GB"], capsys,
             "--model-map T4=A30-24GB: the node list", "has no model column")
    assert cli.main(["simulate", *_trace(tmp_path, nodes=nodes), "--model-map",
                     "*=A30-24GB"]) == 0
