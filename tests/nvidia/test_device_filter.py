"""device-filter matched the way mig-parted matches it: against the GPU's own PCI id.

GFD labels the product, not the PCI id, so a node whose product label leaves several ids open
cannot be said to match a filter holding only some of them: such a config is unknown there,
never taken as applied. NVIDIA's current stock ``all-1g.35gb`` filters 0x2335 (H200 SXM) only:
on an H200 NVL (0x233B) the MIG Manager leaves the GPU as it is.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from migfit import advisor, decoding, errors, layouts, migparted, profiles, records

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia" / "migparted"
STOCK = migparted.parse_configmap(yaml.safe_load(
    (DATA / "raw-gpuop-0400_configmap-a22dbf671f.yaml").read_text(encoding="utf-8")))
CATALOG = profiles.builtin()
H200 = CATALOG.get("H200-141GB")


def test_stock_all_1g_35gb_leaves_an_h200_nvl_untouched() -> None:
    nvl = H200.device_ids_for("NVIDIA-H200-NVL")
    sxm = H200.device_ids_for("NVIDIA-H200")
    assert nvl == ("0x233B10DE",) and sxm == ("0x233510DE",)
    assert migparted.apply(STOCK, "all-1g.35gb", device_ids=nvl, gpu_count=2) == (None, None)
    with pytest.raises(errors.ConfigError, match="leaves it as it is"):
        migparted.resolve(STOCK, "all-1g.35gb", model=H200, gpu_count=1, device_ids=nvl)
    lay = migparted.resolve(STOCK, "all-1g.35gb", model=H200, gpu_count=1, device_ids=sxm)
    assert lay.gpus == (("1g.35gb",) * 4,)


def test_a_filter_holding_some_of_the_possible_ids_is_unknown_not_applied() -> None:
    # Without a label to pin it, an H200 may be either id: the filter may or may not match.
    with pytest.raises(errors.ConfigError, match="may not apply"):
        migparted.resolve(STOCK, "all-1g.35gb", model=H200, gpu_count=1)
    assert not migparted.applies_to(STOCK, "all-1g.35gb", model=H200, gpu_count=1)
    # all-balanced lists both H200 ids: it applies whichever the GPU is.
    assert migparted.applies_to(STOCK, "all-balanced", model=H200, gpu_count=1)


def test_an_unknown_pci_id_never_matches_a_filter_but_matches_an_unfiltered_entry() -> None:
    rtx = CATALOG.get("RTX-PRO-6000-96GB")
    ids = rtx.device_ids_for("NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition")
    assert ids == ()
    with pytest.raises(errors.ConfigError, match="may not apply"):
        migparted.resolve(STOCK, "all-balanced", model=rtx, gpu_count=1, device_ids=ids)
    lay = migparted.resolve(STOCK, "all-2g.48gb", model=rtx, gpu_count=1, device_ids=ids)
    assert lay.gpus == (("2g.48gb", "2g.48gb"),)


@pytest.mark.parametrize(("product", "config", "layout"), [
    ("NVIDIA-B200", "all-balanced", ("1g.23gb", "1g.23gb", "2g.45gb", "3g.90gb")),
    ("NVIDIA-GB200", "all-balanced", ("1g.23gb", "1g.23gb", "2g.47gb", "3g.93gb")),
    ("NVIDIA-H20", "all-balanced", ("1g.12gb", "1g.12gb", "2g.24gb", "3g.48gb")),
    ("NVIDIA-A800-80GB-PCIe", "all-1g.10gb", ("1g.10gb",) * 7),
    ("NVIDIA-A100-PCIE-40GB", "all-1g.10gb", ("1g.10gb",) * 4),
    ("NVIDIA-H800-NVL", "all-balanced", ("1g.12gb", "1g.12gb", "2g.24gb", "3g.47gb")),
    ("NVIDIA-GB300", "all-1g.35gb", ("1g.35gb",) * 7),
])
def test_stock_configs_resolve_on_the_new_ids(product: str, config: str,
                                              layout: tuple[str, ...]) -> None:
    model = CATALOG.resolve(product)
    lay = migparted.resolve(STOCK, config, model=model, gpu_count=2,
                            device_ids=model.device_ids_for(product))
    assert lay.gpus == (layout, layout)


def _state(product: str, config: str, alloc: dict[str, str]) -> records.NodeState:
    obj = {"metadata": {"name": "n1", "labels": {
        "nvidia.com/gpu.product": product, "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/gpu.count": "1", "nvidia.com/mig.config": config,
        "nvidia.com/mig.config.state": "success"}},
        "status": {"capacity": alloc, "allocatable": alloc,
                   "conditions": [{"type": "Ready", "status": "True"}]}}
    rec = decoding.node_from_api(obj, CATALOG)
    total = sum(rec.allocatable.values())
    return records.NodeState(node=rec, used={}, free=dict(rec.allocatable), overcommit={},
                             alloc_total=total, used_total=0, free_total=total,
                             repartitioning=False)


def test_the_advisor_resolves_a_node_s_config_with_its_own_pci_id() -> None:
    sxm = _state("NVIDIA-H200", "all-1g.35gb", {"nvidia.com/mig-1g.35gb": "4"})
    lay = advisor.current_layout(sxm, H200, STOCK)
    assert lay.source == "config" and lay.gpus == (("1g.35gb",) * 4,)
    # The same label on an H200 NVL did nothing: its instances are what it had.
    nvl = _state("NVIDIA-H200-NVL", "all-1g.35gb", {"nvidia.com/mig-1g.18gb": "7"})
    lay = advisor.current_layout(nvl, H200, STOCK)
    assert lay.source == "inferred" and lay.gpus == (("1g.18gb",) * 7,)
    assert "leaves it as it is" in lay.note


@pytest.mark.parametrize("model", [m for m in CATALOG.models], ids=lambda m: m.id)
def test_a_rendered_config_is_applied_by_the_mig_manager_on_every_variant(
        model: profiles.GpuModel) -> None:
    """migfit's own configs carry no device-filter (one node, one model): mig-parted applies
    them whatever the GPU's real PCI id, known to the catalog or not."""
    big = max(layouts.of(model).maximal, key=lambda lay: len(lay.profile_names()))
    gpus = [big.profile_names(), [model.largest.name]]
    doc = migparted.render(migparted.custom_name(gpus), gpus, model=model)
    assert all("device-filter" not in e for e in doc["mig-configs"][migparted.custom_name(gpus)])
    cfg = migparted.parse(migparted.dump(doc))
    for ids in [model.device_ids, (), *(v.device_ids for v in model.variants),
                *((d,) for d in model.device_ids)]:
        back = migparted.resolve(cfg, cfg.names()[0], model=model, gpu_count=2, device_ids=ids)
        assert [list(g) for g in back.gpus] == [sorted(g) for g in gpus]


def test_a_rendered_filter_names_the_ids_given() -> None:
    doc = migparted.render("x", [["7g.141gb"]], model=H200, device_ids=("0x233B10DE",))
    assert doc["mig-configs"]["x"][0]["device-filter"] == ["0x233B10DE"]
    with pytest.raises(errors.ConfigError, match="not a valid layout"):
        migparted.render("y", [["7g.141gb", "1g.18gb"]], model=H200)
