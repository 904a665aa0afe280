"""The extender's Score step: rank the nodes that can take a pod so the cluster fragments least.

MIG instances are fixed resources: taking a ``1g.10gb`` never changes how many ``3g.40gb`` a
node has. What a placement *can* spoil is (a) an idle GPU or node that a large request or a
re-layout needs whole (the MIG Manager can only re-partition GPUs with no pods, DESIGN.md 1.5),
(b) an instance that another pending pod needs and cannot find elsewhere, (c) a bigger or
roomier instance that a tighter request elsewhere would have used. So the score is a weighted
sum of terms in [0, 1], all computed from figures kept current by ``figures.Index``::

    raw   = W_FRAG·no_frag + W_STRAND·(1 − strand) + W_HOST·(1 − host) + W_SCARCE·(1 − scarce)
            + W_ALIGN·(1 − mismatch) − W_PLAN·spoil
    score = clamp(⌊10·raw + 0.5 + 0.1·(tie − 0.5)⌋, 0, 10)        (MaxExtenderPriority = 10)

(the weights are ``WEIGHTS``; the scoring log writes them with every line)

- ``frag`` = growth of the node's expected fragment (``fragmentation``: FGD's idea, Weng et
  al., USENIX ATC '23, for fixed MIG instances) over the demand mix (``figures.Index.mix``:
  the pending and running GPU pods' classes — profiles, cpu, memory — and their shares), in
  GPUs' worth of memory slices, when the pod takes its instances and its cpu and memory
  there; ``no_frag`` = clamp(½ − frag/2, floor, 1), ``floor`` = 0, or −``FRAG_FLOOR`` ×
  the share of the mix's pods that need several instances on one node when there are such
  pods (breaking a node's last whole GPUs then costs them more than one GPU's worth; the
  only term that can go below 0). A free instance is a fragment by the share
  of the demand for its profile that cannot use it there (cpu or memory left too small,
  model, strategy); one no class asks for is a fragment whole; a node with no MIG pod is
  the advisor's re-layout reserve. So the term keeps instances where pods of the mix can
  still use them: it does not break a node whose other instances nobody asks for, and it
  does not spend the cpu that the node's remaining instances need.

- ``mismatch`` = |ln(pod ratio / node ratio)| / ln 16, clamped to [0, 1], where the pod ratio
  is its cpu per memory slice it takes and the node ratio the node's free cpu per free memory
  slice before the placement: shape matching (Tetris's alignment, Grandl et al., SIGCOMM '14,
  for cpu against MIG slices). A pod light on cpu goes where free cpu is short for the free
  slices, one heavy on cpu where cpu is plentiful for them, so that neither leaves the other
  without a node: the trace's nodes have 4 to 128 cores per GPU (most 12, 52 or 8) and its GPU
  pods 1 to 120 cores per GPU of their share (median 11, 99th percentile 35). 0 (no opinion)
  for a pod without cpu requests or a node whose allocatable is unknown; 1 on a node with no
  free cpu.
- ``host`` = max(cpu, memory) requested on the node by the pods bound there plus this pod,
  as a share of the node's allocatable cpu and memory (the MIG pods' records, and the other
  pods' requests as the cache sums them per node, ``NodeState.other_*``).
  A MIG instance is of no use on a node whose cpu or memory is gone, and
  GPU pods of real traces ask for up to 64 cores: keeping host room everywhere keeps every
  node's instances reachable (``migfit simulate`` on the Alibaba trace: packing left 5–8 %
  of the slices free behind exhausted cpu, spreading 3 %).
- ``strand`` = max(0, host − pack): how far the node's cpu/memory would run ahead of its
  MIG instances, ``pack`` being the share of its advertised memory slices in use after the
  placement. A pod heavy on cpu goes where cpu is plentiful relative to the GPU slices left;
  a light one can go where cpu is short. This is the term that beats plain spreading. For a
  pod that requests no cpu and no memory (it cannot strand anything; also when the node's
  allocatable is unknown), strand = (1 − pack) / 2 and host = 0: best fit on GPU slices.
- ``pack`` = (used + requested memory slices) / advertised memory slices of the node, after
  the placement (memory slices weigh a 3g.40gb, 4 slices, above a 1g.10gb, 1).

Reported in the scoring log but weighted 0 since the trace replay (docs/simulation.md): best-
fit packing on ``pack``, ``fresh``, ``tight`` and ``slack`` strand instances behind exhausted
cpu and lose to kube-scheduler's own spreading (7.7 % unallocated against 3.0 %); instances
are fixed resources, so packing them gains nothing back in a static layout. (``scarce``, listed
with them, is weighted: ``W_SCARCE``.)

- ``fresh`` = 1 when the node holds no MIG pod at all. Breaking an idle node costs more than
  its utilisation change shows: it is the only kind of node a re-layout can use without
  disruption, and the only one that can take a whole-GPU (7g) or multi-instance request.
- ``scarce`` = clamp((D − (F − k)) / k, 0, 1) for the pod's profile on the node's GPU model,
  where F is the free instances of that (model, profile) on schedulable nodes cluster-wide, k
  the instances this pod takes, and D the instances other pending pods could use there (their
  decision's models allow it). It is 1 when this placement spends the last free instances that
  another pending pod needs; 0 when enough remain. It only differs between nodes of different
  models (the same profile name is a different instance per model, MIG.md 3.1), and so steers a
  pod that fits anywhere away from the model that a pickier pod can only use.
- ``tight`` = k / free instances of the profile on the node: best fit on the profile itself.
  Taking the last free 1g.10gb of one node keeps another node's several free ones together
  for a pod that needs two (multi-container pods must land on one node).
- ``slack`` = (usable MiB of the instance − requested MiB) / usable MiB, from the webhook's
  decision record (0 without one). Prefer the instance the request fits tightest, e.g. a 9.5
  GiB request on an A100's 9728 MiB 1g.10gb rather than an H100's 9984 MiB one, keeping the
  bigger instance for a request that needs it.
- ``spoil`` = the share of the node's free instances of the pod's profile (the worst of its
  profiles) that lie on GPUs a re-layout migfit advises for the node changes, when the
  advice is not for this pod (0 when it is, or the node has no advised change). The advice
  publisher writes each advised change on its node (``migfit.io/relayout``, state
  ``recommended``) before the apply mode, or an operator, starts it. A pod bound on those
  GPUs meanwhile stops the change (the apply mode re-partitions only GPUs without pods) and
  the pods it was for keep waiting; or, should an operator set the label anyway, loses its
  instance (the MIG Manager checks nothing, reference MIG.md 5). The only term that weighs
  against (``W_PLAN``); the node still takes the pod when it scores best anyway.
- ``tie`` ∈ [0, 1) is a hash of the node name: nodes whose raw score sits at a rounding
  boundary are split the same way on every call and every replica, so equal nodes are filled
  one after another instead of at random. It moves a score by at most one step.

A pod with several profiles averages ``tight`` and ``slack`` and takes the worst ``scarce``.
Nodes that cannot take the pod score 0; a pod without a MIG request scores 0 everywhere (no
opinion). Scores are deterministic functions of the cache, so replicas agree.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from migfit import cluster, profiles
from migfit.extender import figures, filtering

# Chosen on the three Alibaba pod lists and the synthetic mix together (fill, history layouts,
# seed 0, then checked on seeds 0-2; docs/simulation.md has the sweep): frag keeps idle nodes
# for re-layouts (multigpu50 pays for more of it) but spends host room where cpu binds
# (gpushare100 pays for less); align sends each pod to the nodes whose free cpu per free slice
# matches its own, which gives much of that room back. With FRAG_FLOOR this set is ahead of
# every baseline on every list at seed 0, and of the default scheduler and FGD on seeds 0-2
# (on multigpu50 binpack-gpu+advisor is 0.07 points ahead on seed 2).
W_FRAG = 0.25
W_STRAND = 0.20
W_HOST = 0.15
W_SCARCE = 0.10
W_ALIGN = 0.30
ALIGN_SPAN = math.log(16)  # a ratio 16 times off (either way) is as bad as it gets
# no_frag stops at 0 for a growth of one GPU's worth unless pods needing several instances on
# one node are in the mix: then it goes down to −FRAG_FLOOR × their share (growth up to
# 1 + 2·FRAG_FLOOR·share GPUs), so that breaking a node's last whole GPUs for them costs what
# it grows. With multigpu50's 8-GPU pods (2/11 of its mix): −1.45, growth up to 3.9 GPUs.
# No effect on a mix of one-instance pods (gpushare100). docs/simulation.md: 4, 8 and 16
# measured.
FRAG_FLOOR = 8.0
# A node that migfit's advice re-lays out (its ``recommended`` record, written by the advice
# publisher) is held for the pods the change is for: another pod landing on a GPU the change
# re-partitions stops the change (the apply mode re-partitions only GPUs without pods) and
# the pods it was for keep waiting. Three score steps: below a like node without a plan, but
# still taken when nothing else fits (the filter does not refuse it). Not measured by the
# simulator, whose advisor applies what it advises at once (no recommended stage).
W_PLAN = 0.30
# Computed and logged, weighted 0 (see the module docstring).
W_PACK = 0.0
W_FRESH = 0.0
W_TIGHT = 0.0
W_SLACK = 0.0
# The terms of ``raw`` as they enter its sum, by name, each in [0, 1] with 1 the better place
# (but ``spoils_plan``, which weighs against): raw = Σ WEIGHTS[t] · terms(s)[t]. The scoring
# log writes both, so that an operator (or a test) can recompute every node's raw score from
# one log line; change them together with the sum in ``score_nodes``.
WEIGHTS: dict[str, float] = {
    "no_frag": W_FRAG,  # 1 − growth of the node's expected fragmentation (frag)
    "no_strand": W_STRAND,  # 1 − strand
    "host_free": W_HOST,  # 1 − host
    "not_scarce": W_SCARCE,  # 1 − scarce
    "aligned": W_ALIGN,  # 1 − mismatch
    "spoils_plan": -W_PLAN,  # spoil: free instances on GPUs an advised change re-lays out
    "pack": W_PACK,
    "busy": W_FRESH,  # 0 on a node with no MIG pod (fresh), else 1
    "tight": W_TIGHT,
    "snug": W_SLACK,  # 1 − slack
}
TIE = 0.1
MAX_SCORE = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
MIN_SCORE = 0


class NodeScore(NamedTuple):
    """One node's score and the figures behind it (what the scoring log writes).

    A NamedTuple rather than a dataclass: one is built per node per call on the hot path.
    """

    node: str
    score: int
    fits: bool
    pack: float = 0.0
    fresh: bool = False
    scarce: float = 0.0
    tight: float = 0.0
    slack: float = 0.0
    raw: float = 0.0
    strand: float = 0.0
    host: float = 0.0
    frag: float = 0.0  # growth of expected fragmentation, in GPUs' worth of memory slices
    mismatch: float = 0.0  # of the pod's cpu per slice against the node's free cpu per slice
    floor: float = 0.0  # no_frag's lower bound: −FRAG_FLOOR × the mix's multi-instance share
    spoil: float = 0.0  # of the node's free instances the pod may take, the share an advised
    #                     re-layout not for this pod changes (``NodeFigures.planned``)


def terms(s: NodeScore) -> dict[str, float]:
    """The value of each term of ``WEIGHTS`` (and ``HOST_ONLY_WEIGHTS``) for a node that fits
    (what ``raw`` sums)."""
    return {"no_stranding": 1.0 - min(1.0, s.frag), "no_frag": frag_term(s.frag, s.floor),
            "no_strand": 1.0 - s.strand, "host_free": 1.0 - s.host,
            "not_scarce": 1.0 - s.scarce, "aligned": 1.0 - s.mismatch, "pack": s.pack,
            "busy": 0.0 if s.fresh else 1.0, "tight": s.tight, "snug": 1.0 - s.slack,
            "spoils_plan": s.spoil}


def frag_term(growth: float, floor: float = 0.0) -> float:
    """The term of a fragmentation growth (in GPUs' worth of slices): 1 for a placement that
    removes a GPU's worth of fragment, 1/2 for none, 0 for one that adds a GPU's worth, and
    below 0 for more, down to ``floor`` (``frag_floor``: 0 unless the mix has pods that need
    several instances on one node)."""
    return min(1.0, max(floor, 0.5 - growth / 2))


def frag_floor(mix: figures.Mix) -> float:
    """``no_frag``'s lower bound for the demand mix: −``FRAG_FLOOR`` × the share of its pods
    that need more than one instance on one node."""
    return -FRAG_FLOOR * mix.multi


_ZEROS = ("scoring", "zeros")


@dataclasses.dataclass(frozen=True, slots=True)
class Inputs:
    """What one call's score reads besides the node's figures and the model-wide terms.

    Two requests with equal ``Inputs`` get the same score on a node whose figures and
    model-wide term (``model_term``) are unchanged: the answer tables (``answers.Tables``) keep
    one table of ready per-node answers per distinct value. A formula that reads more of the
    pod (a demand class, a priority) adds the field here, in ``inputs_of``, and nowhere else.
    """

    wants: tuple[figures.Want, ...]
    cpu_milli: int  # the pod's own requests as the cache holds them (0 when not cached)
    memory_bytes: int
    own: tuple[figures.Want, ...] | None  # its wants counted in pending demand (excluded)
    mix: figures.Mix = figures.EMPTY_MIX  # the demand mix the fragment is expected over
    host_only: bool = False  # a pod without MIG requests, scored (``all_pods``)
    held: frozenset[str] = frozenset()  # nodes whose advised re-layout is for this pod
    # computed once: the answer tables look the value up more than once per call
    _hash: int = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.wants, self.cpu_milli, self.memory_bytes,
                                                self.own, self.mix, self.host_only,
                                                self.held)))

    def __hash__(self) -> int:
        return self._hash


def inputs_of(index: figures.Index, request: filtering.PodRequest, *,
              all_pods: bool = False) -> Inputs:
    """The score's inputs besides the node for ``request``, read from the cache now.

    ``all_pods``: a pod without MIG requests is scored too (``host_only_score``), else it
    scores ``MIN_SCORE`` everywhere (no opinion)."""
    if not request.mig:
        if not all_pods:
            return _NO_MIG
        return Inputs(wants=(), cpu_milli=request.cpu_milli, memory_bytes=request.memory_bytes,
                      own=None, mix=index.mix(), host_only=True)
    me = index.cluster.pod(request.uid)
    return Inputs(wants=request.wants,
                  cpu_milli=me.cpu_milli if me is not None else request.cpu_milli,
                  memory_bytes=me.memory_bytes if me is not None else request.memory_bytes,
                  own=index.own_demand(request.uid), mix=index.mix(),
                  held=_held(index, request))


def _held(index: figures.Index, request: filtering.PodRequest) -> frozenset[str]:
    index.refresh()
    return index.planned_for(request.key)


_NO_MIG = Inputs(wants=(), cpu_milli=0, memory_bytes=0, own=None)  # scores 0 everywhere


def model_term(index: figures.Index, request: filtering.PodRequest, model_key: str) -> float:
    """The model-wide part of the score of every node of ``model_key`` (its ``scarce``).

    The same for all nodes of one model; it moves when supply or demand of the pod's profiles
    on that model moves, and answer tables drop only that model's entries when it does.
    """
    return _scarcity(index, model_key, request)


def _scarcity(index: figures.Index, model_key: str, request: filtering.PodRequest) -> float:
    if not model_key:
        return 0.0  # a GPU model the catalog lacks: its supply is not counted, nor short
    worst = 0.0
    for w in request.wants:
        supply = index.supply(model_key, w.profile)
        demand = index.demand(model_key, w.profile, exclude=request.uid)
        short = demand - (supply - w.count)
        if short > 0:
            worst = max(worst, min(1.0, short / w.count))
    return worst


_HOST = ("scoring", "host")
HOST_SHAPES = 16  # per node and request shape: scores kept for this many pod cpu/memory pairs
_SCORED = "scoring"  # with the request's wants: each node's last score and its inputs


def _host_used(model: cluster.Cluster, name: str) -> tuple[int, int]:
    """cpu (milli) and memory (bytes) requested by the pods bound to ``name``: the MIG pods,
    and the others as the cache sums them (``NodeState.other_*``)."""
    cpu = mem = 0
    state = model.node(name)
    if state is not None:
        cpu, mem = state.other_cpu_milli, state.other_memory_bytes
    for p in model.pods_on(name):
        if p.holds_instances:
            cpu += p.cpu_milli
            mem += p.memory_bytes
    return cpu, mem


def score_nodes(
    index: figures.Index, request: filtering.PodRequest, names: Iterable[str], *,
    all_pods: bool = False,
) -> list[NodeScore]:
    """A score for every distinct name in ``names``, in input order.

    A name the cluster does not know scores ``MIN_SCORE`` and leaves no memo entry behind.
    A pod without MIG requests scores ``MIN_SCORE`` everywhere unless ``all_pods``.
    """
    unique = list(dict.fromkeys(names))
    if not request.mig:
        if all_pods:
            return _host_only_scores(index, request, unique)
        return [NodeScore(n, MIN_SCORE, True) for n in unique]
    index.refresh()
    model = index.cluster
    figs = index.figures
    scarcity: dict[str, float] = {}  # per model: the same for every node of it
    wants = request.wants
    nwants = len(wants)
    out: list[NodeScore] = []
    append = out.append
    check = filtering.check
    memo = index.memo(request.wants)  # shared with filter: the same verdicts
    zeros: dict[str, NodeScore] = index.memo(_ZEROS)  # one shared "does not fit" per node
    hosts: dict[str, tuple[object, int, int]] = index.memo(_HOST)
    # node -> (figures, mix, the node's part, (pod cpu, memory) -> its score)
    scored: dict[str, tuple[figures.NodeFigures, figures.Mix, _Part,
                            dict[tuple[int, int], NodeScore]]] = \
        index.memo((_SCORED, request.wants))
    mix = index.mix()
    floor = frag_floor(mix)  # per mix: once per call, not per node
    me = model.pod(request.uid)
    my_cpu = me.cpu_milli if me is not None else request.cpu_milli
    my_mem = me.memory_bytes if me is not None else request.memory_bytes
    shape = (my_cpu, my_mem)
    held = index.planned_for(request.key)
    for name in unique:
        fig = figs.get(name)
        if fig is None:
            append(NodeScore(name, MIN_SCORE, False))
            continue
        # What follows reads only the node's figures (replaced on every cache event that
        # touches the node), the request's shape, the demand mix, the model's scarcity and
        # the pod's own cpu/memory. The node's part is kept per (figures, mix), its score per
        # pod cpu/memory besides; a scarcity that moved only re-adds the terms. A part is
        # kept only for a node that passed the filter with these very figures (``check``
        # reads the figures and the wants only), so a kept one needs no filter lookup.
        scarce = scarcity.get(fig.model_key)  # per model: once per call, whatever the branch
        if scarce is None:
            scarce = scarcity[fig.model_key] = model_term(index, request, fig.model_key)
        done = scored.get(name)
        if done is not None and done[0] is fig and done[1] is mix:
            part, results = done[2], done[3]
            spoil = 0.0 if name in held else part[16]
            kept = results.get(shape)
            if kept is not None:
                if kept.scarce != scarce or kept.spoil != spoil:  # a model-wide term, or
                    # whether the node's advised change is for this pod, moved
                    kept = results[shape] = _assemble(
                        name, fig, part, scarce, kept.strand, kept.host, kept.frag,
                        kept.mismatch, kept.floor, spoil)
                append(kept)
                continue
        else:
            hit = memo.get(name)
            if hit is not None and hit[0] is fig:
                reasons = hit[1]
            else:
                reasons = check(fig, request)
                memo[name] = (fig, reasons)
            if reasons:
                zero = zeros.get(name)
                if zero is None:
                    zero = zeros[name] = NodeScore(name, MIN_SCORE, False)
                append(zero)
                continue
            part = _node_part(fig, wants, nwants, _host_of(model, name, fig, hosts), mix)
            results = {}
            scored[name] = (fig, mix, part, results)
            spoil = 0.0 if name in held else part[16]
        result = _finish(name, fig, part, scarce, my_cpu, my_mem, mix, floor, spoil)
        if len(results) >= HOST_SHAPES:  # pods' cpu and memory are the clients': bounded
            results.clear()
        results[shape] = result
        append(result)
    return out


# (pack, fresh, tight, slack, raw without the host terms, host known, cpu used, memory used,
#  node cpu, node memory, fragmentation before, free instances after, free slices after):
# a node's part of the score for one request shape, scarcity and mix.
_Part = tuple[float, bool, float, float, float, bool, int, int, int, int, float,
              dict[profiles.ProfileName, int], int, float, int, int, float]
# (then: the fragment after the placement on a node whose host room, after it, still
#  serves every class of the mix: then it does not depend on the pod's cpu and memory; the
#  most cpu and memory that fragment compares with; the spoil for a pod the node's advised
#  re-layout is not for)


def score_node(index: figures.Index, request: filtering.PodRequest, name: str, *,
               all_pods: bool = False) -> NodeScore:
    """One node's score computed fresh, with no memo: THE formula, one node at a time.

    ``score_nodes`` is this for many nodes with its steps kept across calls; the answer
    tables (``answers``) keep its results, rendered. Reads the node's figures, ``inputs_of``
    and ``model_term``: a new formula changes this function's steps (``_node_part``,
    ``_finish``) and, when it reads more of the pod or the cluster, ``Inputs``/``model_term``.
    """
    inputs = inputs_of(index, request, all_pods=all_pods)
    if inputs.host_only:
        return _host_only_scores(index, request, [name])[0]
    if not request.mig:
        return NodeScore(name, MIN_SCORE, True)
    index.refresh()
    fig = index.figures.get(name)
    if fig is None or filtering.check(fig, request):
        return NodeScore(name, MIN_SCORE, False)
    scarce = model_term(index, request, fig.model_key)
    host = _host_used(index.cluster, name) if _host_known(fig) else None
    part = _node_part(fig, request.wants, len(request.wants), host, inputs.mix)
    return _finish(name, fig, part, scarce, inputs.cpu_milli, inputs.memory_bytes, inputs.mix,
                   frag_floor(inputs.mix), 0.0 if name in inputs.held else part[16])


# A pod without MIG requests (``all_pods``): its cpu and memory should go where they strand
# no GPU instance that the demand mix needs, and preferably where the instances are taken.
# raw = HOST_ONLY_WEIGHTS · terms: no_stranding = 1 − min(1, frag), pack = the node's memory
# slices in use (a node without MIG instances counts as taken: 1).
W_HO_STRANDING = 0.8
W_HO_PACK = 0.2
HOST_ONLY_WEIGHTS: dict[str, float] = {"no_stranding": W_HO_STRANDING, "pack": W_HO_PACK}
_HOST_ONLY = ("scoring", "host-only")


def host_only_score(name: str, fig: figures.NodeFigures, mix: figures.Mix,
                    host: tuple[int, int] | None, cpu: int, memory: int) -> NodeScore:
    """One node's score for a pod without MIG requests (``HOST_ONLY_WEIGHTS``)."""
    free, slices, fresh = fig.state.free, fig.free_slices, fig.state.used_total == 0
    frag = 0.0
    if host is not None and (cpu or memory):
        rec = fig.state.node
        cpu_left, mem_left = rec.cpu_milli - host[0], rec.memory_bytes - host[1]
        before = fragmentation(fig, mix, free, slices, fresh, cpu_left, mem_left)
        after = fragmentation(fig, mix, free, slices, fresh, cpu_left - cpu, mem_left - memory)
        frag = (after - before) / (fig.model.memory_slices if fig.model is not None else 1)
    pack = fig.used_slices / fig.total_slices if fig.total_slices else 1.0
    raw = W_HO_STRANDING * (1.0 - min(1.0, frag)) + W_HO_PACK * pack
    score = math.floor(MAX_SCORE * raw + 0.5 + TIE * (fig.tie - 0.5))
    score = MIN_SCORE if score < MIN_SCORE else min(score, MAX_SCORE)
    return NodeScore(name, score, True, pack=pack, fresh=fresh, raw=raw, frag=frag)


def _host_only_scores(index: figures.Index, request: filtering.PodRequest,
                      unique: Sequence[str]) -> list[NodeScore]:
    index.refresh()
    model, figs, mix = index.cluster, index.figures, index.mix()
    cpu, memory = request.cpu_milli, request.memory_bytes
    hosts: dict[str, tuple[object, int, int]] = index.memo(_HOST)
    done: dict[str, tuple[figures.NodeFigures, figures.Mix, NodeScore]] = \
        index.memo((_HOST_ONLY, cpu, memory))
    out: list[NodeScore] = []
    for name in unique:
        fig = figs.get(name)
        if fig is None:
            out.append(NodeScore(name, MIN_SCORE, False))
            continue
        hit = done.get(name)
        if hit is None or hit[0] is not fig or hit[1] is not mix:
            hit = done[name] = (fig, mix, host_only_score(
                name, fig, mix, _host_of(model, name, fig, hosts), cpu, memory))
        out.append(hit[2])
    return out


def _host_known(fig: figures.NodeFigures) -> bool:
    rec = fig.state.node
    return rec.cpu_milli > 0 and rec.memory_bytes > 0 and bool(fig.total_slices)


def _host_of(model: cluster.Cluster, name: str, fig: figures.NodeFigures,
             hosts: dict[str, tuple[object, int, int]]) -> tuple[int, int] | None:
    """``_host_used`` of a node whose host figures the score reads, kept per figures."""
    if not _host_known(fig):
        return None
    host = hosts.get(name)
    if host is None or host[0] is not fig:
        host = hosts[name] = (fig, *_host_used(model, name))
    return host[1], host[2]


def _node_part(fig: figures.NodeFigures, wants: Sequence[figures.Want], nwants: int,
               host: tuple[int, int] | None, mix: figures.Mix) -> _Part:
    """What the score reads of the node and the request's shape, before the pod's cpu and
    memory: ``host`` is the cpu and memory of the MIG pods bound there (None: unknown)."""
    free = fig.state.free
    taken = tight = slack = spoil = 0.0
    after = dict(free)
    planned = fig.planned
    for w in wants:
        if planned:
            have = free[w.profile]
            there = min(planned.get(w.profile, 0), have) / have
            if there > spoil:
                spoil = there
        taken += w.count * fig.slices.get(w.profile, 1)
        tight += w.count / free[w.profile]
        after[w.profile] = after.get(w.profile, 0) - w.count
        if w.request_mib is not None:
            mem = fig.memory.get(w.profile)
            if mem:
                slack += (mem - w.request_mib) / mem
    tight /= nwants
    slack /= nwants
    pack = min(1.0, (fig.used_slices + taken) / fig.total_slices) if fig.total_slices else 0.0
    fresh = fig.state.used_total == 0
    base = W_PACK * pack + (0.0 if fresh else W_FRESH) + W_TIGHT * tight + W_SLACK * (1.0 - slack)
    rec = fig.state.node
    left = fig.free_slices - int(taken)
    roomy = fragmentation(fig, mix, after, left, False, None, None)
    if host is not None:
        before = fragmentation(fig, mix, free, fig.free_slices, fresh,
                               rec.cpu_milli - host[0], rec.memory_bytes - host[1])
        need_cpu, need_mem = _room_read(fig, mix, after)
        return (pack, fresh, tight, slack, base, True, host[0], host[1], rec.cpu_milli,
                rec.memory_bytes, before, after, left, roomy, need_cpu, need_mem, spoil)
    before = fragmentation(fig, mix, free, fig.free_slices, fresh, None, None)
    return (pack, fresh, tight, slack, base, False, 0, 0, 1, 1, before, after, left, roomy,
            0, 0, spoil)


def _room_read(fig: figures.NodeFigures, mix: figures.Mix,
               free: Mapping[profiles.ProfileName, int]) -> tuple[int, int]:
    """The most cpu and memory that ``fragmentation`` of a (not fresh) node with ``free``
    instances compares with the node's room: with at least this much left, its answer is
    the one for unknown room (every comparison it makes of cpu and memory holds, so it adds
    the same shares in the same order)."""
    most_cpu = most_mem = 0
    asks = mix.asks
    for q, have in free.items():
        if have <= 0:
            continue
        entry = asks.get(q)
        if entry is None:
            continue
        for _share, cpu, mem, _count, _one, _models in entry[1]:
            if cpu > most_cpu:
                most_cpu = cpu
            if mem > most_mem:
                most_mem = mem
    return most_cpu, most_mem


def fragmentation(fig: figures.NodeFigures, mix: figures.Mix,
                  free: Mapping[profiles.ProfileName, int], free_slices: int, fresh: bool,
                  cpu_left: int | None, memory_left: int | None) -> float:
    """The node's expected fragment over the demand mix, in memory slices (FGD's measure,
    for instances that are fixed resources).

    A free instance of profile q is a fragment by the share of the mix's demand for q that
    cannot use it here: classes that need more cpu or memory than the node has left, more
    instances of q than are free, another GPU model, or the other strategy. An instance no
    class asks for is a fragment whole. A node with no MIG pod is the advisor's reserve (the
    MIG Manager re-partitions such nodes): its slices are a fragment only for the classes
    some layout of its GPUs could serve but whose cpu or memory it lacks (a class no layout
    serves never comes here).
    """
    if not mix:
        return 0.0
    if cpu_left is None or memory_left is None:  # unknown: every class fits the host
        cpu_left = memory_left = 1 << 62
    if fresh:
        out = 0.0
        for c in mix:
            if ((c.cpu_milli > cpu_left or c.memory_bytes > memory_left)
                    and _can_host(fig.model, fig.state.node.gpu_count, fig.single,
                                  fig.model_key, c.wants)):
                out += c.share * free_slices
        return out
    out = 0.0
    sizes = fig.slices
    asks = mix.asks
    single, model_key = fig.single, fig.model_key
    for q, have in free.items():
        if have <= 0:
            continue
        entry = asks.get(q)
        if entry is None:  # no class asks for it
            out += have * sizes.get(q, 1)
            continue
        served = 0.0
        for share, cpu, mem, count, one, models in entry[1]:
            if (count <= have and cpu <= cpu_left and mem <= memory_left and one == single
                    and (models is None or model_key in models)):
                served += share
        out += have * sizes.get(q, 1) * (1.0 - served / entry[0])
    return out


@functools.lru_cache(maxsize=4096)
def _can_host(model: profiles.GpuModel | None, gpus: int, single: bool, model_key: str,
              wants: tuple[figures.Want, ...]) -> bool:
    """Whether some layout of the node's GPUs could serve ``wants`` (a re-layout target)."""
    if model is None or gpus <= 0:
        return False
    slices = 0
    for w in wants:
        if w.single != single or not w.allows(model_key) or not model.has_profile(w.profile):
            return False
        if not figures.relayout_chance(model, w.profile, w.request_mib).possible:
            return False
        slices += w.count * model.profile(w.profile).memory_slices
    return slices <= gpus * model.memory_slices


def _finish(name: str, fig: figures.NodeFigures, part: _Part, scarce: float, my_cpu: int,
            my_mem: int, mix: figures.Mix, floor: float, spoil: float) -> NodeScore:
    """The score from a node's part, the model's scarcity, the pod's own cpu and memory, the
    mix's ``frag_floor`` and the pod's ``spoil`` of the node's advised re-layout."""
    # On the hot path (once per node and pod shape): the conditional expressions are the
    # builtins' max(a, b) / min(a, b) exactly (the first argument unless the second is
    # strictly greater / smaller), without the calls.
    pack = part[0]
    strand = (1.0 - pack) / 2
    u_host = 0.0
    mis = 0.0
    after = part[13]
    if part[5]:
        if my_cpu or my_mem:
            u_cpu, u_mem = (part[6] + my_cpu) / part[8], (part[7] + my_mem) / part[9]
            u_host = u_mem if u_mem > u_cpu else u_cpu
            if not u_host < 1.0:
                u_host = 1.0
            strand = u_host - pack
            if not strand > 0.0:
                strand = 0.0
        cpu_left, mem_left = part[8] - part[6] - my_cpu, part[9] - part[7] - my_mem
        if cpu_left < part[14] or mem_left < part[15]:
            after = fragmentation(fig, mix, part[11], part[12], False, cpu_left, mem_left)
        if my_cpu:  # mismatch(my_cpu, slices taken, cpu free, slices free), inlined
            slices_free = fig.free_slices
            slices = slices_free - part[12]
            cpu_free = part[8] - part[6]
            mis = 1.0
            if cpu_free > 0 and slices > 0 and slices_free > 0:
                off = abs(math.log((my_cpu * slices_free) / (slices * cpu_free))) / ALIGN_SPAN
                if off < 1.0:
                    mis = off
    per_gpu = fig.model.memory_slices if fig.model is not None else 1
    return _assemble(name, fig, part, scarce, strand, u_host, (after - part[10]) / per_gpu,
                     mis, floor, spoil)


def mismatch(cpu: int, slices: int, cpu_free: int, slices_free: int) -> float:
    """How far a pod's cpu per memory slice (``cpu`` over ``slices``) is from the node's free
    cpu per free slice, in [0, 1] (``mismatch`` in the module docstring)."""
    if cpu_free <= 0 or slices <= 0 or slices_free <= 0:
        return 1.0
    off = abs(math.log((cpu * slices_free) / (slices * cpu_free))) / ALIGN_SPAN
    return off if off < 1.0 else 1.0


_new_score = tuple.__new__  # NodeScore from its 15 fields, without the generated __new__


def _assemble(name: str, fig: figures.NodeFigures, part: _Part, scarce: float, strand: float,
              u_host: float, frag: float, mis: float, floor: float, spoil: float) -> NodeScore:
    """raw and the 0..10 score from the terms' figures (``_finish``; a kept score whose
    model scarcity moved is re-assembled from its figures, with the same arithmetic)."""
    no_frag = 0.5 - frag / 2  # frag_term(frag, floor), inlined: min(1, max(floor, ...)) exactly
    if not no_frag > floor:
        no_frag = floor
    elif not no_frag < 1.0:
        no_frag = 1.0
    # The same sum, in the same order, as the formula in the module docstring.
    raw = (part[4] + W_SCARCE * (1.0 - scarce) + W_STRAND * (1.0 - strand)
           + W_HOST * (1.0 - u_host) + W_FRAG * no_frag + W_ALIGN * (1.0 - mis)
           - W_PLAN * spoil)
    score = math.floor(MAX_SCORE * raw + 0.5 + TIE * (fig.tie - 0.5))
    if score < MIN_SCORE:
        score = MIN_SCORE
    elif score > MAX_SCORE:
        score = MAX_SCORE
    out: NodeScore = _new_score(NodeScore, (name, score, True, part[0], part[1], scarce,
                                            part[2], part[3], raw, strand, u_host, frag,
                                            mis, floor, spoil))
    return out
