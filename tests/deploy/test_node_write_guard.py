"""deploy/components/node-write-guard, evaluated as CEL: the extender's own node writes (the
advice's marks, the apply mode's taint, label, record and failure mark, built from the keys
the code writes) pass; any other change by the extender's ServiceAccount is denied; writes by
anyone else are not matched."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from deploy_manifests import find, needs_kubectl, render

from migfit import keys

celpy = pytest.importorskip(
    "celpy", reason="cel-python (import celpy) is not installed: the policy's expressions are "
    "not evaluated; install it with `pip install cel-python`")

pytestmark = needs_kubectl

EXTENDER = "system:serviceaccount:migfit-system:migfit-extender"
TARGET = "overlays/apply-custom-configs"


def node() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-0", "resourceVersion": "7",
                         "labels": {"kubernetes.io/hostname": "gpu-0",
                                    keys.LABEL_CONFIG: "all-balanced",
                                    keys.LABEL_CONFIG_STATE: "success"},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present",
                                 "effect": "NoSchedule"}]}}


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


def admitted(old: dict[str, Any], new: dict[str, Any], user: str = EXTENDER
             ) -> tuple[bool, list[str]]:
    """Whether the policy lets the update through, and the messages of what it denies."""
    policy = find(render(TARGET), "ValidatingAdmissionPolicy", "migfit-extender-node-writes")
    env = celpy.Environment()
    request = {"userInfo": {"username": user}, "operation": "UPDATE"}
    base = {"object": new, "oldObject": old, "request": request}
    for condition in policy["spec"]["matchConditions"]:
        program = env.program(env.compile(condition["expression"]))
        if not bool(program.evaluate(celpy.json_to_cel(base))):
            return True, []  # not matched: the policy does not apply
    variables: dict[str, Any] = {}
    for var in policy["spec"]["variables"]:
        program = env.program(env.compile(var["expression"]))
        variables[var["name"]] = program.evaluate(
            celpy.json_to_cel({**base, "variables": variables}))
    activation = {**celpy.json_to_cel(base), "variables": celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()})}
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

# What the extender writes, as merge patches (migfit/extender/advice.py _mark,
# migfit/extender/relayout_machine.py: claim, label, release, fail).
OWN_WRITES = {
    "advice marks": {"metadata": {"annotations": {keys.ANNOTATION_RELAYOUT: RECORD},
                                  "labels": {keys.LABEL_RELAYOUT_RECOMMENDED: "true"}}},
    "claim: record and taint": {"metadata": {"resourceVersion": "7", "annotations": {
        keys.ANNOTATION_RELAYOUT: RECORD}}, "spec": {"taints": [*node()["spec"]["taints"],
                                                               TAINT]}},
    "label the target": {"metadata": {"resourceVersion": "7",
                                      "labels": {keys.LABEL_CONFIG: "migfit-1g.10gb-x7"},
                                      "annotations": {keys.ANNOTATION_RELAYOUT: RECORD}}},
    "failure mark": {"metadata": {"annotations": {
        keys.ANNOTATION_RELAYOUT_FAILED: '{"result": "failed", "reason": "x"}'}}},
}


@pytest.mark.parametrize("name", OWN_WRITES)
def test_the_extenders_own_writes_pass(name: str) -> None:
    old = node()
    new = merge(old, OWN_WRITES[name])
    assert admitted(old, new) == (True, [])


def test_the_release_removes_the_taint_record_and_marks() -> None:
    marked = merge(merge(node(), OWN_WRITES["claim: record and taint"]),
                   OWN_WRITES["advice marks"])
    release = {"metadata": {"annotations": {keys.ANNOTATION_RELAYOUT: None},
                            "labels": {keys.LABEL_RELAYOUT_RECOMMENDED: None}},
               "spec": {"taints": node()["spec"]["taints"]}}
    assert admitted(marked, merge(marked, release)) == (True, [])
    # Without any taint left at all (a node that had only migfit's).
    bare = merge(node(), {"spec": {"taints": [TAINT]}})
    assert admitted(bare, merge(bare, {"spec": {"taints": None}})) == (True, [])


@pytest.mark.parametrize(("patch", "needle"), [
    ({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}, "add or change"),
    ({"metadata": {"labels": {"kubernetes.io/hostname": "other"}}}, "add or change"),
    ({"metadata": {"labels": {keys.LABEL_CONFIG_STATE: None}}}, "remove only the node labels"),
    ({"metadata": {"annotations": {"example.com/owner": "me"}}}, "migfit.io/ annotations"),
    ({"metadata": {"annotations": {"node.alpha.kubernetes.io/ttl": None}}},
     "remove only migfit.io/ annotations"),
    ({"spec": {"taints": [TAINT]}}, "remove only the taint"),
    ({"spec": {"taints": [*node()["spec"]["taints"],
                          {"key": "example.com/drain", "effect": "NoExecute"}]}},
     "add only the taint"),
    ({"spec": {"taints": [{"key": "nvidia.com/gpu", "value": "other", "effect": "NoSchedule"}]}},
     "add only the taint"),
    ({"spec": {"unschedulable": True}}, "never cordons"),
])
def test_anything_else_by_the_extender_is_denied(patch: dict[str, Any], needle: str) -> None:
    old = node()
    ok, messages = admitted(old, merge(old, patch))
    assert not ok
    assert any(needle in m for m in messages), messages


def test_writes_by_anyone_else_are_not_matched() -> None:
    old = node()
    new = merge(old, {"spec": {"unschedulable": True}, "metadata": {"labels": {"x": "y"}}})
    assert admitted(old, new, user="system:serviceaccount:kube-system:node-controller") == (
        True, [])
    assert admitted(old, new, user="kubernetes-admin") == (True, [])


def test_the_policy_is_bound_to_deny_and_matches_only_node_updates() -> None:
    objects = render(TARGET)
    policy = find(objects, "ValidatingAdmissionPolicy", "migfit-extender-node-writes")
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["nodes"] and rule["operations"] == ["UPDATE"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    binding = find(objects, "ValidatingAdmissionPolicyBinding", "migfit-extender-node-writes")
    assert binding["spec"] == {"policyName": "migfit-extender-node-writes",
                               "validationActions": ["Deny"]}
    # The ServiceAccount it names is the one the extender runs as.
    deployment = find(objects, "Deployment", "migfit-extender")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = deployment["metadata"]["namespace"]
    assert f"system:serviceaccount:{namespace}:{account}" == EXTENDER


@pytest.mark.parametrize("overlay", ["base", "overlays/second-scheduler",
                                     "overlays/default-scheduler", "overlays/cert-manager",
                                     "overlays/prometheus-operator",
                                     "overlays/apply-custom-configs"])
def test_every_install_confines_the_extenders_node_writes(overlay: str) -> None:
    # The base grants `patch` on nodes (the advice's marks): every overlay carries the guard
    # and its binding, not only the apply mode's.
    objects = render(overlay)
    find(objects, "ValidatingAdmissionPolicy", "migfit-extender-node-writes")
    binding = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == "migfit-extender-node-writes"
    assert binding["spec"]["validationActions"] == ["Deny"]
