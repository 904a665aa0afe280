"""deploy/components/network-policy lets each migfit pod be reached only on the port it serves
and connect only on the API servers' ports (and, for the extender, to the DCGM exporters):
judged by NetworkPolicy's own rules against what the rendered Deployments listen on and
call."""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy_manifests import DEPLOY, KUBECTL, Obj, needs_kubectl, of_kind, render

from migfit.extender import usage

pytestmark = needs_kubectl

COMPONENT = DEPLOY / "components" / "network-policy"
TARGET = "overlays/apply-custom-configs"  # the overlay that includes the component
PODS = ("migfit-webhook", "migfit-extender")


def _render_with_base(tmp_path: Path) -> list[Obj]:
    """deploy/base with only this component, as an operator's own overlay would add it."""
    rel = os.path.relpath(DEPLOY, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"{rel}/base"], "components": [f"{rel}/components/network-policy"]}))
    assert KUBECTL is not None
    done = subprocess.run([KUBECTL, "kustomize", str(tmp_path)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


# ---------------------------------------------------------------- NetworkPolicy's rules

Peer = dict[str, Any]  # {"ip": ...} outside the pod network, or a pod: ip, namespace, labels


def _labels_match(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, "matchExpressions: extend this evaluator"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer_matches(rule_peer: dict[str, Any], peer: Peer, policy_ns: str) -> bool:
    if "ipBlock" in rule_peer:
        block = rule_peer["ipBlock"]
        ip = ipaddress.ip_address(peer["ip"])
        return (ip in ipaddress.ip_network(block["cidr"])
                and not any(ip in ipaddress.ip_network(e) for e in block.get("except", [])))
    if "namespace" not in peer:  # an address outside the pod network: only ipBlocks match
        return False
    ns_sel, pod_sel = rule_peer.get("namespaceSelector"), rule_peer.get("podSelector")
    if ns_sel is None and peer["namespace"] != policy_ns:
        return False
    ns_labels = {"kubernetes.io/metadata.name": peer["namespace"]}
    return ((ns_sel is None or _labels_match(ns_sel, ns_labels))
            and (pod_sel is None or _labels_match(pod_sel, peer["labels"])))


def _types(spec: dict[str, Any]) -> list[str]:
    """policyTypes, or its default: Ingress, and Egress when the policy has egress rules."""
    return spec.get("policyTypes") or ["Ingress", *(["Egress"] if "egress" in spec else [])]


def _port_matches(entry: dict[str, Any], port: int, protocol: str) -> bool:
    """One NetworkPolicyPort: a protocol (TCP by default) and a port, a range up to
    ``endPort``, or every port when none is given (named ports are not used here)."""
    if entry.get("protocol", "TCP") != protocol:
        return False
    first = entry.get("port")
    if first is None:
        return True
    assert isinstance(first, int), "a named port: extend this evaluator"
    return first <= port <= entry.get("endPort", first)


def allowed(objects: list[Obj], pod: Obj, direction: str, port: int, protocol: str,
            peer: Peer) -> bool:
    """Whether NetworkPolicy lets ``pod`` (a Deployment's template) take (Ingress) or make
    (Egress) a connection on ``port``/``protocol`` from or to ``peer``."""
    ns, labels = pod["metadata"]["namespace"], pod["spec"]["template"]["metadata"]["labels"]
    selecting = [p for p in of_kind(objects, "NetworkPolicy")
                 if p["metadata"]["namespace"] == ns
                 and _labels_match(p["spec"]["podSelector"], labels)
                 and direction in _types(p["spec"])]
    if not selecting:
        return True
    side = "from" if direction == "Ingress" else "to"
    for policy in selecting:
        for rule in policy["spec"].get(direction.lower(), []):
            ports = rule.get("ports")
            if ports and not any(_port_matches(p, port, protocol) for p in ports):
                continue
            peers = rule.get(side)
            if not peers or any(_peer_matches(rp, peer, ns) for rp in peers):
                return True
    return False


def _deployment(objects: list[Obj], name: str) -> Obj:
    (found,) = [d for d in of_kind(objects, "Deployment") if d["metadata"]["name"] == name]
    return found


def _served_ports(deployment: Obj) -> set[int]:
    """The ports the pod's container listens on: its containerPorts and its --port flag."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["containerPort"] for p in container.get("ports", [])}
    ports |= {int(a.split("=", 1)[1]) for a in container["args"] if a.startswith("--port=")}
    return ports


API_SERVERS = ({"ip": "10.96.0.1"}, {"ip": "172.18.0.2"}, {"ip": "2001:db8::6443"})
SOMEWHERE = ({"ip": "10.0.0.7"}, {"ip": "192.168.1.20"}, {"ip": "fd00::1"},
             {"ip": "10.244.1.5", "namespace": "kube-system", "labels": {"k8s-app": "x"}})
EXPORTER = {"ip": "10.244.2.9", "namespace": usage.DEFAULT_NAMESPACE,
            "labels": dict([usage.DEFAULT_SELECTOR.split("=", 1)])}


def _check(objects: list[Obj]) -> None:
    for name in PODS:
        pod = _deployment(objects, name)
        served = _served_ports(pod)
        assert served == {8443}, served
        for peer in SOMEWHERE:
            for port in served:  # kube-apiserver / kube-scheduler / Prometheus reach it
                assert allowed(objects, pod, "Ingress", port, "TCP", peer), (name, port)
            assert not allowed(objects, pod, "Ingress", 8080, "TCP", peer), name
            assert not allowed(objects, pod, "Ingress", 8443, "UDP", peer), name
        for peer in API_SERVERS:
            for port in (443, 6443):
                assert allowed(objects, pod, "Egress", port, "TCP", peer), (name, port)
        # TCP 443 to any address until `to:` names the API servers (the kustomization's
        # comment says so): another HTTPS endpoint too
        assert allowed(objects, pod, "Egress", 443, "TCP", {"ip": "8.8.8.8"})
        # the cloud's metadata service, DNS, any other port: closed
        assert not allowed(objects, pod, "Egress", 80, "TCP", {"ip": "169.254.169.254"})
        assert not allowed(objects, pod, "Egress", 53, "UDP", {"ip": "10.96.0.10"})
        assert not allowed(objects, pod, "Egress", 8080, "TCP", SOMEWHERE[3])
    webhook, extender = (_deployment(objects, n) for n in PODS)
    # the extender's DCGM scrapes, by the scraper's own defaults, and nothing near them
    assert allowed(objects, extender, "Egress", usage.DEFAULT_PORT, "TCP", EXPORTER)
    assert not allowed(objects, webhook, "Egress", usage.DEFAULT_PORT, "TCP", EXPORTER)
    assert not allowed(objects, extender, "Egress", usage.DEFAULT_PORT, "TCP",
                       {**EXPORTER, "namespace": "default"})
    assert not allowed(objects, extender, "Egress", usage.DEFAULT_PORT, "TCP",
                       {**EXPORTER, "labels": {"app": "something-else"}})
    assert not allowed(objects, extender, "Egress", usage.DEFAULT_PORT, "TCP",
                       {"ip": "10.0.0.7"})
    # only migfit's two pods are selected: a second scheduler beside them is left alone
    for deployment in of_kind(objects, "Deployment"):
        if deployment["metadata"]["name"] not in PODS:
            assert allowed(objects, deployment, "Egress", 8080, "TCP", SOMEWHERE[0])


def test_the_overlay_that_includes_it_opens_only_what_migfit_uses() -> None:
    objects = render(TARGET)
    assert len(of_kind(objects, "NetworkPolicy")) == 2
    assert "migfit-scheduler" in {d["metadata"]["name"] for d in of_kind(objects, "Deployment")}
    _check(objects)


def test_the_component_on_the_base_alone(tmp_path: Path) -> None:
    objects = _render_with_base(tmp_path)
    _check(objects)
    for policy in of_kind(objects, "NetworkPolicy"):
        assert policy["metadata"]["labels"]["app.kubernetes.io/part-of"] == "migfit"
        kubernetes_validate.validate(policy, kubernetes_validate.latest_version(), strict=True)


def test_without_the_component_everything_is_open() -> None:
    """The evaluator has teeth: without policies it allows what the component denies."""
    objects = render("overlays/second-scheduler")
    assert not of_kind(objects, "NetworkPolicy")
    extender = _deployment(objects, "migfit-extender")
    assert allowed(objects, extender, "Egress", 80, "TCP", {"ip": "169.254.169.254"})
    with pytest.raises(AssertionError):
        _check(objects)
