"""migfit.dcgm: dcgm-exporter's text (tests/data/dcgm-*.txt, in the exporter's own label order)
read into per-GPU instances in use; malformed input is skipped and counted, never raised."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from migfit import dcgm
from migfit.profiles import ProfileName

DATA = Path(__file__).parent.parent / "data"
ONE, THREE = ProfileName("1g.10gb"), ProfileName("3g.40gb")


def _read(name: str) -> dcgm.Report:
    return dcgm.read((DATA / name).read_text())


def test_a_node_with_mig_and_whole_gpus_and_pods() -> None:
    rep = _read("dcgm-mixed-node.txt")
    assert rep.usable and rep.skipped == 0 and rep.hostname == "gpu-node-1"
    assert rep.gpus == {0, 1, 2}
    # 2 × 3g.40gb on GPU 0, 7 × 1g.10gb on GPU 1 (ids 7..13), GPU 2 has MIG off.
    assert [(i.gpu, i.profile) for i in rep.instances].count((1, ONE)) == 7
    assert len(rep.instances) == 9
    used = {(i.gpu, i.instance_id): i.pods for i in rep.instances if i.in_use}
    assert used == {(0, "1"): {"ml/train-0"}, (1, "9"): {"ml/infer-a"},
                    (1, "12"): {'team-b/notebook-"x"'}}  # an escaped quote in a label value
    # The whole GPU's pod (vision/resnet-…) uses no MIG instance: GPU 2 counts none.
    assert rep.usage() == [Counter({THREE: 1}), Counter({ONE: 2}), Counter()]


def test_an_idle_node_reports_its_instances_and_none_in_use() -> None:
    rep = _read("dcgm-idle-node.txt")
    assert rep.usable and rep.gpus == {0, 1} and len(rep.instances) == 3
    assert not any(i.in_use for i in rep.instances)
    assert rep.usage() == [Counter(), Counter()]


def test_old_attribute_names_and_empty_pod_labels() -> None:
    text = "\n".join([
        'F{gpu="0",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",pod_namespace="a",pod_name="p"} 1',
        'F{gpu="0",GPU_I_PROFILE="1g.10gb",GPU_I_ID="8",namespace="",pod="",container=""} 1',
        'F{gpu="1",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7"} 1',
    ])
    rep = dcgm.read(text)
    assert rep.usage() == [Counter({ONE: 1}), Counter()]
    assert [i.pods for i in rep.instances] == [{"a/p"}, set(), set()]


@pytest.mark.parametrize("line", [
    'F{gpu="0" 1',  # labels not closed
    'F{gpu="0",gpu="1"} 1',  # a label twice
    'F{gpu="0\\x"} 1',  # an unknown escape
    'F{gpu=0} 1',  # an unquoted value
    'F{gpu="0"}',  # no value
    'F{gpu="0"} one',  # not a number
    'F{gpu="0"} 1 2 3',  # too many fields
    'F{gpu="0"} 1 1.5',  # a timestamp is an integer
    '{gpu="0"} 1',  # no name
    '9F{gpu="0"} 1',  # a name starts with a letter, _ or :
    'F{gpu="0"}1',  # no blank before the value
    'F{9="0"} 1',  # a bad label name
])
def test_bad_lines_are_skipped_and_counted(line: str) -> None:
    good = 'F{gpu="0",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",pod="p",namespace="n"} 1'
    exp = dcgm.parse(f"# HELP F x\n# TYPE F gauge\n{line}\n{good}\n\n")
    assert exp.skipped == 1 and len(exp.samples) == 1
    assert dcgm.report(exp).usage() == [Counter({ONE: 1})]


def test_values_and_label_escapes() -> None:
    for text, value in (("NaN", None), ("+Inf", float("inf")), ("-1.5e3", -1500.0)):
        s = dcgm.parse_line(f'F{{a="x\\\\y\\n\\"z",}} {text} 1700000000000')
        assert s.labels == {"a": 'x\\y\n"z'}
        assert value is None or s.value == value


def test_a_gpu_index_must_be_a_number() -> None:
    rep = dcgm.read('F{gpu="-1"} 1\nF{gpu="nvidia0"} 1\nF{gpu="0"} 1\n')
    assert rep.skipped == 2 and rep.gpus == {0}


def test_bounds() -> None:
    line = 'F{gpu="0",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",pod="p",namespace="n"} 1\n'
    many = dcgm.read(line * 20, max_lines=10)
    assert many.truncated and not many.usable
    long = dcgm.parse('F{gpu="0",x="' + "y" * 100 + '"} 1\n' + line, max_line_chars=90)
    assert long.skipped == 1 and len(long.samples) == 1
    # Garbage (binary, HTML) is skipped line by line; nothing raises.
    junk = dcgm.read("<html>\x00\xff{{{\n}}} 1\n" * 50)
    assert not junk.usable and junk.skipped == 100 and junk.gpus == frozenset()


def test_one_instance_with_two_profiles_is_a_conflict() -> None:
    rep = dcgm.read('A{gpu="0",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7"} 1\n'
                    'B{gpu="0",GPU_I_PROFILE="2g.20gb",GPU_I_ID="7"} 1\n')
    assert rep.conflicts and not rep.usable


def test_gaps_in_gpu_indexes_are_empty_gpus() -> None:
    rep = dcgm.read('F{gpu="2",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",pod="p",namespace="n"} 1')
    assert rep.usage() == [Counter(), Counter(), Counter({ONE: 1})]
