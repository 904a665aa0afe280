"""mig-parted's named configs (``all-1g.10gb``, ``all-balanced``, ...) as per-GPU layouts.

mig-parted's default ConfigMap names configs after what they make on every GPU:
``all-<profile>`` fills each GPU with as many instances of one profile as fit, and
``all-balanced`` is two of the smallest 1g profile, one 2g and one 3g (on a 4-slice A30:
two 1g and one 2g). ``all-<G>g`` is accepted for the smallest non-media ``<G>g`` profile,
and ``all-disabled``/``all-empty`` for a GPU with no instances.
"""

from __future__ import annotations

from migfit import errors, layouts, profiles


def _smallest(model: profiles.GpuModel, compute: int) -> profiles.Profile | None:
    cands = [p for p in model.profiles if p.compute_slices == compute and not p.media]
    return min(cands, key=profiles.profile_order) if cands else None


def _fill(model: profiles.GpuModel, profile: profiles.Profile) -> list[str]:
    names: list[str] = []
    while layouts.check(model, [*names, profile.name]).valid:
        names.append(profile.name)
    return names


def layout(model: profiles.GpuModel, name: str) -> list[str]:
    """One GPU's profile names for config ``name`` on ``model``; a UsageError when unknown."""
    if name in ("all-disabled", "all-empty"):
        return []
    if name == "all-balanced":
        one, two, three = _smallest(model, 1), _smallest(model, 2), _smallest(model, 3)
        if one is None or two is None:
            raise errors.UsageError(f"{model.id} has no balanced layout")
        names: list[str] = [one.name, one.name, two.name]
        if three is not None and model.memory_slices >= 8:
            names.append(three.name)
        return names
    if name.startswith("all-"):
        rest = name[len("all-"):]
        if model.has_profile(rest):
            return _fill(model, model.profile(rest))
        if rest.endswith("g") and rest[:-1].isdigit():
            p = _smallest(model, int(rest[:-1]))
            if p is not None:
                return _fill(model, p)
    valid = ", ".join(["all-balanced", "all-disabled",
                       *(f"all-{p.name}" for p in model.profiles)])
    raise errors.UsageError(f"unknown MIG config {name!r} for {model.id}; use one of {valid}, "
                            f"all-<G>g, or a list of profiles")
