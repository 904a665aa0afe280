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
    return keys.rfc3339(t)[:19] + "Z"


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
    # a stamp ahead of this clock (skew) counts as now, so it ends a cool-down from now
    assert advisor.recorded_changes(state, {}, T0 - 30, COOL) == {"a": T0 - 30}


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
    assert ("a: re-laid out 3 min ago (nvidia.com/mig.config.state written then): for 15 min "
            "after a change it is re-laid out again only for pods unschedulable since (the "
            "cool-down), 12 min left") in why.stdout
    assert "Wait for such a node's cool-down to end" in why.stdout
    later = _migfit("advise", "--cluster", str(path), "--now", str(int(T0 + COOL + 1)))
    assert "kubectl label node a " in later.stdout and "cool down" not in later.stdout
