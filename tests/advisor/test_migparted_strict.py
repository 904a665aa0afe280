"""mig-parted v1 configs: strict parsing, resolution per GPU, inference, rendering round trip."""

from __future__ import annotations

import re

import pytest

from migfit import errors, layouts, migparted, profiles

A100 = profiles.builtin().get("A100-80GB")
H200 = profiles.builtin().get("H200-141GB")
# mig-parted matches device-filter against the GPU's own PCI id: these nodes' product labels
# (NVIDIA-A100-80GB-PCIe) pin it. An A100-80GB whose id is not pinned is a separate case.
A100_PCIE = A100.device_ids_for("NVIDIA-A100-80GB-PCIe")

DEFAULT = """
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  all-balanced:
    - device-filter: ["0x233510DE", "0x233B10DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
    - device-filter: ["0x20B510DE", "0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
  custom-config:
    - devices: [0,1,2,3]
      mig-enabled: false
    - devices: [4]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""


def test_parses_the_default_configmap_and_resolves_per_model() -> None:
    cfg = migparted.parse(DEFAULT)
    assert cfg.names() == ["all-disabled", "all-enabled", "all-1g.10gb", "all-balanced",
                           "custom-config"]
    a100 = migparted.resolve(cfg, "all-balanced", model=A100, gpu_count=2,
                             device_ids=A100_PCIE)
    assert a100.gpus == (("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"),) * 2
    h200 = migparted.resolve(cfg, "all-balanced", model=H200, gpu_count=1)
    assert h200.gpus == (("1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"),)
    custom = migparted.resolve(cfg, "custom-config", model=A100, gpu_count=5)
    assert custom.gpus[:4] == ((),) * 4 and len(custom.gpus[4]) == 7
    assert migparted.resolve(cfg, "all-enabled", model=A100, gpu_count=1).gpus == ((),)


@pytest.mark.parametrize("text, words", [
    ("mig-configs: {}", "version"),
    ("version: v2\nmig-configs: {}", "v1"),
    ("version: v1\nmig-configs: {a: []}", "empty list"),
    ("version: v1\nmig-configs: {}", "mig-configs is empty"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true}]}", "mig-devices"),
    ("version: v1\nmig-configs: {a: [{devices: [], mig-enabled: true}]}", "mig-devices"),
    # A null decodes to a nil map, which MigConfigSpec.UnmarshalJSON refuses when enabled.
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: null}]}",
     "not null"),
    ("version: v1\nmig-configs:\n  a:\n  - devices: all\n    mig-enabled: true\n"
     "    mig-devices:\n", "not null"),
    ("version: v1\nmig-configs: {a: [{devices: null, mig-enabled: false}]}", "devices"),
    ("version: v1\nmig-configs: {a: [{devices: [1.5], mig-enabled: false}]}", "devices"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, "
     "mig-devices: {1g.10gb: 1}}]}", "mig-enabled is false"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, colour: red}]}",
     "colour"),
    ("version: v1\nmig-configs: {a: [{devices: all}]}", "mig-enabled"),
    ("version: v1\nmig-configs: {a: [{mig-enabled: true}]}", "devices"),
    ("version: v1\nmig-configs: {a: [{devices: some, mig-enabled: true}]}", "devices"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: 'yes'}]}", "mig-enabled"),
    ("version: v1\nextra: 1\nmig-configs: {}", "extra"),
    ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, "
     "mig-devices: {1g.10gb: -1}}]}", "mig-devices"),
    ("[unclosed", "YAML"),
])
def test_rejects_what_mig_parted_rejects(text: str, words: str) -> None:
    with pytest.raises(errors.ConfigError, match=words):
        migparted.parse(text)


@pytest.mark.parametrize("text, problem", [
    ("root:x:0:0:root:/root:/bin/bash", "holds a YAML string, not a mapping"),
    ("- all-disabled", "holds a YAML list, not a mapping"),
    ("version: v1\nmig-configs: {a: [3]}",
     "mig-configs.a.0: a number, where a mapping (key: value) belongs"),
])
def test_what_is_no_config_says_what_a_config_is(text: str, problem: str) -> None:
    """pydantic said "Input should be a valid dictionary or instance of _Spec"."""
    with pytest.raises(errors.ConfigError) as info:
        migparted.parse(text, where="c.yaml")
    assert str(info.value) == f"c.yaml: {problem}; {migparted.CONFIG_FILE}"


def test_accepts_what_mig_parted_accepts() -> None:
    # mig-parted's v1 spec: empty device-filter (string or list) and devices lists parse, a
    # file may have no mig-configs, and mig-devices: {} with mig-enabled: false is allowed.
    assert migparted.parse("version: v1").names() == []
    cfg = migparted.parse(
        "version: v1\nmig-configs:\n"
        "  x:\n  - device-filter: []\n    devices: all\n    mig-enabled: true\n"
        "    mig-devices: {3g.40gb: 2}\n"
        "  - device-filter: ''\n    devices: []\n    mig-enabled: false\n"
        "    mig-devices: {}\n"
        "  - devices: [1, 1]\n    mig-enabled: false\n")
    lay = migparted.resolve(cfg, "x", model=A100, gpu_count=2)
    assert lay.gpus == (("3g.40gb",) * 2, ())


def test_accepts_what_go_decodes_leniently() -> None:
    # mig-parted reads YAML through sigs.k8s.io/yaml (YAML to JSON, then encoding/json): a
    # null mig-enabled is Go's false, devices is an []int (a negative index matches no GPU),
    # and a config named 123 or yes (YAML 1.1's true) is the string "123" or "true".
    cfg = migparted.parse(
        "version: v1\nmig-configs:\n"
        "  123:\n  - devices: all\n    mig-enabled: null\n    mig-devices: null\n"
        "  yes:\n  - devices: [-1]\n    mig-enabled: true\n    mig-devices: {7g.80gb: 1}\n"
        "  - devices: [1]\n    mig-enabled: true\n    mig-devices: {3g.40gb: 2}\n")
    assert cfg.names() == ["123", "true"]
    (disabled,) = migparted.apply(cfg, "123", device_ids=A100.device_ids, gpu_count=1)
    assert disabled is not None and not disabled.enabled
    untouched, split = migparted.apply(cfg, "true", device_ids=A100.device_ids, gpu_count=2)
    assert untouched is None  # [-1] selects no GPU: GPU 0 keeps what it has
    assert split is not None and split.names == ("3g.40gb", "3g.40gb")


def test_a_pre_production_profile_name_says_which_name_to_use() -> None:
    # GPU Operator ConfigMap mp072 (2025-08): all-balanced for 0x2941 asks for 1g.24gb.
    cfg = migparted.parse(
        "version: v1\nmig-configs:\n  all-balanced:\n"
        "  - device-filter: [\"0x294110DE\"]\n    devices: all\n    mig-enabled: true\n"
        "    mig-devices: {1g.24gb: 2, 2g.47gb: 1, 3g.95gb: 1}\n")
    gb200 = profiles.builtin().get("GB200-186GB")
    with pytest.raises(errors.ConfigError, match=r"'1g.24gb' is what pre-production "
                       r"GB200-186GB boards called 1g.23gb.*use 1g.23gb\)"):
        migparted.resolve(cfg, "all-balanced", model=gb200, gpu_count=1,
                          device_ids=["0x294110DE"])


def test_device_filter_compares_ids_as_numbers() -> None:
    text = ("version: v1\nmig-configs:\n  x:\n  - device-filter: [{ids}]\n"
            "    devices: all\n    mig-enabled: true\n    mig-devices: {{3g.40gb: 2}}\n")
    for ids in ("'0x20b510de'", "'0X20B510DE'", "'0x20B5_10DE'", "'bogus', '0x20B510DE'"):
        cfg = migparted.parse(text.format(ids=ids))
        assert migparted.applies_to(cfg, "x", model=A100, gpu_count=1,
                                    device_ids=A100_PCIE), ids
    # No base prefix (Go's ParseUint reads it as decimal and fails), or a list holding only
    # "": such filters match no GPU.
    for ids in ("'20B510DE'", "''"):
        cfg = migparted.parse(text.format(ids=ids))
        assert not migparted.applies_to(cfg, "x", model=A100, gpu_count=1,
                                        device_ids=A100_PCIE), ids


def test_later_entries_override_earlier_ones() -> None:
    cfg = migparted.parse("version: v1\nmig-configs:\n  x:\n"
                          "  - devices: all\n    mig-enabled: true\n"
                          "    mig-devices: {1g.10gb: 7}\n"
                          "  - device-filter: ['0x20B510DE']\n    devices: [1]\n"
                          "    mig-enabled: true\n    mig-devices: {7g.80gb: 1}\n"
                          "  - device-filter: '0x233510DE'\n    devices: all\n"
                          "    mig-enabled: false\n")
    lay = migparted.resolve(cfg, "x", model=A100, gpu_count=3, device_ids=A100_PCIE)
    assert lay.gpus == (("1g.10gb",) * 7, ("7g.80gb",), ("1g.10gb",) * 7)


def test_device_filter_as_a_string() -> None:
    cfg = migparted.parse("version: v1\nmig-configs:\n  x:\n  - device-filter: '0x20b510de'\n"
                          "    devices: all\n    mig-enabled: true\n"
                          "    mig-devices: {3g.40gb: 2}\n")
    assert migparted.resolve(cfg, "x", model=A100, gpu_count=1,
                            device_ids=A100_PCIE).gpus == (("3g.40gb",) * 2,)
    with pytest.raises(errors.ConfigError, match="no entry for GPU 0"):
        migparted.resolve(cfg, "x", model=H200, gpu_count=1)


def test_invalid_layout_and_unknown_profile_are_reported() -> None:
    bad = migparted.parse("version: v1\nmig-configs:\n  x:\n  - devices: all\n"
                          "    mig-enabled: true\n"
                          "    mig-devices: {3g.40gb: 2, 1g.10gb: 1}\n"
                          "  y:\n  - devices: all\n    mig-enabled: true\n"
                          "    mig-devices: {1g.18gb: 1}\n")
    with pytest.raises(errors.ConfigError, match="not a valid layout"):
        migparted.resolve(bad, "x", model=A100, gpu_count=1)
    with pytest.raises(errors.ConfigError, match="no MIG profile"):
        migparted.resolve(bad, "y", model=A100, gpu_count=1)
    with pytest.raises(errors.ConfigError, match="not in the ConfigMap"):
        migparted.resolve(bad, "z", model=A100, gpu_count=1)


def test_configmap_key() -> None:
    cm = {"metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
          "data": {"config.yaml": DEFAULT}}
    assert "all-balanced" in migparted.parse_configmap(cm).configs
    with pytest.raises(errors.ConfigError, match=r"config\.yaml"):
        migparted.parse_configmap({"data": {"a": "x", "b": "y"}})


def test_inference_from_allocatable_is_valid_and_says_so() -> None:
    lay = migparted.infer(A100, {profiles.ProfileName("3g.40gb"): 2,
                                 profiles.ProfileName("1g.10gb"): 8}, 2)
    assert lay.inferred and "inferred" in lay.note
    assert sum(len(g) for g in lay.gpus) == 10 and len(lay.gpus) == 2
    for g in lay.gpus:
        assert layouts.check(A100, g).valid
    stale = migparted.infer(A100, {profiles.ProfileName("7g.80gb"): 2}, 1)
    assert len(stale.gpus) == 2 and "need 2" in stale.note


def test_render_round_trips() -> None:
    gpus = [["1g.10gb"] * 7, ["3g.40gb", "3g.40gb"]]
    doc = migparted.render(migparted.custom_name(gpus), gpus, model=A100)
    cfg = migparted.parse(migparted.dump(doc))
    (name,) = cfg.names()
    back = migparted.resolve(cfg, name, model=A100, gpu_count=2)
    assert [list(g) for g in back.gpus] == gpus
    uniform = [["1g.10gb", "3g.40gb"]] * 3
    assert migparted.custom_name(uniform) == "migfit-1g.10gb-3g.40gb"
    assert migparted.render("u", uniform)["mig-configs"]["u"][0]["devices"] == "all"


LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def test_custom_names_are_distinct_for_distinct_layouts_and_valid_label_values() -> None:
    """Every layout of every catalog model, as a uniform config: one name per layout. Before,
    ``+`` and ``-`` were both written ``-``: ``1g.24gb+me`` and ``1g.24gb-me`` (RTX PRO 6000)
    got one name, 19 names for two layouts each, and the apply mode kept one of two such
    recommendations under the other's name."""
    seen: dict[str, tuple[str, ...]] = {}
    for model in profiles.builtin().models:
        for lay in layouts.of(model).all:
            names = tuple(lay.profile_names())
            name = migparted.custom_name([list(names)] * 2)
            assert len(name) <= 63 and LABEL_VALUE.fullmatch(name), name
            assert seen.setdefault(name, names) == names, (name, seen[name], names)
    rtx = profiles.builtin().get("RTX-PRO-6000-96GB")
    assert migparted.custom_name([["1g.24gb+me"]]) == "migfit-1g.24gb.me"  # NVIDIA's spelling
    assert migparted.custom_name([["1g.24gb-me"]]) == "migfit-1g.24gb-me"
    for gpus in ([["1g.24gb+me", "1g.24gb"]], [["1g.24gb-me", "1g.24gb"]]):
        doc = migparted.render(migparted.custom_name(gpus), gpus, model=rtx)
        (name,) = migparted.parse(migparted.dump(doc)).names()
        assert name == migparted.custom_name(gpus)


def test_a_uniform_name_past_a_label_values_length_gets_a_digest() -> None:
    gpus = [["1g.10gb+" + "x" * 60] * 3]
    name = migparted.custom_name(gpus)
    assert name.startswith("migfit-") and len(name) == len("migfit-") + 10


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n"])
def test_an_empty_document_is_accepted_and_holds_no_config(text: str) -> None:
    assert migparted.parse(text).names() == []


def test_an_empty_mapping_is_refused_as_mig_parted_refuses_it() -> None:
    # mig-parted's Spec.UnmarshalJSON: no "version" in {} gives "unknown version: "
    # (api/spec/v1/spec.go); only an empty document holds no config.
    with pytest.raises(errors.ConfigError, match="version"):
        migparted.parse("{}")


@pytest.mark.parametrize("name", ["bogus", "1g.5GB", "1g5gb", "g.5gb", "1g.5gb+", "1g.5gb+1x",
                                  "1g.5gb++me", " 1g.5gb", "1g.5gb+me,me,",
                                  # go-nvlib: "non unique attribute in list"
                                  "1g.10gb+me,me", "1g.10gb-me,me", "1g.10gb+gfx,me-me,me"])
def test_a_malformed_profile_name_is_refused_at_parse_time(name: str) -> None:
    text = ("version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n"
            f"    mig-devices: {{'{name}': 1}}\n")
    with pytest.raises(errors.ConfigError, match="not a MIG profile name"):
        migparted.parse(text)


@pytest.mark.parametrize("name", ["1g.5gb", "1c.2g.10gb", "1g.10gb+me", "1g.24gb+me.all",
                                  "1g.24gb+gfx", "1g.24gb-me", "8g.80gb"])
def test_well_formed_names_parse_whether_or_not_a_gpu_has_them(name: str) -> None:
    text = ("version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n"
            f"    mig-devices: {{'{name}': 1}}\n")
    assert migparted.parse(text).configs["c"][0].names() == (name,)


@pytest.mark.parametrize("tail", ["---\n", "---\nversion: v2\n"])
def test_only_the_first_document_is_read_as_go_yaml_unmarshal_reads_it(tail: str) -> None:
    # mig-parted reads its config with sigs.k8s.io/yaml, whose Unmarshal (go-yaml) decodes
    # the first document and ignores what follows; a ConfigMap ending in "---" still works.
    text = ("version: v1\nmig-configs:\n  c:\n  - devices: all\n    mig-enabled: true\n"
            "    mig-devices: {'3g.40gb': 2}\n")
    assert migparted.parse(text + tail).configs["c"][0].names() == ("3g.40gb", "3g.40gb")
    assert migparted.parse("---\n" + text + tail).names() == ["c"]


def test_tab_indented_json_is_read_as_go_yaml_reads_it() -> None:
    text = ('{\n\t"version": "v1",\n\t"mig-configs": {\n\t\t"c": [{\n\t\t\t"devices": "all",\n'
            '\t\t\t"mig-enabled": true,\n\t\t\t"mig-devices": {"1g.5gb\\t": 0, "3g.20gb": 2},\n'
            '\t\t}]\n\t}\n}')
    with pytest.raises(errors.ConfigError, match="not a MIG profile name"):
        migparted.parse(text)  # the tab inside the quoted name is kept, and refused
    cfg = migparted.parse(text.replace('"1g.5gb\\t": 0, ', ""))
    assert cfg.configs["c"][0].names() == ("3g.20gb", "3g.20gb")
    # Block YAML indented with tabs stays refused (go-yaml refuses it too).
    with pytest.raises(errors.ConfigError, match="YAML"):
        migparted.parse("version: v1\nmig-configs:\n\tc: []\n")


@pytest.mark.parametrize(("text", "number"), [
    ("0x20B510DE", 0x20B510DE), ("0X20b510de", 0x20B510DE), ("0x20B5_10DE", 0x20B510DE),
    ("0x_20B510DE", 0x20B510DE), ("010", 8), ("0o17", 15), ("0b101", 5), ("1_000", 1000),
    # What Go's strconv.ParseUint(s, 0, 32) refuses, and so matches no GPU in mig-parted:
    (" 0x20B510DE", None), ("0x20B510DE ", None), ("+0x20B510DE", None), ("-1", None),
    ("0x20B510DE_", None), ("1__0", None), ("0x", None), ("0x1FFFFFFFF", None),
    ("019", None),
])
def test_device_filter_ids_are_read_as_go_parses_them(text: str, number: int | None) -> None:
    assert migparted.device_number(text) == number
    cfg = migparted.parse("version: v1\nmig-configs:\n  c:\n  - devices: all\n"
                          f"    device-filter: '{text}'\n    mig-enabled: true\n"
                          "    mig-devices: {'1g.10gb': 7}\n")
    applied = migparted.apply(cfg, "c", device_ids=["0x20B510DE"], gpu_count=1)
    assert (applied[0] is not None) == (number == 0x20B510DE), applied


@pytest.mark.parametrize("devices, said", [
    ("[0, x]", "'x' is not a GPU index"),
    ("[0, true]", "True is not a GPU index"),
    ("bogus", "'bogus' is not `all`"),
    ("{}", "a mapping"),
    ("null", "a null"),
])
def test_devices_that_are_neither_all_nor_gpu_indexes_say_what_belongs(devices: str,
                                                                         said: str) -> None:
    """pydantic's union said ``devices.literal['all']: Input should be 'all'`` for a list
    with one bad element: neither that a list of indexes is allowed nor which element is
    wrong (an outside check)."""
    text = f"version: v1\nmig-configs:\n  c:\n  - devices: {devices}\n    mig-enabled: false\n"
    with pytest.raises(errors.ConfigError) as got:
        migparted.parse(text)
    assert (f"mig-configs.c.0.devices: {said}: use `all` or a list of GPU indexes, e.g. [0, 1];"
            in got.value.message), got.value.message
