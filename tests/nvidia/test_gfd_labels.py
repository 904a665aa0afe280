"""Node labels as GPU Feature Discovery writes them, for every GPU NVIDIA ships MIG on.

GFD's product label (k8s-device-plugin internal/lm/resource.go, productLabel) joins the NVML
device name with spaces as ``-``, under the single strategy ``MIG`` and the MIG device's profile
(with the ``+`` dropped: ``1g.10gbme``), and ``SHARED`` when time-slicing or MPS replicas > 1
and the resource is not renamed; a single-strategy node whose GPUs do not all hold one profile
is ``<name>-MIG-INVALID`` with count, replicas and memory 0 (internal/lm/mig-strategy.go).
Replicas multiply what the device plugin advertises: ``.count`` and ``gpu.count`` are devices.
"""

from __future__ import annotations

from typing import Any

import pytest

from migfit import decoding, gpulabels, profiles

CATALOG = profiles.builtin()


def _view(product: str, *, strategy: str = "mixed", count: int = 8, memory: int | None = None,
          capacity: dict[str, Any] | None = None, replicas: int | None = None,
          ) -> gpulabels.GpuView:
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/mig.strategy": strategy,
              "nvidia.com/gpu.count": str(count)}
    if memory is not None:
        labels["nvidia.com/gpu.memory"] = str(memory)
    if replicas is not None:
        labels["nvidia.com/gpu.replicas"] = str(replicas)
    cap = capacity or {}
    return gpulabels.gpu_view(labels, cap, cap, CATALOG)


# (product label, gpu.memory, model, the PCI ids the label pins)
WHOLE_GPU_LABELS = [
    ("NVIDIA-A100-SXM4-40GB", 40960, "A100-40GB", ("0x20B010DE",)),
    ("NVIDIA-A100-PCIE-40GB", 40960, "A100-40GB", ("0x20B110DE", "0x20F110DE")),
    ("NVIDIA-A800-SXM4-40GB", 40960, "A100-40GB", ("0x20F610DE",)),
    ("NVIDIA-A100-SXM4-80GB", 81920, "A100-80GB", ("0x20B210DE",)),
    # Some SXM boards name themselves without the 4 (a published GFD label set).
    ("NVIDIA-A100-SXM-80GB", 81920, "A100-80GB", ("0x20B210DE",)),
    ("NVIDIA-A100-80GB-PCIe", 81920, "A100-80GB", ("0x20B510DE",)),
    ("NVIDIA-A800-SXM4-80GB", 81920, "A100-80GB", ("0x20F310DE",)),
    ("NVIDIA-A800-80GB-PCIe", 81920, "A100-80GB", ("0x20F510DE",)),
    ("NVIDIA-A30", 24576, "A30-24GB", ("0x20B710DE",)),
    ("NVIDIA-H100-80GB-HBM3", 81559, "H100-80GB", ("0x233010DE",)),
    ("NVIDIA-H100-PCIe", 81559, "H100-80GB", ("0x233110DE",)),
    ("NVIDIA-H800", 81559, "H100-80GB", ("0x232210DE", "0x232410DE")),
    ("NVIDIA-H800-PCIe", 81559, "H100-80GB", ("0x232210DE", "0x232410DE")),
    ("NVIDIA-H100-NVL", 95830, "H100-94GB", ("0x232110DE",)),
    ("NVIDIA-H800-NVL", 95830, "H100-94GB", ("0x233A10DE",)),
    ("NVIDIA-GH200-480GB", 97871, "H100-96GB", ("0x234210DE",)),
    ("NVIDIA-H20", 97871, "H100-96GB", ("0x232910DE",)),
    ("NVIDIA-GH200-144G-HBM3e", 146432, "GH200-144GB", ("0x234810DE",)),
    ("NVIDIA-H200", 143771, "H200-141GB", ("0x233510DE",)),
    ("NVIDIA-H200-NVL", 143771, "H200-141GB", ("0x233B10DE",)),
    ("NVIDIA-B200", 183359, "B200-180GB", ("0x290110DE",)),
    ("NVIDIA-GB200", 189471, "GB200-186GB", ("0x294110DE",)),
    ("NVIDIA-B300-SXM6-AC", 275040, "B300-288GB", ("0x318210DE",)),
    ("NVIDIA-GB300", 284208, "GB300-288GB", ("0x31C210DE",)),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 97887, "RTX-PRO-6000-96GB",
     ("0x2BB510DE",)),
    # Not in NVIDIA's configs: its PCI id is not known, so no filtered entry can be said to
    # match it.
    ("NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition", 97887, "RTX-PRO-6000-96GB", ()),
]


@pytest.mark.parametrize(("product", "memory", "model", "ids"), WHOLE_GPU_LABELS)
@pytest.mark.parametrize("shared", [False, True])
def test_whole_gpu_labels_resolve_with_and_without_shared(
        product: str, memory: int, model: str, ids: tuple[str, ...], shared: bool) -> None:
    label = product + ("-SHARED" if shared else "")
    view = _view(label, strategy="none", count=4, memory=memory,
                 replicas=4 if shared else 1)
    assert view.model is not None and view.model.id == model, view.model_error
    assert view.model.device_ids_for(label) == ids
    assert view.gpu_count == 4 and not view.capacity
    assert profiles.parse_product(label).shared is shared


# (single-strategy product label, model, canonical profile)
SINGLE_LABELS = [
    ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100-40GB", "1g.5gb"),
    ("A100-SXM4-40GB-MIG-1g.5gbme", "A100-40GB", "1g.5gb+me"),
    ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gbme", "A100-80GB", "1g.10gb+me"),
    ("NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", "H100-80GB", "3g.40gb"),
    ("NVIDIA-H200-NVL-MIG-1g.35gb", "H200-141GB", "1g.35gb"),
    ("NVIDIA-GB300-MIG-1g.35gb", "GB300-288GB", "1g.35gb"),
    ("NVIDIA-GB200-MIG-1g.23gbme", "GB200-186GB", "1g.23gb+me"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition-MIG-1g.24gbgfx", "RTX-PRO-6000-96GB",
     "1g.24gb+gfx"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition-MIG-2g.48gbme.all", "RTX-PRO-6000-96GB",
     "2g.48gb+me.all"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition-MIG-1g.24gb-me", "RTX-PRO-6000-96GB",
     "1g.24gb-me"),
]


@pytest.mark.parametrize(("product", "model", "profile"), SINGLE_LABELS)
def test_single_strategy_labels_name_model_profile_and_gpu_count(
        product: str, model: str, profile: str) -> None:
    per_gpu = CATALOG.get(model).profile(profile).max_instances
    devices = 2 * per_gpu  # two GPUs full of the profile
    view = _view(product, strategy="single", count=devices, memory=4864,
                 capacity={"nvidia.com/gpu": str(devices)})
    assert view.model is not None and view.model.id == model, view.model_error
    assert view.strategy == "single"
    assert list(view.capacity) == [profile]
    assert view.gpu_count == 2


def test_shared_single_strategy_counts_devices_not_replicas() -> None:
    """One 1g.5gb instance shared 14 ways is one instance on one GPU, not 14 on two."""
    view = _view("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED", strategy="single", count=1,
                 memory=4864, capacity={"nvidia.com/gpu": "14"}, replicas=14)
    assert view.model is not None and view.model.id == "A100-40GB"
    assert list(view.capacity) == ["1g.5gb"] and view.gpu_count == 1


def test_mig_invalid_flags_the_node_and_invents_no_profile() -> None:
    view = _view("NVIDIA-A100-SXM4-80GB-MIG-INVALID", strategy="single", count=0, memory=0,
                 capacity={"nvidia.com/gpu": "0"})
    assert view.model is None
    assert view.model_error is not None and "MIG-INVALID" in view.model_error
    assert "invalid" not in view.capacity and not view.capacity
    assert profiles.single_strategy_profile("NVIDIA-A100-SXM4-80GB-MIG-INVALID") is None


def test_memory_label_wins_and_an_unknown_profile_is_kept() -> None:
    """A driver that renames a profile (7g.79gb on an A100-80GB with R510) is reported with
    what the node says, not dropped; the node's memory label wins over the catalog."""
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
              "nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.count": "1",
              "nvidia.com/mig-7g.79gb.memory": "80384",
              "nvidia.com/mig-1g.10gb.memory": "9700"}
    cap = {"nvidia.com/mig-7g.79gb": "1"}
    view = gpulabels.gpu_view(labels, cap, cap, CATALOG)
    assert view.model is not None and view.model.id == "A100-80GB"
    assert view.capacity == {"7g.79gb": 1} and view.allocatable == {"7g.79gb": 1}
    assert view.memory_mib["1g.10gb"] == 9700 and view.memory_mib["7g.79gb"] == 80384


def test_a_node_object_decodes_the_same() -> None:
    obj = {"metadata": {"name": "n1", "labels": {
        "nvidia.com/gpu.product": "NVIDIA-H200-NVL-MIG-1g.18gb-SHARED",
        "nvidia.com/mig.strategy": "single", "nvidia.com/gpu.count": "7",
        "nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.memory": "16384"}},
        "status": {"capacity": {"nvidia.com/gpu": "14"},
                   "allocatable": {"nvidia.com/gpu": "14"}}}
    rec = decoding.node_from_api(obj, CATALOG)
    assert rec.model == "H200-141GB" and rec.strategy == "single" and rec.gpu_count == 1
    assert dict(rec.capacity) == {"1g.18gb": 14}


# Under mixed, GFD labels each MIG resource on its own (internal/lm/resource.go,
# NewMIGResourceLabeler; the set of its test "mig mixed appends shared"): .count instances,
# .replicas the pods sharing one, .product ending in -SHARED; the device plugin advertises
# count × replicas.
def _mixed_shared_node(*, whole: int = 0, gpu_replicas: int = 1) -> dict[str, Any]:
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB" + ("-SHARED" if gpu_replicas > 1
                                                           else ""),
        "nvidia.com/gpu.count": str(1 + whole), "nvidia.com/gpu.replicas": str(gpu_replicas),
        "nvidia.com/gpu.memory": "81920", "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success",
        "nvidia.com/mig-1g.10gb.count": "7", "nvidia.com/mig-1g.10gb.replicas": "2",
        "nvidia.com/mig-1g.10gb.memory": "9728",
        "nvidia.com/mig-1g.10gb.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED",
        "nvidia.com/mig-1g.10gb.slices.gi": "1", "nvidia.com/mig-1g.10gb.slices.ci": "1",
        "nvidia.com/mig-1g.10gb.multiprocessors": "14",
        "nvidia.com/mig-1g.10gb.sharing-strategy": "time-slicing"}
    res = {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/gpu": str(whole * gpu_replicas)}
    return {"metadata": {"name": "n1", "labels": labels},
            "status": {"capacity": res, "allocatable": res,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _state_of(rec: Any) -> Any:
    from migfit import records

    total = sum(rec.allocatable.values())
    return records.NodeState(node=rec, used={}, free=dict(rec.allocatable), overcommit={},
                             alloc_total=total, used_total=0, free_total=total,
                             repartitioning=False)


def test_mixed_replicas_are_read_as_one_instance_shared_not_more_instances() -> None:
    """14 × nvidia.com/mig-1g.10gb with .replicas 2 are the 7 instances of one GPU."""
    from migfit import advisor, migparted

    rec = decoding.node_from_api(_mixed_shared_node(), CATALOG)
    assert rec.model == "A100-80GB" and rec.gpu_count == 1
    assert dict(rec.allocatable) == {"1g.10gb": 14}  # what pods request against
    assert dict(rec.replicas) == {"1g.10gb": 2} and rec.instances == {"1g.10gb": 7}
    model = CATALOG.get("A100-80GB")
    lay = advisor.current_layout(_state_of(rec), model, None)
    assert lay.gpus == (("1g.10gb",) * 7,) and "need" not in lay.note
    stock = migparted.parse("version: v1\nmig-configs:\n  all-1g.10gb:\n  - devices: all\n"
                            "    mig-enabled: true\n    mig-devices: {1g.10gb: 7}\n")
    lay = advisor.current_layout(_state_of(rec), model, stock)
    assert lay.source == "config" and lay.gpus == (("1g.10gb",) * 7,)


def test_a_shared_product_under_mixed_counts_whole_gpus_not_replicas() -> None:
    """A mixed node whose MIG-disabled GPU is time-sliced 4 ways: GFD writes
    nvidia.com/gpu.product ...-SHARED (internal/lm/mig-strategy.go: full GPUs' labels win over
    MIG-enabled ones of the same name), gpu.count counts both GPUs."""
    rec = decoding.node_from_api(_mixed_shared_node(whole=1, gpu_replicas=4), CATALOG)
    assert rec.model == "A100-80GB" and rec.gpu_count == 2
    assert rec.whole_gpus == 1
    assert rec.instances == {"1g.10gb": 7}


def test_the_spread_of_shared_instances_counts_instances() -> None:
    from migfit import migparted

    a100 = CATALOG.get("A100-80GB")
    alloc = {profiles.ProfileName("1g.10gb"): 28}
    share = {profiles.ProfileName("1g.10gb"): 2}
    # 2 replicas in use need one instance on one GPU, and may sit on two GPUs.
    s = migparted.spread(a100, alloc, {profiles.ProfileName("1g.10gb"): 2}, 2, replicas=share)
    assert s == migparted.Spread(needed=1, worst=2)
    # 14 replicas: 7 instances, one GPU's worth (without replicas: two GPUs).
    s = migparted.spread(a100, alloc, {profiles.ProfileName("1g.10gb"): 14}, 2, replicas=share)
    assert s == migparted.Spread(needed=1, worst=2)
    assert migparted.spread_note(a100, alloc, {profiles.ProfileName("1g.10gb"): 2}, 2,
                                 replicas=share)
