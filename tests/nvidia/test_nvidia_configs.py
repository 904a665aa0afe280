"""NVIDIA's own mig-parted configs as test data: parsed as mig-parted parses them, resolved per
GPU as mig-parted applies them, and every layout that can exist accepted by the catalog.

The 86 distinct config texts NVIDIA published (mig-parted and the GPU Operator's
``default-mig-parted-config``, every version; provenance in tests/data/nvidia/README.md and
migparted/index.yaml, copied from shared/reference/nvidia) and mig-parted's own spec test
cases. The expected per-GPU layouts come from a small model of mig-parted written here from
its documented rules (entries in order, ``device-filter`` matched as numbers against the GPU's
own PCI id, ``devices`` by index, the last entry that selects a GPU wins, unselected GPUs
untouched), read straight from the YAML: it shares no code with migfit.migparted.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from migfit import errors, layouts, migparted, profiles

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia" / "migparted"
CONFIG_FILES = sorted(p.name for p in DATA.glob("mp*.yaml"))
STOCK = "raw-gpuop-0400_configmap-a22dbf671f.yaml"  # the GPU Operator's ConfigMap today
CATALOG = profiles.builtin()
GPUS = 8  # a DGX/HGX node: enough GPUs for every `devices: [i]` entry NVIDIA wrote

# Two versions (2022, one commit) give all-1g.10gb a mapping where mig-parted needs a list:
# its Spec.UnmarshalJSON fails on them, and so must migfit.
REFUSED = {
    "mp023-migparted-gpu_operator_nvidia_mig_manager_example-7aa03c4162.yaml",
    "mp024-migparted-deployments_systemd_config_default-7aa03c4162.yaml",
}

# Layouts in old NVIDIA configs that no GPU can hold (shared/reference/nvidia/README.md: "a few
# old versions are themselves invalid"). Keyed by (model, config, layout); each is observed.
CANNOT_EXIST = {
    ("A100-40GB", "all-1g.10gb", "7×1g.10gb"):
        "unfiltered all-1g.10gb of 2021-2023: on an A100-40GB 1g.10gb is the 2-slice profile "
        "(4 at most); later versions filter the A100-40GB ids and ask for 4",
    ("A100-40GB", "all-1g.10gb", "8×1g.10gb"): "pre-release Hopper example: 8 × 1g",
    ("A100-80GB", "all-1g.10gb", "8×1g.10gb"): "pre-release Hopper example: 1g starts at 0-6",
    ("H100-80GB", "all-1g.10gb", "8×1g.10gb"): "pre-release Hopper example: 1g starts at 0-6",
    ("A100-80GB", "all-2g.20gb", "4×2g.20gb"): "pre-release Hopper example: 2g starts at 0,2,4",
    ("H100-80GB", "all-2g.20gb", "4×2g.20gb"): "pre-release Hopper example: 2g starts at 0,2,4",
    ("A100-80GB", "all-4g.40gb", "2×4g.40gb"): "pre-release Hopper example: one 4g per GPU",
    ("H100-80GB", "all-4g.40gb", "2×4g.40gb"): "pre-release Hopper example: one 4g per GPU",
    ("A100-80GB", "all-balanced", "2×1g.10gb 2g.20gb 4g.40gb"):
        "pre-release Hopper example: 8 compute slices of 7",
    ("H100-80GB", "all-balanced", "2×1g.10gb 2g.20gb 4g.40gb"):
        "pre-release Hopper example: 8 compute slices of 7",
    ("A30-24GB", "all-2g.12gb.me", "2×2g.12gb+me"):
        "A30 versions of 2023: two +me instances; a GPU has media engines for one",
}

# Profile names of pre-production boards that today's drivers do not have: H100 NVL's first
# names (config of 2024-05, later 1g.12gb ... 7g.94gb), GB200 pre-production (issue 13:
# 1g.24gb, 3g.95gb, 7g.189gb; also 2g.23gb, 4g.95gb), pre-release Hopper's 8g.80gb.
PRE_PRODUCTION = {
    "H100-94GB": {"1g.11gb", "1g.11gb+me", "1g.22gb", "2g.22gb", "3g.44gb", "4g.44gb",
                  "7g.88gb"},
    "GB200-186GB": {"1g.24gb", "2g.23gb", "3g.95gb", "4g.95gb", "7g.189gb"},
    "H100-80GB": {"8g.80gb"},
}
PRE_PRODUCTION_NAMES = set().union(*PRE_PRODUCTION.values())


def _text(name: str) -> str:
    text = (DATA / name).read_text(encoding="utf-8")
    if name == STOCK:
        return str(yaml.safe_load(text)["data"]["config.yaml"])
    return text


@functools.cache
def _raw(name: str) -> Any:
    return yaml.safe_load(_text(name))


@functools.cache
def _parsed(name: str) -> migparted.Config:
    return migparted.parse(_text(name), where=name)


def _layout_text(names: tuple[str, ...]) -> str:
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return " ".join(f"{v}×{k}" if v > 1 else k for k, v in sorted(counts.items()))


# ---------------------------------------------------------------- mig-parted's rules, here


def _go_uint(text: str) -> int | None:
    # strconv.ParseUint(s, 0, 32): 0x/0o/0b prefixes, underscores only with a prefix.
    try:
        value = int(text, 0)
    except ValueError:
        return None
    return value if 0 <= value < 2**32 else None


def _expected(doc: Any, config: str, device_id: int, count: int) -> list[Any]:
    """Per GPU: None (untouched), "disabled", or the sorted instance names."""
    out: list[Any] = []
    for index in range(count):
        chosen = None
        for entry in doc["mig-configs"][config]:
            filt = entry.get("device-filter")
            filters = [] if not filt else [filt] if isinstance(filt, str) else list(filt)
            if filters and device_id not in {_go_uint(f) for f in filters}:
                continue
            devices = entry["devices"]
            if devices != "all" and index not in devices:
                continue
            chosen = entry
        if chosen is None:
            out.append(None)
        elif not chosen["mig-enabled"]:
            out.append("disabled")
        else:
            out.append(tuple(sorted(n for n, k in (chosen.get("mig-devices") or {}).items()
                                    for _ in range(k))))
    return out


def _device_ids() -> list[int]:
    """Every PCI id NVIDIA's configs filter on, and every id in the catalog."""
    found: set[int] = set()
    for name in [*CONFIG_FILES, STOCK]:
        if name in REFUSED:
            continue
        for entries in (_raw(name).get("mig-configs") or {}).values():
            for e in entries:
                filt = e.get("device-filter") or []
                for f in [filt] if isinstance(filt, str) else filt:
                    number = _go_uint(f)
                    if number is not None:
                        found.add(number)
    for m in CATALOG.models:
        found.update(n for d in m.device_ids if (n := _go_uint(d)) is not None)
    return sorted(found)


DEVICE_IDS = _device_ids()


# ---------------------------------------------------------------- parsing


def test_the_data_is_all_there() -> None:
    assert len(CONFIG_FILES) == 86
    assert (DATA / STOCK).is_file() and (DATA / "spec_cases.yaml").is_file()


@pytest.mark.parametrize("name", CONFIG_FILES)
def test_every_config_parses_as_mig_parted_parses_it(name: str) -> None:
    if name in REFUSED:
        with pytest.raises(errors.ConfigError, match=r"all-1g\.10gb.*valid list"):
            migparted.parse(_text(name), where=name)
        return
    cfg = _parsed(name)
    raw = _raw(name)["mig-configs"]
    assert cfg.names() == list(raw)
    for config, entries in raw.items():
        assert len(cfg.configs[config]) == len(entries)
        for got, want in zip(cfg.configs[config], entries, strict=True):
            filt = want.get("device-filter")
            filters = [] if not filt else [filt] if isinstance(filt, str) else filt
            assert [_go_uint(f) for f in got.device_filter] == [_go_uint(f) for f in filters]
            assert got.devices == (None if want["devices"] == "all" else tuple(want["devices"]))
            assert got.mig_enabled is want["mig-enabled"]
            want_names = sorted(n for n, k in (want.get("mig-devices") or {}).items()
                                for _ in range(k))
            assert list(got.names()) == want_names


def test_the_operator_configmap_manifest_reads_byte_for_byte() -> None:
    obj = yaml.safe_load((DATA / STOCK).read_text(encoding="utf-8"))
    cfg = migparted.parse_configmap(obj)
    assert "all-balanced" in cfg.configs and cfg.names() == list(_raw(STOCK)["mig-configs"])


SPEC_CASES = yaml.safe_load((DATA / "spec_cases.yaml").read_text(encoding="utf-8"))["cases"]


@pytest.mark.parametrize("case", SPEC_CASES, ids=[c["id"] for c in SPEC_CASES])
def test_mig_parted_spec_cases_same_accept_and_refuse(case: dict[str, Any]) -> None:
    if case["mig_parted_accepts"]:
        migparted.parse(case["text"])
    else:
        with pytest.raises(errors.ConfigError):
            migparted.parse(case["text"])


# ---------------------------------------------------------------- resolution


@pytest.mark.parametrize("name", [n for n in [*CONFIG_FILES, STOCK] if n not in REFUSED])
def test_every_config_and_device_id_resolves_as_mig_parted_applies_it(name: str) -> None:
    cfg, raw = _parsed(name), _raw(name)
    for config in cfg.names():
        for device in DEVICE_IDS:
            hexid = f"0x{device:08X}"
            got = migparted.apply(cfg, config, device_ids=(hexid,), gpu_count=GPUS)
            want = _expected(raw, config, device, GPUS)
            as_expected = [None if a is None else a.names if a.enabled else "disabled"
                           for a in got]
            assert as_expected == want, (config, hexid)


def _observed() -> tuple[dict[tuple[str, str, str], set[str]], set[tuple[str, str]]]:
    """Invalid layouts found (with where) and pre-production names met on their own GPU."""
    invalid: dict[tuple[str, str, str], set[str]] = {}
    pre: set[tuple[str, str]] = set()
    for name in [*CONFIG_FILES, STOCK]:
        if name in REFUSED:
            continue
        cfg = _parsed(name)
        for config in cfg.names():
            for device in DEVICE_IDS:
                hexid = f"0x{device:08X}"
                model = CATALOG.by_device_id(hexid)
                if model is None:
                    continue  # 0x1FB0: the DGX Station's display GPU, not MIG-capable
                for a in migparted.apply(cfg, config, device_ids=(hexid,), gpu_count=GPUS):
                    if a is None or not a.names:
                        continue
                    unknown = {n for n in a.names if not model.has_profile(n)}
                    if unknown:
                        pre.update((model.id, n) for n in unknown & PRE_PRODUCTION_NAMES)
                        continue  # not for this GPU: mig-parted would fail to apply it
                    if not layouts.check(model, a.names).valid:
                        key = (model.id, config, _layout_text(a.names))
                        invalid.setdefault(key, set()).add(name)
    return invalid, pre


OBSERVED = _observed()


def test_layout_check_accepts_every_layout_that_can_exist() -> None:
    invalid, _ = OBSERVED
    assert set(invalid) - set(CANNOT_EXIST) == set()
    assert set(CANNOT_EXIST) - set(invalid) == set()  # the list does not rot
    assert all(STOCK not in where for where in invalid.values())


def test_today_s_default_configs_hold_only_layouts_that_exist() -> None:
    # The per-family examples (…_hopper_blackwell) stay unfiltered for their GPUs; the
    # defaults every GPU gets filter where a name means different profiles.
    invalid, _ = OBSERVED
    newest = [n for n in CONFIG_FILES if n > "mp075" and ("config_default" in n
                                                         or "0400_configmap" in n)] + [STOCK]
    assert len(newest) >= 5
    assert not {k: w for k, w in invalid.items() if set(w) & set(newest)}


def test_every_filtered_entry_names_profiles_of_the_gpus_it_filters() -> None:
    """An entry filtered on a PCI id is meant for that GPU: the catalog must know each of its
    profiles there (apart from pre-production names, see PRE_PRODUCTION) and accept it."""
    missing: set[tuple[str, str, str]] = set()
    for name in [*CONFIG_FILES, STOCK]:
        if name in REFUSED:
            continue
        for config, entries in _parsed(name).configs.items():
            for e in entries:
                for f in e.device_filter:
                    model = CATALOG.by_device_id(f)
                    if model is None:
                        assert migparted.device_number(f) == 0x1FB010DE, f  # DGX Display
                        continue
                    for n in set(e.names()):
                        if not model.has_profile(n) and n not in PRE_PRODUCTION.get(model.id, ()):
                            missing.add((name, config, f"{model.id}:{n}"))
    assert missing == set()


def test_every_unfiltered_layout_fits_some_catalog_model() -> None:
    """An unfiltered entry is written for some GPU: one model of the catalog must hold it."""
    orphans: set[tuple[str, str]] = set()
    cannot = {layout for _, _, layout in CANNOT_EXIST}
    for name in [*CONFIG_FILES, STOCK]:
        if name in REFUSED:
            continue
        for config, entries in _parsed(name).configs.items():
            for e in entries:
                names = e.names()
                if e.device_filter or not names or set(names) & PRE_PRODUCTION_NAMES:
                    continue
                if any(all(m.has_profile(n) for n in names) and layouts.check(m, names).valid
                       for m in CATALOG.models):
                    continue
                if _layout_text(names) not in cannot:
                    orphans.add((config, _layout_text(names)))
    assert orphans == set()


def test_pre_production_names_were_met_on_their_gpus() -> None:
    _, pre = OBSERVED
    assert {"GB200-186GB", "H100-94GB"} <= {m for m, _ in pre}


def test_every_nvidia_device_id_is_in_the_catalog() -> None:
    unknown = [f"0x{d:08X}" for d in DEVICE_IDS
               if CATALOG.by_device_id(f"0x{d:08X}") is None]
    assert unknown == ["0x1FB010DE"]  # the DGX Station's display GPU, disabled by NVIDIA


def _stock_layouts() -> set[tuple[str, tuple[str, ...]]]:
    out: set[tuple[str, tuple[str, ...]]] = set()
    cfg = _parsed(STOCK)
    for config in cfg.names():
        for device in DEVICE_IDS:
            hexid = f"0x{device:08X}"
            model = CATALOG.by_device_id(hexid)
            if model is None:
                continue
            for a in migparted.apply(cfg, config, device_ids=(hexid,), gpu_count=1):
                if a is not None and a.names and all(model.has_profile(n) for n in a.names):
                    out.add((model.id, a.names))
    return out


def test_migfit_layout_check_accepts_every_layout_of_the_stock_configmap(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The command an operator runs (``migfit layout check --gpu MODEL PROFILE...``) agrees."""
    from migfit import cli

    stock = sorted(_stock_layouts())
    assert len(stock) > 60
    for model, names in stock:
        assert cli.main(["layout", "check", "--gpu", model, *names]) == 0, (model, names)
    assert "@" in capsys.readouterr().out
