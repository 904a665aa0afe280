"""Every valid MIG layout of a GPU model, computed from its placement table, never listed by hand.

A layout is a multiset of profiles that fits one GPU (some placement exists). They are
enumerated once per model from the allowed (start, size) positions and indexed, so checking a
layout is a dict lookup and the planner can compare every candidate exactly.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from migfit import placements, profiles

LayoutKey = tuple[tuple[profiles.ProfileName, int], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    """A valid multiset of profiles on one GPU, with one placement that realises it."""

    model: profiles.ModelId
    counts: LayoutKey
    placement: placements.Placement

    def profile_names(self) -> list[str]:
        """The instances as a sorted list of profile names (``["1g.10gb", "1g.10gb", ...]``)."""
        return sorted(name for name, n in self.counts for _ in range(n))

    def count(self, profile: str) -> int:
        for name, n in self.counts:
            if name == profile:
                return n
        return 0

    def __str__(self) -> str:
        return " ".join(f"{n}×{name}" if n > 1 else name for name, n in self.counts) or "(empty)"


def key_of(model: profiles.GpuModel, names: Iterable[str]) -> LayoutKey:
    """The canonical key of a multiset: profiles in catalog order (smallest first), with counts."""
    counts = Counter(names)
    order: dict[str, int] = {p.name: i for i, p in enumerate(model.profiles)}
    return tuple(
        (profiles.ProfileName(name), counts[name])
        for name in sorted(counts, key=lambda n: (order.get(n, len(order)), n))
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ModelLayouts:
    """All layouts of one model: by key, plus the maximal ones."""

    model: profiles.GpuModel
    by_key: Mapping[LayoutKey, Layout]
    maximal: tuple[Layout, ...]

    @property
    def all(self) -> tuple[Layout, ...]:
        return tuple(self.by_key.values())


def _enumerate(model: profiles.GpuModel) -> dict[LayoutKey, Layout]:
    """Depth-first over non-overlapping (start, profile) positions, each subset once."""
    options = sorted(
        (start, -p.size, p.name) for p in model.profiles for start in p.starts
    )
    opts = [(s, -neg, name, model.profile(name)) for s, neg, name in options]
    found: dict[LayoutKey, Layout] = {}
    chosen: list[placements.Instance] = []
    counts: Counter[str] = Counter()

    def visit(i: int, mask: int, media: int, compute: int) -> None:
        if chosen:
            key = key_of(model, counts.elements())
            if key not in found:
                found[key] = Layout(model=model.id, counts=key,
                                    placement=placements.Placement(model.id, tuple(chosen)))
        for j in range(i, len(opts)):
            start, size, name, p = opts[j]
            bits = ((1 << size) - 1) << start
            if mask & bits or counts[name] >= p.max_instances:
                continue
            if p.media and media >= placements.MAX_MEDIA_INSTANCES:
                continue
            if compute + p.compute_slices > model.compute_slices:
                continue
            chosen.append(placements.Instance(start=start, size=size, profile=name))
            counts[name] += 1
            visit(j + 1, mask | bits, media + p.media, compute + p.compute_slices)
            counts[name] -= 1
            if not counts[name]:
                del counts[name]
            chosen.pop()

    visit(0, 0, 0, 0)
    return found


@functools.cache
def _for_model(model: profiles.GpuModel) -> ModelLayouts:
    by_key = _enumerate(model)
    maximal = []
    for layout in by_key.values():
        names = layout.profile_names()
        if not any(key_of(model, [*names, p.name]) in by_key for p in model.profiles):
            maximal.append(layout)
    ordered = dict(sorted(by_key.items(), key=lambda kv: (len(kv[1].profile_names()), kv[0])))
    return ModelLayouts(model=model, by_key=ordered, maximal=tuple(
        sorted(maximal, key=lambda lay: lay.counts)))


def of(model: profiles.GpuModel) -> ModelLayouts:
    """The (cached) layouts of ``model``."""
    return _for_model(model)


def gpus_at_least(model: profiles.GpuModel, counts: Mapping[profiles.ProfileName, int]) -> int:
    """A lower bound on the GPUs of ``model`` that hold ``counts`` instances per profile
    (names of the model): their compute slices, their memory slices and each profile's
    most instances per GPU, each against one GPU's. Never more than the fewest GPUs that
    really hold them (a bound to rule a set out, not a packing)."""
    compute = memory = need = 0
    for name, n in counts.items():
        if n <= 0 or not model.has_profile(name):
            continue
        p = model.profile(name)
        compute += p.compute_slices * n
        memory += p.memory_slices * n
        need = max(need, -(-n // max(p.max_instances, 1)))
    return max(need, -(-compute // max(model.compute_slices, 1)),
               -(-memory // max(model.memory_slices, 1)))


def check(model: profiles.GpuModel, names: Sequence[str]) -> placements.Fit:
    """Whether ``names`` fit one GPU: a dict lookup when valid, a search for the reason when not."""
    layout = _for_model(model).by_key.get(key_of(model, names))
    if layout is not None:
        return placements.Fit(layout.placement, None)
    return placements.fit(model, names)


def completions(
    model: profiles.GpuModel, fixed: Sequence[placements.Instance]
) -> list[Layout]:
    """Valid layouts that keep every ``fixed`` instance where it is (a placement exists).

    Each returned layout's placement includes the fixed instances at their starts.
    """
    out: list[Layout] = []
    fixed_names = [i.profile for i in fixed]
    fixed_counts = Counter(fixed_names)
    for layout in _for_model(model).by_key.values():
        extra = Counter(dict(layout.counts))
        extra.subtract(fixed_counts)
        if any(n < 0 for n in extra.values()):
            continue
        f = placements.fit(model, list(extra.elements()), fixed=fixed)
        if f.placement is not None:
            out.append(Layout(model=model.id, counts=layout.counts, placement=f.placement))
    return out
