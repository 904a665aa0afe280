"""The MIG Manager's per-node configs (v0.15): a node's own generated configs, when present, are
the ones its mig.config label names; other nodes use the shared ConfigMap."""

from __future__ import annotations

from migfit import migparted, profiles

SHARED = migparted.parse("""
version: v1
mig-configs:
  all-1g.35gb:
    - device-filter: ["0x233510DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.35gb": 4}
""")
GENERATED = {"metadata": {"name": "generated", "namespace": "gpu-operator"}, "data": {
    "config.yaml": "version: v1\nmig-configs:\n  all-1g.35gb:\n  - devices: all\n"
                   "    mig-enabled: true\n    mig-devices: {1g.35gb: 4}\n"}}
H200 = profiles.builtin().get("H200-141GB")
NVL = H200.device_ids_for("NVIDIA-H200-NVL")


def test_a_node_s_own_configs_win_over_the_shared_configmap() -> None:
    configs, problems = migparted.node_configs(SHARED, {"nvl-1": GENERATED})
    assert problems == {}
    own = configs.for_node("nvl-1")
    assert own is not None
    lay = migparted.resolve(own, "all-1g.35gb", model=H200, gpu_count=1, device_ids=NVL)
    assert lay.gpus == (("1g.35gb",) * 4,)
    assert configs.for_node("other") is SHARED
    assert configs.names == ["all-1g.35gb"]


def test_a_broken_node_configmap_is_reported_and_the_shared_one_used() -> None:
    broken = {"metadata": {"name": "generated"}, "data": {"config.yaml": "version: v2\n"}}
    configs, problems = migparted.node_configs(SHARED, {"nvl-1": broken})
    assert "v2" in problems["nvl-1"]
    assert configs.for_node("nvl-1") is SHARED
