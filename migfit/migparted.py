"""mig-parted's config format: parse strictly, resolve a node's config to per-GPU layouts, render.

The MIG Manager applies the config named by a node's ``nvidia.com/mig.config`` label from the
mig-parted ConfigMap (reference/MIG.md 5-6). This module reads that ConfigMap the way
mig-parted does (``version: v1`` required, unknown fields, empty lists and ``mig-devices``
with ``mig-enabled: false`` rejected, mig-devices names checked for format), turns a config
name into the layout of each GPU of a node the way mig-parted applies it (``device-filter``
matched against the GPU's own PCI id, ``devices`` by index, the last entry that selects a GPU
wins, unselected GPUs untouched), checks every layout with the placement engine, and prints
custom configs in the same format. GFD does not label the PCI id: where a node's product
label leaves several ids possible and a filter holds only some, the config is unknown there,
never taken as applied. When no ConfigMap is readable, a node's layout is inferred from its
allocatable, and says so. The MIG Manager of mig-parted v0.14.0 and later also writes, per
node, the configs it generated for that node's GPUs and applies those instead: a node's own
configs win over the shared ConfigMap for that node (``node_configs``, ``Config.for_node``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import pydantic
import pydantic_core
import yaml

from migfit import errors, layouts, profiles, strictfiles

ProfileName = profiles.ProfileName

DEFAULT_CONFIGMAP = "default-mig-parted-config"
DEFAULT_NAMESPACE = "gpu-operator"
CONFIGMAP_KEY = "config.yaml"


# ---------------------------------------------------------------- the schema (strict)


class _Entry(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True,
                                       populate_by_name=True)

    device_filter: str | list[str] | None = pydantic.Field(default=None, alias="device-filter")
    # mig-parted decodes devices into Go's []int: a negative index is accepted (it matches
    # no GPU).
    devices: Literal["all"] | list[int]
    # Required, but a null is Go's zero value: false (encoding/json leaves the bool alone).
    mig_enabled: bool | None = pydantic.Field(alias="mig-enabled")
    mig_devices: dict[str, pydantic.NonNegativeInt] | None = pydantic.Field(
        default=None, alias="mig-devices")

    @pydantic.field_validator("devices", mode="before")
    @classmethod
    def _devices(cls, value: object) -> object:
        # One sentence for any other value: the union's own errors said only "Input should
        # be 'all'" for a list with a bad element, and never that a list is allowed.
        def index(i: object) -> bool:
            return isinstance(i, int) and not isinstance(i, bool)

        if value == "all" or (isinstance(value, list) and all(index(i) for i in value)):
            return value
        if isinstance(value, list):
            what = f"{next(i for i in value if not index(i))!r} is not a GPU index"
        elif isinstance(value, str):
            what = f"{value!r} is not `all`"
        else:
            what = f"a {strictfiles.kind_of(value)}"
        raise pydantic_core.PydanticCustomError(
            "devices", "{what}: use `all` or a list of GPU indexes, e.g. [0, 1]", {"what": what})

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> _Entry:
        # mig-parted's MigConfigSpec.UnmarshalJSON: an empty device-filter or devices list is
        # valid (it matches every GPU, resp. none); mig-devices must be present and not null
        # when enabled ({} is fine: a null decodes to a nil map, which it refuses) and empty
        # when disabled.
        if self.mig_enabled and self.mig_devices is None:
            raise ValueError("mig-devices is required (and not null) when mig-enabled is "
                             "true (use mig-devices: {} for MIG enabled with no instances)")
        if not self.mig_enabled and self.mig_devices:
            raise ValueError("mig-devices is set but mig-enabled is false")
        for name in self.mig_devices or {}:
            if not valid_profile_format(name):
                raise ValueError(f"mig-devices: {name!r} is not a MIG profile name "
                                 f"([<C>c.]<G>g.<GB>gb, optionally +me, +me.all, +gfx or -me)")
        return self


CONFIG_FILE = ("a mig-parted config is YAML with `version: v1` and `mig-configs:`, each "
               "config a list of entries with devices, mig-enabled and mig-devices, as in the "
               "GPU Operator's default-mig-parted-config")
"""What a mig-parted config must be, said after each problem found in one."""


class _Spec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True,
                                       populate_by_name=True)

    version: str
    # Optional in mig-parted (a file with only a version parses), but never empty when given.
    mig_configs: dict[str, list[_Entry]] = pydantic.Field(default_factory=dict,
                                                          alias="mig-configs")


device_number = profiles.device_number

# mig-parted checks each mig-devices key's format when it parses a config (MigConfigSpec's
# UnmarshalJSON -> AssertValidFormat, go-nvlib's parseMigProfile): "[<C>c.]<G>g.<GB>gb",
# optionally "+" and attributes ("me", "me.all", "gfx"), optionally "-" and the attributes
# taken away ("-me"). Whether the profile exists is only known on the GPU.
_ATTR = r"[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)*"
_PROFILE_FORMAT = re.compile(
    rf"^(?:[0-9]+c\.)?[0-9]+g\.[0-9]+gb(?:\+{_ATTR}(?:,{_ATTR})*)?(?:-{_ATTR}(?:,{_ATTR})*)?$")


def valid_profile_format(name: str) -> bool:
    """Whether mig-parted accepts ``name`` as a MIG profile when it parses a config: the
    format, and each attribute list (after ``+``, after ``-``) without a repeated attribute
    (go-nvlib parseMigProfileAttributes: "non unique attribute in list")."""
    if _PROFILE_FORMAT.match(name) is None:
        return False
    rest = name.partition("+")[2] if "+" in name else ""
    added, _, removed = rest.partition("-") if rest else ("", "", name.partition("-")[2])
    return all(len(set(attrs)) == len(attrs)
               for part in (added, removed) if part for attrs in [part.split(",")])


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a named config: which GPUs it selects and what it puts on each."""

    device_filter: tuple[str, ...]  # upper-case PCI device ids; empty = every device
    devices: tuple[int, ...] | None  # None = all
    mig_enabled: bool
    mig_devices: tuple[tuple[ProfileName, int], ...]

    def selects(self, device_ids: Sequence[str], index: int) -> bool | None:
        """Whether mig-parted applies this entry to GPU ``index``, whose PCI id is one of
        ``device_ids`` (empty: not known); None when that cannot be told.

        mig-parted matches ``device-filter`` against the GPU's own id, as numbers, as its
        ``NewDeviceIDFromString`` parses them (``0x20b510de`` is ``0x20B510DE``); a filter
        that does not parse matches no GPU. When the node's labels leave several ids
        possible and the filter holds some of them only, the answer is None: such a config
        is unknown there, never taken as applied.
        """
        if self.devices is not None and index not in self.devices:
            return False
        if not self.device_filter:
            return True
        wanted = {device_number(f) for f in self.device_filter} - {None}
        ids = {device_number(d) for d in device_ids} - {None}
        if not ids:
            return None if wanted else False
        hits = len(ids & wanted)
        if hits == len(ids):
            return True
        return False if hits == 0 else None

    def names(self) -> tuple[ProfileName, ...]:
        return tuple(sorted(p for p, n in self.mig_devices for _ in range(n)))


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    """The mig-parted configs the MIG Manager applies: config name -> entries, in file order,
    and the configs the MIG Manager of some nodes generated for their own GPUs (see
    ``node_configs``), which those nodes use instead."""

    configs: Mapping[str, tuple[Entry, ...]]
    # node -> its MIG Manager's generated configs (the per-node ConfigMap); empty for a file
    per_node: Mapping[str, Config] = dataclasses.field(default_factory=dict)
    # the node whose MIG Manager generated these configs from its GPUs; None when shared
    node: str | None = None

    def names(self) -> list[str]:
        return list(self.configs)

    def for_node(self, node: str) -> Config:
        """The configs the MIG Manager of ``node`` applies: its own generated ones when it
        wrote them, else these."""
        own = self.per_node.get(node)
        return own if own is not None else self

    @property
    def empty(self) -> bool:
        """No config at all, shared or per node."""
        return not self.configs and not self.per_node


def parse_data(raw: Any, *, where: str = "mig-parted config") -> Config:
    """Validate an already-decoded document; a ConfigError saying what to change.

    An empty document is accepted and holds no config, as mig-parted accepts it (its spec
    test "Empty"); ``{}`` is not: mig-parted's Spec.UnmarshalJSON then finds no version
    ("unknown version: ").
    """
    if raw is None:
        return Config({})
    configs = raw.get("mig-configs") if isinstance(raw, dict) else None
    if isinstance(configs, dict):
        # mig-parted reads YAML through sigs.k8s.io/yaml, which turns it into JSON first:
        # a config named 123 or true becomes the string "123" or "true".
        raw = {**raw, "mig-configs": {_json_key(k): v for k, v in configs.items()}}
    spec = strictfiles.validate(_Spec, raw, where=where, expected=CONFIG_FILE)
    strictfiles.require_version(spec.version, where=where,
                                hint="mig-parted configs use version: v1")
    if "mig_configs" in spec.model_fields_set and not spec.mig_configs:
        raise errors.ConfigError(f"{where}: mig-configs is empty; mig-parted needs at least "
                                 f"one config in it (or no mig-configs key at all)")
    out: dict[str, tuple[Entry, ...]] = {}
    for name, entries in spec.mig_configs.items():
        if not entries:
            raise errors.ConfigError(f"{where}: mig-configs.{name} is an empty list")
        built = []
        for e in entries:
            filt = e.device_filter
            # mig-parted: a string filter "" and an empty list both mean no filter.
            filters = () if not filt else (filt,) if isinstance(filt, str) else tuple(filt)
            built.append(Entry(
                device_filter=tuple(f.upper() for f in filters),
                devices=None if e.devices == "all" else tuple(e.devices),
                mig_enabled=bool(e.mig_enabled),
                mig_devices=tuple(sorted((ProfileName(p), n)
                                         for p, n in (e.mig_devices or {}).items() if n)),
            ))
        out[name] = tuple(built)
    return Config(out)


def _json_key(key: object) -> object:
    """A YAML mapping key as JSON has it: booleans and integers as their text (other
    non-string keys are left for the schema to refuse)."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    return key


def _outside_quotes_tabs_as_spaces(text: str) -> str:
    out: list[str] = []
    quote = ""
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "\t":
            ch = " "
        out.append(ch)
    return "".join(out)


def parse(text: str, *, where: str = "mig-parted config") -> Config:
    """Parse mig-parted's YAML (or JSON) config text strictly.

    mig-parted reads configs with go-yaml, which takes tabs as white space inside a flow
    (JSON-style) document, trailing commas included; PyYAML refuses a tab there, so a
    document that starts with ``{`` is read again with its tabs outside quotes as spaces.
    """
    return parse_data(_load(text, where=where), where=where)


def _load(text: str, *, where: str) -> Any:
    try:
        return strictfiles.load_yaml(text, where=where, first=True)
    except errors.ConfigError:
        if "\t" not in text or not text.lstrip().startswith(("{", "[")):
            raise
        return strictfiles.load_yaml(_outside_quotes_tabs_as_spaces(text), where=where,
                                  first=True)


def parse_configmap(obj: Mapping[str, Any]) -> Config:
    """The config inside a ConfigMap (key ``config.yaml``, or its only key)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = f"ConfigMap {meta.get('namespace', '')}/{meta.get('name', '')}" if meta else \
        "ConfigMap"
    data = obj.get("data")
    if not isinstance(data, dict) or not data:
        raise errors.ConfigError(f"{name} has no data; it needs a {CONFIGMAP_KEY} key")
    if CONFIGMAP_KEY in data:
        key = CONFIGMAP_KEY
    elif len(data) == 1:
        (key,) = data
    else:
        raise errors.ConfigError(f"{name} has keys {', '.join(sorted(data))}; the mig-parted "
                                 f"config must be under {CONFIGMAP_KEY}")
    text = data[key]
    if not isinstance(text, str):
        raise errors.ConfigError(f"{name}: data.{key} is not a string")
    return parse(text, where=f"{name} data.{key}")


# The per-node ConfigMap of the MIG Manager. From mig-parted v0.14.0 ("Add support for dynamic
# MIG config generation", NVIDIA/mig-parted PR 295; GPU Operator v26.3.0) the k8s-mig-manager
# pod, when no custom config file is given (CONFIG_FILE), generates at start-up a complete v1
# config from the MIG profiles NVML reports for its node's GPUs (pkg/mig/builder:
# all-disabled, all-enabled, all-<profile> with "+" written ".", all-balanced; a device-filter
# only where the node has more than one GPU type or a profile not every GPU has), applies
# configs from that file, and writes it to a ConfigMap (cmd/nvidia-mig-manager/main.go,
# createNodeConfigMap): name "<node>-mig-config", in the pod's namespace (POD_NAMESPACE: the
# GPU Operator's), labels app.kubernetes.io/component=nvidia-mig-manager and
# nvidia.com/node-name=<node>, owned by the MIG Manager pod (deleted with it), the text under
# data."config.yaml" (after a "# DO NOT EDIT" header). When generation finds no profile it falls
# back to the static default config and writes no ConfigMap. Assumed, not stated upstream: a
# node's ConfigMap that exists belongs to the MIG Manager running there now (a ConfigMap left
# by a pod being deleted is garbage-collected with it), and a failed write leaves the node with
# none, so the node is then read with the shared config although it applies its generated one.
NODE_CONFIGMAP_SUFFIX = "-mig-config"
NODE_CONFIGMAP_NODE_LABEL = "nvidia.com/node-name"
NODE_CONFIGMAP_COMPONENT = ("app.kubernetes.io/component", "nvidia-mig-manager")
NODE_CONFIGMAP_SELECTOR = (f"{NODE_CONFIGMAP_COMPONENT[0]}={NODE_CONFIGMAP_COMPONENT[1]},"
                           f"{NODE_CONFIGMAP_NODE_LABEL}")


def node_configmap_name(node: str) -> str:
    """The name of the ConfigMap the MIG Manager of ``node`` writes its configs to."""
    return node + NODE_CONFIGMAP_SUFFIX


def node_of_configmap(obj: Mapping[str, Any]) -> str | None:
    """The node a per-node MIG Manager ConfigMap is for, or None when ``obj`` is not one
    (its labels and its name must both say so)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        return None
    node = labels.get(NODE_CONFIGMAP_NODE_LABEL)
    key, value = NODE_CONFIGMAP_COMPONENT
    if (not isinstance(node, str) or not node or labels.get(key) != value
            or meta.get("name") != node_configmap_name(node)):
        return None
    return node


def node_configs(shared: Config | None, objects: Sequence[Mapping[str, Any]]
                 ) -> tuple[Config | None, dict[str, str]]:
    """The shared config with the per-node ConfigMaps among ``objects`` attached
    (``Config.for_node``); None when there is neither.

    Objects that are not per-node MIG Manager ConfigMaps are ignored. One that does not parse
    is left out and reported (node -> what to fix): that node is then read with the shared
    config.
    """
    own: dict[str, Config] = {}
    problems: dict[str, str] = {}
    for obj in objects:
        node = node_of_configmap(obj)
        if node is None:
            continue
        try:
            parsed = parse_configmap(obj)
        except errors.ConfigError as exc:
            problems[node] = exc.message
            continue
        own[node] = dataclasses.replace(parsed, node=node)
    if not own:
        return shared, problems
    return Config(configs=shared.configs if shared is not None else {}, per_node=own), problems


def _named_ids(config: Config) -> set[int]:
    return {n for entries in config.configs.values() for e in entries
            for n in (device_number(f) for f in e.device_filter) if n is not None}


def node_device_ids(config: Config, device_ids: Sequence[str]) -> tuple[str, ...]:
    """The PCI ids among ``device_ids`` that the node of a generated ``config`` has.

    The MIG Manager builds a node's configs from that node's GPUs, so every id its
    device-filters name is the id of one of them: where the product label leaves several ids
    possible (an H200 NVL or SXM), the generated filters tell which. Unchanged for a shared
    config, or when the filters name none of ``device_ids``.
    """
    if config.node is None:
        return tuple(device_ids)
    named = _named_ids(config)
    kept = tuple(d for d in device_ids if device_number(d) in named)
    return kept or tuple(device_ids)


# ---------------------------------------------------------------- per-node layouts


Source = Literal["config", "inferred"]


@dataclasses.dataclass(frozen=True, slots=True)
class NodeLayout:
    """The layout of each GPU of a node (index order), and where it was learnt."""

    gpus: tuple[tuple[ProfileName, ...], ...]  # sorted profile names per GPU
    source: Source
    config: str | None = None  # the config name when from the ConfigMap
    note: str = ""
    # GPUs (indexes) that run with MIG disabled (``mig-enabled: false``; under the mixed
    # strategy they are advertised as nvidia.com/gpu): their entry in ``gpus`` is ().
    disabled: frozenset[int] = frozenset()

    @property
    def inferred(self) -> bool:
        return self.source == "inferred"

    def totals(self) -> Counter[ProfileName]:
        out: Counter[ProfileName] = Counter()
        for g in self.gpus:
            out.update(g)
        return out


def _validate(model: profiles.GpuModel, names: Sequence[str], what: str) -> None:
    for n in names:
        if not model.has_profile(n):
            raise errors.ConfigError(f"{what}: {model.no_profile(n)}")
    if names:
        fit = layouts.check(model, names)
        if fit.reason is not None:
            raise errors.ConfigError(f"{what}: {' '.join(sorted(names))} is not a valid "
                                     f"layout of {model.id}: {fit.reason.message}")


@dataclasses.dataclass(frozen=True, slots=True)
class Applied:
    """What mig-parted puts on one GPU: MIG mode, and the instances when enabled."""

    enabled: bool
    names: tuple[ProfileName, ...]  # sorted; () when disabled or enabled with none


def apply(
    config: Config, name: str, *, device_ids: Sequence[str], gpu_count: int
) -> tuple[Applied | None, ...]:
    """What config ``name`` does to each of ``gpu_count`` GPUs whose PCI id is one of
    ``device_ids``, as mig-parted applies it; None for a GPU it leaves untouched.

    mig-parted walks the entries in order and applies each to the GPUs it selects (its
    ``device-filter`` matched against the GPU's own id, ``devices`` by index), so the last
    entry that selects a GPU decides it and a GPU no entry selects keeps whatever it has.
    An unknown config name, or an entry that may or may not select a GPU (the node's labels
    leave its id open), is a ConfigError: such a config is not known to apply.
    """
    entries = config.configs.get(name)
    if entries is None:
        known = ", ".join(config.configs) or "none"
        raise errors.ConfigError(f"mig-parted config {name!r} is not in the ConfigMap "
                                 f"(it has: {known})")
    out: list[Applied | None] = []
    for index in range(gpu_count):
        chosen: Entry | None = None
        for e in reversed(entries):  # the last entry that selects the GPU decides it
            hit = e.selects(device_ids, index)
            if hit is None:
                ids = ", ".join(device_ids) or "not known"
                raise errors.ConfigError(
                    f"mig-parted config {name!r} may not apply to GPU {index}: its "
                    f"device-filter {', '.join(e.device_filter)} holds some of the PCI ids "
                    f"the node's GPU may have ({ids}) but not all; the node's product label "
                    f"does not tell which")
            if hit:
                chosen = e
                break
        out.append(None if chosen is None else
                   Applied(enabled=chosen.mig_enabled,
                           names=chosen.names() if chosen.mig_enabled else ()))
    return tuple(out)


def resolve(
    config: Config, name: str, *, model: profiles.GpuModel, gpu_count: int,
    device_ids: Sequence[str] | None = None,
) -> NodeLayout:
    """Per-GPU layouts that config ``name`` gives a node of ``gpu_count`` GPUs of ``model``.

    ``device_ids`` are the PCI ids the node's GPUs may have (``model.device_ids_for`` its
    product label); by default any of the model's. A node's own generated config narrows them
    to the ids its filters name (``node_device_ids``). A GPU the config leaves untouched (its
    layout is then whatever it was), one it may or may not select, an unknown config name,
    or a layout invalid for the model is a ConfigError saying what to fix.
    """
    ids = node_device_ids(config, model.device_ids if device_ids is None else device_ids)
    gpus: list[tuple[ProfileName, ...]] = []
    disabled: set[int] = set()
    for index, applied in enumerate(apply(config, name, device_ids=ids,
                                          gpu_count=gpu_count)):
        if applied is None:
            raise errors.ConfigError(
                f"mig-parted config {name!r} has no entry for GPU {index} of a {model.id} "
                f"(device ids {', '.join(ids) or 'unknown'}): mig-parted leaves it as it is")
        if not applied.enabled:
            disabled.add(index)
        _validate(model, applied.names, f"mig-parted config {name!r}, GPU {index}")
        gpus.append(applied.names)
    return NodeLayout(gpus=tuple(gpus), source="config", config=name,
                      disabled=frozenset(disabled))


def applies_to(config: Config, name: str, *, model: profiles.GpuModel, gpu_count: int,
               device_ids: Sequence[str] | None = None) -> bool:
    """Whether ``name`` resolves cleanly for such a node (used to list candidate configs)."""
    try:
        resolve(config, name, model=model, gpu_count=gpu_count, device_ids=device_ids)
    except errors.ConfigError:
        return False
    return True


def infer(
    model: profiles.GpuModel, allocatable: Mapping[ProfileName, int], gpu_count: int
) -> NodeLayout:
    """Distribute a node's advertised instances over ``gpu_count`` GPUs as valid layouts.

    The API does not say which GPU holds which instance (reference/MIG.md 4), so this is one
    arrangement consistent with the allocatable; the result says it was inferred. When no
    arrangement over ``gpu_count`` GPUs exists (a stale count), the fewest GPUs that hold
    the instances are used and the note says so. A ConfigError for profiles the model lacks.
    """
    counts = {p: n for p, n in allocatable.items() if n > 0}
    for p in counts:
        if not model.has_profile(p):
            raise errors.ConfigError(f"the node advertises {p}, which {model.id} does not have")
    names = sorted((p for p, n in counts.items() for _ in range(n)),
                   key=lambda p: (-model.profile(p).memory_slices, p))
    by_key = layouts.of(model).by_key
    count = max(gpu_count, 0)
    note = "inferred from allocatable"
    if not names:
        return NodeLayout(gpus=((),) * count, source="inferred", note=note)
    # Uniform first: what every all-<profile> and balanced config gives.
    if count and all(n % count == 0 for n in counts.values()):
        per = [p for p, n in counts.items() for _ in range(n // count)]
        if layouts.key_of(model, per) in by_key:
            return NodeLayout(gpus=(tuple(sorted(per)),) * count, source="inferred",
                              note=note)
    for k in ([count] if count else []) + list(range(1, len(names) + 1)):
        found = _pack(model, names, k, by_key)
        if found is not None:
            if k != count:
                note = (f"inferred from allocatable; the instances need {k} GPU(s), not "
                        f"the {count} the node reports")
            return NodeLayout(gpus=tuple(found), source="inferred", note=note)
    raise errors.ConfigError(f"no arrangement of {' '.join(names)} fits {model.id} GPUs")


@dataclasses.dataclass(frozen=True, slots=True)
class Spread:
    """How many GPUs a node's instances in use need, and how many they may occupy."""

    needed: int  # the fewest GPUs whose instances can hold every one in use
    worst: int  # the most GPUs an allocation can spread them over (one each)


def spread(model: profiles.GpuModel, allocatable: Mapping[ProfileName, int],
           used: Mapping[ProfileName, int], gpu_count: int, *,
           replicas: Mapping[ProfileName, int] | None = None) -> Spread | None:
    """The spread of a node's instances in use over its GPUs, or None when nothing is in use
    or no arrangement of its allocatable is known.

    Inside a node the device plugin, not the scheduler, picks the instance, and the API does
    not say which GPU it is on: the answer is bounded on one arrangement consistent with the
    allocatable (``infer``). ``worst > needed`` means an allocation that spreads pods can
    leave fewer GPUs free of pods than packing them would. ``replicas``: pods that share one
    instance, per profile (time-slicing; ``allocatable`` and ``used`` then count replicas):
    in-use replicas need ``used / replicas`` instances, and may sit on ``used`` of them.
    """
    share = replicas or {}
    wanted = {p: n for p, n in used.items() if n > 0}
    if not wanted or any(not model.has_profile(p) for p in wanted):
        return None
    try:
        lay = infer(model, {p: n for p, n in profiles.instances_of(allocatable, share).items()
                            if model.has_profile(p)}, gpu_count)
    except errors.ConfigError:
        return None
    held = [Counter(g) for g in lay.gpus]
    least = {p: -(-n // max(share.get(p, 1), 1)) for p, n in wanted.items()}
    needed = None
    for k in range(1, len(held) + 1):
        if any(all(sum(held[i][p] for i in pick) >= n for p, n in least.items())
               for pick in itertools.combinations(range(len(held)), k)):
            needed = k
            break
    if needed is None:
        return None
    # The most GPUs with one in-use instance each: a matching of instances to GPUs.
    units = [p for p, n in sorted(wanted.items()) for _ in range(n)]
    owner: dict[int, int] = {}

    def augment(u: int, seen: set[int]) -> bool:
        for g, counts in enumerate(held):
            if counts[units[u]] and g not in seen:
                seen.add(g)
                if g not in owner or augment(owner[g], seen):
                    owner[g] = u
                    return True
        return False

    for u in range(len(units)):
        augment(u, set())
    return Spread(needed=needed, worst=len(owner))


def spread_note(model: profiles.GpuModel, allocatable: Mapping[ProfileName, int],
                used: Mapping[ProfileName, int], gpu_count: int, *,
                replicas: Mapping[ProfileName, int] | None = None) -> str:
    """A note for ``migfit status`` when the instances in use may sit on more GPUs than they
    need (see ``spread``), else ""."""
    s = spread(model, allocatable, used, gpu_count, replicas=replicas)
    if s is None or s.worst <= s.needed:
        return ""
    # k8s-device-plugin's --allocation-policy=packed (v0.20.0, PR #1621) groups candidates
    # by device UUID, one per MIG instance: it packs MIG instances by GPU only once they are
    # grouped by parent GPU (PR #2036, open in 2026-09). README, "Which GPU the device plugin
    # gives a pod".
    return (f"in-use instances fit on {s.needed} GPU(s) but may occupy {s.worst}: which GPUs "
            f"are idle is known only from the DCGM exporter (--gpu-usage-from dcgm) until the "
            f"device plugin's packed allocation policy packs MIG instances by GPU")


def _pack(model: profiles.GpuModel, names: list[ProfileName], k: int,
          by_key: Mapping[layouts.LayoutKey, layouts.Layout]
          ) -> list[tuple[ProfileName, ...]] | None:
    bins: list[list[ProfileName]] = [[] for _ in range(k)]
    failed: set[tuple[int, tuple[layouts.LayoutKey, ...]]] = set()

    def place(i: int) -> bool:
        if i == len(names):
            return True
        state = (i, tuple(sorted(layouts.key_of(model, b) for b in bins)))
        if state in failed:
            return False
        tried: set[layouts.LayoutKey] = set()
        for b in bins:
            key = layouts.key_of(model, b)
            if key in tried:
                continue  # identical GPUs: one try is enough
            tried.add(key)
            if layouts.key_of(model, [*b, names[i]]) in by_key:
                b.append(names[i])
                if place(i + 1):
                    return True
                b.pop()
        failed.add(state)
        return False

    if place(0):
        return [tuple(sorted(b)) for b in bins]
    return None


# ---------------------------------------------------------------- rendering


def render(
    name: str, gpus: Sequence[Sequence[str]], *, model: profiles.GpuModel | None = None,
    device_ids: Sequence[str] = (), disabled: Collection[int] = (),
) -> dict[str, Any]:
    """A mig-parted v1 document with one config ``name`` giving GPU ``i`` layout ``gpus[i]``.

    GPUs with the same layout share an entry; when all are the same it is ``devices: all``.
    The GPUs in ``disabled`` (their layout must be empty) get ``mig-enabled: false``: they
    keep MIG disabled, where an empty layout with MIG enabled would take each out of the
    node's ``nvidia.com/gpu`` and make no instance of it.
    With ``model`` every layout is checked against it first (a ConfigError when invalid).
    Entries carry a ``device-filter`` only when ``device_ids`` are given: the config is for
    one node whose GPUs are all one model, and a filter that missed the GPU's real PCI id
    would make the MIG Manager skip the GPU and report success (mig-parted matches the
    filter against the GPU's own id).
    """
    groups: dict[tuple[bool, tuple[str, ...]], list[int]] = {}
    for i, names in enumerate(gpus):
        if i in disabled and names:
            raise errors.ConfigError(f"rendered config {name!r}, GPU {i}: MIG is disabled "
                                     f"there, so it can hold no instance ({' '.join(names)})")
        if model is not None:
            _validate(model, list(names), f"rendered config {name!r}, GPU {i}")
        groups.setdefault((i not in disabled, tuple(sorted(names))), []).append(i)
    entries: list[dict[str, Any]] = []
    for (enabled, names), indices in groups.items():
        entry: dict[str, Any] = {}
        if device_ids:
            entry["device-filter"] = list(device_ids)
        entry["devices"] = "all" if len(groups) == 1 else indices
        entry["mig-enabled"] = enabled
        if enabled:
            entry["mig-devices"] = dict(sorted(Counter(names).items()))
        entries.append(entry)
    return {"version": "v1", "mig-configs": {name: entries}}


def custom_name(gpus: Sequence[Sequence[str]], disabled: Collection[int] = ()) -> str:
    """A stable, readable name for a custom config (``migfit-4x1g.10gb-3g.40gb`` when uniform),
    distinct for distinct layouts and a valid label value (``nvidia.com/mig.config``).

    A profile's ``+`` is written ``.``, as NVIDIA's own names do (``all-1g.24gb.me`` for
    ``1g.24gb+me``), and its ``-`` kept (``1g.24gb-me``, another profile): replacing both
    with ``-`` gave one name to two layouts of the RTX PRO 6000. A mixed layout, or a name
    past a label value's 63 characters, gets a digest of the layout instead, as does one with
    GPUs that keep MIG disabled (``disabled``, as ``render``'s).
    """
    distinct = {tuple(sorted(g)) for g in gpus}
    if len(distinct) == 1 and not disabled:
        (only,) = distinct
        counts = Counter(only)
        body = "-".join(f"{n}x{p}" if n > 1 else p for p, n in sorted(counts.items()))
        name = f"migfit-{body or 'empty'}".replace("+", ".")
        if len(name) <= _LABEL_VALUE_MAX:
            return name
    shape: list[Any] = [sorted(g) for g in gpus]
    if disabled:
        shape.append({"mig-disabled": sorted(disabled)})
    digest = hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:10]
    return f"migfit-{digest}"


_LABEL_VALUE_MAX = 63  # a Kubernetes label value: at most 63 characters


def dump(doc: Mapping[str, Any]) -> str:
    """YAML text of a rendered config, ready to paste under the ConfigMap's ``config.yaml``."""
    return yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=None)


# ---------------------------------------------------------------- writing a config in


# What the apply mode puts at the top of a ConfigMap it writes custom configs into
# (``--apply-custom-configs``): the text is re-rendered, so comments do not survive.
WRITTEN_HEADER = ("# Custom configs named migfit-... are added (and, once no node uses them,\n"
                  "# removed) by migfit's apply mode (--apply-custom-configs); comments in\n"
                  "# this text are not kept when it writes.\n")


def same_config(current: Config, name: str, doc: Mapping[str, Any]) -> bool | None:
    """Whether the config ``name`` in ``current`` (a parsed ConfigMap text) is the one in
    ``doc`` (a rendered document): True, False (another config by that name), or None when
    ``current`` has no ``name``."""
    have = current.configs.get(name)
    if have is None:
        return None
    return have == parse_data(dict(doc)).configs[name]


def with_config(text: str, doc: Mapping[str, Any], *, drop: Sequence[str] = (),
                where: str = "mig-parted config") -> str:
    """``text`` (a mig-parted config) with the configs of ``doc`` added and those named in
    ``drop`` removed, every other config kept as it was; a ConfigError when ``text`` does
    not parse, or when the result would not (nothing is written then)."""
    raw = _load(text, where=where)
    parse_data(raw, where=where)  # strict first: never rewrite what mig-parted would refuse
    if not isinstance(raw, dict):
        raw = {}  # an empty document: no config yet
    added = dict(doc["mig-configs"])
    kept = {k: v for k, v in (raw.get("mig-configs") or {}).items()
            if k not in drop and k not in added}
    out = {**raw, "version": raw.get("version", "v1"), "mig-configs": {**kept, **added}}
    rendered = WRITTEN_HEADER + yaml.safe_dump(out, sort_keys=False, default_flow_style=None)
    check = parse(rendered, where=f"{where} (as migfit would write it)")
    wanted = parse_data(dict(doc)).configs
    for name in added:
        if check.configs[name] != wanted[name]:
            raise errors.ConfigError(f"{where}: config {name} did not survive rendering")
    return rendered
