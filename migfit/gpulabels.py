"""What a Node's GPU labels and extended resources say about its MIG devices.

The parsing of GPU Feature Discovery's labels (``nvidia.com/gpu.product``, ``gpu.memory``,
``gpu.count``, ``mig.strategy``, ``nvidia.com/mig-<profile>.memory``) and of the device
plugin's resources (``nvidia.com/mig-<profile>`` under mixed, ``nvidia.com/gpu`` under single)
into one ``GpuView`` (reference/MIG.md 4). Time-slicing and MPS replicas (``<resource>.replicas``)
multiply what the device plugin advertises: the view keeps them, so that an advertised count
is read as instances × replicas (``profiles.instances_of``). ``migfit.decoding`` builds the node
record from it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from migfit import errors, fields, keys, profiles


@dataclasses.dataclass(frozen=True, slots=True)
class GpuView:
    """A node's GPU model and MIG instances, as its labels and resources report them."""

    model: profiles.GpuModel | None
    model_error: str | None  # why the GPU model is unknown, when it is
    strategy: str | None  # none | single | mixed
    gpu_count: int
    capacity: dict[profiles.ProfileName, int]
    allocatable: dict[profiles.ProfileName, int]
    memory_mib: dict[profiles.ProfileName, int]  # usable memory per profile, from labels
    whole_gpus: int  # GPUs advertised as nvidia.com/gpu, not as MIG devices (mixed strategy)
    # pods that share one MIG instance, per profile, where more than 1 (time-slicing or MPS:
    # GFD's ``<resource>.replicas``); capacity and allocatable count each instance that often
    replicas: dict[profiles.ProfileName, int] = dataclasses.field(default_factory=dict)
    # profiles the device plugin advertises under their renamed shared name (``….shared``,
    # ``renameByDefault``): a pod must ask for that name to land here
    renamed: frozenset[profiles.ProfileName] = frozenset()


def _plain(raw: Mapping[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """``raw`` resources with renamed shared GPU resources (``….shared``) under their plain
    names (a count where both spellings are there is their sum), and the plain names that
    are advertised renamed only: a pod must ask for ``….shared`` to get one. A leftover
    zero of either spelling (the device plugin's config changed) does not count."""
    if not any(k.endswith(profiles.SHARED_SUFFIX) for k in raw):
        return dict(raw), set()
    out: dict[str, Any] = {}
    shared: set[str] = set()
    plain: set[str] = set()
    for key, val in raw.items():
        name, was = profiles.unshared(key)
        if fields.count(val) > 0:
            (shared if was else plain).add(name)
        out[name] = (fields.count(out[name]) + fields.count(val)) if name in out else val
    return out, shared - plain


def gpu_view(labels: Mapping[str, str], capacity_raw: Mapping[str, Any],
             allocatable_raw: Mapping[str, Any], catalog: profiles.Catalog) -> GpuView:
    """Read a node's GPU labels and its status capacity/allocatable resources."""
    strategy = labels.get(keys.LABEL_STRATEGY)
    product = labels.get(keys.LABEL_PRODUCT)

    model: profiles.GpuModel | None = None
    model_error: str | None = None
    gpu_mem = fields.int_label(labels.get(keys.LABEL_GPU_MEMORY))
    if product:
        try:
            model = catalog.resolve(product, gpu_mem)
        except errors.UnknownModelError as exc:
            model_error = exc.message
    invalid = profiles.invalid_layout_message(product or "")
    if invalid is not None:  # …-MIG-INVALID: flag the node, never a profile named "invalid"
        model, model_error = None, invalid

    capacity_raw, _ = _plain(capacity_raw)
    allocatable_raw, renamed_raw = _plain(allocatable_raw)
    capacity: dict[profiles.ProfileName, int] = {}
    allocatable: dict[profiles.ProfileName, int] = {}
    renamed: set[profiles.ProfileName] = set()
    memory: dict[profiles.ProfileName, int] = {}
    shared: dict[profiles.ProfileName, int] = {}
    whole = 0
    if strategy == "single":
        prof = profiles.single_strategy_profile(product or "")
        if prof is not None:
            pname = profiles.ProfileName(prof)
            capacity[pname] = fields.count(capacity_raw.get(profiles.GPU_RESOURCE, 0))
            allocatable[pname] = fields.count(allocatable_raw.get(profiles.GPU_RESOURCE, 0))
            if gpu_mem is not None:
                memory[pname] = gpu_mem
            if profiles.replicas(labels) > 1:
                shared[pname] = profiles.replicas(labels)
            if profiles.GPU_RESOURCE in renamed_raw:
                renamed.add(pname)
    else:
        for res, val in capacity_raw.items():
            p = profiles.parse_resource(res)
            if p is not None:
                capacity[profiles.ProfileName(p)] = fields.count(val)
        for res, val in allocatable_raw.items():
            p = profiles.parse_resource(res)
            if p is not None:
                allocatable[profiles.ProfileName(p)] = fields.count(val)
                if res in renamed_raw:
                    renamed.add(profiles.ProfileName(p))
        # Under mixed, GFD labels each MIG resource on its own (internal/lm/resource.go,
        # NewMIGResourceLabeler): nvidia.com/mig-<p>.count instances, .replicas the pods that
        # share one (the device plugin advertises count × replicas), .product ending in
        # -SHARED when replicas > 1. nvidia.com/gpu.replicas is the GPUs' own (whole GPUs
        # time-sliced: their nvidia.com/gpu.product then ends in -SHARED).
        whole = fields.count(allocatable_raw.get(profiles.GPU_RESOURCE, 0))
        whole = -(-whole // profiles.replicas(labels))
        for p in set(capacity) | set(allocatable):
            r = profiles.replicas(labels, p)
            if r > 1:
                shared[p] = r
        for key, val in labels.items():
            mib = fields.int_label(val)
            if (key.startswith(keys.MIG_LABEL_PREFIX) and key.endswith(keys.MIG_MEMORY_LABEL_SUFFIX)
                    and mib is not None):
                spelled = key[len(keys.MIG_LABEL_PREFIX):-len(keys.MIG_MEMORY_LABEL_SUFFIX)]
                memory[profiles.ProfileName(profiles.canonical_profile(spelled))] = mib
    for p in capacity:
        allocatable.setdefault(p, 0)

    gpu_count = fields.int_label(labels.get(keys.LABEL_GPU_COUNT)) or 0
    if strategy == "single" and model is not None and allocatable:
        # Under single, gpu.count is the number of MIG devices (reference/MIG.md 4).
        (pname, devices), = capacity.items() or allocatable.items()
        devices //= profiles.replicas(labels)  # time-slicing/MPS replicas multiply it
        per_gpu = model.profile(pname).max_instances if model.has_profile(pname) else 1
        gpu_count = math.ceil(max(devices, gpu_count) / per_gpu) if per_gpu else gpu_count
    elif not gpu_count:
        gpu_count = fields.count(capacity_raw.get(profiles.GPU_RESOURCE, 0))
    return GpuView(model=model, model_error=model_error, strategy=strategy,
                   gpu_count=gpu_count, capacity=capacity, allocatable=allocatable,
                   memory_mib=memory, whole_gpus=whole, replicas=shared,
                   renamed=frozenset(renamed))
