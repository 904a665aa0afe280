"""--apply-custom-configs against kmock's emulator: the apply mode writes a custom config into
the mig-parted ConfigMap as soon as it is advised, and starts the node's re-layout on a later
pass, once the config has had time to reach the MIG Manager's file (the node is not tainted
meanwhile). A run adopted with its config missing writes it itself (the run's CONFIG phase).

The simulated MIG Manager reads the config from the ConfigMap as its volume shows it, late by
``mount_lag_s``, and fails a config that is not in it, as mig-parted does.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import kmock
import prometheus_client
import pytest
from advisor_scene import node, pod
from kubernetes_asyncio import client as k8s
from migmanager_sim import (
    CONFIGMAPS,
    MigManager,
    VersionedEmulator,
    events,
    read_node,
    snapshot,
    store,
    taints,
)

from migfit import keys, migparted
from migfit.extender import advice, relayout, relayout_machine

NS, NAME = "gpu-operator", "migfit-mig-parted-config"
TEXT = """version: v1
mig-configs:
  all-3g.40gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 1}
  my-own:   # an operator's config: migfit never removes it
    - devices: all
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
"""
NOW = 2_000_000_000.0


def _settings(**changes: Any) -> relayout.Settings:
    base = relayout.Settings(max_concurrent=1, timeout_s=3.0, wedge_s=2.0, poll_s=0.02,
                             interval_s=0.02, custom_configs=(NS, NAME), config_sync_s=0.6)
    return relayout.Settings(**{**{f: getattr(base, f) for f in base.__dataclass_fields__},
                                **changes})


@pytest.fixture()
def server(kmock: kmock.KubernetesEmulator) -> kmock.KubernetesEmulator:
    for res in ("v1/pods", "v1/nodes", "v1/events", "v1/configmaps"):
        kmock.resources[res] = {}  # type: ignore[assignment]
    return kmock


def _seed(server: kmock.KubernetesEmulator, *, text: str | None = TEXT,
          added: dict[str, float] | None = None, extra: tuple[dict[str, Any], ...] = ()) -> None:
    """A two-GPU node laid out 3g.40gb on each GPU, a pending 1g.10gb pod, the ConfigMap."""
    store(server, node("idle", gpus=2, alloc={"3g.40gb": 2}, config="all-3g.40gb"))
    store(server, pod("small", "1g.10gb", namespace="ml"))
    for obj in extra:
        store(server, obj)
    if text is not None:
        notes = {} if added is None else {keys.ANNOTATION_CONFIGS: keys.encode_configs(added)}
        server.objects[CONFIGMAPS, NS, NAME] = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": NS, "annotations": notes,
                         "resourceVersion": "7"},
            "data": {"config.yaml": text}}


async def _apply(api: k8s.ApiClient, settings: relayout.Settings, *,
                 mount_lag_s: float = 0.1, staged_first: bool = True,
                 ) -> tuple[relayout.Outcome, MigManager]:
    """Passes until the node's re-layout starts: the first only writes the config (unless
    it is there already, ``staged_first`` False); the node stays untainted until then."""
    mm = MigManager(api, "idle", configmap=(NS, NAME), mount_lag_s=mount_lag_s, gpus=2,
                    delay_s=0.02)
    mm.start()
    try:
        r = await _relayouter(api, settings)
        (rec,) = r.cache.get(r.state).recommendations
        assert rec.config is None and rec.mig_parted is not None  # a custom config
        if staged_first:
            assert await r.step() == []
            assert taints(await read_node(api, "idle")) == []
            await asyncio.sleep(settings.config_sync_s + 0.05)
        assert await r.step() == ["idle"]
        (outcome,) = await r.wait()
        return outcome, mm
    finally:
        await mm.stop()


async def _relayouter(api: k8s.ApiClient, settings: relayout.Settings,
                      registry: prometheus_client.CollectorRegistry | None = None,
                      ) -> relayout.Relayouter:
    cache = advice.AdviceCache(config=migparted.parse(TEXT), clock=lambda: NOW)
    state = await snapshot(api)
    metrics = None if registry is None else advice.Metrics(registry, state=state, cache=cache)
    return relayout.Relayouter(state, api, elector=None, cache=cache, settings=settings,
                               metrics=metrics)


def _configmap(server: kmock.KubernetesEmulator) -> dict[str, Any]:
    obj: Any = server.objects[CONFIGMAPS, NS, NAME]
    return dict(obj)


async def test_a_custom_config_is_written_then_applied_to_the_idle_gpu_only(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    _seed(server)
    outcome, mm = await _apply(api, _settings())
    assert outcome.result == "success", (outcome.reason, mm.failures)
    obj = await read_node(api, "idle")
    target = obj["metadata"]["labels"][keys.LABEL_CONFIG]
    assert target.startswith("migfit-") and mm.applied == [target]
    assert taints(obj) == []
    # GPU 0 re-laid out for the 1g.10gb pod, GPU 1 kept its 3g.40gb.
    alloc = obj["status"]["allocatable"]
    assert alloc["nvidia.com/mig-1g.10gb"] == "2" and alloc["nvidia.com/mig-3g.40gb"] == "2"
    cm = _configmap(server)
    written = migparted.parse(cm["data"]["config.yaml"])
    assert set(written.configs) == {"all-3g.40gb", "my-own", target}
    assert [e.devices for e in written.configs[target]] == [(0,), (1,)]
    assert written.configs["my-own"] == migparted.parse(TEXT).configs["my-own"]
    assert set(keys.decode_configs(cm["metadata"]["annotations"][keys.ANNOTATION_CONFIGS])) \
        == {target}
    assert relayout_machine.REASON_CONFIG in [e["reason"] for e in await events(api)]


async def test_a_label_set_before_the_mount_has_the_config_fails_and_says_why(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    # The wait is shorter than the volume's lag: the MIG Manager does not find the config.
    _seed(server)
    outcome, mm = await _apply(api, _settings(config_sync_s=0.0), mount_lag_s=0.5)
    assert outcome.result == "failed"
    assert mm.failures and "--config-sync" in outcome.reason
    assert taints(await read_node(api, "idle")) == [keys.TAINT_RELAYOUT]


async def test_without_the_flag_custom_configs_are_left_to_the_operator(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    _seed(server)
    cache = advice.AdviceCache(config=migparted.parse(TEXT), clock=lambda: NOW)
    r = relayout.Relayouter(await snapshot(api), api, elector=None, cache=cache,
                            settings=_settings(custom_configs=None))
    assert await r.step() == []
    assert _configmap(server)["data"]["config.yaml"] == TEXT


async def _target(server: kmock.KubernetesEmulator, api: k8s.ApiClient) -> str:
    """The name of the custom config the advice renders for the scene."""
    _seed(server)
    cache = advice.AdviceCache(config=migparted.parse(TEXT), clock=lambda: NOW)
    (rec,) = cache.get(await snapshot(api)).recommendations
    return rec.target


@pytest.mark.parametrize("text, expected", [
    (None, "create it as a copy of the GPU Operator's default-mig-parted-config"),
    ("NOKEY", "has no data.config.yaml, the file the MIG Manager reads"),
    ("version: v1\nmig-configs: [\n", "migfit writes nothing into a config it cannot read"),
    ("version: v2\n", "migfit writes nothing into a config it cannot read"),
    # Someone else's config under the very name migfit would write.
    (TEXT + "  TARGET:\n    - devices: all\n      mig-enabled: false\n",
     "with other entries"),
])
async def test_a_configmap_it_cannot_use_is_never_written_and_an_adopted_run_aborts(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient, text: str | None, expected: str,
) -> None:
    target = await _target(server, api)
    if text is not None:
        text = text.replace("TARGET", target)

    def configmap() -> None:
        if text is None:
            server.objects[CONFIGMAPS, NS, NAME].delete()
        _seed(server, text=None if text == "NOKEY" else text)
        if text == "NOKEY":  # the configs under another key: the MIG Manager has no file
            server.objects[CONFIGMAPS, NS, NAME] = {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": NAME, "namespace": NS}, "data": {"other.yaml": TEXT}}

    configmap()
    before = None if text in (None, "NOKEY") else _configmap(server)["data"]["config.yaml"]
    # A pass writes nothing and starts nothing, however many passes.
    r = await _relayouter(api, _settings(config_sync_s=0.0))
    for _ in range(3):
        assert await r.step() == []
    assert taints(await read_node(api, "idle")) == []
    if before is not None:
        assert _configmap(server)["data"]["config.yaml"] == before
    # A run adopted in "tainted" (started by a replica before the ConfigMap changed) aborts
    # in its CONFIG phase: taint and record removed, the label never set.
    cache = advice.AdviceCache(config=migparted.parse(TEXT), clock=lambda: NOW)
    (rec,) = cache.get(await snapshot(api)).recommendations
    record = relayout_machine.planned(rec).but(state=keys.RelayoutState.TAINTED)
    store(server, node("idle", gpus=2, alloc={"3g.40gb": 2}, config="all-3g.40gb",
                       taints=[keys.relayout_taint()],
                       annotations={keys.ANNOTATION_RELAYOUT: keys.encode_relayout(record)}))
    mm = MigManager(api, "idle", configmap=(NS, NAME), gpus=2, delay_s=0.02) \
        if text is not None else None
    if mm is not None:
        mm.start()
    try:
        r = await _relayouter(api, _settings())
        assert await r.step() == ["idle"]
        (outcome,) = await r.wait()
    finally:
        if mm is not None:
            await mm.stop()
    assert outcome.result == "aborted" and expected in outcome.reason, outcome.reason
    obj = await read_node(api, "idle")
    assert taints(obj) == [] and keys.ANNOTATION_RELAYOUT not in obj["metadata"].get(
        "annotations", {})
    assert obj["metadata"]["labels"][keys.LABEL_CONFIG] == "all-3g.40gb"
    assert mm is None or mm.applied == []
    if before is not None:
        assert _configmap(server)["data"]["config.yaml"] == before


async def test_configs_no_node_uses_are_removed_once_old_and_the_rest_kept(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    text = TEXT + "".join(
        f"  {name}:\n    - devices: all\n      mig-enabled: true\n"
        f"      mig-devices: {{\"2g.20gb\": 3}}\n"
        for name in ("migfit-unused-old", "migfit-unused-new", "migfit-in-use"))
    day = 86_400.0
    wall = time.time()
    _seed(server, text=text, added={"migfit-unused-old": wall - day,
                                    "migfit-unused-new": wall - 60,
                                    "migfit-in-use": wall - day,
                                    "migfit-gone": wall - day},
          extra=(node("other", alloc={"2g.20gb": 3}, config="migfit-in-use"),))
    outcome, _ = await _apply(api, _settings())
    assert outcome.result == "success", outcome.reason
    cm = _configmap(server)
    names = set(migparted.parse(cm["data"]["config.yaml"]).configs)
    target = (await read_node(api, "idle"))["metadata"]["labels"][keys.LABEL_CONFIG]
    assert names == {"all-3g.40gb", "my-own", "migfit-unused-new", "migfit-in-use", target}
    assert set(keys.decode_configs(cm["metadata"]["annotations"][keys.ANNOTATION_CONFIGS])) \
        == {"migfit-unused-new", "migfit-in-use", target}


@pytest.mark.kmock(cls=VersionedEmulator)
async def test_a_write_between_read_and_patch_is_read_again_and_kept(
    server: VersionedEmulator, api: k8s.ApiClient,
) -> None:
    for res in ("v1/pods", "v1/nodes", "v1/events", "v1/configmaps"):
        server.resources[res] = {}  # type: ignore[assignment]
    _seed(server)
    theirs = TEXT + ("  theirs:\n    - devices: all\n      mig-enabled: true\n"
                     "      mig-devices: {\"1g.10gb\": 7}\n")
    server.race(CONFIGMAPS, NS, NAME, {"data": {"config.yaml": theirs}})
    r = await _relayouter(api, _settings(config_sync_s=0.0))
    assert await r.step() == []  # 409: nothing written, the next pass reads again
    assert set(migparted.parse(_configmap(server)["data"]["config.yaml"]).configs) == {
        "theirs", "my-own", "all-3g.40gb"}
    assert await r.step() == []  # written now, next to theirs
    names = set(migparted.parse(_configmap(server)["data"]["config.yaml"]).configs)
    assert {"theirs", "my-own", "all-3g.40gb"} <= names and len(names) == 4
    assert await r.step() == ["idle"]  # and applied
    for t in list(r._tasks.values()):
        t.cancel()
    await asyncio.gather(*r._tasks.values(), return_exceptions=True)


async def test_a_config_written_long_ago_starts_at_once_without_a_write(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    # Written by an earlier pass (a replica that lost the Lease) long ago: the first pass
    # starts the re-layout, with no wait, and the ConfigMap is not touched again.
    _seed(server)
    cache = advice.AdviceCache(config=migparted.parse(TEXT), clock=lambda: NOW)
    (rec,) = cache.get(await snapshot(api)).recommendations
    assert rec.mig_parted is not None
    text = migparted.with_config(TEXT, rec.mig_parted)
    _seed(server, text=text, added={rec.target: time.time() - 3600})
    before = _configmap(server)
    cm_before = (before["data"]["config.yaml"], dict(before["metadata"]["annotations"]))
    outcome, _ = await _apply(api, _settings(config_sync_s=30.0), staged_first=False)
    assert outcome.result == "success", outcome.reason
    after = _configmap(server)
    assert (after["data"]["config.yaml"], dict(after["metadata"]["annotations"])) == cm_before


async def test_the_metrics_count_configs_added_and_waiting(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    _seed(server)
    registry = prometheus_client.CollectorRegistry()
    r = await _relayouter(api, _settings(), registry)

    def value(name: str) -> float | None:
        return registry.get_sample_value(name)

    assert await r.step() == []
    assert value("migfit_relayout_configs_added_total") == 1.0
    assert value("migfit_relayout_configs_waiting") == 1.0
    await asyncio.sleep(0.65)
    assert await r.step() == ["idle"]
    assert value("migfit_relayout_configs_waiting") == 0.0
    assert value("migfit_relayout_configs_added_total") == 1.0
    for t in list(r._tasks.values()):
        t.cancel()
    await asyncio.gather(*r._tasks.values(), return_exceptions=True)


POLICIES = kmock.resource("nvidia.com", "v1", "clusterpolicies")


def _policy_reads(server: kmock.KubernetesEmulator, configmap: str) -> None:
    """The GPU Operator's ClusterPolicy, its MIG Managers reading ``configmap``."""
    server.objects[POLICIES, None, "cluster-policy"] = {
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"migManager": {"enabled": True, "config": {"name": configmap}}}}


async def test_nothing_is_written_while_the_cluster_policy_names_another_configmap(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient, caplog: pytest.LogCaptureFixture,
) -> None:
    # The MIG Managers read the GPU Operator's own ConfigMap: a custom config written to
    # migfit's would never reach them, and the label would fail the node.
    server.resources["nvidia.com/v1/clusterpolicies"] = {}  # type: ignore[assignment]
    _seed(server)
    _policy_reads(server, "default-mig-parted-config")
    r = await _relayouter(api, _settings(config_sync_s=0.0, policy_check_s=0.0))
    for _ in range(2):
        assert await r.step() == []
    assert _configmap(server)["data"]["config.yaml"] == TEXT
    assert taints(await read_node(api, "idle")) == []
    errors = [rec.getMessage() for rec in caplog.records if rec.levelname == "ERROR"]
    assert len(errors) == 1 and "spec.migManager.config.name" in errors[0]  # said once
    # Once the ClusterPolicy names it, the next pass stages the config, the one after applies.
    _policy_reads(server, NAME)
    assert await r.step() == []
    assert await r.step() == ["idle"]
    for t in list(r._tasks.values()):
        t.cancel()
    await asyncio.gather(*r._tasks.values(), return_exceptions=True)


async def test_an_adopted_run_writes_and_labels_nothing_while_the_policy_names_another(
    server: kmock.KubernetesEmulator, api: k8s.ApiClient,
) -> None:
    """The ClusterPolicy was checked only before a start: a run adopted in `tainted` (a
    restart, a new leader) wrote its custom config and set the label, which the MIG Manager
    then failed, leaving the node tainted (an outside check). It is aborted now."""
    server.resources["nvidia.com/v1/clusterpolicies"] = {}  # type: ignore[assignment]
    _seed(server)
    _policy_reads(server, "default-mig-parted-config")
    cache = advice.AdviceCache(config=migparted.parse(TEXT), clock=lambda: NOW)
    (rec,) = cache.get(await snapshot(api)).recommendations
    left = relayout_machine.planned(rec).but(state=keys.RelayoutState.TAINTED,
                                             from_config="all-3g.40gb")
    store(server, node("idle", gpus=2, alloc={"3g.40gb": 2}, config="all-3g.40gb",
                       taints=[keys.relayout_taint()],
                       annotations={keys.ANNOTATION_RELAYOUT: keys.encode_relayout(left)}))
    r = await _relayouter(api, _settings(config_sync_s=0.2, policy_check_s=0.0))
    assert await r.step() == ["idle"]
    (outcome,) = await r.wait()
    assert outcome.result == "aborted", outcome
    assert "spec.migManager.config.name" in outcome.reason
    obj = await read_node(api, "idle")
    assert obj["metadata"]["labels"][keys.LABEL_CONFIG] == "all-3g.40gb"
    assert taints(obj) == []
    assert _configmap(server)["data"]["config.yaml"] == TEXT
