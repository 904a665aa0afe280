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
