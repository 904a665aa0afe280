"""The MutatingWebhookConfiguration (DESIGN §9, reference/WIRE.md §2.2) and the hardening of the
Deployments, as rendered by every target."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from deploy_manifests import NAMESPACE, TARGETS, Obj, find, needs_kubectl, of_kind, render

from migfit import cli

pytestmark = needs_kubectl

MIGFIT_DEPLOYMENTS = ("migfit-webhook", "migfit-extender")


def _webhook(target: str = "base") -> dict[str, Any]:
    config = find(render(target), "MutatingWebhookConfiguration", "migfit")
    assert len(config["webhooks"]) == 1
    hook: dict[str, Any] = config["webhooks"][0]
    return hook


@pytest.mark.parametrize("target", TARGETS)
def test_webhook_registration(target: str) -> None:
    hook = _webhook(target)
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert hook["timeoutSeconds"] == 5
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""],
                              "apiVersions": ["v1"], "resources": ["pods"],
                              "scope": "Namespaced"}]
    service = hook["clientConfig"]["service"]
    assert (service["namespace"], service["name"], service["path"]) == (
        NAMESPACE, "migfit-webhook", "/mutate")
    svc = find(render(target), "Service", "migfit-webhook")
    assert service["port"] in [p["port"] for p in svc["spec"]["ports"]]


def test_webhook_skips_system_namespaces() -> None:
    expressions = _webhook()["namespaceSelector"]["matchExpressions"]
    by_name = next(e for e in expressions if e["key"] == "kubernetes.io/metadata.name")
    assert by_name["operator"] == "NotIn"
    assert {"kube-system", "migfit-system"} <= set(by_name["values"])
    namespace = find(render("base"), "Namespace", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_webhook_match_condition_is_on_the_annotation() -> None:
    conditions = _webhook()["matchConditions"]
    assert len(conditions) == 1
    assert "migfit.io/gpu-memory" in conditions[0]["expression"]


def _pods(target: str) -> list[tuple[str, Obj]]:
    return [(d["metadata"]["name"], d["spec"]["template"]["spec"])
            for d in of_kind(render(target), "Deployment")]


@pytest.mark.parametrize("target", TARGETS)
def test_every_deployment_is_hardened(target: str) -> None:
    objects = render(target)
    for name, pod in _pods(target):
        deployment = find(objects, "Deployment", name)
        assert deployment["spec"]["replicas"] == 2, name
        pdbs = [p for p in of_kind(objects, "PodDisruptionBudget")
                if p["spec"]["selector"] == deployment["spec"]["selector"]]
        assert len(pdbs) == 1 and pdbs[0]["spec"]["minAvailable"] == 1, name
        # The replicas spread over nodes (the second scheduler's did not: an outside check).
        assert [(c["topologyKey"], c["labelSelector"]["matchLabels"])
                for c in pod["topologySpreadConstraints"]] == [
            ("kubernetes.io/hostname", deployment["spec"]["selector"]["matchLabels"])], name
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in pod["containers"]:
            ctx = container["securityContext"]
            assert ctx["readOnlyRootFilesystem"] is True, name
            assert ctx["allowPrivilegeEscalation"] is False, name
            assert ctx["capabilities"] == {"drop": ["ALL"]}, name
            requests = container["resources"]["requests"]
            assert requests.get("cpu") and requests.get("memory"), name
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz", name
            assert container["livenessProbe"]["httpGet"]["path"] in ("/healthz", "/livez"), name


@pytest.mark.parametrize("name", MIGFIT_DEPLOYMENTS)
def test_migfit_servers_probe_their_health_endpoints_over_https(name: str) -> None:
    container = find(render("base"), "Deployment", name)["spec"]["template"]["spec"][
        "containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["scheme"]) == (path, "HTTPS")
        assert get["port"] in ports
    service = find(render("base"), "Service", name)
    assert all(p["targetPort"] in ports for p in service["spec"]["ports"])
    assert service["spec"]["selector"] == find(render("base"), "Deployment", name)[
        "spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", MIGFIT_DEPLOYMENTS)
def test_container_args_are_accepted_by_the_migfit_command(target: str, name: str) -> None:
    """Each Deployment's args parse with the real CLI (a flag it lacks would crash-loop)."""
    container = find(render(target), "Deployment", name)["spec"]["template"]["spec"][
        "containers"][0]
    args = list(container["args"])
    command = args[0]
    parser = cli.build_parser(command)
    assert command in parser.format_help(), f"`migfit {command}` is missing from the CLI"
    try:
        parsed = parser.parse_args(args)
    except SystemExit as exc:
        pytest.fail(f"{target} {name}: `migfit {' '.join(args)}` is refused (exit {exc.code})")
    assert isinstance(parsed, argparse.Namespace)
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    for flag in ("--tls-cert", "--tls-key"):
        value = next(a.split("=", 1)[1] for a in args if a.startswith(flag + "="))
        assert any(value.startswith(m + "/") for m in mounts), (name, flag)
    assert f"--port={container['ports'][0]['containerPort']}" in args


CRITICAL = ("system-cluster-critical", "system-node-critical")


def _surge(deployment: Obj) -> int:
    """The extra pods a rolling update may create (maxSurge, default 25 %, rounded up)."""
    replicas = deployment["spec"]["replicas"]
    surge = (deployment["spec"].get("strategy") or {}).get("rollingUpdate", {}).get(
        "maxSurge", "25%")
    return -(-replicas * int(surge[:-1]) // 100) if isinstance(surge, str) else int(surge)


@pytest.mark.parametrize("target", TARGETS)
def test_critical_pods_have_a_quota_that_admits_them(target: str) -> None:
    """A pod of a critical priority class outside kube-system is refused where the API
    server limits those classes to namespaces with a matching ResourceQuota (GKE): without
    one, migfit's pods were never created. The quota admits every replica and a surge pod."""
    objects = render(target)
    critical = [d for d in of_kind(objects, "Deployment")
                if d["spec"]["template"]["spec"].get("priorityClassName") in CRITICAL]
    assert critical
    for deployment in critical:
        namespace = deployment["metadata"]["namespace"]
        priority = deployment["spec"]["template"]["spec"]["priorityClassName"]
        quotas = [q for q in of_kind(objects, "ResourceQuota")
                  if q["metadata"]["namespace"] == namespace
                  and {"scopeName": "PriorityClass", "operator": "In"}.items()
                  <= q["spec"]["scopeSelector"]["matchExpressions"][0].items()
                  and priority in q["spec"]["scopeSelector"]["matchExpressions"][0]["values"]]
        assert len(quotas) == 1, (target, deployment["metadata"]["name"])
        peers = [d for d in critical if d["metadata"]["namespace"] == namespace
                 and d["spec"]["template"]["spec"]["priorityClassName"] == priority]
        room = sum(d["spec"]["replicas"] + _surge(d) for d in peers)
        assert int(quotas[0]["spec"]["hard"]["pods"]) >= room, target
