"""Idle nodes that trade GPU layouts so that each node's cpu and memory can feed its instances.

Operators lay out MIG per node (one ``nvidia.com/mig.config`` per node), so a node of small
instances needs far more cpu than a node of whole GPUs: on the Alibaba trace's 96-core,
8-GPU nodes, ``4g.40gb + 2g.20gb + 1g.10gb`` GPUs ask for about 150 cores at the gpushare100
pod list's mean per instance (``7g.80gb`` GPUs about 40) and strand over a quarter of their
slices behind exhausted cpu, while ``7g.80gb`` nodes finish with nearly a third of their cpu
idle. No placement fixes that: a pod can only go where its profile is. Trading GPU layouts
between two idle nodes of the same model keeps the cluster's instances per profile exactly
as they are and moves the cpu-hungry layouts to the nodes that have the cpu.

The measure is a node's expected stranded slices: with H its instances' expected cpu and
memory (the demand mix's mean per instance of each profile, ``advisor.demand_mix``) and C its
free cpu and memory, the cpu and memory its instances want beyond what it has, each divided
by the mix's cpu (memory) per memory slice: stranded = max((H_cpu − C_cpu)⁺ / ν_cpu,
(H_mem − C_mem)⁺ / ν_mem). Linear in the excess, so that moving one layout off a node far
over its room counts as much as the last one that brings it within (the share of slices fed,
1 − C/H, barely moves for the first few and would stop the trades halfway). ``trades`` swaps
one GPU's layout of the node with the most stranded slices against one of the node that
best takes it, while a swap lowers the two nodes' sum by at least ``min_gain`` slices
(hysteresis: estimates move with the mix, a small gain is not worth two re-layouts). The
pressure reported, max(H_cpu / C_cpu, H_mem / C_mem), is the same excess as a ratio.
Pure: no I/O.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Mapping, Sequence

from migfit import planner, profiles

ProfileName = profiles.ProfileName
Layout = tuple[ProfileName, ...]
Need = Callable[[Layout], tuple[float, float]]  # cpu (milli), memory (bytes)

MIN_GAIN = 2.0  # memory slices a trade must un-strand (the two nodes together)


@dataclasses.dataclass(slots=True)
class _Node:
    supply: planner.NodeSupply
    cpu: float
    memory: float
    layouts: list[Layout]  # per GPU, as traded so far
    movable: list[bool]  # per GPU: a known layout on a GPU that may change
    need_cpu: float = 0.0
    need_memory: float = 0.0
    index: int = 0  # in the pool: the order partners are tried in

    def signature(self) -> tuple[object, ...]:
        kinds = tuple(sorted({lay for lay, m in zip(self.layouts, self.movable, strict=True)
                              if m}))
        return (self.cpu, self.memory, round(self.need_cpu), round(self.need_memory), kinds)


def pressure(need_cpu: float, need_memory: float, cpu: float, memory: float) -> float:
    """How many times the node's free cpu or memory its instances' expected needs are."""
    return max(need_cpu / cpu if cpu > 0 else 0.0, need_memory / memory if memory > 0 else 0.0)


def stranded(need_cpu: float, need_memory: float, cpu: float, memory: float,
             per: tuple[float, float]) -> float:
    """Memory slices' worth of cpu or memory (``per``: the mix's per memory slice) that the
    node's instances want beyond its free cpu and memory."""
    out = 0.0
    if need_cpu > cpu and per[0] > 0:
        out = (need_cpu - cpu) / per[0]
    if need_memory > memory and per[1] > 0:
        out = max(out, (need_memory - memory) / per[1])
    return out


def _layout_need(layout: Layout, needs: Mapping[ProfileName, tuple[int, int]]
                 ) -> tuple[float, float]:
    cpu = mem = 0.0
    for q in layout:
        c, m = needs.get(q, (0, 0))
        cpu += c
        mem += m
    return cpu, mem


def trades(pool: Sequence[planner.NodeSupply], needs: Mapping[ProfileName, tuple[int, int]],
           instances: Mapping[ProfileName, int], room: Mapping[str, tuple[int, ...]], *,
           limit: int | None = None, min_gain: float = MIN_GAIN,
           together: Mapping[ProfileName, frozenset[int]] | None = None
           ) -> list[tuple[planner.NodeChange, str]]:
    """Node changes that trade GPU layouts between idle nodes of ``pool`` (one model each
    trade), with a line per node saying why; at most ``limit`` nodes change.

    ``needs``: per profile, the mix's mean cpu (milli) and memory (bytes) per instance (a
    profile nobody asks for needs nothing: its instances strand no host room);
    ``instances``: the mix's instances per profile (their weights in ν). ``room``: per
    node, its free cpu and memory; a node without both is left out. GPUs without a known
    layout, or frozen, keep theirs and count with their needs. ``together``: per profile, how
    many instances of it the mix's pods that want several ask for (on one node); a trade
    never takes a node below the most of them when it had that many (a node of eight whole
    GPUs keeps them for a pod of eight). Smaller sizes are not kept: on the Alibaba default
    list, with 75 pods of 2 to 8 GPUs among 8,152, keeping every node's pairs of whole GPUs
    as well blocked most trades (1.2 → 2.1 % unallocated, seed 0; multigpu50 2.6 → 2.4 %).
    """
    keep = {q: ks for q, ks in (together or {}).items() if any(k > 1 for k in ks)}
    out: list[tuple[planner.NodeChange, str]] = []
    by_model: dict[profiles.ModelId, list[_Node]] = {}
    for s in pool:
        r = room.get(s.name)
        if r is None or len(r) < 2 or r[0] <= 0 or r[1] <= 0 or not s.gpus:
            continue
        n = _Node(supply=s, cpu=float(r[0]), memory=float(r[1]),
                  layouts=[tuple(sorted(g.current)) for g in s.gpus],
                  movable=[bool(g.current) and not g.frozen and not g.fixed for g in s.gpus])
        n.index = len(by_model.setdefault(s.model.id, []))
        by_model[s.model.id].append(n)
    changed: dict[str, _Node] = {}
    was: dict[str, float] = {}  # each changed node's pressure before its first trade
    for model_id in sorted(by_model):
        nodes = by_model[model_id]
        model = nodes[0].supply.model
        size = {p.name: p.memory_slices for p in model.profiles}
        memo: dict[Layout, tuple[float, float]] = {}
        slices = sum(k * size[q] for q, k in instances.items() if q in size)
        if not slices:
            continue
        per = (sum(k * needs.get(q, (0, 0))[0] for q, k in instances.items() if q in size)
               / slices,
               sum(k * needs.get(q, (0, 0))[1] for q, k in instances.items() if q in size)
               / slices)

        def need(lay: Layout, memo: dict[Layout, tuple[float, float]] = memo
                 ) -> tuple[float, float]:
            hit = memo.get(lay)
            if hit is None:
                hit = memo[lay] = _layout_need(lay, needs)
            return hit

        for n in nodes:
            for lay in n.layouts:
                c, m = need(lay)
                n.need_cpu += c
                n.need_memory += m
        value = {n.supply.name: stranded(n.need_cpu, n.need_memory, n.cpu, n.memory, per)
                 for n in nodes}
        # Nodes alike (room, needs, layouts) give the same trades: partners are tried once
        # per group, the first of it in pool order.
        groups: dict[tuple[object, ...], list[int]] = {}
        sig: list[tuple[object, ...]] = []
        for n in nodes:
            sig.append(n.signature())
            groups.setdefault(sig[-1], []).append(n.index)
        done: set[str] = set()  # nodes no trade helps any more
        while True:
            hi = max((n for n in nodes if n.supply.name not in done
                      and value[n.supply.name] >= min_gain),
                     key=lambda n: (value[n.supply.name], n.supply.name), default=None)
            if hi is None:
                break
            best = _best_trade(hi, nodes, groups, need, value, min_gain, per, changed=changed,
                               slots=None if limit is None else limit - len(changed),
                               keep=keep)
            if best is None:
                done.add(hi.supply.name)
                continue
            lo, i, j = best
            for n in (hi, lo):
                was.setdefault(n.supply.name, pressure(n.need_cpu, n.need_memory, n.cpu,
                                                       n.memory))
            a, b = hi.layouts[i], lo.layouts[j]
            _move(hi, i, b, need)
            _move(lo, j, a, need)
            for n in (hi, lo):
                value[n.supply.name] = stranded(n.need_cpu, n.need_memory, n.cpu, n.memory,
                                                per)
                changed[n.supply.name] = n
                old, new = sig[n.index], n.signature()
                if old != new:
                    members = groups[old]
                    members.remove(n.index)
                    if not members:
                        del groups[old]
                    bisect.insort(groups.setdefault(new, []), n.index)
                    sig[n.index] = new
    for name in changed:  # in the order trades touched them: partners side by side
        n = changed[name]
        s = n.supply
        if tuple(tuple(sorted(g.current)) for g in s.gpus) == tuple(n.layouts):
            continue  # traded away and back
        plan = planner.plan_from_layouts(s.model, gpus=s.gpus, after=n.layouts,
                                         demand=planner.Demand.of_items([]))
        now = pressure(n.need_cpu, n.need_memory, n.cpu, n.memory)
        why = (f"its instances would ask for {was[name]:.0%} of its free cpu or memory at the "
               f"demand mix's mean, {now:.0%} after trading GPU layouts with another idle "
               f"node of the same model")
        out.append((planner.NodeChange(name=name, disruption=0, plan=plan), why))
    return out


def _move(n: _Node, i: int, lay: Layout, need: Need) -> None:
    oc, om = need(n.layouts[i])
    nc, nm = need(lay)
    n.need_cpu += nc - oc
    n.need_memory += nm - om
    n.layouts[i] = lay


def _best_trade(hi: _Node, nodes: Sequence[_Node], groups: Mapping[tuple[object, ...], list[int]],
                need: Need,
                value: Mapping[str, float], min_gain: float, per: tuple[float, float], *,
                changed: Mapping[str, _Node], slots: int | None,
                keep: Mapping[ProfileName, frozenset[int]]) -> tuple[_Node, int, int] | None:
    """The partner and GPUs (hi's index, partner's index) of the best trade for ``hi``;
    ``slots``: how many more nodes may change (None: any)."""
    mine: dict[Layout, int] = {}
    for i, (lay, m) in enumerate(zip(hi.layouts, hi.movable, strict=True)):
        if m:
            mine.setdefault(lay, i)
    if not mine:
        return None
    best: tuple[float, str, _Node, int, int] | None = None
    hi_name = hi.supply.name
    firsts: list[int] = []
    for members in groups.values():
        for k in members:
            name = nodes[k].supply.name
            if name == hi_name or (slots is not None and (hi_name not in changed)
                                   + (name not in changed) > slots):
                continue
            firsts.append(k)
            break
    for k in sorted(firsts):
        lo = nodes[k]
        name = lo.supply.name
        theirs: dict[Layout, int] = {}
        for j, (lay, m) in enumerate(zip(lo.layouts, lo.movable, strict=True)):
            if m:
                theirs.setdefault(lay, j)
        before = value[hi_name] + value[name]
        for a, i in mine.items():
            ac, am = need(a)
            for b, j in theirs.items():
                if a == b or (keep and (_breaks(hi, a, b, keep) or _breaks(lo, b, a, keep))):
                    continue
                bc, bm = need(b)
                after = (stranded(hi.need_cpu - ac + bc, hi.need_memory - am + bm, hi.cpu,
                                  hi.memory, per)
                         + stranded(lo.need_cpu - bc + ac, lo.need_memory - bm + am, lo.cpu,
                                    lo.memory, per))
                gain = before - after
                if gain >= min_gain and (best is None or gain > best[0] + 1e-9):
                    best = (gain, name, lo, i, j)
    if best is None:
        return None
    return best[2], best[3], best[4]


def _breaks(n: _Node, gone: Layout, new: Layout,
            keep: Mapping[ProfileName, frozenset[int]]) -> bool:
    """Whether ``n`` giving a GPU of layout ``gone`` for one of ``new`` falls below the most
    instances of a profile that one pod of ``keep`` wants, having had that many."""
    for q, sizes in keep.items():
        lost = gone.count(q) - new.count(q)
        if lost > 0:
            have = sum(lay.count(q) for lay in n.layouts)
            if have >= max(sizes) > have - lost:
                return True
    return False
