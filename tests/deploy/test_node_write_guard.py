"""deploy/components/node-write-guard, evaluated as CEL in every install: the extender's own node
writes (built from the keys the code writes) pass; the apply mode's (its taint, the config
label, the failure mark) pass exactly where deploy/components/apply-relayout turns the apply
mode on, and are denied in advice-only installs; any other change by the extender's
ServiceAccount is denied; writes by anyone else are not matched."""

from __future__ import annotations

import copy
import functools
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_manifests import DEPLOY, KUBECTL, TARGETS, find, needs_kubectl, render

from migfit import keys

celpy = pytest.importorskip(
    "celpy", reason="cel-python (import celpy) is not installed: the policy's expressions are "
    "not evaluated; install it with `pip install cel-python`")

pytestmark = needs_kubectl

EXTENDER = "system:serviceaccount:migfit-system:migfit-extender"
POLICY = "migfit-extender-node-writes"
APPLY = "overlays/apply-custom-configs"
# deploy/components/apply-relayout alone (no custom configs) on the recommended overlay: no
# overlay ships it so, and the README tells operators to add it to theirs.
APPLY_ALONE = "second-scheduler + components/apply-relayout"
ALL = (*TARGETS, APPLY_ALONE)


@functools.cache
def _render_apply_alone() -> str:
    assert KUBECTL is not None
    with tempfile.TemporaryDirectory() as tmp:
        # kustomize takes relative paths only, to directories anywhere.
        up = os.path.relpath(DEPLOY, tmp)
        (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [f"{up}/overlays/second-scheduler"],
            "components": [f"{up}/components/apply-relayout"]}))
        done = subprocess.run([KUBECTL, "kustomize", tmp], capture_output=True, text=True,
                              timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def objects_of(target: str) -> list[dict[str, Any]]:
    if target == APPLY_ALONE:
        return [d for d in yaml.safe_load_all(_render_apply_alone()) if d]
    return render(target)


def policy_of(target: str) -> dict[str, Any]:
    return find(objects_of(target), "ValidatingAdmissionPolicy", POLICY)


def applies(target: str) -> bool:
    """Whether the install runs the extender's apply mode (its flag in the Deployment)."""
    deployment = find(objects_of(target), "Deployment", "migfit-extender")
    return "--apply-relayout" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def node() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-0", "resourceVersion": "7",
                         "labels": {"kubernetes.io/hostname": "gpu-0",
                                    keys.LABEL_CONFIG: "all-balanced",
                                    keys.LABEL_CONFIG_STATE: "success"},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present",
                                 "effect": "NoSchedule"}],
                     "podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"],
                     "providerID": "kind://docker/gpu/gpu-0"}}


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies the extender's patches."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def _variables(policy: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    env = celpy.Environment()
    variables: dict[str, Any] = {}
    for var in policy["spec"]["variables"]:
        program = env.program(env.compile(var["expression"]))
        variables[var["name"]] = program.evaluate(
            celpy.json_to_cel({**base, "variables": variables}))
    return variables


def admitted(policy: dict[str, Any], old: dict[str, Any], new: dict[str, Any],
             user: str = EXTENDER) -> tuple[bool, list[str]]:
    """Whether the policy lets the update through, and the messages of what it denies."""
    env = celpy.Environment()
    request = {"userInfo": {"username": user}, "operation": "UPDATE"}
    base = {"object": new, "oldObject": old, "request": request}
    for condition in policy["spec"]["matchConditions"]:
        program = env.program(env.compile(condition["expression"]))
        if not bool(program.evaluate(celpy.json_to_cel(base))):
            return True, []  # not matched: the policy does not apply
    activation = {**celpy.json_to_cel(base), "variables": celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in _variables(policy, base).items()})}
    denied = []
    for rule in policy["spec"]["validations"]:
        program = env.program(env.compile(rule["expression"]))
        result = program.evaluate(activation)
        assert isinstance(result, celpy.celtypes.BoolType), (rule["expression"], result)
        if not result:
            denied.append(rule["message"])
    return not denied, denied


RECORD = '{"v": 1, "state": "tainted"}'
TAINT = keys.relayout_taint()

# What the advice writes, as merge patches (migfit/extender/advice.py, Publisher: the marks
# of a recommended node, and their removal once it is no longer recommended).
ADVICE_WRITES = {
    "advice marks": {"metadata": {"resourceVersion": "7",
                                  "annotations": {keys.ANNOTATION_RELAYOUT: RECORD},
                                  "labels": {keys.LABEL_RELAYOUT_RECOMMENDED: "true"}}},
}
# What only the apply mode writes (migfit/extender/relayout_machine.py: claim, label, fail;
# the release is test_the_release_removes_the_taint_record_and_marks).
APPLY_WRITES = {
    "claim: record and taint": {"metadata": {"resourceVersion": "7", "annotations": {
        keys.ANNOTATION_RELAYOUT: RECORD}}, "spec": {"taints": [*node()["spec"]["taints"],
                                                               TAINT]}},
    "label the target": {"metadata": {"resourceVersion": "7",
                                      "labels": {keys.LABEL_CONFIG: "migfit-1g.10gb-x7"},
                                      "annotations": {keys.ANNOTATION_RELAYOUT: RECORD}}},
    "failure mark": {"metadata": {"annotations": {
        keys.ANNOTATION_RELAYOUT_FAILED: '{"result": "failed", "reason": "x"}'}}},
}


def test_an_install_applies_only_with_the_apply_relayout_component() -> None:
    # The split below stands on this: the advice-only overlays and the two with the component.
    assert {t for t in ALL if applies(t)} == {APPLY, APPLY_ALONE}


@pytest.mark.parametrize("target", ALL)
def test_the_policy_allows_exactly_the_keys_its_mode_writes(target: str) -> None:
    allowed = {name: {str(k) for k in value} for name, value in
               _variables(policy_of(target), {"object": node(), "oldObject": node()}).items()}
    advice = {"labels": {keys.LABEL_RELAYOUT_RECOMMENDED},
              "annotations": {keys.ANNOTATION_RELAYOUT}, "taints": set()}
    apply = {"labels": {keys.LABEL_CONFIG}, "annotations": {keys.ANNOTATION_RELAYOUT_FAILED},
             "taints": {keys.TAINT_RELAYOUT}}
    assert allowed == {k: v | (apply[k] if applies(target) else set())
                       for k, v in advice.items()}


@pytest.mark.parametrize("target", ALL)
@pytest.mark.parametrize("name", ADVICE_WRITES)
def test_the_advice_writes_pass_in_every_install(target: str, name: str) -> None:
    old = node()
    new = merge(old, ADVICE_WRITES[name])
    assert admitted(policy_of(target), old, new) == (True, [])
    # ... and so does their removal, once the node is no longer recommended.
    gone = {"metadata": {"annotations": {keys.ANNOTATION_RELAYOUT: None},
                         "labels": {keys.LABEL_RELAYOUT_RECOMMENDED: None}}}
    assert admitted(policy_of(target), new, merge(new, gone)) == (True, [])


@pytest.mark.parametrize("target", ALL)
@pytest.mark.parametrize("name", APPLY_WRITES)
def test_the_apply_modes_writes_pass_only_where_it_runs(target: str, name: str) -> None:
    # Before, the base's policy let every install's extender set nvidia.com/mig.config and
    # taint nodes, though only the apply-relayout component turns the apply mode on.
    old = node()
    ok, messages = admitted(policy_of(target), old, merge(old, APPLY_WRITES[name]))
    assert ok == applies(target), messages
    if not ok:
        assert all("deploy/components/apply-relayout" in m for m in messages), messages


@pytest.mark.parametrize("target", ALL)
def test_the_release_removes_the_taint_record_and_marks(target: str) -> None:
    policy = policy_of(target)
    marked = merge(merge(node(), APPLY_WRITES["claim: record and taint"]),
                   ADVICE_WRITES["advice marks"])
    release = {"metadata": {"annotations": {keys.ANNOTATION_RELAYOUT: None},
                            "labels": {keys.LABEL_RELAYOUT_RECOMMENDED: None}},
               "spec": {"taints": node()["spec"]["taints"]}}
    assert admitted(policy, marked, merge(marked, release))[0] == applies(target)
    # Without any taint left at all (a node that had only migfit's).
    bare = merge(node(), {"spec": {"taints": [TAINT]}})
    assert admitted(policy, bare, merge(bare, {"spec": {"taints": None}}))[0] == applies(target)


LABELS_ADD, LABELS_REMOVE, ANNOTATIONS_ADD, ANNOTATIONS_REMOVE, TAINTS_ADD, TAINTS_REMOVE, \
    CORDON, OWNERS, FINALIZERS, SPEC = range(10)
OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "0000"}


@pytest.mark.parametrize("target", ["overlays/second-scheduler", APPLY])
@pytest.mark.parametrize(("patch", "rule"), [
    ({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}, LABELS_ADD),
    ({"metadata": {"labels": {"kubernetes.io/hostname": "other"}}}, LABELS_ADD),
    ({"metadata": {"labels": {keys.LABEL_CONFIG_STATE: None}}}, LABELS_REMOVE),
    ({"metadata": {"annotations": {"example.com/owner": "me"}}}, ANNOTATIONS_ADD),
    ({"metadata": {"annotations": {"migfit.io/anything": "x"}}}, ANNOTATIONS_ADD),
    ({"metadata": {"annotations": {"node.alpha.kubernetes.io/ttl": None}}},
     ANNOTATIONS_REMOVE),
    ({"spec": {"taints": [TAINT]}}, TAINTS_REMOVE),
    ({"spec": {"taints": [*node()["spec"]["taints"],
                          {"key": "example.com/drain", "effect": "NoExecute"}]}}, TAINTS_ADD),
    ({"spec": {"taints": [{"key": "nvidia.com/gpu", "value": "other", "effect": "NoSchedule"}]}},
     TAINTS_ADD),
    ({"spec": {"unschedulable": True}}, CORDON),
    # An owner that does not exist: the garbage collector deletes the node (an outside check:
    # the policy confined labels, annotations, taints and cordoning only).
    ({"metadata": {"ownerReferences": [OWNER]}}, OWNERS),
    ({"metadata": {"finalizers": ["example.com/keep"]}}, FINALIZERS),
    ({"spec": {"providerID": "aws:///x"}}, SPEC),
    ({"spec": {"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24"]}}, SPEC),
    ({"spec": {"podCIDRs": None}}, SPEC),
])
def test_anything_else_by_the_extender_is_denied(target: str, patch: dict[str, Any],
                                                 rule: int) -> None:
    policy = policy_of(target)
    old = node()
    ok, messages = admitted(policy, old, merge(old, patch))
    assert not ok
    assert policy["spec"]["validations"][rule]["message"] in messages, messages


@pytest.mark.parametrize("target", ["base", APPLY])
def test_the_messages_name_what_the_install_allows(target: str) -> None:
    messages = [v["message"] for v in policy_of(target)["spec"]["validations"]]
    if applies(target):
        assert keys.LABEL_CONFIG in messages[LABELS_ADD]
        assert keys.ANNOTATION_RELAYOUT_FAILED in messages[ANNOTATIONS_ADD]
        assert keys.TAINT_RELAYOUT in messages[TAINTS_ADD]
    else:
        assert keys.LABEL_CONFIG not in " ".join(messages)
        assert keys.ANNOTATION_RELAYOUT_FAILED not in " ".join(messages)
        assert "may add no taint" in messages[TAINTS_ADD]


@pytest.mark.parametrize("target", ["base", APPLY])
def test_writes_by_anyone_else_are_not_matched(target: str) -> None:
    old = node()
    new = merge(old, {"spec": {"unschedulable": True}, "metadata": {"labels": {"x": "y"}}})
    policy = policy_of(target)
    assert admitted(policy, old, new, user="system:serviceaccount:kube-system:node-controller"
                    ) == (True, [])
    assert admitted(policy, old, new, user="kubernetes-admin") == (True, [])


def test_the_policy_is_bound_to_deny_and_matches_only_node_updates() -> None:
    objects = render(APPLY)
    policy = find(objects, "ValidatingAdmissionPolicy", POLICY)
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["nodes"] and rule["operations"] == ["UPDATE"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    binding = find(objects, "ValidatingAdmissionPolicyBinding", POLICY)
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}
    # The ServiceAccount it names is the one the extender runs as.
    deployment = find(objects, "Deployment", "migfit-extender")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = deployment["metadata"]["namespace"]
    assert f"system:serviceaccount:{namespace}:{account}" == EXTENDER


@pytest.mark.parametrize("target", ALL)
def test_every_install_confines_the_extenders_node_writes(target: str) -> None:
    # The base grants `patch` on nodes (the advice's marks): every overlay carries the guard
    # and its binding, not only the apply mode's.
    objects = objects_of(target)
    find(objects, "ValidatingAdmissionPolicy", POLICY)
    binding = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == POLICY
    assert binding["spec"]["validationActions"] == ["Deny"]
