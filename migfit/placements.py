"""Where MIG instances sit on one GPU: fit a multiset of profiles to memory-slice positions.

A GPU instance occupies ``size`` consecutive memory slices from a ``start`` its profile allows
(NVML ``nvmlGpuInstancePlacement_t``; creation fails on overlap — reference/MIG.md 3.1). There
is no hardware to try orderings against, so placements are modelled explicitly: an occupancy
bit mask per GPU and a backtracking search over each profile's allowed starts (MIG.md 3.4).
When instances do not fit, the answer is the precise reason, as data.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from migfit import errors, profiles


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Instance:
    """One GPU instance: a profile at a start position (in memory slices)."""

    start: int
    size: int
    profile: profiles.ProfileName

    @property
    def mask(self) -> int:
        return ((1 << self.size) - 1) << self.start

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}"


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    """A concrete arrangement of instances on one GPU, ordered by start."""

    model: profiles.ModelId
    instances: tuple[Instance, ...]

    def __str__(self) -> str:
        return " ".join(str(i) for i in self.instances)

    @property
    def mask(self) -> int:
        mask = 0
        for inst in self.instances:
            mask |= inst.mask
        return mask

    def profile_names(self) -> list[str]:
        return sorted(i.profile for i in self.instances)


class ReasonCode(enum.StrEnum):
    UNKNOWN_PROFILE = "unknown-profile"
    FIXED_INVALID = "fixed-invalid"
    INSTANCE_LIMIT = "instance-limit"
    MEDIA_LIMIT = "media-limit"
    MEMORY_SLICES = "memory-slices"
    COMPUTE_SLICES = "compute-slices"
    POSITIONS = "positions"


@dataclasses.dataclass(frozen=True, slots=True)
class Reason:
    """Why a set of instances does not fit one GPU."""

    code: ReasonCode
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class Fit:
    """The outcome of a fit: a placement, or the reason there is none."""

    placement: Placement | None
    reason: Reason | None

    @property
    def valid(self) -> bool:
        return self.placement is not None


# At most one instance per GPU can own the media engines (MIGUG: "+me" gives the instance
# the GPU's decoders/JPEG/OFA; the max-instances column of every +me profile is 1).
MAX_MEDIA_INSTANCES = 1


_START: Final = re.compile(r"[0-9]{1,3}")


def parse_instance(model: profiles.GpuModel, text: str, *, any_start: bool = False
                   ) -> Instance:
    """``3g.40gb@4`` -> an Instance; a UsageError when the form or the start is wrong (with
    ``any_start``, a start the profile cannot use is kept: ``check_fixed`` says why)."""
    name, sep, start_text = text.partition("@")
    # ASCII digits only, and few: str.isdigit() takes "²" (int() then fails) and "٣".
    if not sep or _START.fullmatch(start_text) is None:
        raise errors.UsageError(f"{text!r} is not of the form PROFILE@START, e.g. 3g.40gb@4")
    profile = model.profile(name)
    start = int(start_text)
    if start not in profile.starts and not any_start:
        allowed = ", ".join(map(str, profile.starts))
        raise errors.UsageError(
            f"{profile.name} cannot start at memory slice {start} on {model.id}; "
            f"allowed starts: {allowed}"
        )
    return Instance(start=start, size=profile.size, profile=profile.name)


def _slices(mask: int) -> str:
    used = [str(i) for i in range(mask.bit_length()) if mask >> i & 1]
    return ",".join(used) if used else "none"


def check_fixed(model: profiles.GpuModel, fixed: Sequence[Instance]) -> Reason | None:
    """Instances already on the GPU: each at an allowed start, none overlapping."""
    mask = 0
    for inst in sorted(fixed):
        if not model.has_profile(inst.profile):
            return Reason(ReasonCode.UNKNOWN_PROFILE, model.no_profile(inst.profile))
        p = model.profile(inst.profile)
        if inst.start not in p.starts or inst.size != p.size:
            return Reason(ReasonCode.FIXED_INVALID,
                          f"{inst} is not a valid position for {p.name} on {model.id} "
                          f"(starts {', '.join(map(str, p.starts))}, size {p.size})")
        if mask & inst.mask:
            return Reason(ReasonCode.FIXED_INVALID,
                          f"{inst} overlaps another fixed instance on memory slices "
                          f"{_slices(mask & inst.mask)}")
        mask |= inst.mask
    return None


def _limits(model: profiles.GpuModel, counts: Counter[str]) -> Reason | None:
    for name, n in counts.items():
        p = model.profile(name)
        if n > p.max_instances:
            return Reason(ReasonCode.INSTANCE_LIMIT,
                          f"{n} × {name} exceeds its limit of {p.max_instances} per GPU "
                          f"on {model.id}")
    media = sum(n for name, n in counts.items() if model.profile(name).media)
    if media > MAX_MEDIA_INSTANCES:
        return Reason(ReasonCode.MEDIA_LIMIT,
                      f"{media} instances with media extensions (+me); a GPU has media "
                      f"engines for only {MAX_MEDIA_INSTANCES}")
    mem = sum(model.profile(name).memory_slices * n for name, n in counts.items())
    if mem > model.memory_slices:
        return Reason(ReasonCode.MEMORY_SLICES,
                      f"needs {mem} memory slices; {model.id} has {model.memory_slices} "
                      f"({mem} of {model.memory_slices})")
    comp = sum(model.profile(name).compute_slices * n for name, n in counts.items())
    if comp > model.compute_slices:
        return Reason(ReasonCode.COMPUTE_SLICES,
                      f"needs {comp} compute slices; {model.id} has {model.compute_slices} "
                      f"({comp} of {model.compute_slices})")
    return None


def fit(
    model: profiles.GpuModel,
    wanted: Iterable[str],
    *,
    fixed: Sequence[Instance] = (),
) -> Fit:
    """Place ``wanted`` profiles on one GPU of ``model`` around the ``fixed`` instances.

    The result's placement holds the fixed instances too. Reasons are checked from the
    cheapest and most telling (unknown names, instance limits, slice totals) to the placement
    positions themselves.
    """
    names = list(wanted)
    for name in names:
        if not model.has_profile(name):
            return Fit(None, Reason(ReasonCode.UNKNOWN_PROFILE, model.no_profile(name)))
    bad = check_fixed(model, fixed)
    if bad is not None:
        return Fit(None, bad)
    counts: Counter[str] = Counter(names)
    counts.update(i.profile for i in fixed)
    bad = _limits(model, counts)
    if bad is not None:
        return Fit(None, bad)

    base = 0
    for inst in fixed:
        base |= inst.mask
    # Most constrained first: fewest starts, then largest; equal profiles in increasing start
    # order so that permutations of identical instances are not searched twice.
    order = sorted((model.profile(n) for n in names),
                   key=lambda p: (len(p.starts), -p.size, p.name))
    chosen: list[Instance] = []
    failed: set[tuple[int, int, int]] = set()
    deepest = [-1]  # the deepest index of ``order`` whose instance could not be placed

    def place(i: int, mask: int, min_start: int) -> bool:
        if i == len(order):
            return True
        key = (i, mask, min_start)
        if key in failed:
            return False
        p = order[i]
        for start in p.starts:
            if start < min_start:
                continue
            bits = ((1 << p.size) - 1) << start
            if mask & bits:
                continue
            chosen.append(Instance(start=start, size=p.size, profile=p.name))
            nxt = order[i + 1] if i + 1 < len(order) else None
            nxt_min = start + 1 if nxt is not None and nxt.name == p.name else 0
            if place(i + 1, mask | bits, nxt_min):
                return True
            chosen.pop()
        failed.add(key)
        deepest[0] = max(deepest[0], i)
        return False

    if place(0, base, 0):
        placed = tuple(sorted([*fixed, *chosen]))
        return Fit(Placement(model=model.id, instances=placed), None)
    stuck = order[max(deepest[0], 0)]
    total = sum(model.profile(n).memory_slices * k for n, k in counts.items())
    starts = ", ".join(map(str, stuck.starts))
    return Fit(None, Reason(
        ReasonCode.POSITIONS,
        f"the instances need {total} of {model.memory_slices} memory slices but no arrangement "
        f"exists: {stuck.name} (size {stuck.size}) may start only at {starts}, and every "
        f"such position overlaps another instance",
    ))


def addable(
    model: profiles.GpuModel, fixed: Sequence[Instance]
) -> dict[profiles.ProfileName, tuple[int, ...]]:
    """For each profile, the starts where one more instance could be created next to ``fixed``.

    Profiles at their instance limit (or a second ``+me``) get no starts.
    """
    bad = check_fixed(model, fixed)
    if bad is not None:
        raise errors.UsageError(bad.message)
    mask = 0
    for inst in fixed:
        mask |= inst.mask
    counts = Counter(i.profile for i in fixed)
    media = sum(n for name, n in counts.items() if model.profile(name).media)
    comp = sum(model.profile(name).compute_slices * n for name, n in counts.items())
    out: dict[profiles.ProfileName, tuple[int, ...]] = {}
    for p in model.profiles:
        ok = (counts[p.name] < p.max_instances
              and not (p.media and media >= MAX_MEDIA_INSTANCES)
              and comp + p.compute_slices <= model.compute_slices)
        out[p.name] = tuple(
            s for s in p.starts if ok and not mask & (((1 << p.size) - 1) << s)
        )
    return out
