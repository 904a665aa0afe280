"""Bounded, disruptive defragmentation advice: which busy nodes to drain, and exactly which pods.

Advice only: migfit never evicts anything. The MIG Manager re-partitions only GPUs without
pods (docs/relayout.md), so the unit of a move is a whole node: every MIG pod on it leaves
(evicted; its controller re-creates it elsewhere), then all its GPUs may be re-laid out for
the pods the regular advice (``advisor.advise``) leaves waiting. A node qualifies only when

- every pod to move has a controller (a bare pod would not come back; a DaemonSet's or a
  static pod would come back on the same node), and uses MIG instances only;
- every PodDisruptionBudget selecting them allows it: at most one PDB per pod (the eviction
  API refuses more), and per PDB the moves of the whole advice stay within its
  ``status.disruptionsAllowed`` (else ``currentHealthy - desiredHealthy``; a PDB whose status
  is missing or older than its spec allows nothing);
- each moved pod has a free instance of its profiles on another node that can take it (the
  advisor's checks: selectors, affinity, taints, cpu and memory), none booked twice;
- the moves of the whole advice stay within ``floor(max_move_share × bound MIG pods)``.

Nodes are chosen greedily by the waiting instances a re-layout would serve per moved pod
(then most served, then node name), re-checked lazily as budgets and free instances are used
up. The re-layout is planned by ``planner.plan_pods`` with every GPU of the node idle, and
rendered as the advisor renders it (``advisor.recommendation``).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from migfit import advisor, cluster, migparted, planner, profiles, records

ProfileName = profiles.ProfileName
DEFAULT_MAX_MOVE_SHARE = 0.1
# Controllers whose replacement pod comes back on the same node.
_STAYS = {"DaemonSet": "its DaemonSet re-creates it on the same node",
          "Node": "a static pod cannot be evicted"}


@dataclasses.dataclass(frozen=True, slots=True)
class Move:
    """One pod to evict, and the node whose free instances take its replacement."""

    pod: str
    profiles: Mapping[ProfileName, int]
    to: str
    pdb: str | None  # the PodDisruptionBudget selecting it


@dataclasses.dataclass(frozen=True, slots=True)
class PdbUse:
    """A PDB consulted: the disruptions it allows now and how many the advice uses so far."""

    pdb: str
    allowed: int
    used: int


@dataclasses.dataclass(frozen=True, slots=True)
class Drain:
    """Move the node's MIG pods away, then re-lay out all its GPUs."""

    node: str
    moves: tuple[Move, ...]
    pdbs: tuple[PdbUse, ...]
    recommendation: advisor.Recommendation  # disrupts = the moved pods
    served: int  # waiting instances the new layout serves

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "moves": [{"pod": m.pod, "profiles": dict(m.profiles), "to": m.to, "pdb": m.pdb}
                      for m in self.moves],
            "pdbs": [{"pdb": p.pdb, "disruptions_allowed": p.allowed, "used": p.used}
                     for p in self.pdbs],
            "unblocks": list(self.recommendation.unblocks),
            "served": self.served,
            "recommendation": dict(self.recommendation.to_json()),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Blocked:
    """A node whose drain would serve waiting pods, and why it is not advised."""

    node: str
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class Defrag:
    drains: tuple[Drain, ...]
    blocked: tuple[Blocked, ...]
    max_move_share: float
    bound_pods: int  # bound MIG pods in the cluster
    max_moves: int
    unserved: tuple[str, ...]  # waiting pods neither the advice nor a drain unblocks

    @property
    def moved(self) -> int:
        return sum(len(d.moves) for d in self.drains)

    def to_json(self) -> dict[str, Any]:
        return {"max_move_share": self.max_move_share, "bound_pods": self.bound_pods,
                "max_moves": self.max_moves, "moves": self.moved,
                "drains": [d.to_json() for d in self.drains],
                "blocked": [{"node": b.node, "reason": b.reason} for b in self.blocked],
                "unserved": list(self.unserved)}


def pdb_allowance(pdb: records.PdbRecord) -> tuple[int, str]:
    """Disruptions the PDB allows now, and where that figure comes from."""
    if (pdb.generation is not None and pdb.observed_generation is not None
            and pdb.observed_generation < pdb.generation):
        return 0, "its status is older than its spec"
    if pdb.disruptions_allowed is not None:
        return max(pdb.disruptions_allowed, 0), "status.disruptionsAllowed"
    if pdb.current_healthy is not None and pdb.desired_healthy is not None:
        return max(pdb.current_healthy - pdb.desired_healthy, 0), \
            "status.currentHealthy - desiredHealthy"
    return 0, "it has no status"


def _selecting(pdbs: Sequence[records.PdbRecord], namespace: str,
               labels: Mapping[str, str]) -> list[records.PdbRecord]:
    return [p for p in pdbs if p.namespace == namespace and p.selector is not None
            and p.selector.matches(labels)]


@dataclasses.dataclass(slots=True)
class _Ledger:
    """What the drains chosen so far use up."""

    booked: dict[str, Counter[ProfileName]] = dataclasses.field(default_factory=dict)
    host: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    pdb_used: Counter[str] = dataclasses.field(default_factory=Counter)
    drained: set[str] = dataclasses.field(default_factory=set)
    moved: int = 0
    version: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class _Eval:
    drain: Drain | None
    reason: str | None  # why not, when the drain would serve demand
    units: tuple[planner.Unit, ...] = ()
    host: Mapping[str, tuple[int, int]] = dataclasses.field(default_factory=dict)

    @property
    def rank(self) -> tuple[float, int]:
        if self.drain is None:
            return (0.0, 0)
        return (-self.drain.served / len(self.drain.moves), -self.drain.served)


def advise_defrag(
    state: cluster.Cluster,
    advice: advisor.Advice,
    disruption: records.Disruption,
    *,
    max_move_share: float = DEFAULT_MAX_MOVE_SHARE,
    config: migparted.Config | None = None,
) -> Defrag:
    """Drains that serve the pods ``advice`` leaves waiting (see the module docstring)."""
    bound = sum(1 for p in state.pods() if p.holds_instances and p.mig_requests)
    max_moves = math.floor(max_move_share * bound + 1e-9)
    by_key = {w.key: w for w in advice.waiting}
    left = [by_key[k] for k in advice.unserved if k in by_key]
    empty = Defrag(drains=(), blocked=(), max_move_share=max_move_share, bound_pods=bound,
                   max_moves=max_moves, unserved=tuple(advice.unserved))
    if not left:
        return empty
    wanted = {p for w in left for p in w.requests}
    advised = {r.node for r in advice.recommendations}
    recs = {ns.name: ns.node for ns in state.nodes()}
    classes: dict[records.PodConstraints, int] = {}
    units: list[planner.Unit] = []
    for w in left:
        cons = w.pod.constraints if w.pod is not None else records.NO_CONSTRAINTS
        cls = classes.setdefault(cons, len(classes))
        needs = () if w.pod is None else (w.pod.cpu_milli, w.pod.memory_bytes)
        units.extend(planner.Unit(pod=w.key, profile=p, weight=w.weight, needs=needs, cls=cls)
                     for p, n in w.requests.items() for _ in range(n))

    def eligible(node: str, unit: planner.Unit) -> bool:
        w = by_key[unit.pod]
        cons = w.pod.constraints if w.pod is not None else records.NO_CONSTRAINTS
        return advisor.excludes(recs[node], cons) is None

    prefer = advisor.prefer_named(config)
    ledger = _Ledger()
    candidates: list[advisor.NodeView] = []
    for ns in state.nodes():
        rec = ns.node
        if rec.name in advised or rec.model is None:
            continue
        if not any(state.catalog.get(rec.model).has_profile(p) for p in wanted):
            continue
        v = advisor.view(state, ns, config)
        if v is not None and v.pods:
            candidates.append(v)

    def destination(pod: records.PodRecord, cons: records.PodConstraints, node: str,
                    taken: dict[str, Counter[ProfileName]],
                    host: dict[str, tuple[int, int]]) -> str | None:
        reqs = pod.mig_requests
        names: set[str] | None = None
        for p in reqs:
            have = set(state.free_nodes(p))
            names = have if names is None else names & have
        best: tuple[int, str] | None = None
        for name in sorted(names or ()):
            if name == node or name in ledger.drained or name in advised:
                continue
            dest = state.node(name)
            if dest is None or not dest.node.ready or advisor.excludes(dest.node, cons):
                continue
            free = state.free_nodes
            spare = {p: free(p).get(name, 0) - ledger.booked.get(name, Counter())[p]
                     - taken.get(name, Counter())[p] for p in reqs}
            if any(spare[p] < n for p, n in reqs.items()):
                continue
            room = host.get(name)
            if room is None:
                base = advisor.host_room(state, dest.node)
                used = ledger.host.get(name, [0, 0])
                room = (1 << 62, 1 << 62) if base is None else \
                    (base[0] - used[0], base[1] - used[1])
            if pod.cpu_milli > room[0] or pod.memory_bytes > room[1]:
                continue
            fit = (sum(spare.values()), name)
            if best is None or fit < best:
                best = fit
        if best is None:
            return None
        name = best[1]
        taken.setdefault(name, Counter()).update(reqs)
        room = host.get(name)
        if room is None:
            base = advisor.host_room(state, state.node(name).node)  # type: ignore[union-attr]
            used = ledger.host.get(name, [0, 0])
            room = (1 << 62, 1 << 62) if base is None else \
                (base[0] - used[0], base[1] - used[1])
        host[name] = (room[0] - pod.cpu_milli, room[1] - pod.memory_bytes)
        return name

    def evaluate(v: advisor.NodeView) -> _Eval:
        if not units:
            return _Eval(None, None)
        # Every pod moves away, so every GPU may change, but one with MIG disabled
        # (``advisor.view``'s rule: it serves nvidia.com/gpu pods).
        gpus = tuple(planner.GpuState(index=i, current=names, frozen=i in v.layout.disabled)
                     for i, names in enumerate(v.layout.gpus))
        supply = planner.NodeSupply(name=v.name, model=v.model, gpus=gpus,
                                    disruption=len(v.pods))
        pods = [p for p in state.pods_on(v.name) if p.holds_instances and p.requests]
        rec = recs[v.name]
        room = advisor.host_room(state, rec)
        rooms = None
        if room is not None:
            rooms = {v.name: (room[0] + sum(p.cpu_milli for p in pods),
                              room[1] + sum(p.memory_bytes for p in pods))}
        plan = planner.plan_pods([supply], units, eligible=eligible, room=rooms,
                                 prefer=prefer)
        if not plan.changes:
            return _Eval(None, None)
        got = plan.assigned.get(v.name, ())
        for pod in sorted(pods, key=lambda p: p.key):
            if set(pod.requests) - {profiles.resource_name(p) for p in pod.mig_requests}:
                return _Eval(None, f"pod {pod.key} uses whole GPUs (nvidia.com/gpu)")
        if ledger.moved + len(pods) > max_moves:
            return _Eval(None, f"moving its {len(pods)} pod(s) would pass the bound of "
                               f"{max_moves} move(s) ({max_move_share:g} of {bound} bound "
                               f"MIG pods; {ledger.moved} already advised)")
        moves: list[Move] = []
        uses: Counter[str] = Counter()
        allowed: dict[str, int] = {}
        taken: dict[str, Counter[ProfileName]] = {}
        host: dict[str, tuple[int, int]] = {}
        for pod in sorted(pods, key=lambda p: p.key):
            facts = disruption.pods.get(pod.key)
            if facts is None:
                return _Eval(None, f"pod {pod.key}: its labels and owners were not read")
            if facts.controller is None:
                return _Eval(None, f"pod {pod.key} has no controller: a bare pod never moves")
            if facts.controller[0] in _STAYS:
                return _Eval(None, f"pod {pod.key}: {_STAYS[facts.controller[0]]}")
            pdbs = _selecting(disruption.pdbs, pod.namespace, facts.labels)
            if len(pdbs) > 1:
                return _Eval(None, f"pod {pod.key} is selected by {len(pdbs)} "
                                   f"PodDisruptionBudgets ({', '.join(p.key for p in pdbs)}); "
                                   f"the eviction API refuses such pods")
            pdb = pdbs[0] if pdbs else None
            if pdb is not None:
                n, source = pdb_allowance(pdb)
                allowed[pdb.key] = n
                uses[pdb.key] += 1
                if ledger.pdb_used[pdb.key] + uses[pdb.key] > n:
                    return _Eval(None, f"PodDisruptionBudget {pdb.key} allows {n} "
                                       f"disruption(s) ({source}); "
                                       f"{ledger.pdb_used[pdb.key]} already advised")
            to = destination(pod, facts.constraints, v.name, taken, host)
            if to is None:
                want = ", ".join(f"{n} × {p}" for p, n in sorted(pod.mig_requests.items()))
                return _Eval(None, f"pod {pod.key} ({want}): no free instance on another "
                                   f"node that can take it")
            moves.append(Move(pod=pod.key, profiles=pod.mig_requests, to=to,
                              pdb=None if pdb is None else pdb.key))
        change = plan.changes[0]
        moved = tuple(m.pod for m in moves)
        drained = dataclasses.replace(v, gpus=gpus)
        rec_ = advisor.recommendation(change, drained, got, by_key, disrupts=moved)
        pdb_uses = tuple(PdbUse(pdb=k, allowed=allowed[k], used=ledger.pdb_used[k] + n)
                         for k, n in sorted(uses.items()))
        return _Eval(Drain(node=v.name, moves=tuple(moves), pdbs=pdb_uses,
                           recommendation=rec_, served=len(got)),
                     None, units=tuple(got), host=host)

    heap: list[tuple[tuple[float, int], str, int]] = []
    views = {v.name: v for v in candidates}
    reasons: dict[str, str] = {}
    for v in candidates:
        ev = evaluate(v)
        if ev.drain is not None:
            heap.append((ev.rank, v.name, ledger.version))
        elif ev.reason is not None:
            reasons[v.name] = ev.reason
    heapq.heapify(heap)
    drains: list[Drain] = []
    receivers: set[str] = set()
    while heap:
        _rank, name, _version = heapq.heappop(heap)
        if name in receivers:
            continue  # it takes moved pods now: draining it would move them again
        ev = evaluate(views[name])
        if ev.drain is None:
            if ev.reason is not None:
                reasons[name] = ev.reason
            continue
        if heap and (ev.rank, name) > heap[0][:2]:  # no longer the best: re-queue it
            heapq.heappush(heap, (ev.rank, name, ledger.version))
            continue
        drain = ev.drain
        drains.append(drain)
        reasons.pop(name, None)
        ledger.drained.add(name)
        ledger.moved += len(drain.moves)
        for m in drain.moves:
            ledger.booked.setdefault(m.to, Counter()).update(m.profiles)
            receivers.add(m.to)
            if m.pdb is not None:
                ledger.pdb_used[m.pdb] += 1
        for dest, room in ev.host.items():
            base = advisor.host_room(state, recs[dest])
            if base is not None:
                ledger.host[dest] = [base[0] - room[0], base[1] - room[1]]
        gone = {id(u) for u in ev.units}
        units[:] = [u for u in units if id(u) not in gone]
        ledger.version += 1
    unblocked = {k for d in drains for k in d.recommendation.unblocks}
    blocked = tuple(Blocked(node=n, reason=r) for n, r in sorted(reasons.items())
                    if n not in receivers)
    return Defrag(drains=tuple(drains), blocked=blocked, max_move_share=max_move_share,
                  bound_pods=bound, max_moves=max_moves,
                  unserved=tuple(k for k in advice.unserved if k not in unblocked))
