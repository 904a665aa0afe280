"""Choose MIG layouts that serve waiting demand: exact per GPU, greedy per node and cluster.

One GPU: every valid layout that keeps the in-use (``fixed``) instances where they are is
enumerated (``layouts.completions``) and compared, so the answer is exact. The order is

1. most weighted demand served (a demand unit is one instance of a profile with a weight,
   such as how long its pod has waited; free instances beyond the fixed ones serve it);
2. no change at all when a change would serve nothing more;
3. fewest instances of the current layout destroyed;
4. most memory slices, then compute slices, carved into instances (maximal layouts leave
   nothing stranded), then fewest instances added (larger instances), then fewest media
   (``+me``) instances, then the layout key (deterministic).

A node of several GPUs and the cluster are planned greedily (documented, not exact):
per node, repeatedly change the one GPU whose best plan gains the most weight, until no
change gains; per cluster, nodes are visited cheapest first (no disruption, then fewest pods
disrupted), then by what each alone could serve, and a node is changed only when it gains.
That tends to the fewest GPUs and nodes changed; identical GPUs are planned once per round.

The MIG Manager (mig-parted) re-creates a changed GPU's instances from its config, so
"kept" here means "the same profiles exist after the change", which is what pods see.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from migfit import errors, layouts, placements, profiles

ProfileName = profiles.ProfileName


# ---------------------------------------------------------------- demand


@dataclasses.dataclass(frozen=True, slots=True)
class Demand:
    """Instances wanted, per profile: one weight per instance, heaviest first.

    Serving ``k`` instances of a profile earns the sum of its ``k`` heaviest weights, so
    the planner prefers pods that have waited longest when it cannot serve them all.
    """

    weights: Mapping[ProfileName, tuple[float, ...]]

    @staticmethod
    def of_counts(counts: Mapping[str, int], weight: float = 1.0) -> Demand:
        """``{"1g.10gb": 3}``: three instances of weight ``weight`` each."""
        return Demand.of_items(
            (name, weight) for name, n in counts.items() for _ in range(n)
        )

    @staticmethod
    def of_items(items: Iterable[tuple[str, float]]) -> Demand:
        """One ``(profile, weight)`` per instance wanted; weights must be positive."""
        grouped: dict[ProfileName, list[float]] = {}
        for name, weight in items:
            if not weight > 0:
                raise errors.UsageError(
                    f"demand weight for {name} must be positive, got {weight}")
            grouped.setdefault(ProfileName(name), []).append(float(weight))
        return Demand({p: tuple(sorted(ws, reverse=True)) for p, ws in grouped.items()})

    def count(self, profile: str) -> int:
        return len(self.weights.get(ProfileName(profile), ()))

    @property
    def total(self) -> int:
        return sum(len(ws) for ws in self.weights.values())

    @property
    def weight(self) -> float:
        return sum(sum(ws) for ws in self.weights.values())

    def counts(self) -> dict[ProfileName, int]:
        return {p: len(ws) for p, ws in self.weights.items() if ws}

    def __bool__(self) -> bool:
        return any(self.weights.values())

    def value(self, served: Mapping[ProfileName, int]) -> float:
        """The weight earned by serving ``served`` instances (heaviest first)."""
        total = 0.0
        for name, n in served.items():
            ws = self.weights.get(name, ())
            total += sum(ws[:n])
        return total

    def take(self, served: Mapping[ProfileName, int]) -> tuple[Demand, Demand]:
        """Split into (the heaviest ``served`` instances per profile, the rest)."""
        taken: dict[ProfileName, tuple[float, ...]] = {}
        rest: dict[ProfileName, tuple[float, ...]] = {}
        for p, ws in self.weights.items():
            n = served.get(p, 0)
            if n > 0:
                taken[p] = ws[:n]
            if ws[n:]:
                rest[p] = ws[n:]
        return Demand(taken), Demand(rest)

    def plus(self, other: Demand) -> Demand:
        if not other:
            return self
        merged: dict[ProfileName, tuple[float, ...]] = dict(self.weights)
        for p, ws in other.weights.items():
            merged[p] = tuple(sorted((*merged.get(p, ()), *ws), reverse=True))
        return Demand(merged)


EMPTY = Demand({})


# ---------------------------------------------------------------- one GPU


@dataclasses.dataclass(frozen=True, slots=True)
class GpuPlan:
    """The chosen layout of one GPU and what changes."""

    model: profiles.ModelId
    index: int
    before: tuple[ProfileName, ...]  # sorted profile names of the current layout
    after: layouts.Layout  # valid for the model; its placement holds the fixed instances
    fixed: tuple[placements.Instance, ...]
    served: Mapping[ProfileName, int]  # demand instances the layout's free instances serve
    value: float
    removed: tuple[ProfileName, ...]  # instances of ``before`` that no longer exist
    added: tuple[ProfileName, ...]  # instances that are new

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.added)

    @property
    def after_names(self) -> tuple[ProfileName, ...]:
        return tuple(ProfileName(n) for n in self.after.profile_names())


@dataclasses.dataclass(frozen=True, slots=True)
class _Candidate:
    layout: layouts.Layout
    counts: Mapping[ProfileName, int]
    free: tuple[tuple[ProfileName, int], ...]  # instances beyond the fixed ones
    memory: int
    compute: int
    size: int
    media: int


def _sorted_fixed(fixed: Iterable[placements.Instance]) -> tuple[placements.Instance, ...]:
    return tuple(sorted(fixed))


@functools.lru_cache(maxsize=4096)
def _candidates(
    model: profiles.GpuModel, fixed: tuple[placements.Instance, ...]
) -> tuple[_Candidate, ...]:
    bad = placements.check_fixed(model, fixed)
    if bad is not None:
        raise errors.UsageError(bad.message)
    found = list(layouts.completions(model, fixed))
    if not fixed:
        found.append(empty_layout(model))
    fixed_counts = Counter(i.profile for i in fixed)
    out = []
    for lay in found:
        counts = {ProfileName(p): n for p, n in lay.counts}
        free = tuple((p, n - fixed_counts.get(p, 0)) for p, n in lay.counts
                     if n - fixed_counts.get(p, 0) > 0)
        memory = sum(model.profile(p).memory_slices * n for p, n in lay.counts)
        compute = sum(model.profile(p).compute_slices * n for p, n in lay.counts)
        media = sum(n for p, n in lay.counts if model.profile(p).media)
        out.append(_Candidate(layout=lay, counts=counts, free=free, memory=memory,
                              compute=compute, size=sum(counts.values()), media=media))
    return tuple(out)


def empty_layout(model: profiles.GpuModel) -> layouts.Layout:
    """The layout with no instances (MIG enabled, nothing created, or MIG disabled)."""
    return layouts.Layout(model=model.id, counts=(),
                          placement=placements.Placement(model.id, ()))


def _diff(before: Counter[str], after: Mapping[ProfileName, int]
          ) -> tuple[tuple[ProfileName, ...], tuple[ProfileName, ...]]:
    removed: list[ProfileName] = []
    added: list[ProfileName] = []
    for p in set(before) | set(after):
        b, a = before.get(p, 0), after.get(ProfileName(p), 0)
        if b > a:
            removed.extend([ProfileName(p)] * (b - a))
        elif a > b:
            added.extend([ProfileName(p)] * (a - b))
    return tuple(sorted(removed)), tuple(sorted(added))


def plan_gpu(
    model: profiles.GpuModel,
    *,
    demand: Demand,
    fixed: Sequence[placements.Instance] = (),
    current: Sequence[str] | None = None,
    index: int = 0,
) -> GpuPlan:
    """The best valid layout of one GPU for ``demand``, keeping ``fixed`` (exact; see module).

    ``current`` is the GPU's layout now (profile names, including the fixed ones); None means
    only the fixed instances exist. A UsageError when ``fixed`` is not a valid placement or
    ``current`` does not contain it.
    """
    fixed_t = _sorted_fixed(fixed)
    cands = _candidates(model, fixed_t)
    cur_names = [i.profile for i in fixed_t] if current is None else list(current)
    before: Counter[str] = Counter(cur_names)
    missing = Counter(str(i.profile) for i in fixed_t) - before
    if missing:
        raise errors.UsageError(
            f"the current layout ({' '.join(sorted(cur_names)) or 'empty'}) lacks the "
            f"instances in use: {' '.join(sorted(missing.elements()))}")
    cur_key = layouts.key_of(model, cur_names)
    # Prefix sums of the heaviest weights, capped at what one GPU could ever serve.
    prefix: dict[ProfileName, list[float]] = {}
    for p, ws in demand.weights.items():
        if ws and model.has_profile(p):
            sums = [0.0]
            for w in ws[: model.profile(p).max_instances]:
                sums.append(sums[-1] + w)
            prefix[p] = sums

    best: tuple[object, ...] | None = None
    best_cand: _Candidate | None = None
    best_served: dict[ProfileName, int] = {}
    for cand in cands:
        value = 0.0
        served: dict[ProfileName, int] = {}
        for p, n in cand.free:
            acc = prefix.get(p)
            if acc is not None:
                k = min(n, len(acc) - 1)
                served[p] = k
                value += acc[k]
        same = cand.layout.counts == cur_key
        removed = 0
        added = 0
        if not same:
            for name, b in before.items():
                a = cand.counts.get(ProfileName(name), 0)
                if b > a:
                    removed += b - a
            added = cand.size + removed - len(cur_names)
        rank = (-round(value, 9), not same, removed, -cand.memory, -cand.compute, added,
                cand.media, cand.layout.counts)
        if best is None or rank < best:
            best, best_cand, best_served = rank, cand, served
    assert best_cand is not None  # the fixed instances alone always form a candidate
    removed_t, added_t = _diff(before, best_cand.counts)
    return GpuPlan(
        model=model.id,
        index=index,
        before=tuple(sorted(ProfileName(n) for n in cur_names)),
        after=best_cand.layout,
        fixed=fixed_t,
        served={p: k for p, k in best_served.items() if k},
        value=demand.value(best_served),
        removed=removed_t,
        added=added_t,
    )


def _free_instances(names: Sequence[str], fixed: Sequence[placements.Instance]
                    ) -> Counter[str]:
    """A layout's instances per profile beyond the ``fixed`` (in use) ones."""
    free = Counter(names)
    free.subtract(i.profile for i in fixed)
    return free


def serves(model: profiles.GpuModel, names: Sequence[str], fixed: Sequence[placements.Instance],
           demand: Demand) -> dict[ProfileName, int]:
    """What a layout's free instances (beyond ``fixed``) serve of ``demand`` right now."""
    free = _free_instances(names, fixed)
    return {ProfileName(p): min(n, demand.count(p)) for p, n in free.items()
            if n > 0 and demand.count(p) and model.has_profile(p)}


# ---------------------------------------------------------------- one node


@dataclasses.dataclass(frozen=True, slots=True)
class GpuState:
    """One GPU as the planner sees it: its layout now and the instances in use on it."""

    index: int
    current: tuple[ProfileName, ...]
    fixed: tuple[placements.Instance, ...] = ()
    # Keeps its exact layout: mig-parted re-creates every instance of a GPU whose config
    # changes, so a GPU that may hold an instance in use is never changed at all.
    frozen: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class NodePlan:
    """Per GPU (index order) the plan; unchanged GPUs have ``after == before``."""

    model: profiles.ModelId
    gpus: tuple[GpuPlan, ...]
    served: Mapping[ProfileName, int]  # demand instances the node serves after the plan
    value: float  # weight gained by the changes

    @property
    def changed(self) -> tuple[GpuPlan, ...]:
        return tuple(g for g in self.gpus if g.changed)


def unchanged(model: profiles.GpuModel, gpu: GpuState) -> GpuPlan:
    """The plan that leaves ``gpu`` as it is."""
    key = layouts.key_of(model, gpu.current)
    lay = layouts.of(model).by_key.get(key) if key else empty_layout(model)
    if lay is None:
        raise errors.UsageError(
            f"GPU {gpu.index}: {' '.join(gpu.current)} is not a valid layout of {model.id}")
    return GpuPlan(model=model.id, index=gpu.index, before=tuple(sorted(gpu.current)),
                   after=lay, fixed=_sorted_fixed(gpu.fixed), served={}, value=0.0,
                   removed=(), added=())


def plan_node(
    model: profiles.GpuModel,
    *,
    gpus: Sequence[GpuState],
    demand: Demand,
    max_gpus: int | None = None,
) -> NodePlan:
    """Change the fewest GPUs of one node to serve ``demand`` (greedy, exact per GPU).

    ``demand`` is what nothing serves now; free instances already on a GPU count as serving
    the demand first, so a GPU is changed only for what it adds.
    """
    plans = {g.index: unchanged(model, g) for g in gpus}
    remaining = demand
    held: dict[int, Demand] = {}
    for g in gpus:  # what the current layouts already serve stays with them
        taken, remaining = remaining.take(serves(model, g.current, g.fixed, remaining))
        held[g.index] = taken
    open_ = {g.index: g for g in gpus if not g.frozen}
    value_total = 0.0
    changed = 0
    while remaining and open_ and (max_gpus is None or changed < max_gpus):
        best: tuple[float, int, int] | None = None
        best_plan: GpuPlan | None = None
        seen: dict[tuple[tuple[ProfileName, ...], tuple[placements.Instance, ...]],
                   GpuPlan] = {}
        for idx, g in open_.items():
            local = remaining.plus(held[idx])
            sig = (tuple(sorted(g.current)), _sorted_fixed(g.fixed))
            if not held[idx] and sig in seen:
                p = dataclasses.replace(seen[sig], index=idx)
            else:
                p = plan_gpu(model, demand=local, fixed=g.fixed, current=g.current, index=idx)
                if not held[idx]:
                    seen[sig] = p
            gain = p.value - held[idx].weight
            if not p.changed or gain <= 1e-9:
                continue
            rank = (-round(gain, 9), len(p.removed), idx)
            if best is None or rank < best:
                best, best_plan = rank, p
        if best_plan is None:
            break
        idx = best_plan.index
        local = remaining.plus(held[idx])
        taken, remaining = local.take(best_plan.served)
        value_total += best_plan.value - held[idx].weight
        held[idx] = taken
        plans[idx] = best_plan
        del open_[idx]
        changed += 1
    served_total: Counter[ProfileName] = Counter()
    for idx, plan in plans.items():
        counts = held[idx].counts()
        served_total.update(counts)
        if not plan.changed and counts:
            plans[idx] = dataclasses.replace(plan, served=counts,
                                             value=held[idx].weight)
    return NodePlan(model=model.id, gpus=tuple(plans[g.index] for g in gpus),
                    served=dict(served_total), value=value_total)


# ---------------------------------------------------------------- the cluster


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSupply:
    """A node that may be re-laid out: its model, GPUs, and what a change would disrupt."""

    name: str
    model: profiles.GpuModel
    gpus: tuple[GpuState, ...]
    disruption: int = 0  # pods a change would disrupt; 0 = safe
    busy: int = 0  # pods running on the node's frozen GPUs (not disrupted; planned after idle)


@dataclasses.dataclass(frozen=True, slots=True)
class NodeChange:
    """One node to change; ``named`` is the name of an existing config the plan came from."""

    name: str
    plan: NodePlan
    disruption: int
    named: str | None = None


# Given a node, the planner's plan for it and the demand it was planned against, a plan from
# an existing layout (a named config) to use instead and its name, or None; a plan that
# changes nothing leaves the node as it is (no named config can be applied there).
Prefer = Callable[[NodeSupply, NodePlan, Demand], "tuple[NodePlan, str] | None"]


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterPlan:
    """Nodes to change, in the order the demand was assigned to them, and what stays unmet."""

    changes: tuple[NodeChange, ...]
    served: Mapping[ProfileName, int]
    unserved: Demand


def plan_cluster(
    supply: Sequence[NodeSupply],
    *,
    demand: Demand,
    max_nodes: int | None = None,
    prefer: Prefer | None = None,
) -> ClusterPlan:
    """Serve ``demand`` changing few nodes: safe nodes first, then least disruptive (greedy).

    Within a class of disruption, nodes are tried in decreasing order of what each alone
    would serve of the whole demand (identical nodes are planned once), so big contributors
    come first and fewer nodes change. ``prefer`` may swap a node's plan for one from an
    existing layout (a named config) that serves at least as much.
    """
    remaining = demand
    changes: list[NodeChange] = []
    served: Counter[ProfileName] = Counter()
    potential: dict[tuple[object, ...], float] = {}
    keyed: list[tuple[tuple[float, int, float, str], NodeSupply]] = []
    for node in supply:
        if not any(model_has(node.model, p) for p in demand.weights):
            continue
        sig = _signature(node)
        if sig not in potential:
            potential[sig] = plan_node(node.model, gpus=node.gpus, demand=demand).value
        if potential[sig] > 0:
            keyed.append(((node.disruption, node.busy, -potential[sig], node.name), node))
    keyed.sort(key=lambda kv: kv[0])
    for _, node in keyed:
        if not remaining or (max_nodes is not None and len(changes) >= max_nodes):
            break
        planned = _changed_plan(node, remaining, prefer)
        if planned is None:
            continue
        plan, named = planned
        _, remaining = remaining.take(plan.served)
        served.update(plan.served)
        changes.append(NodeChange(name=node.name, plan=plan, disruption=node.disruption,
                                  named=named))
    return ClusterPlan(changes=tuple(changes), served=dict(served), unserved=remaining)


def _changed_plan(node: NodeSupply, demand: Demand, prefer: Prefer | None
                  ) -> tuple[NodePlan, str | None] | None:
    """The node's plan for ``demand`` (or the named config ``prefer`` swaps in) and that
    config's name; None when the plan gains nothing or changes no GPU."""
    plan = plan_node(node.model, gpus=node.gpus, demand=demand)
    if plan.value <= 1e-9 or not plan.changed:
        return None
    named: str | None = None
    if prefer is not None:
        alternative = prefer(node, plan, demand)
        if alternative is not None:
            plan, named = alternative
        if not plan.changed:
            return None  # the node must stay as it is
    return plan, named


def model_has(model: profiles.GpuModel, profile: str) -> bool:
    return model.has_profile(profile)


def _signature(node: NodeSupply) -> tuple[object, ...]:
    return (node.model.id,
            tuple((g.current, _sorted_fixed(g.fixed), g.frozen) for g in node.gpus))


# ---------------------------------------------------------------- the cluster, pod by pod


@dataclasses.dataclass(frozen=True, slots=True)
class Unit:
    """One instance a pod waits for: the pod, its profile, its weight and its host needs.

    ``cls`` groups pods that every node treats alike (same constraints): eligibility is asked
    once per node and group of units with equal ``cls``, ``profile`` and ``needs``.
    """

    pod: str
    profile: ProfileName
    weight: float
    needs: tuple[int, ...] = ()  # e.g. (cpu milli, memory bytes); counted once per pod
    cls: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class PodsPlan:
    """``plan_pods``' answer: the node changes (in order) and which units each one takes."""

    changes: tuple[NodeChange, ...]
    assigned: Mapping[str, tuple[Unit, ...]]  # node -> the units it serves
    unserved: tuple[Unit, ...]


# Whether the pod of a unit may run on node ``node`` at all (affinity, selectors, taints);
# asked for one unit per group (see ``Unit.cls``).
Eligible = Callable[[str, Unit], bool]
_Group = tuple[int, ProfileName, tuple[int, ...]]


def plan_pods(
    supply: Sequence[NodeSupply],
    units: Sequence[Unit],
    *,
    eligible: Eligible | None = None,
    room: Mapping[str, tuple[int, ...]] | None = None,
    max_nodes: int | None = None,
    prefer: Prefer | None = None,
) -> PodsPlan:
    """``plan_cluster`` where each node is planned for the pods it can take (greedy).

    A unit counts toward a node only when ``eligible(node, unit)`` holds and the pod's
    ``needs`` fit in the node's ``room`` (its free cpu and memory); the pods a changed node
    takes then use up its room, once per pod. Nodes are visited as in ``plan_cluster`` (no
    disruption, fewest busy pods, then what each could serve of the units it may take); a
    changed node serves its eligible, fitting units, heaviest first.

    A pod runs on one node, so its units go to one node or none: a node is planned only for
    the pods whose every instance its GPUs could hold (an eight-GPU pod never counts toward a
    two-GPU node), and a plan that would serve only some of a pod's instances is planned
    again without that pod.
    """
    ok = eligible or (lambda _node, _unit: True)
    groups: dict[_Group, list[Unit]] = {}
    for u in sorted(units, key=lambda u: -u.weight):
        groups.setdefault((u.cls, u.profile, u.needs), []).append(u)
    verdict: dict[tuple[str, _Group], bool] = {}
    size = Counter(u.pod for u in units)
    multi: dict[str, list[Unit]] = {}  # the units of each pod that has several
    for u in units:
        if size[u.pod] > 1:
            multi.setdefault(u.pod, []).append(u)
    # per pod of several units and profile, how many instances it asks for
    several = Counter((u.pod, u.profile) for us in multi.values() for u in us)
    too_big_for: dict[tuple[object, ...], set[str]] = {}  # per node signature

    def too_big(node: NodeSupply) -> set[str]:
        """The pods of several instances that the node's GPUs could not hold all of."""
        if not several:
            return set()
        sig = _signature(node)
        out = too_big_for.get(sig)
        if out is None:
            cap = _capacity(node, {p for _, p in several})
            out = too_big_for[sig] = {pod for (pod, p), n in several.items() if n > cap[p]}
        return out

    def open_groups(node: NodeSupply) -> tuple[_Group, ...]:
        left = None if room is None else room.get(node.name)
        out = []
        for g, members in groups.items():
            if not members or not model_has(node.model, g[1]):
                continue
            if left is not None and any(n > r for n, r in zip(g[2], left, strict=False)):
                continue
            key = (node.name, g)
            if key not in verdict:
                verdict[key] = ok(node.name, members[0])
            if verdict[key]:
                out.append(g)
        return tuple(out)

    def pool_of(node: NodeSupply, open_: Sequence[_Group]) -> list[Unit]:
        out = too_big(node)
        pool = [u for g in open_ for u in groups[g] if u.pod not in out]
        pool.sort(key=lambda u: -u.weight)
        return pool

    potential: dict[tuple[object, ...], float] = {}
    keyed: list[tuple[tuple[float, int, float, str], NodeSupply]] = []
    for node in supply:
        open_ = open_groups(node)
        if not open_:
            continue
        sig = (_signature(node), open_)
        if sig not in potential:
            demand = Demand.of_items((u.profile, u.weight) for u in pool_of(node, open_))
            potential[sig] = plan_node(node.model, gpus=node.gpus, demand=demand).value
        if potential[sig] > 0:
            keyed.append(((node.disruption, node.busy, -potential[sig], node.name), node))
    keyed.sort(key=lambda kv: kv[0])
    changes: list[NodeChange] = []
    assigned: dict[str, tuple[Unit, ...]] = {}
    for _, node in keyed:
        if not any(groups.values()) or (max_nodes is not None and len(changes) >= max_nodes):
            break
        open_ = open_groups(node)
        pool = pool_of(node, open_)
        left = None if room is None else room.get(node.name)
        planned = _plan_whole(node, pool, multi, set(open_), left, prefer)
        if planned is None:
            continue
        plan, named, taken = planned
        gone = {id(u) for u in taken}
        for g, members in groups.items():
            groups[g] = [u for u in members if id(u) not in gone]
        assigned[node.name] = tuple(taken)
        changes.append(NodeChange(name=node.name, plan=plan, disruption=node.disruption,
                                  named=named))
    rest = [u for members in groups.values() for u in members]
    rest.sort(key=lambda u: -u.weight)
    return PodsPlan(changes=tuple(changes), assigned=assigned, unserved=tuple(rest))


def _capacity(node: NodeSupply, wanted: set[ProfileName]) -> Counter[ProfileName]:
    """At most how many instances of each ``wanted`` profile the node's GPUs could hold: a
    frozen GPU its free instances, any other GPU as many as the profile fits on one GPU."""
    cap: Counter[ProfileName] = Counter()
    frozen = [_free_instances(g.current, g.fixed) for g in node.gpus if g.frozen]
    others = len(node.gpus) - len(frozen)
    for p in wanted:
        if model_has(node.model, p):
            cap[p] = sum(f[p] for f in frozen) + others * node.model.profile(p).max_instances
    return cap


_REPLANS = 4  # plans per node at most, each without the pods the last one split


def _plan_whole(node: NodeSupply, pool: list[Unit], multi: Mapping[str, Sequence[Unit]],
                open_: set[_Group], left: tuple[int, ...] | None, prefer: Prefer | None
                ) -> tuple[NodePlan, str | None, list[Unit]] | None:
    """The node's plan for ``pool``, the named config it came from and the units it takes,
    none of a pod's instances split from the others; None when nothing worth a change."""
    tries = _REPLANS
    while pool:
        planned = _changed_plan(node, Demand.of_items((u.profile, u.weight) for u in pool),
                                prefer)
        if planned is None:
            return None
        plan, named = planned
        taken, split = _take_units(pool, plan.served, left, multi, open_)
        tries -= 1
        if not split or not tries:
            return (plan, named, taken) if taken else None
        pool = [u for u in pool if u.pod not in split]
    return None


def _take_units(pool: Sequence[Unit], served: Mapping[ProfileName, int],
                left: tuple[int, ...] | None, multi: Mapping[str, Sequence[Unit]],
                open_: set[_Group]) -> tuple[list[Unit], set[str]]:
    """The units that ``served`` instances go to, and the pods to plan the node without.

    Pods heaviest first, each taken whole or not at all: all its instances (``multi``: the
    units of each pod that has several) must be in ``pool`` (their groups in ``open_``:
    a pod's units leave the groups together) and served, and its host needs fit what is
    left of ``left`` (subtracted once per pod). When served instances go to nobody while a
    pod got only some of its instances, that pod is returned: the plan counted instances
    no pod can use."""
    want = Counter(served)
    remaining = sum(n for n in want.values() if n > 0)
    budget = list(left) if left is not None else None
    seen: set[str] = set()
    out: list[Unit] = []
    short: set[str] = set()
    for u in pool:
        if remaining <= 0:
            break
        if want[u.profile] <= 0 or u.pod in seen:
            continue
        mine: Sequence[Unit] = multi.get(u.pod, (u,))
        if len(mine) > 1:
            seen.add(u.pod)
            if any((v.cls, v.profile, v.needs) not in open_ for v in mine):
                continue  # some of its instances cannot go here
            need = Counter(v.profile for v in mine)
            if any(want[p] < n for p, n in need.items()):
                short.add(u.pod)
                continue
        if budget is not None and u.needs:
            if any(n > r for n, r in zip(u.needs, budget, strict=False)):
                continue
            budget = [r - n for r, n in zip(budget, u.needs, strict=False)] + \
                budget[len(u.needs):]
        for v in mine:
            want[v.profile] -= 1
        remaining -= len(mine)
        out.extend(mine)
    if not short or remaining <= 0:
        short = set()
    return out, short


def plan_from_layouts(
    model: profiles.GpuModel,
    *,
    gpus: Sequence[GpuState],
    after: Sequence[Sequence[str]],
    demand: Demand,
) -> NodePlan:
    """The plan that gives GPU ``i`` the layout ``after[i]`` (e.g. a named config), scored on
    ``demand`` like ``plan_node``. A UsageError when a layout is invalid, or drops or moves
    an instance in use: as in ``plan_gpu``, a changed GPU's layout must place its ``fixed``
    instances where they are, and each plan's ``after`` placement holds them.
    """
    if len(after) != len(gpus):
        raise errors.UsageError(f"{len(after)} layouts for {len(gpus)} GPUs")
    remaining = demand
    # What the current layouts already serve, handed out GPU by GPU as ``plan_node`` does, so
    # that one demand unit is not counted once per GPU that could serve it.
    base = 0.0
    unserved_now = demand
    plans: list[GpuPlan] = []
    served_total: Counter[ProfileName] = Counter()
    for g, names in zip(gpus, after, strict=True):
        key = layouts.key_of(model, names)
        lay = layouts.of(model).by_key.get(key) if key else empty_layout(model)
        if lay is None:
            raise errors.UsageError(f"GPU {g.index}: {' '.join(sorted(names))} is not a "
                                    f"valid layout of {model.id}")
        lost = Counter(str(i.profile) for i in g.fixed) - Counter(names)
        if lost:
            raise errors.UsageError(f"GPU {g.index}: the layout drops instances in use: "
                                    f"{' '.join(sorted(lost.elements()))}")
        if g.frozen and key != layouts.key_of(model, g.current):
            raise errors.UsageError(f"GPU {g.index} may hold an instance in use: its layout "
                                    f"({' '.join(sorted(g.current)) or 'empty'}) must stay "
                                    f"exactly as it is")
        if g.fixed:
            extra = Counter(names) - Counter(str(i.profile) for i in g.fixed)
            fit = placements.fit(model, list(extra.elements()), fixed=g.fixed)
            if fit.placement is None:
                if key != layouts.key_of(model, g.current):
                    raise errors.UsageError(
                        f"GPU {g.index}: {' '.join(sorted(names))} cannot keep the instances "
                        f"in use where they are ({' '.join(map(str, sorted(g.fixed)))})")
            else:
                lay = layouts.Layout(model=model.id, counts=key, placement=fit.placement)
        held, unserved_now = unserved_now.take(serves(model, g.current, g.fixed, unserved_now))
        base += held.weight
        served = serves(model, names, g.fixed, remaining)
        taken, remaining = remaining.take(served)
        served_total.update(served)
        removed, added = _diff(Counter(g.current), {p: n for p, n in key})
        plans.append(GpuPlan(model=model.id, index=g.index, before=tuple(sorted(g.current)),
                             after=lay, fixed=_sorted_fixed(g.fixed), served=served,
                             value=taken.weight, removed=removed, added=added))
    value = sum(p.value for p in plans) - base
    return NodePlan(model=model.id, gpus=tuple(plans), served=dict(served_total), value=value)
