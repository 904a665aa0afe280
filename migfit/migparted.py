"""mig-parted's config format: parse strictly, resolve a node's config to per-GPU layouts, render.

The MIG Manager applies the config named by a node's ``nvidia.com/mig.config`` label from the
mig-parted ConfigMap (reference/MIG.md 5-6). This module reads that ConfigMap the way
mig-parted does (``version: v1`` required, unknown fields, empty lists and ``mig-devices``
with ``mig-enabled: false`` rejected), turns a config name into the layout of each GPU of a
node for its model (``device-filter`` matched against the model's PCI device ids), checks
every layout with the placement engine, and prints custom configs in the same format. When no
ConfigMap is readable, a node's layout is inferred from its allocatable, and says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pydantic
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
    devices: Literal["all"] | list[pydantic.NonNegativeInt]
    mig_enabled: bool = pydantic.Field(alias="mig-enabled")
    mig_devices: dict[str, pydantic.NonNegativeInt] | None = pydantic.Field(
        default=None, alias="mig-devices")

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> _Entry:
        # mig-parted's MigConfigSpec.UnmarshalJSON: an empty device-filter or devices list is
        # valid (it matches every GPU, resp. none); mig-devices must be present when enabled
        # ({} is fine) and empty when disabled.
        if self.mig_enabled and "mig_devices" not in self.model_fields_set:
            raise ValueError("mig-devices is required when mig-enabled is true "
                             "(use mig-devices: {} for MIG enabled with no instances)")
        if not self.mig_enabled and self.mig_devices:
            raise ValueError("mig-devices is set but mig-enabled is false")
        return self


class _Spec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True,
                                       populate_by_name=True)

    version: str
    # Optional in mig-parted (a file with only a version parses), but never empty when given.
    mig_configs: dict[str, list[_Entry]] = pydantic.Field(default_factory=dict,
                                                          alias="mig-configs")


def device_number(text: str) -> int | None:
    """A PCI device id (``0x20B510DE``) as a number, the way mig-parted reads it, or None.

    mig-parted uses Go's ``strconv.ParseUint(s, 0, 32)``: a base prefix is needed for hex
    and the value must fit 32 bits. Ids with a subsystem part (``...:0x...``) are not
    matched: the catalog does not know a GPU's subsystem id.
    """
    try:
        value = int(text, 0)
    except ValueError:
        return None
    return value if 0 <= value < 2**32 else None


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a named config: which GPUs it selects and what it puts on each."""

    device_filter: tuple[str, ...]  # upper-case PCI device ids; empty = every device
    devices: tuple[int, ...] | None  # None = all
    mig_enabled: bool
    mig_devices: tuple[tuple[ProfileName, int], ...]

    def selects(self, model: profiles.GpuModel, index: int) -> bool:
        """Whether mig-parted applies this entry to GPU ``index`` of a ``model`` GPU.

        Device ids compare as numbers, as mig-parted's ``NewDeviceIDFromString`` parses them
        (``0x20b510de`` is ``0x20B510DE``); a filter that does not parse matches no GPU.
        """
        if self.device_filter:
            wanted = {device_number(f) for f in self.device_filter}
            if not wanted & {device_number(d) for d in model.device_ids} - {None}:
                return False
        return self.devices is None or index in self.devices

    def names(self) -> tuple[ProfileName, ...]:
        return tuple(sorted(p for p, n in self.mig_devices for _ in range(n)))


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    """A parsed mig-parted config file: config name -> entries, in file order."""

    configs: Mapping[str, tuple[Entry, ...]]

    def names(self) -> list[str]:
        return list(self.configs)


def parse_data(raw: Any, *, where: str = "mig-parted config") -> Config:
    """Validate an already-decoded document; a ConfigError saying what to change."""
    spec = strictfiles.validate(_Spec, raw, where=where)
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
                mig_enabled=e.mig_enabled,
                mig_devices=tuple(sorted((ProfileName(p), n)
                                         for p, n in (e.mig_devices or {}).items() if n)),
            ))
        out[name] = tuple(built)
    return Config(out)


def parse(text: str, *, where: str = "mig-parted config") -> Config:
    """Parse mig-parted's YAML (or JSON) config text strictly."""
    return parse_data(strictfiles.load_yaml(text, where=where), where=where)


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


# ---------------------------------------------------------------- per-node layouts


Source = Literal["config", "inferred"]


@dataclasses.dataclass(frozen=True, slots=True)
class NodeLayout:
    """The layout of each GPU of a node (index order), and where it was learnt."""

    gpus: tuple[tuple[ProfileName, ...], ...]  # sorted profile names per GPU
    source: Source
    config: str | None = None  # the config name when from the ConfigMap
    note: str = ""

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
            valid = ", ".join(p.name for p in model.profiles)
            raise errors.ConfigError(f"{what}: {model.id} has no MIG profile {n!r}; its "
                                     f"profiles are: {valid}")
    if names:
        fit = layouts.check(model, names)
        if fit.reason is not None:
            raise errors.ConfigError(f"{what}: {' '.join(sorted(names))} is not a valid "
                                     f"layout of {model.id}: {fit.reason.message}")


def resolve(
    config: Config, name: str, *, model: profiles.GpuModel, gpu_count: int
) -> NodeLayout:
    """Per-GPU layouts that config ``name`` gives a node of ``gpu_count`` GPUs of ``model``.

    mig-parted applies the entries in order to the GPUs each selects, so the last entry that
    selects a GPU decides it. A GPU no entry selects, an unknown config name, or a layout
    invalid for the model is a ConfigError saying what to fix.
    """
    entries = config.configs.get(name)
    if entries is None:
        known = ", ".join(config.configs) or "none"
        raise errors.ConfigError(f"mig-parted config {name!r} is not in the ConfigMap "
                                 f"(it has: {known})")
    gpus: list[tuple[ProfileName, ...]] = []
    for index in range(gpu_count):
        chosen: Entry | None = None
        for e in entries:
            if e.selects(model, index):
                chosen = e
        if chosen is None:
            raise errors.ConfigError(
                f"mig-parted config {name!r} has no entry for GPU {index} of a {model.id} "
                f"(device ids {', '.join(model.device_ids) or 'unknown'})")
        names = chosen.names() if chosen.mig_enabled else ()
        _validate(model, names, f"mig-parted config {name!r}, GPU {index}")
        gpus.append(names)
    return NodeLayout(gpus=tuple(gpus), source="config", config=name)


def applies_to(config: Config, name: str, *, model: profiles.GpuModel, gpu_count: int) -> bool:
    """Whether ``name`` resolves cleanly for such a node (used to list candidate configs)."""
    try:
        resolve(config, name, model=model, gpu_count=gpu_count)
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
    name: str, gpus: Sequence[Sequence[str]], *, model: profiles.GpuModel | None = None
) -> dict[str, Any]:
    """A mig-parted v1 document with one config ``name`` giving GPU ``i`` layout ``gpus[i]``.

    GPUs with the same layout share an entry; when all are the same it is ``devices: all``.
    With ``model``, entries carry its ``device-filter`` so the config only touches such GPUs.
    """
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, names in enumerate(gpus):
        groups.setdefault(tuple(sorted(names)), []).append(i)
    entries: list[dict[str, Any]] = []
    for names, indices in groups.items():
        entry: dict[str, Any] = {}
        if model is not None and model.device_ids:
            entry["device-filter"] = list(model.device_ids)
        entry["devices"] = "all" if len(groups) == 1 else indices
        entry["mig-enabled"] = True
        entry["mig-devices"] = dict(sorted(Counter(names).items()))
        entries.append(entry)
    return {"version": "v1", "mig-configs": {name: entries}}


def custom_name(gpus: Sequence[Sequence[str]]) -> str:
    """A stable, readable name for a custom config (``migfit-4x1g.10gb-3g.40gb`` when uniform)."""
    distinct = {tuple(sorted(g)) for g in gpus}
    if len(distinct) == 1:
        (only,) = distinct
        counts = Counter(only)
        body = "-".join(f"{n}x{p}" if n > 1 else p for p, n in sorted(counts.items()))
        return f"migfit-{body or 'empty'}".replace("+", "-")
    digest = hashlib.sha256(json.dumps([sorted(g) for g in gpus]).encode()).hexdigest()[:10]
    return f"migfit-{digest}"


def dump(doc: Mapping[str, Any]) -> str:
    """YAML text of a rendered config, ready to paste under the ConfigMap's ``config.yaml``."""
    return yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=None)
