"""The MIG catalog: built-in models, product-label resolution, and strict override files."""

from __future__ import annotations

from pathlib import Path

import pytest

from migfit import errors, profiles

MODEL_IDS = ["A100-40GB", "A100-80GB", "A30-24GB", "H100-80GB", "H100-94GB", "H100-96GB",
             "H200-141GB", "GH200-144GB", "B200-180GB", "GB200-186GB", "B300-288GB",
             "GB300-288GB", "RTX-PRO-6000-96GB", "RTX-PRO-5000-48GB", "RTX-PRO-4500-32GB"]


def test_builtin_has_every_model_of_the_issue() -> None:
    assert sorted(m.id for m in profiles.builtin().models) == sorted(MODEL_IDS)


def test_profiles_are_ordered_smallest_first() -> None:
    for model in profiles.builtin().models:
        keys = [profiles.profile_order(p) for p in model.profiles]
        assert keys == sorted(keys), model.id


@pytest.mark.parametrize(("product", "memory", "expected"), [
    ("NVIDIA-A100-SXM4-80GB", 81920, "A100-80GB"),
    ("NVIDIA-A100-SXM4-80GB", None, "A100-80GB"),
    ("NVIDIA-A100-80GB-PCIe", 81920, "A100-80GB"),
    ("A100-SXM4-40GB", 40960, "A100-40GB"),
    ("NVIDIA-A100-PCIE-40GB", None, "A100-40GB"),
    ("NVIDIA-H100-80GB-HBM3", 81559, "H100-80GB"),
    ("NVIDIA-H100-NVL", 95830, "H100-94GB"),
    ("NVIDIA-H200", 143771, "H200-141GB"),
    ("NVIDIA-A30", 24576, "A30-24GB"),
    # Single strategy: the profile is appended and gpu.memory is the size of one MIG device.
    ("A100-SXM4-40GB-MIG-1g.5gb", 4864, "A100-40GB"),
    ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", 9728, "A100-80GB"),
    # A label without a size: gpu.memory decides.
    ("NVIDIA-A100-SXM4", 81920, "A100-80GB"),
    ("NVIDIA-A100-SXM4", 40960, "A100-40GB"),
    ("NVIDIA-GH200", 146432, "GH200-144GB"),
])
def test_resolve_product_labels(product: str, memory: int | None, expected: str) -> None:
    assert profiles.builtin().resolve(product, memory).id == expected


def test_ambiguous_product_without_memory_is_an_error_naming_the_candidates() -> None:
    with pytest.raises(errors.UnknownModelError) as info:
        profiles.builtin().resolve("NVIDIA-A100-SXM4")
    assert "A100-40GB" in str(info.value) and "A100-80GB" in str(info.value)
    assert "gpu.memory" in str(info.value)


def test_ambiguous_product_with_a_memory_matching_neither_is_an_error() -> None:
    with pytest.raises(errors.UnknownModelError):
        profiles.builtin().resolve("NVIDIA-A100-SXM4", 60000)


@pytest.mark.parametrize("product", ["Tesla-T4", "NVIDIA-GeForce-RTX-4090", "NVIDIA-L40S", ""])
def test_unknown_product_is_an_error_not_a_guess(product: str) -> None:
    with pytest.raises(errors.UnknownModelError) as info:
        profiles.builtin().resolve(product, 81920)
    assert "--catalog" in str(info.value)


@pytest.mark.parametrize(("name", "expected"), [
    ("A100-80GB", "A100-80GB"), ("a100-80gb", "A100-80GB"), ("NVIDIA-H100-NVL", "H100-94GB"),
    ("NVIDIA-A100-80GB-PCIe", "A100-80GB"), ("A30-24GB", "A30-24GB"),
])
def test_get_accepts_ids_and_product_aliases(name: str, expected: str) -> None:
    assert profiles.builtin().get(name).id == expected


def test_get_unknown_lists_known_models() -> None:
    with pytest.raises(errors.UnknownModelError) as info:
        profiles.builtin().get("T4")
    assert all(mid in str(info.value) for mid in MODEL_IDS)


def test_a_product_label_of_several_models_names_them_where_a_model_is_asked_for() -> None:
    """``--gpu NVIDIA-A100-SXM4`` said "unknown GPU model", listing every model: the label is
    known, it only fits two (an outside check)."""
    with pytest.raises(errors.UnknownModelError) as got:
        profiles.builtin().get("NVIDIA-A100-SXM4")
    assert got.value.message == ("GPU product 'NVIDIA-A100-SXM4' could be any of A100-40GB, "
                                 "A100-80GB: name one of them")


def test_same_name_is_a_different_profile_on_a100_40gb() -> None:
    small = profiles.builtin().get("A100-40GB").profile("1g.10gb")
    large = profiles.builtin().get("A100-80GB").profile("1g.10gb")
    assert (small.memory_slices, small.starts, small.max_instances) == (2, (0, 2, 4, 6), 4)
    assert small.gi_profile_id == 15
    assert (large.memory_slices, large.max_instances, large.gi_profile_id) == (1, 7, 19)
    assert large.memory_mib == 9728  # nominal 10gb, usable 9728 MiB (GFD label)


def test_profile_fields_and_resource_name() -> None:
    p = profiles.builtin().get("A100-80GB").profile("3g.40gb")
    assert p.resource == "nvidia.com/mig-3g.40gb"
    assert (p.compute_slices, p.memory_slices, p.size, p.starts) == (3, 4, 4, (0, 4))
    assert not p.media and not p.provisional
    assert profiles.builtin().get("A100-80GB").profile("1g.10gb+me").media


def test_unknown_profile_names_the_valid_ones() -> None:
    with pytest.raises(errors.UsageError) as info:
        profiles.builtin().get("A100-80GB").profile("1g.5gb")
    assert "1g.10gb" in str(info.value)


@pytest.mark.parametrize(("former", "now"), [
    ("1g.24gb", "1g.23gb"), ("3g.95gb", "3g.93gb"), ("4g.95gb", "4g.93gb"),
    ("7g.189gb", "7g.186gb")])
def test_a_pre_production_name_says_what_the_profile_is_called_now(former: str,
                                                                    now: str) -> None:
    # NVIDIA's GPU Operator ConfigMaps of 2025-03 to 2025-08 (tests/data/nvidia, mp065,
    # mp068, mp072) ask GB200 (0x2941) for 1g.24gb and 3g.95gb; production boards report
    # 1g.23gb and 3g.93gb (mp073 on).
    gb200 = profiles.builtin().get("GB200-186GB")
    assert not gb200.has_profile(former)
    with pytest.raises(errors.UsageError) as info:
        gb200.profile(former)
    assert f"pre-production GB200-186GB boards called {now}" in str(info.value)
    assert f"use {now})" in str(info.value)
    # The same name on a model that has it is that model's profile: no hint there.
    assert "pre-production" not in profiles.builtin().get("A100-80GB").no_profile("1g.24gb")


def test_provisional_flags_follow_the_reference() -> None:
    # Issue 13 brought real lgip outputs: what was seen is no longer provisional, what was not
    # (B300, GB300, the RTX PRO 5000/4500, the larger B200/GB200/GH200 profiles) still is.
    cat = profiles.builtin()
    assert cat.get("A100-80GB").profile("1g.20gb").provisional
    assert not cat.get("A100-80GB").profile("1g.10gb").provisional
    assert not any(p.provisional for p in cat.get("A100-40GB").profiles)
    assert cat.get("A30-24GB").profile("2g.12gb+me").provisional
    assert cat.get("A30-24GB").profile("2g.12gb+me").gi_profile_id == 6
    for mid in ("B300-288GB", "GB300-288GB", "RTX-PRO-5000-48GB", "RTX-PRO-4500-32GB"):
        assert cat.get(mid).provisional
        assert all(p.provisional for p in cat.get(mid).profiles)
    for mid, seen, unseen in (("B200-180GB", "2g.45gb", "7g.180gb"),
                              ("GB200-186GB", "1g.47gb", "3g.93gb"),
                              ("GH200-144GB", "1g.36gb", "4g.72gb"),
                              ("H100-96GB", "3g.48gb", "1g.12gb")):
        assert not cat.get(mid).provisional
        assert not cat.get(mid).profile(seen).provisional
        assert cat.get(mid).profile(unseen).provisional
    h200 = cat.get("H200-141GB")
    assert not h200.profile("1g.18gb").provisional and h200.profile("1g.18gb").memory_mib == 16384
    assert not h200.profile("3g.71gb").provisional
    assert h200.profile("2g.35gb").provisional


@pytest.mark.parametrize(("model", "profile", "gib"), [
    ("H200-141GB", "3g.71gb", 69.50), ("H200-141GB", "4g.71gb", 69.50),
    ("H200-141GB", "7g.141gb", 139.75), ("GH200-144GB", "1g.18gb", 17.50),
    ("GH200-144GB", "1g.36gb", 35.25), ("GH200-144GB", "2g.36gb", 35.25),
    ("H100-96GB", "1g.24gb", 23.00), ("H100-96GB", "2g.24gb", 23.00),
    ("H100-96GB", "3g.48gb", 46.50), ("H100-96GB", "4g.48gb", 46.50),
    ("H100-96GB", "7g.96gb", 93.00), ("B200-180GB", "1g.45gb", 44.25),
    ("B200-180GB", "2g.45gb", 44.25), ("B200-180GB", "1g.23gb", 20.50),
    ("A30-24GB", "4g.24gb", 23.44), ("GB200-186GB", "1g.23gb", 22.00),
    ("GB200-186GB", "1g.47gb", 45.50), ("GB200-186GB", "2g.47gb", 45.50),
    ("RTX-PRO-6000-96GB", "2g.48gb", 46.50),
])
def test_memory_is_what_nvidia_smi_prints_never_more(model: str, profile: str, gib: float) -> None:
    """nvidia-smi prints GiB with two decimals: the catalog holds a MiB figure that prints the
    same and is the lowest such (usable memory is never overstated)."""
    mib = profiles.builtin().get(model).profile(profile).memory_mib
    assert f"{mib / 1024:.2f}" == f"{gib:.2f}"
    assert f"{(mib - 1) / 1024:.2f}" != f"{gib:.2f}"


@pytest.mark.parametrize(("model", "ids"), [
    ("A100-40GB", {"1g.5gb": 19, "1g.5gb+me": 20, "1g.10gb": 15, "2g.10gb": 14, "3g.20gb": 9,
                   "4g.20gb": 5, "7g.40gb": 0}),
    ("B200-180GB", {"1g.23gb": 19, "1g.23gb+me": 20, "1g.45gb": 15, "2g.45gb": 14,
                    "3g.90gb": 9, "4g.90gb": 5, "7g.180gb": 0}),
    ("RTX-PRO-6000-96GB", {"1g.24gb": 14, "1g.24gb+me": 21, "1g.24gb+gfx": 47,
                           "1g.24gb+me.all": 65, "1g.24gb-me": 67, "2g.48gb": 5,
                           "2g.48gb+gfx": 35, "2g.48gb+me.all": 64, "2g.48gb-me": 66,
                           "4g.96gb": 0, "4g.96gb+gfx": 32}),
])
def test_gpu_instance_profile_ids(model: str, ids: dict[str, int]) -> None:
    got = {p.name: p.gi_profile_id for p in profiles.builtin().get(model).profiles}
    assert got == ids


def test_every_model_of_an_8_slice_geometry_has_ids_on_every_profile() -> None:
    for model in profiles.builtin().models:
        if model.memory_slices == 8:
            assert all(p.gi_profile_id is not None for p in model.profiles), model.id


def test_same_name_is_a_one_slice_profile_on_gb300_and_two_slices_on_h200() -> None:
    cat = profiles.builtin()
    gb300 = cat.get("GB300-288GB").profile("1g.35gb")
    h200 = cat.get("H200-141GB").profile("1g.35gb")
    assert (gb300.memory_slices, gb300.max_instances) == (1, 7)
    assert (h200.memory_slices, h200.max_instances) == (2, 4)


def test_resource_names_cover_every_profile() -> None:
    names = profiles.builtin().resource_names()
    assert "nvidia.com/mig-1g.10gb" in names and "nvidia.com/mig-7g.180gb" in names
    assert names == sorted(set(names))


@pytest.mark.parametrize(("resource", "expected"), [
    ("nvidia.com/mig-1g.10gb", "1g.10gb"), ("nvidia.com/gpu", None), ("cpu", None),
])
def test_parse_resource(resource: str, expected: str | None) -> None:
    assert profiles.parse_resource(resource) == expected


# ---------------------------------------------------------------- override files

A800 = """\
version: v1
models:
- id: A800-80GB
  memory_slices: 8
  compute_slices: 7
  memory_mib: 81920
  products: ['A800(-SXM4|-PCIE)?-80GB']
  profiles:
  - name: 1g.10gb
    compute_slices: 1
    memory_slices: 1
    memory_mib: 9728
    max_instances: 7
    starts: [0, 1, 2, 3, 4, 5, 6]
  - name: 7g.80gb
    id: 0
    compute_slices: 7
    memory_slices: 8
    memory_mib: 80896
    max_instances: 1
    starts: [0]
"""

A100_OVERRIDE = """\
version: v1
models:
- id: A100-80GB
  memory_slices: 8
  compute_slices: 7
  memory_mib: 81920
  products: ['A100(-SXM4|-PCIE)?-80GB(-PCIE)?']
  profiles:
  - name: 1g.10gb
    id: 19
    compute_slices: 1
    memory_slices: 1
    memory_mib: 9856
    max_instances: 7
    starts: [0, 1, 2, 3, 4, 5, 6]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_override_file_adds_a_model(tmp_path: Path) -> None:
    cat = profiles.load(_write(tmp_path, A800))
    model = cat.get("NVIDIA-A800-SXM4-80GB")
    assert model.id == "A800-80GB"
    assert [p.name for p in model.profiles] == ["1g.10gb", "7g.80gb"]
    assert model.profile("1g.10gb").gi_profile_id is None
    assert cat.get("A100-80GB") is profiles.builtin().get("A100-80GB")  # the others stay
    assert len(cat.models) == len(MODEL_IDS) + 1


def test_override_file_replaces_a_model_and_leaves_builtin_alone(tmp_path: Path) -> None:
    cat = profiles.load(_write(tmp_path, A100_OVERRIDE))
    model = cat.get("A100-80GB")
    assert model.profile("1g.10gb").memory_mib == 9856
    assert not model.has_profile("3g.40gb")
    assert profiles.builtin().get("A100-80GB").profile("1g.10gb").memory_mib == 9728
    assert len(cat.models) == len(MODEL_IDS)


def test_load_without_a_path_is_the_builtin() -> None:
    assert profiles.load() is profiles.builtin()


@pytest.mark.parametrize(("text", "needle"), [
    (A800.replace("  memory_mib: 81920\n", "  memory_mib: 81920\n  colour: green\n"), "colour"),
    (A800.replace("    max_instances: 1\n", "    max_instances: 1\n    weight: 3\n"), "weight"),
    (A800.replace("starts: [0]", "starts: [1]"), "start 1"),
    (A800.replace("starts: [0, 1, 2, 3, 4, 5, 6]", "starts: [0, 8]"), "start 8"),
    (A800.replace("starts: [0, 1, 2, 3, 4, 5, 6]", "starts: [-1]"), "start -1"),
    (A800.replace("version: v1", "version: v2"), "v2"),
    (A800.replace("name: 7g.80gb", "name: 7g.80GB"), "7g.80GB"),
    (A800.replace("name: 7g.80gb", "name: 6g.80gb"), "6g"),
    (A800.replace("max_instances: 7", "max_instances: '7'"), "max_instances"),
    (A800.replace("name: 7g.80gb\n", "name: 7g.80gb\n    formerly: [1g.10gb]\n"),
     "formerly '1g.10gb'"),
    (A800.replace("name: 7g.80gb\n", "name: 7g.80gb\n    formerly: [seven]\n"),
     "formerly 'seven'"),
    ("models: [", "YAML"),
    # A compute instance shares its GPU instance's memory: no catalog entry makes it one.
    (A800.replace("name: 7g.80gb", "name: 7c.7g.80gb"), "compute instance of 7g.80gb"),
])
def test_override_file_is_validated_strictly(tmp_path: Path, text: str, needle: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(errors.ConfigError) as info:
        profiles.load(path)
    message = str(info.value)
    assert needle in message
    assert str(path) in message


@pytest.mark.parametrize(("text", "problem"), [
    ("root:x:0:0:root:/root:/bin/bash\n", "holds a YAML string, not a mapping"),
    ("- A100-80GB\n", "holds a YAML list, not a mapping"),
    ("", "the file is empty"),
    ("# nothing but a comment\n", "the file is empty"),
    ("version: v1\nmodels: [3]\n", "models.0: a number, where a mapping (key: value) belongs"),
    ("version: v1\nmodels:\n- id: X\n  memory_slices: 8\n  compute_slices: 7\n"
     "  memory_mib: 1\n  profiles: [1g.10gb]\n",
     "models.0.profiles.0: a string, where a mapping (key: value) belongs"),
    ("version: v1\nmodels: []\nextra: 1\n", "extra: Extra inputs are not permitted"),
])
def test_a_file_that_is_no_catalog_says_what_a_catalog_file_is(tmp_path: Path, text: str,
                                                               problem: str) -> None:
    """pydantic's "Input should be a valid dictionary or instance of _CatalogSpec" named an
    internal class and nothing to change."""
    path = _write(tmp_path, text)
    with pytest.raises(errors.ConfigError) as info:
        profiles.load(path)
    assert str(info.value) == f"{path}: {problem}; {profiles.CATALOG_FILE}"
    assert "Spec" not in str(info.value)


def test_override_file_missing_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="cannot read"):
        profiles.load(tmp_path / "nope.yaml")


def test_resolve_answers_alike_when_asked_again() -> None:
    # Answers are remembered per (product, memory): a repeat gives the same model, and an
    # unknown product the same clear error each time (a fresh exception, not a shared one).
    catalog = profiles.builtin()
    first = catalog.resolve("NVIDIA-A100-SXM4", 81920)
    assert catalog.resolve("NVIDIA-A100-SXM4", 81920) is first
    assert first.id == "A100-80GB"
    assert catalog.resolve("NVIDIA-A100-SXM4", 40960).id == "A100-40GB"
    caught = []
    for _ in range(2):
        with pytest.raises(errors.UnknownModelError, match="NVIDIA-RTX-9000") as info:
            catalog.resolve("NVIDIA-RTX-9000")
        caught.append(info.value)
    assert caught[0] is not caught[1] and caught[0].message == caught[1].message


def test_single_strategy_profile_narrows_an_unsized_product() -> None:
    """Under single the memory label is one MIG device's size; the profile in the product
    label decides instead, where only one candidate model has it."""
    catalog = profiles.builtin()
    assert catalog.resolve("A100-SXM4-MIG-1g.5gb", 4864).id == "A100-40GB"
    assert catalog.resolve("NVIDIA-A100-SXM4-MIG-7g.80gb").id == "A100-80GB"
    with pytest.raises(errors.UnknownModelError) as info:
        catalog.resolve("A100-SXM4-MIG-1g.10gb", 9728)  # 1g.10gb exists on both
    assert "products" in info.value.message and "gpu.memory" not in info.value.message
