"""Fitting MIG instances to memory-slice positions: the worked cases of reference/MIG.md 3.4."""

from __future__ import annotations

import pytest

from migfit import errors, layouts, placements, profiles

Code = placements.ReasonCode


def model(mid: str) -> profiles.GpuModel:
    return profiles.builtin().get(mid)


def both(mid: str, names: list[str]) -> placements.Fit:
    """``placements.fit`` and ``layouts.check`` must agree on validity; return the search's fit."""
    m = model(mid)
    searched = placements.fit(m, names)
    looked_up = layouts.check(m, names)
    assert searched.valid == looked_up.valid
    if searched.valid:
        assert searched.reason is None and looked_up.reason is None
    else:
        assert searched.reason is not None and looked_up.reason is not None
        assert searched.placement is None and looked_up.placement is None
    return searched


def assert_sound(mid: str, names: list[str], fit: placements.Fit) -> None:
    """The placement holds exactly ``names``, at allowed starts, with no overlap."""
    assert fit.placement is not None
    m = model(mid)
    assert fit.placement.model == m.id
    assert fit.placement.profile_names() == sorted(names)
    mask = 0
    for inst in fit.placement.instances:
        p = m.profile(inst.profile)
        assert inst.start in p.starts and inst.size == p.size
        assert not mask & inst.mask
        mask |= inst.mask
    assert list(fit.placement.instances) == sorted(fit.placement.instances)


@pytest.mark.parametrize(("mid", "names"), [
    ("A100-80GB", ["4g.40gb", "3g.40gb"]),
    ("A100-80GB", ["1g.10gb"] * 7),
    ("A100-80GB", ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]),
    ("A100-80GB", ["3g.40gb", "2g.20gb", "2g.20gb"]),
    ("A100-80GB", ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]),  # MIGUG: -cgi 19,19,14,9
    ("A100-80GB", ["1g.10gb+me", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb",
                   "1g.10gb"]),
    ("A100-80GB", ["7g.80gb"]),
    ("A100-80GB", ["1g.20gb"] * 4),
    ("A100-40GB", ["1g.10gb"] * 4),
    ("A100-40GB", ["1g.5gb"] * 7),
    ("A30-24GB", ["2g.12gb", "1g.6gb", "1g.6gb"]),
    ("A30-24GB", ["1g.6gb"] * 4),
    ("H100-80GB", ["4g.40gb", "3g.40gb"]),
    ("H200-141GB", ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]),  # mig-parted all-balanced
])
def test_valid(mid: str, names: list[str]) -> None:
    fit = both(mid, names)
    assert fit.valid
    assert_sound(mid, names, fit)


def test_4g_plus_3g_placement() -> None:
    assert str(both("A100-80GB", ["3g.40gb", "4g.40gb"]).placement) == "4g.40gb@0 3g.40gb@4"


def test_3g_2g_2g_is_valid_only_with_both_2g_before_the_3g() -> None:
    fit = both("A100-80GB", ["3g.40gb", "2g.20gb", "2g.20gb"])
    assert str(fit.placement) == "2g.20gb@0 2g.20gb@2 3g.40gb@4"
    # The only arrangement: exhaustively, no other start assignment is valid.
    m = model("A100-80GB")
    three, two = m.profile("3g.40gb"), m.profile("2g.20gb")
    arrangements = set()
    for s3 in three.starts:
        for a in two.starts:
            for b in two.starts:
                spans = [(s3, 4), (a, 2), (b, 2)]
                used = [i for s, n in spans for i in range(s, s + n)]
                if a < b and len(used) == len(set(used)):
                    arrangements.add((a, b, s3))
    assert arrangements == {(0, 2, 4)}


def test_3g_3g_1g_names_the_memory_slices() -> None:
    fit = both("A100-80GB", ["3g.40gb", "3g.40gb", "1g.10gb"])
    assert fit.reason is not None
    assert fit.reason.code is Code.MEMORY_SLICES
    assert "9 of 8" in fit.reason.message and "memory slices" in fit.reason.message


def test_a30_2g_2g_1g_is_invalid() -> None:
    fit = both("A30-24GB", ["2g.12gb", "2g.12gb", "1g.6gb"])
    assert fit.reason is not None
    assert fit.reason.code is Code.MEMORY_SLICES
    assert "5 of 4" in fit.reason.message


def test_eight_1g_exceed_the_instance_limit() -> None:
    fit = both("A100-80GB", ["1g.10gb"] * 8)
    assert fit.reason is not None and fit.reason.code is Code.INSTANCE_LIMIT
    assert "7" in fit.reason.message


def test_media_extension_at_most_once() -> None:
    fit = both("A100-80GB", ["1g.10gb+me", "1g.10gb+me"])
    assert fit.reason is not None and fit.reason.code is Code.INSTANCE_LIMIT
    # Two different +me profiles are limited together (one set of media engines per GPU).
    fit = both("A30-24GB", ["1g.6gb+me", "2g.12gb+me"])
    assert fit.reason is not None and fit.reason.code is Code.MEDIA_LIMIT
    assert both("A30-24GB", ["1g.6gb+me", "2g.12gb"]).valid


def test_compute_slices_reason() -> None:
    fit = both("A100-80GB", ["4g.40gb", "2g.20gb", "2g.20gb"])
    assert fit.reason is not None and fit.reason.code is Code.COMPUTE_SLICES
    assert "8 of 7" in fit.reason.message


def test_positions_reason_names_the_stuck_profile() -> None:
    m = model("A100-80GB")
    fit = placements.fit(m, ["4g.40gb"], fixed=[placements.parse_instance(m, "1g.10gb@2")])
    assert fit.reason is not None and fit.reason.code is Code.POSITIONS
    assert "4g.40gb" in fit.reason.message and "start only at 0" in fit.reason.message
    fit = placements.fit(m, ["2g.20gb"], fixed=[placements.parse_instance(m, "1g.10gb@1"),
                                                  placements.parse_instance(m, "1g.10gb@3"),
                                                  placements.parse_instance(m, "1g.10gb@5")])
    assert fit.reason is not None and fit.reason.code is Code.POSITIONS
    assert "0, 2, 4" in fit.reason.message


def test_slice_7_is_reachable_only_by_wide_profiles() -> None:
    # 4g@0 and four 1-slice instances would need slice 7; compute (8 of 7) already says no.
    fit = both("A100-80GB", ["4g.40gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"])
    assert fit.reason is not None and fit.reason.code is Code.COMPUTE_SLICES
    # With the 2-slice 1g at 6, the same memory is usable.
    fit = both("A100-80GB", ["4g.40gb", "1g.10gb", "1g.10gb", "1g.20gb"])
    assert str(fit.placement) == "4g.40gb@0 1g.10gb@4 1g.10gb@5 1g.20gb@6"


def test_unknown_profile_reason() -> None:
    fit = placements.fit(model("A100-80GB"), ["1g.5gb"])
    assert fit.reason is not None and fit.reason.code is Code.UNKNOWN_PROFILE
    assert "1g.10gb" in fit.reason.message


def test_empty_is_valid() -> None:
    fit = placements.fit(model("A100-80GB"), [])
    assert fit.placement is not None and fit.placement.instances == ()


# ---------------------------------------------------------------- fixed instances


def test_with_3g_fixed_at_0_one_2g_fits_and_a_second_does_not() -> None:
    m = model("A100-80GB")
    fixed = [placements.parse_instance(m, "3g.40gb@0")]
    one = placements.fit(m, ["2g.20gb"], fixed=fixed)
    assert str(one.placement) == "3g.40gb@0 2g.20gb@4"
    two = placements.fit(m, ["2g.20gb", "2g.20gb"], fixed=fixed)
    assert two.placement is None
    assert two.reason is not None and two.reason.code is Code.POSITIONS
    # Without the fixed instance the same multiset is valid (the 3g moves to 4).
    assert placements.fit(m, ["3g.40gb", "2g.20gb", "2g.20gb"]).valid


def addable(m: profiles.GpuModel, fixed: list[placements.Instance]) -> dict[str, tuple[int, ...]]:
    return dict(placements.addable(m, fixed).items())


def test_addable_next_to_a_fixed_3g() -> None:
    m = model("A100-80GB")
    add = addable(m, [placements.parse_instance(m, "3g.40gb@0")])
    assert add["2g.20gb"] == (4,)
    assert add["3g.40gb"] == (4,)
    assert add["1g.10gb"] == (4, 5, 6)
    assert add["1g.20gb"] == (4, 6)
    assert add["4g.40gb"] == () and add["7g.80gb"] == ()


def test_addable_respects_limits() -> None:
    m = model("A100-80GB")
    fixed = [placements.parse_instance(m, "1g.10gb+me@0")]
    add = addable(m, fixed)
    assert add["1g.10gb+me"] == ()
    assert add["1g.10gb"] == (1, 2, 3, 4, 5, 6)
    assert add["4g.40gb"] == ()  # slice 0 is taken
    seven = [placements.parse_instance(m, f"1g.10gb@{i}") for i in range(7)]
    assert all(starts == () for starts in placements.addable(m, seven).values())


def test_addable_rejects_invalid_fixed() -> None:
    m = model("A100-80GB")
    bad = [placements.Instance(start=1, size=4, profile=profiles.ProfileName("3g.40gb"))]
    with pytest.raises(errors.UsageError):
        placements.addable(m, bad)


def test_fixed_overlap_and_bad_start_are_reasons() -> None:
    m = model("A100-80GB")
    overlap = [placements.parse_instance(m, "4g.40gb@0"), placements.parse_instance(m, "2g.20gb@2")]
    fit = placements.fit(m, [], fixed=overlap)
    assert fit.reason is not None and fit.reason.code is Code.FIXED_INVALID
    assert "2,3" in fit.reason.message
    bad = [placements.Instance(start=6, size=2, profile=profiles.ProfileName("2g.20gb"))]
    fit = placements.fit(m, ["1g.10gb"], fixed=bad)
    assert fit.reason is not None and fit.reason.code is Code.FIXED_INVALID


def test_fixed_counts_towards_limits() -> None:
    m = model("A100-80GB")
    fit = placements.fit(m, ["1g.10gb+me"], fixed=[placements.parse_instance(m, "1g.10gb+me@3")])
    assert fit.reason is not None and fit.reason.code is Code.INSTANCE_LIMIT


@pytest.mark.parametrize("text", ["3g.40gb@1", "3g.40gb", "3g.40gb@", "3g.40gb@x", "1g.5gb@0",
                                  "@0", "3g.40gb@-4"])
def test_parse_instance_rejects(text: str) -> None:
    with pytest.raises(errors.UsageError):
        placements.parse_instance(model("A100-80GB"), text)


def test_parse_instance() -> None:
    inst = placements.parse_instance(model("A100-40GB"), "1g.10gb@6")
    assert (inst.start, inst.size, inst.profile, str(inst)) == (6, 2, "1g.10gb", "1g.10gb@6")
    assert inst.mask == 0b1100_0000
