"""The MIG catalog: each GPU model's profiles, where they may start, and how to name a node's GPU.

The data lives in ``migfit/data/catalog.yaml`` (facts cited there and in shared/reference/MIG.md);
this module validates it strictly, lets an operator add or override models with a file of the
same schema, and resolves a node's ``nvidia.com/gpu.product`` label to a model.

A profile name means nothing without its model: ``1g.10gb`` is a 1-memory-slice profile on an
A100-80GB and a 2-memory-slice one on an A100-40GB, so every lookup goes through a model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final, NewType

import pydantic

from migfit import errors, keys, strictfiles

ModelId = NewType("ModelId", str)
ProfileName = NewType("ProfileName", str)

RESOURCE_PREFIX = "nvidia.com/mig-"
GPU_RESOURCE = "nvidia.com/gpu"
#: What the device plugin appends to a shared resource's name under time-slicing or MPS with
#: ``renameByDefault: true`` (``nvidia.com/mig-1g.10gb.shared``, ``nvidia.com/gpu.shared``);
#: GFD's labels keep the plain name (``nvidia.com/mig-1g.10gb.replicas``) and then leave
#: ``-SHARED`` off the product (k8s-device-plugin internal/lm/resource.go, productLabel).
SHARED_SUFFIX = ".shared"
_BUILTIN = Path(__file__).with_name("data") / "catalog.yaml"

# `<G>g.<GB>gb` with optional attribute suffixes (go-nvlib mig_profile.go; reference/MIG.md 3.1).
_PROFILE_RE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb((?:\+me|\+me\.all|\+gfx|-me)*)$")


@dataclasses.dataclass(frozen=True, slots=True)
class Profile:
    """One MIG profile of one GPU model."""

    name: ProfileName
    gi_profile_id: int | None
    compute_slices: int
    memory_slices: int
    memory_mib: int
    max_instances: int
    starts: tuple[int, ...]
    media: bool
    provisional: bool
    # Names that NVIDIA's configs once used for this profile (pre-production boards); the
    # GPUs report ``name``, so mig-parted fails a config that still uses one of these.
    formerly: tuple[str, ...] = ()

    @property
    def resource(self) -> str:
        """The extended resource the device plugin advertises under the mixed strategy."""
        return resource_name(self.name)

    @property
    def size(self) -> int:
        """Memory slices occupied by one instance (the placement size)."""
        return self.memory_slices


@dataclasses.dataclass(frozen=True, slots=True)
class Variant:
    """Product labels that pin which of a model's PCI device ids a node's GPUs have.

    GFD labels the product name, not the PCI id (reference/MIG.md 4), but mig-parted matches
    ``device-filter`` against the id (``NVIDIA-H200-NVL`` is 0x233B, the SXM ``NVIDIA-H200``
    0x2335). An empty ``device_ids`` is a product whose id NVIDIA's configs do not list.
    """

    products: tuple[str, ...]
    device_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class GpuModel:
    """A MIG-capable GPU model and its profiles, ordered smallest first."""

    id: ModelId
    memory_slices: int
    compute_slices: int
    memory_mib: int
    products: tuple[str, ...]
    device_ids: tuple[str, ...]
    provisional: bool
    source: str
    profiles: tuple[Profile, ...]
    _by_name: Mapping[str, Profile] = dataclasses.field(repr=False, compare=False, hash=False)
    variants: tuple[Variant, ...] = ()

    def device_ids_for(self, product: str | None) -> tuple[str, ...]:
        """The PCI ids a GPU labelled ``product`` may have: one variant's, else all the model's.

        An empty answer means the id is not known (no filtered mig-parted entry can be said
        to match it).
        """
        if product:
            norm = normalize_product(product)
            for v in self.variants:
                if any(re.fullmatch(pat, norm, flags=re.IGNORECASE) for pat in v.products):
                    return v.device_ids
        return self.device_ids

    def profile(self, name: str) -> Profile:
        """The profile called ``name`` on this model, or a UsageError naming the valid ones."""
        try:
            return self._by_name[name]
        except KeyError:
            raise errors.UsageError(self.no_profile(name)) from None

    def no_profile(self, name: str) -> str:
        """Why ``name`` is not a profile of this model: the valid ones, and the name it has
        now when ``name`` is a former one (``Profile.formerly``)."""
        valid = ", ".join(p.name for p in self.profiles)
        now = next((p.name for p in self.profiles if name in p.formerly), None)
        hint = "" if now is None else (
            f" ({name!r} is what pre-production {self.id} boards called {now}; production "
            f"GPUs report {now}, so mig-parted cannot create {name!r} there: use {now})")
        return f"{self.id} has no MIG profile {name!r}{hint}; its profiles are: {valid}"

    def has_profile(self, name: str) -> bool:
        return name in self._by_name

    @property
    def largest(self) -> Profile:
        return max(self.profiles, key=lambda p: (p.memory_mib, p.compute_slices))


# ---------------------------------------------------------------- the file schema (strict)


class _ProfileSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str
    id: int | None = None
    compute_slices: int = pydantic.Field(ge=1)
    memory_slices: int = pydantic.Field(ge=1)
    memory_mib: int = pydantic.Field(ge=1)
    max_instances: int = pydantic.Field(ge=1)
    starts: list[int] = pydantic.Field(min_length=1)
    provisional: bool = False
    formerly: list[str] = pydantic.Field(default_factory=list)


class _VariantSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)

    products: list[str] = pydantic.Field(min_length=1)
    device_ids: list[str]


class _ModelSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)

    id: str = pydantic.Field(min_length=1)
    memory_slices: int = pydantic.Field(ge=1, le=16)
    compute_slices: int = pydantic.Field(ge=1, le=16)
    memory_mib: int = pydantic.Field(ge=1)
    products: list[str] = pydantic.Field(default_factory=list)
    device_ids: list[str] = pydantic.Field(default_factory=list)
    provisional: bool = False
    source: str = ""
    variants: list[_VariantSpec] = pydantic.Field(default_factory=list)
    profiles: list[_ProfileSpec] = pydantic.Field(min_length=1)


CATALOG_FILE = ("a catalog file is YAML with `version: v1` and `models:`, a list of GPU "
                "models in the schema of migfit's built-in migfit/data/catalog.yaml (README, "
                "\"The MIG catalog\")")
"""What ``--catalog FILE`` must be, said after each problem found in one."""


class _CatalogSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)

    version: str
    models: list[_ModelSpec]


def _build_model(spec: _ModelSpec, where: str) -> GpuModel:
    def fail(msg: str) -> errors.ConfigError:
        return errors.ConfigError(f"{where}: model {spec.id!r}: {msg}")

    for pattern in [*spec.products, *(p for v in spec.variants for p in v.products)]:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise fail(f"products pattern {pattern!r} is not a valid regex: {exc}") from None
    known_ids = {device_number(d) for d in spec.device_ids}
    if None in known_ids:
        raise fail("a device_ids entry is not a PCI device id such as 0x20B510DE")
    for v in spec.variants:
        if not {device_number(d) for d in v.device_ids} <= known_ids:
            raise fail(f"variant {v.products} lists device ids that are not in device_ids")
    profiles: list[Profile] = []
    seen: set[str] = set()
    for p in spec.profiles:
        m = _PROFILE_RE.match(p.name)
        if m is None:
            raise fail(f"profile name {p.name!r} is not of the form <G>g.<GB>gb[+me|+me.all|"
                       f"+gfx|-me]")
        if m.group(1) is not None:
            raise fail(f"profile {p.name!r} is a compute instance of {gpu_instance_of(p.name)}: "
                       f"{_SHARED_MEMORY}; list GPU instance profiles only")
        if int(m.group(2)) != p.compute_slices:
            raise fail(f"profile {p.name!r} says {m.group(2)}g but compute_slices is "
                       f"{p.compute_slices}")
        if p.name in seen:
            raise fail(f"profile {p.name!r} is listed twice")
        seen.add(p.name)
        for former in p.formerly:
            if _PROFILE_RE.match(former) is None or former in seen:
                raise fail(f"profile {p.name!r}: formerly {former!r} is not a profile name, "
                           "or names a profile of the model or another's former name")
            seen.add(former)
        if p.compute_slices > spec.compute_slices:
            raise fail(f"profile {p.name!r} needs {p.compute_slices} compute slices; the GPU "
                       f"has {spec.compute_slices}")
        for start in p.starts:
            if start < 0 or start + p.memory_slices > spec.memory_slices:
                raise fail(f"profile {p.name!r} start {start} with size {p.memory_slices} "
                           f"does not fit in {spec.memory_slices} memory slices")
        if len(set(p.starts)) != len(p.starts):
            raise fail(f"profile {p.name!r} lists a start twice")
        profiles.append(
            Profile(
                name=ProfileName(p.name),
                gi_profile_id=p.id,
                compute_slices=p.compute_slices,
                memory_slices=p.memory_slices,
                memory_mib=p.memory_mib,
                max_instances=p.max_instances,
                starts=tuple(sorted(p.starts)),
                media="+me" in m.group(4),
                provisional=p.provisional or spec.provisional,
                formerly=tuple(p.formerly),
            )
        )
    profiles.sort(key=profile_order)
    return GpuModel(
        id=ModelId(spec.id),
        memory_slices=spec.memory_slices,
        compute_slices=spec.compute_slices,
        memory_mib=spec.memory_mib,
        products=tuple(spec.products),
        device_ids=tuple(spec.device_ids),
        provisional=spec.provisional,
        source=spec.source,
        profiles=tuple(profiles),
        _by_name={p.name: p for p in profiles},
        variants=tuple(Variant(products=tuple(v.products), device_ids=tuple(v.device_ids))
                       for v in spec.variants),
    )


def profile_order(p: Profile) -> tuple[int, int, bool, str]:
    """Smallest first: least memory, then fewest compute slices, then without ``+me``."""
    return (p.memory_mib, p.compute_slices, p.media, p.name)


def _parse_file(text: str, where: str) -> list[GpuModel]:
    spec = strictfiles.validate(_CatalogSpec, strictfiles.load_yaml(text, where=where),
                                where=where, expected=CATALOG_FILE)
    strictfiles.require_version(spec.version, where=where)
    ids = [m.id for m in spec.models]
    if len(ids) != len(set(ids)):
        raise errors.ConfigError(f"{where}: a model id is listed twice")
    return [_build_model(m, where) for m in spec.models]


# ---------------------------------------------------------------- the catalog


def device_number(text: str) -> int | None:
    """A PCI device id (``0x20B510DE``) as a number, the way mig-parted reads it, or None.

    mig-parted uses Go's ``strconv.ParseUint(s, 0, 32)``: a base prefix is needed for hex
    and the value must fit 32 bits. Ids with a subsystem part (``...:0x...``) are not
    matched: the catalog does not know a GPU's subsystem id. Go's syntax, not Python's: no
    sign, no white space, underscores only between digits (or after a base prefix), and a
    leading ``0`` is octal (``int(text, 0)`` took " 0x20B510DE" and "+0x20B510DE", which
    mig-parted cannot read and so matches with no GPU).
    """
    if _GO_UINT.fullmatch(text) is None:
        return None
    digits = text.replace("_", "")
    prefix = digits[:2].lower()
    if prefix in _GO_BASES:
        value = int(digits[2:], _GO_BASES[prefix])
    elif len(digits) > 1 and digits[0] == "0":
        value = int(digits[1:], 8)
    else:
        value = int(digits, 10)
    return value if value < 2**32 else None


# strconv.ParseUint(s, 0, bits): a base prefix (0x, 0b, 0o; 0 alone: octal) or decimal, with
# underscores only between digits or after the prefix (Go's underscoreOK).
_GO_UINT: Final = re.compile(r"0[xX](?:_?[0-9a-fA-F])+|0[bB](?:_?[01])+|0[oO](?:_?[0-7])+"
                             r"|0(?:_?[0-7])*|[1-9](?:_?[0-9])*")
_GO_BASES: Final = {"0x": 16, "0b": 2, "0o": 8}


@dataclasses.dataclass(frozen=True, slots=True)
class ProductLabel:
    """``nvidia.com/gpu.product`` as GFD writes it, taken apart.

    GFD joins the NVML device name (spaces as ``-``), under the single strategy ``MIG`` and
    the MIG device's profile, and ``SHARED`` when the resource has time-slicing or MPS
    replicas > 1 and is not renamed (k8s-device-plugin internal/lm/resource.go,
    productLabel). A single-strategy node whose GPUs do not all hold one profile is
    labelled ``<name>-MIG-INVALID`` with count, replicas and memory 0
    (internal/lm/mig-strategy.go, newInvalidMigStrategyLabeler).
    """

    name: str  # the GPU's name as labelled, without the MIG and SHARED parts
    profile: str | None  # canonical profile of a single-strategy label
    invalid: bool  # ...-MIG-INVALID
    shared: bool  # ...-SHARED
    profile_text: str | None = None  # the profile as spelled in the label, when unreadable


# The profile part of a single-strategy product label. GFD drops the "+" (label values may
# not hold it: "1g.10gbme", "1g.24gbme.all", "1g.24gbgfx"); "-me" is kept as it is.
_LABEL_PROFILE_RE = re.compile(
    r"^((?:\d+c\.)?\d+g\.\d+gb)(\+?me\.all|\+?me|\+?gfx|\.me\.all|\.me|\.gfx)?(-me)?$",
    re.IGNORECASE)


def parse_product(product: str) -> ProductLabel:
    """Take a ``nvidia.com/gpu.product`` label apart (see ProductLabel)."""
    text = product.strip().replace(" ", "-")
    shared = text.upper().endswith("-SHARED")
    if shared:
        text = text[: -len("-SHARED")]
    m = re.search(r"-MIG-(.+)$", text, flags=re.IGNORECASE)
    if m is None:
        return ProductLabel(name=text, profile=None, invalid=False, shared=shared)
    name, part = text[: m.start()], m.group(1)
    if part.upper() == "INVALID":
        return ProductLabel(name=name, profile=None, invalid=True, shared=shared)
    pm = _LABEL_PROFILE_RE.match(part)
    if pm is None:
        return ProductLabel(name=name, profile=None, invalid=False, shared=shared,
                            profile_text=part)
    attr = (pm.group(2) or "").lower().lstrip("+.")
    profile = pm.group(1).lower() + (f"+{attr}" if attr else "") + (pm.group(3) or "").lower()
    return ProductLabel(name=name, profile=profile, invalid=False, shared=shared)


def invalid_layout_message(product: str) -> str | None:
    """Why a node labelled ``…-MIG-INVALID`` has no usable MIG devices, or None."""
    if not parse_product(product).invalid:
        return None
    return (f"GPU Feature Discovery labels the product {product!r}: under the single MIG "
            f"strategy its GPUs do not all hold one profile (a mixed layout, or MIG enabled "
            f"with no instances), so the device plugin advertises none; apply a uniform "
            f"config or use the mixed strategy")


# Why a compute-instance profile (``1c.3g.40gb``: one compute slice of a 3g.40gb GPU
# instance) is never asked for by memory: the compute instances of one GPU instance share its
# memory (MIG User Guide, "Terminology"), so none of them holds the profile's memory alone.
# NVIDIA's device plugin supports no such devices either: "MIG devices with compute instance
# slice counts different than GPU instance slice counts are unsupported" (k8s-device-plugin
# issue #192, klueska, 2020-08-24).
_SHARED_MEMORY = ("compute instances share their GPU instance's memory, so migfit asks for "
                  "none by memory (nor does NVIDIA's device plugin support them)")


def gpu_instance_of(name: str) -> str | None:
    """The GPU instance profile of a compute-instance profile (``1c.3g.40gb`` ->
    ``3g.40gb``), or None for a GPU instance profile or any other name."""
    m = _PROFILE_RE.match(name)
    if m is None or m.group(1) is None:
        return None
    return name[len(m.group(1)) + 2:]


def unknown_profiles_note(model: GpuModel, names: Iterable[str], *,
                          catalog: Catalog | None = None,
                          labels: Mapping[str, str] | None = None) -> str:
    """A note naming the profiles a node advertises that ``model`` does not have, or "".

    Some drivers rename profiles (``7g.79gb`` on an A100-80GB with R510, ``3g.39gb`` with
    R535/R545): the node's own names and its ``nvidia.com/mig-<p>.memory`` labels are kept
    and reported, not dropped; planning re-layouts needs them in a catalog file. A
    compute-instance profile (``1c.3g.40gb``) is said as such: no catalog entry makes it
    usable by memory. A profile whose ``nvidia.com/mig-<p>.product`` label (in ``labels``)
    names another model of ``catalog``, or that only other models have, is that of a GPU of
    another model on the same node (``other_model_profiles``).
    """
    odd = sorted({n for n in names if not model.has_profile(n)})
    split = {n: gi for n in odd if (gi := gpu_instance_of(n)) is not None}
    others = other_model_profiles(model, [n for n in odd if n not in split], catalog, labels)
    unknown = [n for n in odd if n not in split and n not in others]
    notes = []
    if split:
        gis = sorted(set(split.values()))
        notes.append(f"{', '.join(split)}: {_SHARED_MEMORY}; lay these GPUs out with "
                     f"GPU instance profiles ({', '.join(gis)})")
    if others:
        what = ", ".join(f"{n} ({' or '.join(ms)})" for n, ms in others.items())
        notes.append(f"GPUs of more than one model: {what} besides {model.id}, which GPU "
                     f"Feature Discovery's labels cannot describe (they name one model per "
                     f"node); migfit plans no re-layout here: keep one GPU model per node")
    if unknown:
        notes.append(f"{', '.join(unknown)} not in the catalog for {model.id} (a driver's "
                     f"own name?): add it with --catalog FILE to plan re-layouts here")
    return "; ".join(notes)


def other_model_profiles(model: GpuModel, names: Iterable[str], catalog: Catalog | None,
                         labels: Mapping[str, str] | None) -> dict[str, list[str]]:
    """Of ``names`` (profiles ``model`` does not have), those of other models: per name, the
    models of ``catalog`` its ``nvidia.com/mig-<p>.product`` label resolves to, or else
    every other model that has it.

    GPU Feature Discovery labels a node with one product, its first GPU's ("Multiple device
    types detected", k8s-device-plugin issue #736), and the GPU Operator supports one GPU
    model per node (gpu-operator issue #334); the mixed strategy still advertises every
    GPU's MIG devices, each with its own ``.product`` label. A name of no model (a driver's
    own) is left out.
    """
    if catalog is None:
        return {}
    out: dict[str, list[str]] = {}
    for name in names:
        product = (labels or {}).get(f"{resource_name(name)}.product", "")
        labelled: GpuModel | None = None
        if product:
            with contextlib.suppress(errors.UnknownModelError):
                labelled = catalog.resolve(parse_product(product).name)  # its GPU's model
        if labelled is not None:  # the label decides: the node's own model is a driver's name
            found: list[str] = [] if labelled.id == model.id else [str(labelled.id)]
        else:
            found = [str(m.id) for m in catalog.models
                     if m.id != model.id and m.has_profile(name)]
        if found:
            out[name] = found
    return out


REPLICAS_SUFFIX = ".replicas"


def replicas(labels: Mapping[str, str], profile: str | None = None) -> int:
    """How many pods share one device of a resource (time-slicing or MPS), from GFD's labels.

    GFD writes ``<resource>.replicas`` (``nvidia.com/gpu.replicas`` under the none and single
    strategies, ``nvidia.com/mig-<p>.replicas`` under mixed): 1 unshared, 0 when sharing is
    not configured at all (k8s-device-plugin internal/lm/resource.go, replicasLabel). The
    device plugin advertises every device that many times, so allocatable is devices ×
    replicas; a missing, 0 or unreadable label counts as 1.
    """
    resource = GPU_RESOURCE if profile is None else resource_name(profile)
    text = labels.get(resource + REPLICAS_SUFFIX, "")
    value = int(text) if text.isascii() and text.isdigit() else 1
    return max(value, 1)


def normalize_product(product: str) -> str:
    """Canonical form of a ``nvidia.com/gpu.product`` label for matching.

    Upper case, without the ``NVIDIA-`` prefix, the ``-MIG-<profile>`` part that the single
    strategy appends and the ``-SHARED`` suffix of shared resources (reference/MIG.md 4).
    """
    text = parse_product(product).name.upper()
    if text.startswith("NVIDIA-"):
        text = text[len("NVIDIA-"):]
    return text


def instances_of(advertised: Mapping[ProfileName, int], replicas: Mapping[ProfileName, int]
                 ) -> dict[ProfileName, int]:
    """MIG instances per profile from what the device plugin advertises: with time-slicing or
    MPS each instance is advertised ``replicas`` times (``replicas`` above), so 14 ×
    ``1g.10gb`` with 2 replicas are 7 instances; a partly unhealthy instance still counts as
    one. Zero counts are left out."""
    return {p: -(-n // max(replicas.get(p, 1), 1)) for p, n in advertised.items() if n > 0}


def single_strategy_profile(product: str) -> str | None:
    """The canonical profile a single-strategy product label names (``…-MIG-1g.5gb``).

    None without one, and for ``…-MIG-INVALID`` (a mixed layout, not a profile) or a
    profile spelling that cannot be read.
    """
    return parse_product(product).profile


_RESOLVED_MAX = 4096  # distinct (product, memory) label pairs remembered per catalog


class Catalog:
    """The known GPU models, by id; resolves node labels to models."""

    def __init__(self, models: Iterable[GpuModel], *, preferred: Iterable[str] = ()) -> None:
        self._models: dict[str, GpuModel] = {m.id: m for m in models}
        # Models of an operator's override file: where their product patterns match a label,
        # they are meant rather than a built-in model that matches too.
        self._preferred = frozenset(preferred) & set(self._models)
        self._by_device: dict[int, GpuModel] = {}
        for m in self._models.values():
            for d in m.device_ids:
                number = device_number(d)
                if number is not None:
                    self._by_device.setdefault(number, m)
        self._patterns: list[tuple[re.Pattern[str], GpuModel]] = [
            (re.compile(p, re.IGNORECASE), m) for m in self._models.values() for p in m.products
        ]
        # Every Node event resolves its labels; a cluster has a handful of distinct ones.
        self._resolved: dict[tuple[str, int | None], GpuModel | errors.UnknownModelError] = {}

    @property
    def models(self) -> tuple[GpuModel, ...]:
        return tuple(self._models.values())

    def with_overrides(self, path: str | Path) -> Catalog:
        """A new catalog with the models of ``path`` added or replacing those of the same id."""
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise errors.ConfigError(f"cannot read catalog file {p}: {exc.strerror}") from None
        text = strictfiles.text(data, where=str(p))
        merged = dict(self._models)
        added = _parse_file(text, str(p))
        for model in added:
            merged[model.id] = model
        return Catalog(merged.values(),
                       preferred=self._preferred | {m.id for m in added})

    def by_device_id(self, device_id: str) -> GpuModel | None:
        """The model with PCI device id ``device_id`` (compared as numbers), or None."""
        number = device_number(device_id)
        return None if number is None else self._by_device.get(number)

    def get(self, name: str) -> GpuModel:
        """A model by canonical id (case-insensitive) or by a product label alias."""
        for mid, model in self._models.items():
            if mid.lower() == name.strip().lower():
                return model
        try:
            return self.resolve(name)
        except errors.UnknownModelError:
            several = self._candidates(normalize_product(name))
            if len(several) > 1:
                raise errors.UnknownModelError(
                    f"GPU product {name!r} could be any of "
                    f"{', '.join(m.id for m in several)}: name one of them") from None
            known = ", ".join(self._models)
            raise errors.UnknownModelError(
                f"unknown GPU model {name!r}; known models: {known} "
                f"(product labels such as NVIDIA-A100-SXM4-80GB are accepted too)"
            ) from None

    def resolve(self, product: str, memory_mib: int | None = None) -> GpuModel:
        """The model of a node from ``nvidia.com/gpu.product`` (and ``nvidia.com/gpu.memory``).

        Several models may match a label without a size (``NVIDIA-A100-SXM4``); the memory label
        then decides (the model within 8 % of it). An unknown or undecidable product is a
        clear error, never a guess. Under the single strategy the memory label is the size of
        one MIG device, so it is ignored when the product names a MIG profile; the profile
        itself then narrows the candidates to the models that have it.
        """
        key = (product, memory_mib)
        known = self._resolved.get(key)
        if known is None:
            try:
                known = self._resolve(product, memory_mib)
            except errors.UnknownModelError as exc:
                known = exc
            if len(self._resolved) < _RESOLVED_MAX:
                self._resolved[key] = known
        if isinstance(known, errors.UnknownModelError):
            raise errors.UnknownModelError(known.message)
        return known

    def _candidates(self, norm: str) -> list[GpuModel]:
        """The models whose product patterns match a normalised product label (only the
        catalog file's own when they are among them)."""
        candidates: list[GpuModel] = []
        for pattern, model in self._patterns:
            if pattern.fullmatch(norm) and model not in candidates:
                candidates.append(model)
        if len(candidates) > 1 and any(m.id in self._preferred for m in candidates):
            candidates = [m for m in candidates if m.id in self._preferred]
        return candidates

    def _resolve(self, product: str, memory_mib: int | None) -> GpuModel:
        norm = normalize_product(product)
        label = parse_product(product)
        mig_profile = label.profile
        if mig_profile is not None or label.invalid or label.profile_text is not None:
            memory_mib = None  # one MIG device's size (0 when INVALID), not the GPU's
        candidates = self._candidates(norm)
        if not candidates:
            raise errors.UnknownModelError(
                f"GPU product {product!r} is not a known MIG-capable model; known models: "
                f"{', '.join(self._models)}. Add it to a catalog file (--catalog) with a "
                f"'products' pattern"
            )
        if len(candidates) > 1 and mig_profile is not None:
            # Under the single strategy the label names the profile (…-MIG-1g.5gb): only
            # models that have it can be meant (A100-SXM4-MIG-1g.5gb is an A100-40GB).
            having = [m for m in candidates if m.has_profile(canonical_profile(mig_profile))]
            candidates = having or candidates
        if len(candidates) == 1:
            return candidates[0]
        if memory_mib is not None:
            close = [m for m in candidates if abs(m.memory_mib - memory_mib) <= 0.08 * m.memory_mib]
            if len(close) == 1:
                return close[0]
        names = ", ".join(m.id for m in candidates)
        hint = ("" if memory_mib is None else f" and gpu.memory {memory_mib} MiB")
        fix = ("add a more specific 'products' pattern (--catalog)" if mig_profile is not None
               else "label the node with nvidia.com/gpu.memory or add a more specific "
                    "'products' pattern (--catalog)")
        raise errors.UnknownModelError(
            f"GPU product {product!r}{hint} could be any of {names}; {fix}"
        )

    def resource_names(self, *, shared: bool = False) -> list[str]:
        """Every ``nvidia.com/mig-*`` resource of every model, sorted (for managedResources;
        ``shared``: with each one's renamed shared name too)."""
        names = {p.resource for m in self._models.values() for p in m.profiles}
        if shared:
            names |= {n + SHARED_SUFFIX for n in names}
        return sorted(names)


@functools.cache
def builtin() -> Catalog:
    """The catalog shipped with migfit."""
    return Catalog(_parse_file(_BUILTIN.read_text(encoding="utf-8"), str(_BUILTIN)))


def load(path: str | Path | None = None) -> Catalog:
    """The built-in catalog, with the models of ``path`` added or overridden when given."""
    catalog = builtin()
    return catalog if path is None else catalog.with_overrides(path)


# Extended-resource names may not contain "+", so the device plugin advertises the media
# profile 1g.10gb+me as nvidia.com/mig-1g.10gb.me (k8s-device-plugin; its node labels use the
# same spelling). Profile names stay canonical inside migfit and are converted at the edge.
_ATTRIBUTE_SPELLINGS = ((".me.all", "+me.all"), (".gfx", "+gfx"), (".me", "+me"))


def canonical_profile(text: str) -> str:
    """A profile as the device plugin spells it (``1g.10gb.me``) -> canonical (``1g.10gb+me``)."""
    for dotted, plus in _ATTRIBUTE_SPELLINGS:
        if text.endswith(dotted):
            return text[: -len(dotted)] + plus
    return text


def resource_name(profile: str, *, shared: bool = False) -> str:
    """``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me`` (the name kubelet advertises;
    ``shared``: as the device plugin renames a shared one, ``….shared``)."""
    return RESOURCE_PREFIX + keys.device_name(profile) + (SHARED_SUFFIX if shared else "")


def unshared(resource: str) -> tuple[str, bool]:
    """A GPU resource's name without the device plugin's ``SHARED_SUFFIX``, and whether it
    had it (``nvidia.com/mig-1g.10gb.shared`` -> ``nvidia.com/mig-1g.10gb``, True); any other
    name as it is."""
    if resource.endswith(SHARED_SUFFIX):
        base = resource[:-len(SHARED_SUFFIX)]
        if base == GPU_RESOURCE or base.startswith(RESOURCE_PREFIX):
            return base, True
    return resource, False


def parse_resource(resource: str) -> str | None:
    """``nvidia.com/mig-1g.10gb.me`` -> ``1g.10gb+me`` (a renamed shared resource,
    ``….shared``, names its profile too); None for any other resource name."""
    resource = unshared(resource)[0]
    if resource.startswith(RESOURCE_PREFIX):
        return canonical_profile(resource[len(RESOURCE_PREFIX):])
    return None
