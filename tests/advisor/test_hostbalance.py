"""Idle nodes trading GPU layouts so that each node's cpu and memory feed its instances."""

from __future__ import annotations

from collections import Counter

from migfit import hostbalance, planner, profiles

A100 = profiles.builtin().get("A100-80GB")
P = profiles.ProfileName
ONE, WHOLE = P("1g.10gb"), P("7g.80gb")
NEEDS = {ONE: (4000, 16 << 30), WHOLE: (4000, 16 << 30)}
MIX = {ONE: 140, WHOLE: 20}


def _node(name: str, gpus: list[tuple[P, ...]]) -> planner.NodeSupply:
    return planner.NodeSupply(name=name, model=A100, gpus=tuple(
        planner.GpuState(index=i, current=g) for i, g in enumerate(gpus)))


def _after(change: planner.NodeChange) -> list[tuple[str, ...]]:
    return [g.after_names for g in change.plan.gpus]


def test_a_trade_keeps_the_instances_per_profile_and_brings_both_within_room() -> None:
    small = _node("small", [(ONE,) * 7] * 4)  # 28 × 4 cores against 64
    whole = _node("whole", [(WHOLE,)] * 4)  # 4 × 4
    room = {"small": (64000, 1 << 40), "whole": (64000, 1 << 40)}
    out = hostbalance.trades([small, whole], NEEDS, MIX, room)
    assert [c.name for c, _ in out] == ["small", "whole"]
    before: Counter[str] = Counter(p for n in (small, whole) for g in n.gpus for p in g.current)
    after: Counter[str] = Counter(p for c, _ in out for g in _after(c) for p in g)
    assert after == before
    # 112 cores wanted of 64: two 1g GPUs go, two whole ones come: both nodes want 64 of 64.
    assert sorted(_after(out[0][0])).count((WHOLE,)) == 2
    assert sorted(_after(out[1][0])).count((ONE,) * 7) == 2
    assert "175%" in out[0][1] and "100% after" in out[0][1]


def test_no_trade_below_the_gain_and_none_that_breaks_a_multi_gpu_node() -> None:
    small = _node("small", [(ONE,) * 7] * 2)
    whole = _node("whole", [(WHOLE,)] * 8)
    room = {"small": (48000, 1 << 40), "whole": (96000, 1 << 40)}
    assert hostbalance.trades([small, whole], NEEDS, MIX, room)  # 56 cores of 48
    # pods of 8 whole GPUs in the mix: the 8-GPU node keeps its eight
    assert hostbalance.trades([small, whole], NEEDS, MIX, room,
                              together={WHOLE: frozenset({8})}) == []
    # pods of two only: the node keeps two and more whatever it trades
    assert hostbalance.trades([small, whole], NEEDS, MIX, room,
                              together={WHOLE: frozenset({2})})
    # 8 cores over: 8000 / (cpu per memory slice: 640 cores / 300 slices) = 3.75 slices
    assert hostbalance.trades([small, whole], NEEDS, MIX, room, min_gain=4.0) == []
    assert hostbalance.trades([small, whole], NEEDS, MIX, room, min_gain=3.5)


def test_nodes_without_room_or_with_frozen_gpus_keep_their_layouts() -> None:
    small = _node("small", [(ONE,) * 7] * 2)
    whole = _node("whole", [(WHOLE,)] * 2)
    assert hostbalance.trades([small, whole], NEEDS, MIX, {"small": (16000, 1 << 40)}) == []
    frozen = planner.NodeSupply(name="whole", model=A100, gpus=tuple(
        planner.GpuState(index=i, current=(WHOLE,), frozen=True) for i in range(2)))
    room = {"small": (16000, 1 << 40), "whole": (64000, 1 << 40)}
    assert hostbalance.trades([small, frozen], NEEDS, MIX, room) == []
