"""The planner against an independent brute force: every multiset of profiles, for every model."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace as dataclasses_replace

import hypothesis
import hypothesis.strategies as st
import pytest

from migfit import errors, layouts, placements, planner, profiles

MODELS = profiles.builtin().models


def _multisets(model: profiles.GpuModel) -> list[tuple[str, ...]]:
    """Every multiset of profiles whose slice totals fit one GPU (fit decides the rest)."""
    names = [p.name for p in model.profiles]
    out: list[tuple[str, ...]] = [()]

    def grow(start: int, chosen: list[str], mem: int, comp: int) -> None:
        for i in range(start, len(names)):
            p = model.profile(names[i])
            if mem + p.memory_slices > model.memory_slices:
                continue
            if comp + p.compute_slices > model.compute_slices:
                continue
            chosen.append(p.name)
            out.append(tuple(chosen))
            grow(i, chosen, mem + p.memory_slices, comp + p.compute_slices)
            chosen.pop()

    grow(0, [], 0, 0)
    return out


def brute_force(
    model: profiles.GpuModel,
    demand: dict[str, list[float]],
    fixed: list[placements.Instance],
    current: list[str],
) -> tuple[float, bool, int, int, int]:
    """The best rank by the documented order, computed without the planner's enumeration."""
    fixed_counts: Counter[str] = Counter(str(i.profile) for i in fixed)
    best: tuple[float, bool, int, int, int] | None = None
    for ms in _multisets(model):
        counts = Counter(ms)
        extra = counts - fixed_counts
        if any(counts[p] < n for p, n in fixed_counts.items()):
            continue
        if not placements.fit(model, list(extra.elements()), fixed=fixed).valid:
            continue
        value = 0.0
        for p, n in extra.items():
            ws = sorted(demand.get(p, []), reverse=True)
            value += sum(ws[:n])
        same = counts == Counter(current)
        removed = sum(max(0, n - counts[p]) for p, n in Counter(current).items())
        memory = sum(model.profile(p).memory_slices for p in ms)
        rank = (-round(value, 9), not same, removed, -memory, 0)
        if best is None or rank < best:
            best = rank
    assert best is not None
    return best


def _rank_of(model: profiles.GpuModel, plan: planner.GpuPlan, current: list[str]
             ) -> tuple[float, bool, int, int, int]:
    names = plan.after.profile_names()
    memory = sum(model.profile(p).memory_slices for p in names)
    return (-round(plan.value, 9), Counter(names) != Counter(current), len(plan.removed),
            -memory, 0)


def _demands(model: profiles.GpuModel) -> list[dict[str, list[float]]]:
    small, *_, large = model.profiles
    mid = model.profiles[len(model.profiles) // 2]
    return [
        {},
        {small.name: [1.0]},
        {small.name: [1.0] * 9},
        {large.name: [5.0], small.name: [1.0, 1.0]},
        {mid.name: [2.0, 1.5], small.name: [3.0, 0.5, 0.5]},
        {p.name: [float(i + 1)] for i, p in enumerate(model.profiles)},
    ]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.id)
def test_optimal_on_one_gpu_for_every_model(model: profiles.GpuModel) -> None:
    maximal = [lay.profile_names() for lay in layouts.of(model).maximal]
    currents: list[list[str]] = [[], maximal[0], maximal[-1]]
    for demand, current in itertools.product(_demands(model), currents):
        d = planner.Demand.of_items((p, w) for p, ws in demand.items() for w in ws)
        plan = planner.plan_gpu(model, demand=d, current=current)
        assert placements.fit(model, plan.after.profile_names()).valid
        assert _rank_of(model, plan, current) == brute_force(model, demand, [], current)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.id)
def test_optimal_with_pinned_instances(model: profiles.GpuModel) -> None:
    for lay in layouts.of(model).maximal[:6]:
        inst = lay.placement.instances
        fixed = list(inst[:1])
        current = lay.profile_names()
        for demand in _demands(model):
            d = planner.Demand.of_items((p, w) for p, ws in demand.items() for w in ws)
            plan = planner.plan_gpu(model, demand=d, fixed=fixed, current=current)
            assert set(fixed) <= set(plan.after.placement.instances)
            assert _rank_of(model, plan, current) == brute_force(model, demand, fixed, current)


@st.composite
def _cases(draw: st.DrawFn) -> tuple[profiles.GpuModel, list[placements.Instance],
                                      dict[str, int]]:
    model = draw(st.sampled_from(MODELS))
    fixed: list[placements.Instance] = []
    for _ in range(draw(st.integers(0, 3))):
        free = placements.addable(model, fixed)
        options = [(p, s) for p, starts in free.items() for s in starts]
        if not options:
            break
        p, s = draw(st.sampled_from(options))
        fixed.append(placements.Instance(start=s, size=model.profile(p).size, profile=p))
    names = [p.name for p in model.profiles]
    need: dict[str, int] = dict(draw(
        st.dictionaries(st.sampled_from([str(n) for n in names]), st.integers(1, 8), max_size=4)))
    return model, fixed, need


@hypothesis.given(_cases())
@hypothesis.settings(max_examples=150, deadline=None)
def test_never_invalid_and_keeps_pinned(
    case: tuple[profiles.GpuModel, list[placements.Instance], dict[str, int]],
) -> None:
    model, fixed, need = case
    plan = planner.plan_gpu(model, demand=planner.Demand.of_counts(need), fixed=fixed)
    extra = Counter(plan.after.profile_names()) - Counter(i.profile for i in fixed)
    assert placements.fit(model, list(extra.elements()), fixed=fixed).valid
    assert set(fixed) <= set(plan.after.placement.instances)
    for p, n in plan.served.items():
        assert n <= need[p]


def test_no_change_when_nothing_is_gained() -> None:
    model = profiles.builtin().get("A100-80GB")
    plan = planner.plan_gpu(model, demand=planner.Demand.of_counts({"7g.80gb": 1}),
                            current=["3g.40gb", "3g.40gb"],
                            fixed=[placements.parse_instance(model, "3g.40gb@4")])
    assert not plan.changed and plan.value == 0


def test_node_plan_changes_fewest_gpus() -> None:
    model = profiles.builtin().get("A100-80GB")
    gpus = [planner.GpuState(i, (profiles.ProfileName("3g.40gb"),) * 2) for i in range(4)]
    plan = planner.plan_node(model, gpus=gpus, demand=planner.Demand.of_counts({"1g.10gb": 7}))
    assert len(plan.changed) == 1
    assert plan.served == {"1g.10gb": 7}


def test_named_layouts_score_like_the_node_plan() -> None:
    # Two GPUs that could each serve the one waiting 1g.10gb: it counts once, not per GPU,
    # so a named config equal in effect to the planner's plan is worth as much (and the
    # advisor can prefer it).
    model = profiles.builtin().get("A100-80GB")
    gpus = [planner.GpuState(i, (profiles.ProfileName("1g.10gb"),) * 7) for i in range(2)]
    demand = planner.Demand.of_counts({"1g.10gb": 1, "3g.40gb": 1})
    plan = planner.plan_node(model, gpus=gpus, demand=demand)
    named = planner.plan_from_layouts(model, gpus=gpus, demand=demand,
                                      after=[["1g.10gb"] * 7, ["3g.40gb"] * 2])
    assert plan.value == named.value == 1.0
    same = planner.plan_from_layouts(model, gpus=gpus, demand=demand,
                                     after=[g.current for g in gpus])
    assert same.value == 0.0 and not same.changed


def test_named_layouts_never_move_an_instance_in_use() -> None:
    model = profiles.builtin().get("A100-80GB")
    small = profiles.ProfileName("1g.10gb")
    pinned = placements.parse_instance(model, "1g.10gb@0")
    gpu = planner.GpuState(0, (small,) * 7, fixed=(pinned,))
    # 4g.40gb can only start at 0, where the 1g.10gb in use sits.
    with pytest.raises(errors.UsageError, match="where they are"):
        planner.plan_from_layouts(model, gpus=[gpu], demand=planner.EMPTY,
                                  after=[["4g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"]])
    ok = planner.plan_from_layouts(model, gpus=[gpu], demand=planner.EMPTY,
                                   after=[["1g.10gb", "1g.10gb", "3g.40gb", "2g.20gb"]])
    assert pinned in ok.gpus[0].after.placement.instances


# ---------------------------------------------------------------- frozen GPUs (busy nodes)

P = profiles.ProfileName


def test_a_frozen_gpu_keeps_its_exact_layout_even_when_changing_it_would_serve_more() -> None:
    model = profiles.builtin().get("A100-80GB")
    # GPU 0 (frozen, one 3g.40gb in use at 0, a free slot range at 4-7) could take three
    # 1g.10gb beside the one in use; only GPU 1 may change.
    in_use = placements.parse_instance(model, "3g.40gb@0")
    gpus = [planner.GpuState(0, (P("3g.40gb"), P("3g.40gb")), fixed=(in_use,), frozen=True),
            planner.GpuState(1, (P("7g.80gb"),))]
    demand = planner.Demand.of_counts({"1g.10gb": 9})
    plan = planner.plan_node(model, gpus=gpus, demand=demand)
    assert not plan.gpus[0].changed
    assert list(plan.gpus[0].after.profile_names()) == ["3g.40gb", "3g.40gb"]
    assert plan.gpus[1].changed and plan.served == {"1g.10gb": 7}
    # Fixed alone (not frozen) lets the planner add around the instance in use.
    loose = planner.plan_node(model, gpus=[dataclasses_replace(gpus[0], frozen=False),
                                           gpus[1]], demand=demand)
    assert loose.gpus[0].changed and in_use in loose.gpus[0].after.placement.instances
    # Every GPU frozen: nothing changes.
    frozen = [dataclasses_replace(g, frozen=True) for g in gpus]
    assert planner.plan_node(model, gpus=frozen, demand=demand).changed == ()


def test_named_layouts_never_change_a_frozen_gpu() -> None:
    model = profiles.builtin().get("A100-80GB")
    gpu = planner.GpuState(0, (P("3g.40gb"), P("3g.40gb")), frozen=True)
    with pytest.raises(errors.UsageError, match="must stay exactly"):
        planner.plan_from_layouts(model, gpus=[gpu], demand=planner.EMPTY,
                                  after=[["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]])
    same = planner.plan_from_layouts(model, gpus=[gpu], demand=planner.EMPTY,
                                     after=[["3g.40gb", "3g.40gb"]])
    assert not same.changed


def test_plan_pods_counts_a_unit_only_where_it_may_go_and_fits() -> None:
    model = profiles.builtin().get("A100-80GB")
    gpus = (planner.GpuState(0, (P("3g.40gb"), P("3g.40gb"))),)
    supply = [planner.NodeSupply("a", model, gpus), planner.NodeSupply("b", model, gpus)]
    # Pods of different classes (constraints) may go to different nodes.
    units = [planner.Unit("p", P("1g.10gb"), 2.0, needs=(4000,), cls=1),
             planner.Unit("q", P("1g.10gb"), 1.0, needs=(4000,), cls=2)]
    # p may only go to b; a has room for one 4-cpu pod.
    plan = planner.plan_pods(supply, units, eligible=lambda n, u: u.pod != "p" or n == "b",
                             room={"a": (6000,), "b": (64000,)})
    assigned = {n: [u.pod for u in us] for n, us in plan.assigned.items()}
    assert assigned == {"b": ["p", "q"]} and plan.unserved == ()  # b could serve more
    without_b = planner.plan_pods(supply[:1], units,
                                  eligible=lambda n, u: u.pod != "p" or n == "b")
    assert [u.pod for u in without_b.assigned["a"]] == ["q"]
    assert [u.pod for u in without_b.unserved] == ["p"]
    # b alone takes both; a alone takes one (room), the other stays unserved.
    only_a = planner.plan_pods(supply[:1], units, room={"a": (6000,)})
    assert [u.pod for u in only_a.assigned["a"]] == ["p"]
    assert [u.pod for u in only_a.unserved] == ["q"]
    # Busy supply is visited after idle supply.
    busy = planner.NodeSupply("a-busy", model, gpus, busy=3)
    first = planner.plan_pods([busy, supply[1]], units[:1])
    assert [c.name for c in first.changes] == ["b"]


def test_plan_pods_never_splits_a_pods_instances_across_nodes() -> None:
    model = profiles.builtin().get("A100-80GB")
    idle = planner.GpuState(0, (P("3g.40gb"), P("4g.40gb")))
    two = planner.NodeSupply("two", model, (idle, dataclasses_replace(idle, index=1)))
    four = planner.NodeSupply("four", model, tuple(dataclasses_replace(idle, index=i)
                                                    for i in range(4)))
    big = [planner.Unit("big", P("7g.80gb"), 1.0) for _ in range(4)]
    assert planner.plan_pods([two], big).changes == ()  # never two of its four
    plan = planner.plan_pods([two, four], big)
    assert [c.name for c in plan.changes] == ["four"] and len(plan.assigned["four"]) == 4
    # A frozen GPU holds only its free instances: one free 4g.40gb and one GPU that may
    # change make room for two 4g.40gb, not three.
    used = placements.Instance(start=4, size=model.profile(P("3g.40gb")).size,
                               profile=P("3g.40gb"))
    frozen = planner.GpuState(0, (P("3g.40gb"), P("4g.40gb")), fixed=(used,), frozen=True)
    mixed = planner.NodeSupply("mixed", model, (frozen, dataclasses_replace(idle, index=1)))
    three = [planner.Unit("three", P("4g.40gb"), 1.0) for _ in range(3)]
    assert planner.plan_pods([mixed], three).changes == ()
    # A plan that would serve some of a pod's instances is made again without that pod:
    # one of two 7g.80gb would be worth less than the 1g.10gb pod's layout beside it, so the
    # node changes one GPU, for the 1g.10gb pod, and the other keeps its layout.
    pair = [planner.Unit("pair", P("7g.80gb"), 1.0) for _ in range(2)]
    small = [planner.Unit("small", P("1g.10gb"), 5.0)]
    plan = planner.plan_pods([two], pair + small)
    assert [u.pod for u in plan.assigned["two"]] == ["small"]
    assert [u.pod for u in plan.unserved] == ["pair"] * 2
    (change,) = plan.changes
    assert len(change.plan.changed) == 1 and dict(change.plan.served) == {"1g.10gb": 1}
