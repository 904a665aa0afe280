"""The KubeSchedulerConfiguration that deploy/ ships: strict kubescheduler.config.k8s.io/v1,
kube-scheduler's extender validation (reference/WIRE.md §1.2), and the extender settings of
DESIGN §9 (filter + prioritize, nodeCacheCapable, every MIG resource, httpTimeout, TLS)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from deploy_manifests import DEPLOY, find, needs_kubectl, render

from migfit import errors, profiles, schedulerconfig

SNIPPET = DEPLOY / "overlays/default-scheduler/extender-snippet.yaml"


def _rendered_configuration() -> dict[str, Any]:
    objects = render("overlays/second-scheduler")
    maps = [o for o in objects if o["kind"] == "ConfigMap"
            and o["metadata"]["name"].startswith("migfit-scheduler-config")]
    assert len(maps) == 1
    doc: dict[str, Any] = yaml.safe_load(maps[0]["data"]["config.yaml"])
    return doc


def _snippet() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(SNIPPET.read_text(encoding="utf-8"))
    return doc


def _check_extender(extender: schedulerconfig.Extender) -> None:
    assert extender.filterVerb == "filter"
    assert extender.prioritizeVerb == "prioritize"
    assert extender.weight is not None and extender.weight > 0
    assert extender.bindVerb is None and extender.preemptVerb is None
    assert extender.nodeCacheCapable is True
    assert extender.ignorable is False
    assert extender.httpTimeout
    assert extender.enableHTTPS is True
    assert extender.urlPrefix.startswith("https://")
    tls = extender.tlsConfig
    assert tls is not None and tls.caFile and tls.insecure is False
    assert tls.serverName == "migfit-extender.migfit-system.svc"
    names = [r.name for r in extender.managedResources or ()]
    # every MIG resource, and the single strategy's nvidia.com/gpu: without it kube-scheduler
    # never sent the extender a single-strategy MIG pod; each also renamed as the device
    # plugin renames a shared resource (renameByDefault)
    plain = profiles.builtin().resource_names()
    assert names == [*sorted([*plain, *(n + ".shared" for n in plain)]), "nvidia.com/gpu",
                     "nvidia.com/gpu.shared"]
    assert all(n.startswith("nvidia.com/mig-") for n in names[:-2])
    assert not any(r.ignoredByScheduler for r in extender.managedResources or ())


@needs_kubectl
def test_second_scheduler_configuration_is_strict_and_valid() -> None:
    doc = _rendered_configuration()
    config = schedulerconfig.parse_configuration(doc)
    assert "extenders" in doc and all("extenders" not in p for p in doc["profiles"])
    assert [p.schedulerName for p in config.profiles or ()] == ["migfit-scheduler"]
    assert config.extenders is not None and len(config.extenders) == 1
    _check_extender(config.extenders[0])
    assert config.extenders[0].urlPrefix == "https://migfit-extender.migfit-system.svc:443"
    assert config.leaderElection is not None
    assert config.leaderElection.resourceName == "migfit-scheduler"


@needs_kubectl
def test_second_scheduler_mounts_the_configuration_and_the_ca_it_names() -> None:
    objects = render("overlays/second-scheduler")
    config = schedulerconfig.parse_configuration(_rendered_configuration())
    assert config.extenders is not None
    ca_file = config.extenders[0].tlsConfig.caFile  # type: ignore[union-attr]
    pod = find(objects, "Deployment", "migfit-scheduler")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "--config=/etc/kubernetes/scheduler/config.yaml" in container["command"]
    config_map = volumes[mounts["/etc/kubernetes/scheduler"]]["configMap"]["name"]
    assert config_map.startswith("migfit-scheduler-config")
    assert ca_file is not None
    ca_dir, ca_name = ca_file.rsplit("/", 1)
    ca_volume = volumes[mounts[ca_dir]]
    assert [i["path"] for i in ca_volume["configMap"]["items"]] == [ca_name]
    cm_pod = find(render("overlays/cert-manager"), "Deployment",
                  "migfit-scheduler")["spec"]["template"]["spec"]
    cm_volume = next(v for v in cm_pod["volumes"] if v["name"] == ca_volume["name"])
    assert cm_volume["secret"]["secretName"] == "migfit-extender-tls"


def test_default_scheduler_snippet_is_strict_and_valid() -> None:
    snippet = schedulerconfig.parse_snippet(_snippet())
    assert len(snippet.extenders) == 1
    _check_extender(snippet.extenders[0])


def _valid() -> dict[str, Any]:
    return copy.deepcopy(_snippet()["extenders"][0])


def _problems(*extenders: dict[str, Any]) -> list[str]:
    models = [schedulerconfig.Extender.model_validate(e) for e in extenders]
    return schedulerconfig.validate_extenders(models)


def test_valid_extenders_have_no_problems() -> None:
    assert _problems(_valid()) == []


def test_prioritize_needs_a_positive_weight() -> None:
    for weight in (0, -1, None):
        entry = _valid()
        entry["weight"] = weight
        assert any("must have a positive weight" in p for p in _problems(entry)), weight
    entry = _valid()
    del entry["prioritizeVerb"]
    entry["weight"] = 0
    assert _problems(entry) == []


def test_only_one_extender_may_bind() -> None:
    first, second = _valid(), _valid()
    first["bindVerb"] = second["bindVerb"] = "bind"
    second["managedResources"] = []
    assert any("only one extender can implement bind" in p for p in _problems(first, second))
    second.pop("bindVerb")
    assert _problems(first, second) == []


def test_managed_resources_are_unique_across_extenders() -> None:
    first, second = _valid(), _valid()
    second["managedResources"] = [first["managedResources"][0]]
    assert any("duplicate extender managed resource name" in p
               for p in _problems(first, second))
    first["managedResources"].append(first["managedResources"][0])
    assert any("duplicate" in p for p in _problems(first))


@pytest.mark.parametrize("name", [
    "cpu",                              # native: no prefix
    "kubernetes.io/mig-1g.10gb",        # native namespace
    "requests.nvidia.com/mig-1g.10gb",  # the quota prefix
    "nvidia.com/mig-1g.10gb+me",        # '+' is not allowed (why the device plugin says .me)
    "Nvidia.com/mig-1g.10gb",           # prefix must be a lowercase DNS subdomain
    "nvidia.com/",                      # empty name part
    "nvidia.com/mig-1g.10gb-",          # must end alphanumeric
    "a/b/c",                            # two slashes
    "nvidia.com/" + "m" * 64,           # name part over 63
])
def test_managed_resource_names_must_be_extended_resource_names(name: str) -> None:
    entry = _valid()
    entry["managedResources"] = [{"name": name}]
    assert _problems(entry), name


@pytest.mark.parametrize("name", ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb.me",
                                  "example.com/foo_bar", "nvidia.com/gpu",
                                  "nvidia.com/mig-1g.10gb.me.shared", "nvidia.com/gpu.shared"])
def test_extended_resource_names_that_kube_scheduler_accepts(name: str) -> None:
    entry = _valid()
    entry["managedResources"] = [{"name": name}]
    assert _problems(entry) == []


def test_unknown_fields_are_rejected_everywhere() -> None:
    with pytest.raises(errors.ConfigError, match="Extra inputs"):
        schedulerconfig.parse_snippet({"extenders": [{**_valid(), "managedResource": []}]})
    entry = _valid()
    entry["tlsConfig"]["caFiles"] = "x"
    with pytest.raises(errors.ConfigError, match="tlsConfig"):
        schedulerconfig.parse_snippet({"extenders": [entry]})
    doc = {"apiVersion": schedulerconfig.API_VERSION, "kind": schedulerconfig.KIND,
           "profiles": [{"schedulerName": "s", "extenders": [_valid()]}]}
    with pytest.raises(errors.ConfigError, match=r"profiles\.0\.extenders"):
        schedulerconfig.parse_configuration(doc)


def test_wire_types_are_checked() -> None:
    entry = _valid()
    entry["httpTimeout"] = "2 seconds"
    with pytest.raises(errors.ConfigError, match="httpTimeout"):
        schedulerconfig.parse_snippet({"extenders": [entry]})
    entry = _valid()
    entry["weight"] = "5"
    with pytest.raises(errors.ConfigError, match="weight"):
        schedulerconfig.parse_snippet({"extenders": [entry]})
    with pytest.raises(errors.ConfigError, match="apiVersion"):
        schedulerconfig.parse_configuration({"apiVersion": "kubescheduler.config.k8s.io/v1beta3",
                                             "kind": "KubeSchedulerConfiguration"})


def test_validation_failures_are_config_errors_naming_the_field() -> None:
    entry = _valid()
    entry["weight"] = 0
    with pytest.raises(errors.ConfigError, match=r"extenders\[0\]\.weight"):
        schedulerconfig.parse_snippet({"extenders": [entry]})


@needs_kubectl
def test_webhook_hands_pods_to_the_second_scheduler_it_installs() -> None:
    for target in ("overlays/second-scheduler", "overlays/cert-manager"):
        args = find(render(target), "Deployment", "migfit-webhook")["spec"]["template"][
            "spec"]["containers"][0]["args"]
        assert "--scheduler-name=migfit-scheduler" in args, target
    base_args = find(render("base"), "Deployment", "migfit-webhook")["spec"]["template"][
        "spec"]["containers"][0]["args"]
    assert not any(a.startswith("--scheduler-name") for a in base_args)
    config = schedulerconfig.parse_configuration(_rendered_configuration())
    assert [p.schedulerName for p in config.profiles or ()] == ["migfit-scheduler"]
