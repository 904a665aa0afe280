"""The cool-down after a re-layout, read from the node itself: the time its
``nvidia.com/mig.config.state`` label was last written (``metadata.managedFields``).

Before, only a process that saw the label change cooled the node down: a restarted extender,
and every one-shot ``migfit advise`` and ``migfit explain``, planned a node re-laid out a
minute ago again at once for pods that had waited since before its change, so layouts could
flap across restarts.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml

from migfit import advisor, builders, cluster, decoding, keys, profiles
from migfit.extender import advice

ROOT = pathlib.Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0  # the re-layout's end, as the API server stamped it
COOL = advisor.Settings().cooldown_s


def _stamp(t: float) -> str:
    return keys.rfc3339(t, micro=False)


def _entry(manager: str, at: str | None, labels: list[str], **more: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "apiVersion": "v1", "fieldsType": "FieldsV1", "manager": manager,
        "operation": "Update",
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, **{f"f:{k}": {} for k in labels}}}}}
    if at is not None:
        entry["time"] = at
    entry.update(more)
    return entry


def _node(name: str = "a", managed: list[Any] | None = None) -> dict[str, Any]:
    labels = builders.mig_labels(product="NVIDIA-A100-SXM4-80GB", instances={"3g.40gb": 2},
                                 config="all-3g.40gb", config_state="success",
                                 count_labels=False)
    obj = builders.node(name, labels=labels,
                        resources=builders.mig_resources({"3g.40gb": 2}, whole_gpus=None))
    if managed is not None:
        obj["metadata"]["managedFields"] = managed
    return obj


def _changed_at(t: float) -> list[dict[str, Any]]:
    # As a real node carries them: kubelet's, GPU Feature Discovery's labels, and the MIG
    # Manager's state label.
    return [_entry("kubelet", _stamp(T0 - 9000), ["kubernetes.io/hostname"]),
            _entry("gpu-feature-discovery", _stamp(t + 500), ["nvidia.com/gpu.product"]),
            _entry("nvidia-mig-manager", _stamp(t), [keys.LABEL_CONFIG_STATE])]


def _waiting(name: str, since: float) -> dict[str, Any]:
    return builders.pod(name, [{profiles.resource_name("1g.10gb"): "1"}],
                        unschedulable_since=_stamp(since), image="x",
                        container_names=["main"])


def _state(*objects: dict[str, Any]) -> cluster.Cluster:
    state = cluster.Cluster()
    cluster.load_objects(state, list(objects))
    return state


def test_the_time_is_the_latest_entry_that_owns_the_state_label() -> None:
    catalog = profiles.builtin()
    rec = decoding.node_from_api(_node(managed=[
        *_changed_at(T0 - 600),
        _entry("kubectl-label", _stamp(T0), [keys.LABEL_CONFIG_STATE, "team"]),
    ]), catalog)
    assert rec.layout_written_at == T0
    assert decoding.node_from_api(_node(), catalog).layout_written_at is None


@pytest.mark.parametrize("managed", [
    "not a list", [None, 7, "x"], [{"fieldsV1": "x", "time": _stamp(T0)}],
    [_entry("m", None, [keys.LABEL_CONFIG_STATE])],  # no time
    [_entry("m", "yesterday", [keys.LABEL_CONFIG_STATE])],  # not RFC 3339
    [_entry("m", _stamp(T0), [keys.LABEL_CONFIG])],  # another label
    [{"fieldsV1": {"f:metadata": {"f:labels": "x"}}, "time": _stamp(T0)}],
])
def test_entries_that_do_not_say_are_ignored(managed: Any) -> None:
    rec = decoding.node_from_api(_node(managed=managed), profiles.builtin())
    assert rec.layout_written_at is None


def _recommended(state: cluster.Cluster, now: float) -> list[str]:
    # A fresh cache: a process that never saw the node change (restarted, or one-shot).
    return [r.node for r in advice.AdviceCache().get(state, now=now).recommendations]


def test_a_process_that_did_not_see_the_change_cools_the_node_down_too() -> None:
    state = _state(_node(managed=_changed_at(T0)), _waiting("p", T0 - 3600))
    got = advice.AdviceCache().get(state, now=T0 + 200)
    assert got.recommendations == ()
    assert got.cooling == {"a": T0}
    assert got.to_json()["cooling"] == {"a": keys.rfc3339(T0)}
    assert _recommended(state, T0 + COOL + 1) == ["a"]  # cooled down
    # The same node without the entry (managedFields trimmed): no history, planned at once.
    assert _recommended(_state(_node(), _waiting("p", T0 - 3600)), T0 + 200) == ["a"]


def test_demand_newer_than_the_recorded_change_may_re_lay_it_out() -> None:
    state = _state(_node(managed=_changed_at(T0)), _waiting("p", T0 + 60),
                   _waiting("q", T0 + 90))  # cooldown_min = 2 instances, both newer
    assert _recommended(state, T0 + 200) == ["a"]


def test_the_later_of_seen_and_recorded_counts() -> None:
    state = _state(_node(managed=_changed_at(T0)))
    assert advisor.recorded_changes(state, {"a": T0 + 50}, T0 + 100, COOL) == {"a": T0 + 50}
    assert advisor.recorded_changes(state, {"a": T0 - 50}, T0 + 100, COOL) == {"a": T0}
    assert advisor.recorded_changes(state, {}, T0 + COOL, COOL) == {}
    # a stamp ahead of this clock (the API server's clock is ahead) says nothing of how long
    # ago the change was: left out. Taken as "now" on every call, it kept the node cooling
    # down for as long as the clocks differed, "0 s ago, 15 min left" each time.
    assert advisor.recorded_changes(state, {}, T0 - 30, COOL) == {}
    assert advisor.recorded_changes(state, {"a": T0 - 100}, T0 - 30, COOL) == {"a": T0 - 100}


def _migfit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "migfit.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_one_shot_advise_and_explain_say_the_node_cools_down(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        _node(managed=_changed_at(T0)), _waiting("p", T0 - 3600)]}))
    now = str(int(T0 + 200))
    text = _migfit("advise", "--cluster", str(path), "--now", now)
    assert text.returncode == 0, text.stderr
    assert ("1 node(s) cool down after a re-layout and are re-laid out again only for pods "
            f"unschedulable since: a (changed {_stamp(T0)})") in text.stdout
    assert "kubectl label node" not in text.stdout
    doc = json.loads(_migfit("advise", "--cluster", str(path), "--now", now, "-o", "json")
                     .stdout)
    assert doc["recommendations"] == [] and doc["cooling"] == {"a": keys.rfc3339(T0)}
    why = _migfit("explain", "default/p", "--cluster", str(path), "--now", now)
    assert why.returncode == 0, why.stderr
    assert ("a: cooling down: its nvidia.com/mig.config.state label was written 3 min ago (by "
            "the MIG Manager as a re-layout ended, or a later label write of the same field "
            "manager); for 15 min after that it is re-laid out again only for pods "
            "unschedulable since, and only for at least 2 of their instances (this pod has "
            "waited since before); 12 min left") in why.stdout
    assert "Wait for such a node's cool-down to end" in why.stdout
    later = _migfit("advise", "--cluster", str(path), "--now", str(int(T0 + COOL + 1)))
    assert "kubectl label node a " in later.stdout and "cool down" not in later.stdout


def test_cooling_nodes_are_listed_when_no_pod_waits() -> None:
    got = advice.AdviceCache().get(_state(_node(managed=_changed_at(T0))), now=T0 + 200)
    assert got.recommendations == () and got.waiting == ()
    assert got.cooling == {"a": T0}


def _busy(name: str) -> list[dict[str, Any]]:
    """A one-GPU node one of whose two 3g.40gb runs a pod: re-laying out its free half
    disrupts that pod (the MIG Manager re-partitions the whole GPU)."""
    running = builders.pod(f"{name}-run", [{profiles.resource_name("3g.40gb"): "1"}],
                           node_name=name, phase="Running", image="x",
                           container_names=["main"])
    return [_node(name), running]


def test_a_pod_a_cooling_node_will_serve_gets_no_disruptive_change() -> None:
    # The safe node cools down (10 more minutes): advising to evict the busy node's pod
    # for a pod that the safe node serves once cooled was worse than waiting.
    state = _state(_node(managed=_changed_at(T0)), *_busy("b"), _waiting("p", T0 - 3600))
    got = advisor.advise(state, now=T0 + 300)
    assert got.recommendations == ()
    assert got.unserved == ("default/p",)
    after = advisor.advise(state, now=T0 + COOL + 1)  # cooled: the safe change, not b
    assert [r.node for r in after.recommendations] == ["a"]
    assert not after.recommendations[0].disrupts
    # Without a cooling node the disruptive change is still advised, as before.
    alone = advisor.advise(_state(*_busy("b"), _waiting("p", T0 - 3600)), now=T0 + 300)
    assert [(r.node, r.disruptive) for r in alone.recommendations] == [("b", True)]


def test_explain_names_the_cooling_node_for_a_pod_newer_than_the_change(
        tmp_path: pathlib.Path) -> None:
    # One instance of newer demand is below Settings.cooldown_min: the node stays put, and
    # explain said nothing of it (it only named cooling nodes to pods older than the change).
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [
        _node(managed=_changed_at(T0)), _waiting("p", T0 + 60)]}))
    why = _migfit("explain", "default/p", "--cluster", str(path), "--now", str(int(T0 + 300)))
    assert why.returncode == 0, why.stderr
    assert ("a: cooling down: its nvidia.com/mig.config.state label was written 5 min ago"
            in why.stdout)
    assert "(this pod asks for 1); 10 min left" in why.stdout
