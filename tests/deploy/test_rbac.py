"""Least privilege, checked against the code: the roles bound to each ServiceAccount grant
exactly the Kubernetes API calls the server it runs can make (api_calls.py reads them from the
source), no more, no less.

migfit-webhook runs `migfit webhook`, migfit-extender runs `migfit extender`. The code of a
server is its command module (``migfit/commands/<server>.py``), every module of its package
(the commands a person runs with their own credentials live in the commands layer, not there),
the Kubernetes watch source, and everything those import. New code that calls the API is
picked up when it lands.

The extender's apply mode (``--apply-relayout``, off by default) is the code of
``APPLY_MODULES``; a call made only there is granted only where the extender runs with the
flag (deploy/components/apply-relayout), so the base grants none of them. Leader election
(``migfit/extender/leader.py``) is not among them: only the Lease's holder publishes the
advice, so every extender that publishes takes the Lease, and the base grants it.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import pytest
from api_calls import Call, Site, Unresolved, closure, rbac_call, server_calls
from deploy_manifests import NAMESPACE, REPO, TARGETS, Obj, needs_kubectl, render

from migfit import migparted
from migfit.extender import leader

pytestmark = needs_kubectl

SERVERS = {"migfit-webhook": "webhook", "migfit-extender": "extender"}
WATCH_SOURCE = "migfit.watching"
CUSTOM_CONFIGMAP = "migfit-mig-parted-config"  # docs/relayout.md, custom configs
APPLY_FLAG = "--apply-relayout"
APPLY_MODULES = ("migfit/extender/relayout.py",)
CUSTOM_FLAG = "--apply-custom-configs"
# The KubeClient methods the apply mode calls for --apply-custom-configs alone (each call in
# APPLY_MODULES is under ``assert self.settings.custom_configs is not None``, checked below).
CUSTOM_METHODS = ("list_cluster_policies", "patch_config_map")


def server_roots(package: str, *, root: Path = REPO) -> list[str]:
    modules = sorted((root / "migfit" / package).glob("*.py"))
    return [f"migfit.commands.{package}", WATCH_SOURCE,
            *(f"migfit.{package}.{p.stem}" for p in modules if p.stem != "__init__")]


@functools.cache
def _called(package: str) -> dict[Call, list[Site]]:
    return server_calls(server_roots(package), root=REPO)


def _apply_only(site: Site) -> bool:
    return any(site.path == REPO / m for m in APPLY_MODULES)


def server_args(objects: list[Obj], package: str) -> list[str]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"
                     and o["metadata"]["name"] == f"migfit-{package}"]
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def _custom_only(site: Site) -> bool:
    return _apply_only(site) and any(m in site.what for m in CUSTOM_METHODS)


def expected_calls(package: str, args: list[str]) -> dict[Call, list[Site]]:
    """What the server can call as deployed: without the apply flag, no call the apply
    mode's modules alone make; without --apply-custom-configs, none that only it makes."""
    called = _called(package)
    if APPLY_FLAG in args and CUSTOM_FLAG in args:
        return called
    only = _custom_only if APPLY_FLAG in args else _apply_only
    return {c: sites for c, sites in called.items() if not all(only(site) for site in sites)}


def granted(objects: list[Obj], account: str) -> dict[Call, list[str]]:
    """What the roles bound to ServiceAccount ``account`` allow, with the role of each grant."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in objects if o["kind"] in ("Role", "ClusterRole")}
    grants: dict[Call, list[str]] = {}
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account
                   and s.get("namespace") == NAMESPACE for s in binding.get("subjects", [])):
            continue
        ref = binding["roleRef"]
        ns = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles[(ref["kind"], ns, ref["name"])]
        where = f"{ref['kind']} {ns + '/' if ns else ''}{ref['name']}"
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants.setdefault(Call(group, resource, verb), []).append(where)
    return grants


def _diff(called: dict[Call, list[Site]], allowed: dict[Call, list[str]]) -> str:
    lines = []
    for call in sorted(set(called) - set(allowed)):
        lines.append(f"  called but not granted: {call}  (at {called[call][0]})")
    for call in sorted(set(allowed) - set(called)):
        lines.append(f"  granted but never called: {call}  (in {', '.join(allowed[call])})")
    return "\n".join(lines)


@pytest.mark.parametrize("account", SERVERS)
@pytest.mark.parametrize("target", TARGETS)
def test_roles_grant_exactly_the_calls_the_code_makes(target: str, account: str) -> None:
    package = SERVERS[account]
    entry = REPO / "migfit" / "commands" / f"{package}.py"
    assert entry.is_file(), f"`migfit {package}` has no {entry}"
    objects = render(target)
    args = server_args(objects, package)
    called = expected_calls(package, args)
    allowed = granted(objects, account)
    where = ("deploy/components/apply-custom-configs/rbac.yaml" if CUSTOM_FLAG in args
             else "deploy/components/apply-relayout/rbac.yaml" if APPLY_FLAG in args
             else "deploy/base/rbac.yaml")
    assert set(called) == set(allowed), (
        f"deploy/{target}: RBAC of ServiceAccount {account} differs from what `migfit "
        f"{package} {' '.join(args[1:])}` can call; fix {where}:\n{_diff(called, allowed)}")


def test_the_apply_mode_alone_needs_grants_the_base_leaves_out() -> None:
    """The split is real: the apply mode makes calls nothing else makes (a node read back),
    and every site the split relies on exists."""
    for module in APPLY_MODULES:
        assert (REPO / module).is_file(), module
    apply_only = set(_called("extender")) - set(expected_calls("extender", []))
    assert Call("", "nodes", "get") in apply_only
    base = granted(render("base"), "migfit-extender")
    assert not apply_only & set(base)
    assert apply_only <= set(granted(render("overlays/apply-custom-configs"),
                                     "migfit-extender"))


def test_the_base_grants_the_lease_the_advice_publisher_needs() -> None:
    """Only the replica holding the Lease publishes the advice, so an extender without the apply
    mode takes the Lease too: the base lets it read, create and renew its own Lease only."""
    calls = set(expected_calls("extender", []))
    lease = {Call("coordination.k8s.io", "leases", verb) for verb in ("get", "create", "patch")}
    assert lease <= calls
    assert lease <= set(granted(render("base"), "migfit-extender"))
    (role,) = [o for o in render("base") if o["kind"] == "Role"
               and o["metadata"]["name"] == "migfit-extender-leader"]
    assert role["metadata"]["namespace"] == NAMESPACE
    named = [r for r in role["rules"] if set(r["verbs"]) & {"get", "patch"}]
    assert [r["resourceNames"] for r in named] == [[leader.DEFAULT_LEASE]]


def test_the_custom_configs_calls_are_made_only_with_their_flag() -> None:
    """The split by method is real: every call of a CUSTOM_METHODS method in the apply mode's
    code comes after ``assert self.settings.custom_configs is not None`` in its function (the
    setting --apply-custom-configs gives), and those calls need grants apply-relayout alone
    does not give."""
    seen = 0
    for module in APPLY_MODULES:
        lines = (REPO / module).read_text().splitlines()
        for i, line in enumerate(lines):
            if not any(f".{m}(" in line for m in CUSTOM_METHODS):
                continue
            seen += 1
            start = max(j for j in range(i + 1) if lines[j].lstrip().startswith(
                ("def ", "async def ")))
            assert any("assert self.settings.custom_configs is not None" in lines[j]
                       for j in range(start, i)), f"{module}:{i + 1}: {line.strip()}"
    assert seen >= len(CUSTOM_METHODS)
    custom = set(expected_calls("extender", [APPLY_FLAG, CUSTOM_FLAG])) - set(
        expected_calls("extender", [APPLY_FLAG]))
    assert {Call("nvidia.com", "clusterpolicies", "list"), Call("", "configmaps", "patch")} \
        <= custom
    assert not custom & set(granted(render(str(_apply_relayout_alone())), "migfit-extender"))


@functools.cache
def _apply_relayout_alone() -> Path:
    """An overlay of the second scheduler with deploy/components/apply-relayout only (what
    README section 6 tells an operator to write), outside the checkout."""
    root = Path(tempfile.mkdtemp(prefix="migfit-apply-relayout-"))
    deploy = Path(os.path.relpath(REPO / "deploy", root))  # kustomize takes no absolute path
    (root / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {deploy / 'overlays' / 'second-scheduler'}\n"
        f"components:\n  - {deploy / 'components' / 'apply-relayout'}\n")
    return root


def test_roles_grant_exactly_the_calls_of_the_apply_mode_alone() -> None:
    """With --apply-relayout and not --apply-custom-configs, neither the ClusterPolicy read
    nor a writable ConfigMap is granted: the code makes those calls only with the second."""
    objects = render(str(_apply_relayout_alone()))
    args = server_args(objects, "extender")
    assert APPLY_FLAG in args and CUSTOM_FLAG not in args
    called = expected_calls("extender", args)
    allowed = granted(objects, "migfit-extender")
    assert set(called) == set(allowed), _diff(called, allowed)
    assert Call("", "configmaps", "patch") not in allowed


@pytest.mark.parametrize("target", TARGETS)
def test_rules_are_tight(target: str) -> None:
    for role in (o for o in render(target) if o["kind"] in ("Role", "ClusterRole")):
        if not role["metadata"]["name"].startswith("migfit"):
            continue
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], (role["metadata"]["name"], rule)
            if rule.get("resourceNames"):
                # create (and list without a name selector) cannot be limited by name.
                assert not {"create", "deletecollection"} & set(rule["verbs"]), rule


def test_the_mig_parted_configmap_is_readable_only_by_name() -> None:
    """The shared ConfigMap is read by name; the MIG Manager's per-node ones (their names
    follow the nodes) are listed, in the GPU Operator's namespace only, never written. The
    one ConfigMap written (--apply-custom-configs) is migfit's own, by name; the GPU
    Operator's is never writable."""
    objects = render("overlays/apply-custom-configs")
    rules = [(o["kind"], o["metadata"].get("namespace"), r) for o in objects
             if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]
             if "configmaps" in r["resources"]]
    assert rules, "no Role grants the mig-parted ConfigMap the extender reads"
    for kind, namespace, rule in rules:
        assert kind == "Role" and namespace == migparted.DEFAULT_NAMESPACE
        # The extender reads the ConfigMap --configmap names: here migfit's own, so the
        # GPU Operator's is not readable by name either.
        assert rule["verbs"] in (["list"], ["get", "patch"]), rule
        if "patch" in rule["verbs"]:
            assert rule["resourceNames"] == [CUSTOM_CONFIGMAP]
    base_rules = [r for o in render("base") if o["kind"] == "Role"
                  for r in o["rules"] if "configmaps" in r["resources"]]
    assert {"resources": ["configmaps"], "apiGroups": [""], "verbs": ["get"],
            "resourceNames": [migparted.DEFAULT_CONFIGMAP]} in base_rules
    # Without the apply mode no ConfigMap is writable at all.
    assert not [r for o in render("base") if o["kind"] in ("Role", "ClusterRole")
                for r in o["rules"] if "configmaps" in r["resources"] and "patch" in r["verbs"]]


def test_the_webhook_may_only_read() -> None:
    for call in granted(render("base"), "migfit-webhook"):
        assert call.verb in ("get", "list", "watch"), call


# The scanner itself, on code written for the purpose.

FAKE = {
    "migfit/__init__.py": "",
    "migfit/commands/__init__.py": "",
    "migfit/commands/extender.py":
        "from migfit.extender import relayout\nfrom ..extender import leader\n",
    "migfit/extender/__init__.py": "",
    "migfit/extender/relayout.py": '''
import kubernetes_asyncio.client as k8s
from kubernetes_asyncio import watch

async def act(api):
    core = k8s.CoreV1Api(api)
    events: k8s.EventsV1Api = k8s.EventsV1Api(api)
    await core.patch_node("n", {})
    await core.read_node_status("n")
    await events.create_namespaced_event("default", {})
    async for _ in watch.Watch().stream(core.list_namespaced_config_map, "gpu-operator"):
        pass
    await api.call_api(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/x", "PUT")
''',
    "migfit/extender/leader.py": '''
def helper():
    from kubernetes_asyncio.leaderelection.resourcelock import leaselock
    return leaselock.LeaseLock
''',
}


def test_scanner_finds_generated_methods_watches_raw_calls_and_leader_election(
    tmp_path: Path,
) -> None:
    for rel, text in FAKE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    calls = server_calls(server_roots("extender", root=tmp_path), root=tmp_path)
    assert set(calls) == {
        Call("", "nodes", "patch"), Call("", "nodes/status", "get"),
        Call("events.k8s.io", "events", "create"),
        Call("", "configmaps", "list"), Call("", "configmaps", "watch"),
        Call("coordination.k8s.io", "leases", "update"),
        # kubernetes-asyncio's LeaseLock, reached through the leader module's import
        Call("coordination.k8s.io", "leases", "get"),
        Call("coordination.k8s.io", "leases", "create"),
    }
    assert "kubernetes_asyncio.leaderelection.resourcelock.leaselock" in {
        m.name for m in closure(["migfit.extender.leader"], root=tmp_path)}


def test_an_ambiguous_method_must_name_its_api_class(tmp_path: Path) -> None:
    (tmp_path / "migfit/commands").mkdir(parents=True)
    (tmp_path / "migfit/commands/extender.py").write_text(
        "import kubernetes_asyncio.client as k8s\n"
        "x = (k8s.CoreV1Api, k8s.EventsV1Api)\n"
        "async def f(api):\n    await api.create_namespaced_event('ns', {})\n",
        encoding="utf-8")
    with pytest.raises(Unresolved, match="name the receiver's type"):
        server_calls(["migfit.commands.extender"], root=tmp_path)


@pytest.mark.parametrize(("path", "method", "watch", "expected"), [
    ("/api/v1/nodes", "GET", True, {("", "nodes", "list"), ("", "nodes", "watch")}),
    ("/api/v1/nodes/{name}", "PATCH", False, {("", "nodes", "patch")}),
    ("/api/v1/namespaces/{ns}/pods", "GET", False, {("", "pods", "list")}),
    ("/api/v1/namespaces/{ns}/pods/{name}/binding", "POST", False,
     {("", "pods/binding", "create")}),
    ("/api/v1/namespaces", "GET", False, {("", "namespaces", "list")}),
    ("/api/v1/namespaces/{name}", "GET", False, {("", "namespaces", "get")}),
    ("/apis/events.k8s.io/v1/namespaces/{ns}/events", "POST", False,
     {("events.k8s.io", "events", "create")}),
    ("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}", "PUT", False,
     {("coordination.k8s.io", "leases", "update")}),
])
def test_paths_map_to_rbac(path: str, method: str, watch: bool,
                           expected: set[tuple[str, str, str]]) -> None:
    assert rbac_call(path, method, watch=watch) == {Call(*e) for e in expected}


def test_the_apply_mode_component_writes_only_the_configmap_the_role_grants() -> None:
    """deploy/components/apply-custom-configs points --configmap at the one ConfigMap the
    extender may patch, never the GPU Operator's own."""
    objects = render("overlays/apply-custom-configs")
    (extender,) = [o for o in objects if o["kind"] == "Deployment"
                   and o["metadata"]["name"] == "migfit-extender"]
    args = extender["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--apply-relayout", "--apply-custom-configs"} <= set(args)
    (ref,) = [a.split("=", 1)[1] for a in args if a.startswith("--configmap=")]
    namespace, name = ref.split("/")
    assert (namespace, name) == (migparted.DEFAULT_NAMESPACE, CUSTOM_CONFIGMAP)
    assert name != migparted.DEFAULT_CONFIGMAP
    patchable = [r for o in objects if o["kind"] == "Role"
                 and o["metadata"].get("namespace") == namespace for r in o["rules"]
                 if "configmaps" in r["resources"] and "patch" in r["verbs"]]
    assert [r["resourceNames"] for r in patchable] == [[name]]
