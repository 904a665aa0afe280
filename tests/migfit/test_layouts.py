"""Every enumerated layout of every model, re-checked against rules written from reference/MIG.md.

The checker here is deliberately independent of migfit.placements: its placement tables are
typed in from reference/MIG.md 3.2 and 3.3 (not read from the catalog), and it brute-forces
every start assignment (combinations per profile, an 8-bit occupancy mask) over every
multiset within the instance limits.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections import Counter
from collections.abc import Iterator, Mapping

import pytest

from migfit import layouts, placements, profiles

# ---------------------------------------------------------------- the reference (MIG.md 3.2, 3.3)


@dataclasses.dataclass(frozen=True)
class Ref:
    compute: int
    starts: tuple[int, ...]
    size: int
    max: int
    media: bool = False


# `nvidia-smi mig -lgipp` of the A100/H100 family (MIG.md 3.2): 8 memory slices, 7 compute.
ONE = (tuple(range(7)), 1)           # ID 19 / 20 (+me): {0..6}:1
ONE_WIDE = ((0, 2, 4, 6), 2)         # ID 15: {0,2,4,6}:2
TWO = ((0, 2, 4), 2)                 # ID 14: {0,2,4}:2
THREE = ((0, 4), 4)                  # ID 9:  {0,4}:4
FOUR = ((0,), 4)                     # ID 5:  {0}:4
SEVEN = ((0,), 8)                    # ID 0:  {0}:8


def eight_slice(one: str, wide: str, two: str, three: str, four: str, seven: str,
                ) -> dict[str, Ref]:
    """The §3.2 geometry with the names of one model; max instances from the §3.3 tables."""
    return {
        one: Ref(1, *ONE, 7),
        one + "+me": Ref(1, *ONE, 1, media=True),
        wide: Ref(1, *ONE_WIDE, 4),
        two: Ref(2, *TWO, 3),
        three: Ref(3, *THREE, 2),
        four: Ref(4, *FOUR, 1),
        seven: Ref(7, *SEVEN, 1),
    }


# model id -> (memory slices, compute slices, profiles)
REFERENCE: dict[str, tuple[int, int, dict[str, Ref]]] = {
    "A100-40GB": (8, 7, eight_slice("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb",
                                    "7g.40gb")),
    "A100-80GB": (8, 7, eight_slice("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
                                    "7g.80gb")),
    "H100-80GB": (8, 7, eight_slice("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
                                    "7g.80gb")),
    "H100-94GB": (8, 7, eight_slice("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb",
                                    "7g.94gb")),
    # mig-parted names only; MIG.md says assume the §3.2 geometry (the catalog adds +me).
    "H100-96GB": (8, 7, eight_slice("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb",
                                    "7g.96gb")),
    "GH200-144GB": (8, 7, eight_slice("1g.18gb", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb",
                                      "7g.144gb")),
    "H200-141GB": (8, 7, eight_slice("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb",
                                     "7g.141gb")),
    "B200-180GB": (8, 7, eight_slice("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb",
                                     "7g.180gb")),
    # A30 (MIG.md 3.2, 3.3): 4 memory slices, 4 compute; {0,1,2,3}:1, {0,2}:2, {0}:4.
    "A30-24GB": (4, 4, {
        "1g.6gb": Ref(1, (0, 1, 2, 3), 1, 4),
        "1g.6gb+me": Ref(1, (0, 1, 2, 3), 1, 1, media=True),
        "2g.12gb": Ref(2, (0, 2), 2, 2),
        "2g.12gb+me": Ref(2, (0, 2), 2, 1, media=True),
        "4g.24gb": Ref(4, (0,), 4, 1),
    }),
}
MODELS = sorted(REFERENCE)
MAX_MEDIA = 1  # one set of media engines per GPU: every +me profile has max 1

Multiset = tuple[tuple[str, int], ...]  # sorted (name, count) pairs, counts > 0


def canon(names: Mapping[str, int]) -> Multiset:
    return tuple(sorted((n, k) for n, k in names.items() if k > 0))


def _assignments(refs: dict[str, Ref], wanted: list[tuple[str, int]], mask: int,
                 ) -> Iterator[int]:
    """Every occupancy mask reachable by placing ``wanted`` around ``mask`` (brute force)."""
    if not wanted:
        yield mask
        return
    (name, n), rest = wanted[0], wanted[1:]
    ref = refs[name]
    for starts in itertools.combinations(ref.starts, n):
        m = mask
        for s in starts:
            bits = ((1 << ref.size) - 1) << s
            if m & bits:
                break
            m |= bits
        else:
            yield from _assignments(refs, rest, m)


def ref_valid(mid: str, counts: Mapping[str, int], fixed_mask: int = 0) -> bool:
    """The independent rule: limits, media, compute and memory slices, then some placement."""
    mem, comp, refs = REFERENCE[mid]
    if any(n > refs[name].max for name, n in counts.items()):
        return False
    if sum(n for name, n in counts.items() if refs[name].media) > MAX_MEDIA:
        return False
    if sum(refs[name].compute * n for name, n in counts.items()) > comp:
        return False
    if sum(refs[name].size * n for name, n in counts.items()) > mem:
        return False
    wanted = [(name, n) for name, n in counts.items() if n > 0]
    return next(_assignments(refs, wanted, fixed_mask), None) is not None


def universe(mid: str) -> Iterator[dict[str, int]]:
    """Every non-empty multiset within the instance limits."""
    _, _, refs = REFERENCE[mid]
    names = sorted(refs)
    for counts in itertools.product(*(range(refs[n].max + 1) for n in names)):
        if any(counts):
            yield dict(zip(names, counts, strict=True))


@functools.cache
def ref_layouts(mid: str) -> frozenset[Multiset]:
    return frozenset(canon(c) for c in universe(mid) if ref_valid(mid, c))


def ref_maximal(mid: str, layout: Multiset) -> bool:
    _, _, refs = REFERENCE[mid]
    counts = Counter(dict(layout))
    for name in refs:
        counts[name] += 1
        ok = ref_valid(mid, counts)
        counts[name] -= 1
        if ok:
            return False
    return True


def as_multiset(layout: layouts.Layout) -> Multiset:
    return canon(dict(layout.counts))


def model(mid: str) -> profiles.GpuModel:
    return profiles.builtin().get(mid)


# ---------------------------------------------------------------- the catalog matches the reference


@pytest.mark.parametrize("mid", MODELS)
def test_catalog_geometry_matches_the_reference(mid: str) -> None:
    mem, comp, refs = REFERENCE[mid]
    m = model(mid)
    assert (m.memory_slices, m.compute_slices) == (mem, comp)
    assert sorted(p.name for p in m.profiles) == sorted(refs)
    for p in m.profiles:
        ref = refs[p.name]
        got = (p.compute_slices, p.starts, p.size, p.max_instances, p.media)
        assert got == (ref.compute, ref.starts, ref.size, ref.max, ref.media), p.name


# ---------------------------------------------------------------- table-driven: every layout


@pytest.mark.parametrize("mid", MODELS)
def test_enumerated_layouts_are_exactly_the_brute_force_set(mid: str) -> None:
    found = layouts.of(model(mid))
    enumerated = [as_multiset(lay) for lay in found.all]
    assert len(enumerated) == len(set(enumerated)), "a layout is listed twice"
    assert set(enumerated) == ref_layouts(mid)
    assert set(found.by_key) == {lay.counts for lay in found.all}


@pytest.mark.parametrize("mid", MODELS)
def test_every_layout_placement_is_consistent(mid: str) -> None:
    _, _, refs = REFERENCE[mid]
    mem = REFERENCE[mid][0]
    for lay in layouts.of(model(mid)).all:
        assert lay.model == mid and lay.placement.model == mid
        mask = 0
        for inst in lay.placement.instances:
            ref = refs[inst.profile]
            assert inst.start in ref.starts, (str(lay.placement), inst)
            assert inst.size == ref.size
            bits = ((1 << inst.size) - 1) << inst.start
            assert not mask & bits, f"overlap in {lay.placement}"
            assert bits < 1 << mem
            mask |= bits
        assert Counter(i.profile for i in lay.placement.instances) == Counter(dict(lay.counts))
        assert lay.profile_names() == sorted(lay.profile_names())
        assert lay.placement.profile_names() == lay.profile_names()


@pytest.mark.parametrize("mid", MODELS)
def test_maximal_layouts_are_exactly_the_maximal_ones(mid: str) -> None:
    found = layouts.of(model(mid))
    maximal = {as_multiset(lay) for lay in found.maximal}
    assert len(maximal) == len(found.maximal)
    for lay in found.all:
        key = as_multiset(lay)
        assert (key in maximal) == ref_maximal(mid, key), f"{mid}: {lay}"
    assert maximal <= {as_multiset(lay) for lay in found.all}
    assert maximal  # every model has at least one (e.g. the full 7g)


@pytest.mark.parametrize("mid", MODELS)
def test_check_agrees_with_the_reference_on_every_multiset(mid: str) -> None:
    """Including the invalid ones: check() says no, with a reason, exactly when the rules do."""
    m = model(mid)
    for counts in universe(mid):
        names = [n for n, k in counts.items() for _ in range(k)]
        fit = layouts.check(m, names)
        assert fit.valid == (canon(counts) in ref_layouts(mid)), names
        assert (fit.reason is None) == fit.valid


def test_known_counts() -> None:
    # Pinned so that a change in the catalog or the enumerator shows up loudly in review.
    a100 = layouts.of(model("A100-80GB"))
    assert (len(a100.all), len(a100.maximal)) == (127, 44)
    a30 = layouts.of(model("A30-24GB"))
    assert len(a30.all) == 19


def test_the_seed_layouts_are_maximal() -> None:
    a100 = model("A100-80GB")
    maximal = {lay.counts for lay in layouts.of(a100).maximal}
    for names in (["4g.40gb", "3g.40gb"], ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
                  ["1g.10gb"] * 7, ["7g.80gb"], ["3g.40gb", "3g.40gb"]):
        assert layouts.key_of(a100, names) in maximal, names
    assert layouts.key_of(a100, ["3g.40gb", "2g.20gb"]) not in maximal


def test_key_of_is_order_independent_and_in_catalog_order() -> None:
    a100 = model("A100-80GB")
    key = layouts.key_of(a100, ["3g.40gb", "1g.10gb", "2g.20gb", "1g.10gb"])
    assert key == layouts.key_of(a100, ["1g.10gb", "2g.20gb", "1g.10gb", "3g.40gb"])
    assert key == (("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1))


def test_layout_helpers() -> None:
    a100 = model("A100-80GB")
    lay = layouts.of(a100).by_key[layouts.key_of(a100, ["3g.40gb", "1g.10gb", "1g.10gb"])]
    assert lay.count("1g.10gb") == 2 and lay.count("7g.80gb") == 0
    assert str(lay) == "2×1g.10gb 3g.40gb"


def test_check_on_a100_40gb_counts_1g10gb_as_two_slices() -> None:
    a40 = model("A100-40GB")
    assert layouts.check(a40, ["1g.10gb"] * 4).valid
    assert not layouts.check(a40, ["1g.10gb"] * 4 + ["1g.5gb"]).valid
    assert layouts.check(a40, ["1g.10gb"] * 3 + ["1g.5gb", "1g.5gb"]).valid


# ---------------------------------------------------------------- completions (fixed instances)


@pytest.mark.parametrize(("mid", "fixed_text"), [
    ("A100-80GB", ["3g.40gb@0"]),
    ("A100-80GB", ["1g.10gb@3"]),
    ("A100-80GB", ["1g.10gb@6", "2g.20gb@0"]),
    ("A100-40GB", ["1g.10gb@2"]),
    ("A30-24GB", ["1g.6gb+me@1"]),
    ("H200-141GB", []),
])
def test_completions_match_the_reference(mid: str, fixed_text: list[str]) -> None:
    m = model(mid)
    fixed = [placements.parse_instance(m, t) for t in fixed_text]
    fixed_mask = 0
    for inst in fixed:
        fixed_mask |= inst.mask
    fixed_counts = Counter(i.profile for i in fixed)
    expected: set[Multiset] = set()
    for ref_lay in ref_layouts(mid):
        extra = Counter(dict(ref_lay))
        extra.subtract(fixed_counts)
        if min(extra.values(), default=0) < 0:
            continue
        counts = Counter(dict(ref_lay))
        # Limits on the whole layout; the extra instances placed around the fixed mask.
        if ref_valid(mid, counts) and next(_assignments(
                REFERENCE[mid][2], [(n, k) for n, k in extra.items() if k > 0], fixed_mask),
                None) is not None:
            expected.add(ref_lay)
    got = layouts.completions(m, fixed)
    assert {as_multiset(lay) for lay in got} == expected
    for lay in got:
        starts = {(i.profile, i.start) for i in lay.placement.instances}
        assert {(i.profile, i.start) for i in fixed} <= starts
        assert Counter(i.profile for i in lay.placement.instances) == Counter(dict(lay.counts))
