"""Choosing a MIG profile: the smallest one that fits each container's request (DESIGN.md §4),
or under contention the smallest fitting one with a free instance (``Policy.contention``;
free: not asked for by pods already waiting, ``view.Offer.free``).

Candidates are what schedulable nodes advertise now (of the nodes the pod may run on,
``decision.scoped``); when none fits, any profile of the GPU
models present (a re-layout could create it); without a cluster view, the catalog of the
configured models. A profile fits when its usable memory covers the request (a profile name
is nominal: ``1g.10gb`` is 9728 MiB on an A100-80GB) and the compute and media constraints
hold. Also here: the warnings about the choice, the device-plugin strategy, and the
``nvidia.com/gpu.product`` values the pod must be restricted to. Pure: no I/O, no HTTP.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

from migfit import keys, layouts, profiles, quantity, requests
from migfit.webhook import view
from migfit.webhook.reading import Container, Denied

MemoryMatch = Literal["label", "catalog", "nominal"]
MEMORY_MATCHES: Final[tuple[MemoryMatch, ...]] = ("label", "catalog", "nominal")
StrategyChoice = Literal["auto", "mixed", "single"]
STRATEGY_CHOICES: Final[tuple[StrategyChoice, ...]] = ("auto", "mixed", "single")
#: Which fitting profile under contention (``--choice``): ``smallest`` overall; ``free`` = the
#: smallest with a free instance now (one no pending pod asks for), else the smallest;
#: ``ceiling`` = as ``free`` but never one that would leave more than
#: ``Policy.waste_ceiling`` of its memory unused; ``usable`` = as ``free``, counting only
#: free instances on nodes with the pod's cpu and memory left.
Contention = Literal["smallest", "free", "ceiling", "usable"]
CONTENTIONS: Final[tuple[Contention, ...]] = ("smallest", "free", "ceiling", "usable")
#: A pod's own cpu (milli) and memory (bytes) requests: what ``usable`` needs left on a node.
Host = tuple[int, int]
NO_HOST: Final[Host] = (0, 0)

_NOMINAL: Final = re.compile(r"\.(\d+)gb")
ANY_GPU: Final = "use a whole GPU (nvidia.com/gpu) instead"
#: Containers a message lists by name at most (the rest are counted).
_SHOWN: Final = 8
#: kube-apiserver may cut a warning longer than this (WIRE.md §2.1), in bytes of UTF-8 (its
#: Go code measures bytes; the server cuts by them): a warning about several containers
#: names no more of them than leave its text whole.
WARNING_CHARS: Final = 256


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    """How the webhook decides; the CLI flags map onto these fields."""

    #: GPU models to decide against without a cluster view (``--gpu-models``).
    fallback_models: tuple[profiles.GpuModel, ...] = ()
    #: Usable memory of a profile: ``label`` = the node's nvidia.com/mig-<p>.memory label when
    #: present, else the catalog's MiB; ``catalog`` = the catalog only; ``nominal`` = the GB of
    #: the name read as GiB (``1g.10gb`` = 10 GiB; optimistic, for clusters without GFD labels).
    memory_match: MemoryMatch = "label"
    #: ``auto`` follows the nodes' nvidia.com/mig.strategy label; otherwise forced.
    strategy: StrategyChoice = "auto"
    #: Warn when more than this share of the chosen instance's memory would be unused.
    waste_warning: float = 0.5
    #: Which fitting profile when the smallest has no free instance (``Contention``). ``free``
    #: by measurement (docs/simulation.md, "The webhook's choice under contention"): never
    #: worse in unallocated share, lower GPU wait where the smallest profile runs out.
    contention: Contention = "free"
    #: ``ceiling``: a larger free profile is taken only when at most this share of its memory
    #: is unused. 0.5 = at most twice the request, one step up the MIG ladder (10→20→40 GB),
    #: and exactly where ``waste_warning`` starts warning: the choice never causes the warning.
    waste_ceiling: float = 0.5
    #: Hand annotated pods to this scheduler (the second-scheduler overlay's
    #: ``migfit-scheduler``); pods that name a scheduler other than the default keep theirs.
    scheduler_name: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """What one container gets."""

    container: Container
    request_mib: int
    profile: str
    models: tuple[profiles.ModelId, ...]  # models where it fits; () = wherever advertised
    fit_models: tuple[profiles.ModelId, ...]
    reason: str = ""  # why this profile (the decision record's ``reason``); "" = not recorded


def usable_mib(
    model: profiles.GpuModel, profile: profiles.Profile, *, supply: view.Supply, policy: Policy
) -> int:
    """The memory a pod can count on in ``profile`` on ``model`` under ``policy``."""
    if policy.memory_match == "nominal":
        m = _NOMINAL.search(profile.name)
        if m is not None:
            return int(m.group(1)) * 1024
    if policy.memory_match == "label":
        offer = supply.offers.get((model.id, profile.name))
        if offer is not None and offer.label_mib is not None:
            return offer.label_mib
    return profile.memory_mib


def meets(profile: profiles.Profile, req: requests.GpuRequest) -> bool:
    """Whether ``profile`` has the compute slices and media engines ``req`` asks for (its
    memory is checked against the usable MiB, which depends on the policy)."""
    if req.compute is not None and profile.compute_slices < req.compute:
        return False
    return not (req.media and not profile.media)


_Candidate = tuple[profiles.GpuModel, profiles.Profile, int]


def smallest_first(profile: profiles.Profile, usable: int) -> tuple[Any, ...]:
    """The order of "smallest" (DESIGN §4): least usable memory, then fewest compute
    slices, then without +me."""
    return (usable, profile.compute_slices, profile.media, profile.name)


def _order(c: _Candidate) -> tuple[Any, ...]:
    model, p, usable = c
    return (*smallest_first(p, usable), model.id)


@dataclasses.dataclass(frozen=True, slots=True)
class Choice:
    """The profile chosen for one request, and what the warnings need to know about it."""

    model: profiles.GpuModel
    profile: profiles.Profile
    usable: int
    advertised: bool
    free: int
    fit_models: tuple[profiles.ModelId, ...]
    restricted: bool  # some model with this profile name cannot hold the request
    reason: str  # why this one (see ``_contend``)


def _advertised(
    req: requests.GpuRequest, *, pool: Sequence[profiles.GpuModel], supply: view.Supply,
    policy: Policy,
) -> list[_Candidate]:
    """The advertised (model, profile)s that hold ``req``."""
    by_id = {m.id: m for m in pool}
    out: list[_Candidate] = []
    for (mid, pname), _offer in supply.offers.items():
        model = by_id.get(mid)
        if model is None or not model.has_profile(pname):
            continue
        p = model.profile(pname)
        usable = usable_mib(model, p, supply=supply, policy=policy)
        if usable >= req.memory_mib and meets(p, req):
            out.append((model, p, usable))
    return out


def choose(
    req: requests.GpuRequest,
    *,
    key: str,
    value: str,
    pool: Sequence[profiles.GpuModel],
    supply: view.Supply,
    policy: Policy,
    host: Host = NO_HOST,
) -> Choice:
    """The profile that holds ``req`` (advertised first; under contention as
    ``policy.contention`` says), or Denied naming the largest one; ``key``/``value`` are the
    annotation the request came from, ``host`` the pod's cpu and memory (``usable``)."""
    mib = req.memory_mib
    advertised = _advertised(req, pool=pool, supply=supply, policy=policy)
    if advertised:
        (model, p, usable), reason = _contend(sorted(advertised, key=_order), req, pool=pool,
                                              supply=supply, policy=policy, host=host)
    else:
        anywhere = [(m, p, usable_mib(m, p, supply=supply, policy=policy))
                    for m in pool for p in m.profiles]
        fitting = [c for c in anywhere if c[2] >= mib and meets(c[1], req)]
        if not fitting:
            raise Denied(_too_big(req, key=key, value=value, pool=pool, supply=supply,
                                  policy=policy))
        model, p, usable = min(fitting, key=_order)
        reason = "smallest fitting (none advertised)" if supply.available else "smallest fitting"
    fit = _fit_models(req, p.name, pool=pool, supply=supply, policy=policy)
    having = [m for m in pool if m.has_profile(p.name)]
    return Choice(
        model=model,
        profile=p,
        usable=usable,
        advertised=any((mid, p.name) in supply.offers for mid in fit),
        free=_free(fit, p.name, supply),
        fit_models=fit,
        restricted=len(fit) < len(having),
        reason=reason,
    )


def _contend(
    ordered: Sequence[_Candidate], req: requests.GpuRequest, *,
    pool: Sequence[profiles.GpuModel], supply: view.Supply, policy: Policy,
    host: Host = NO_HOST,
) -> tuple[_Candidate, str]:
    """The candidate ``policy.contention`` picks among the advertised ones (smallest first)
    and why. Reads of the supply only whether each offer has a free instance (``usable``:
    one on a node with ``host`` left), never how many (what the simulator's cache keys on),
    so the reason names no count but 0."""
    smallest = ordered[0]
    if policy.contention == "smallest":
        return smallest, "smallest fitting"
    usable = policy.contention == "usable"
    # ``usable`` counts a free instance only where the pod's cpu and memory fit beside it
    where, none = ((keys.REASON_ROOM, "none") if usable
                   else ("", "0 free that no waiting pod asks for"))
    busy: list[str] = []  # profile names passed over: no free instance
    wasteful: tuple[str, int] | None = None  # the smallest free one refused by the ceiling
    seen: set[str] = set()
    for c in ordered:
        name = c[1].name
        if name in seen:  # the same profile on another model: more usable memory, same count
            continue
        seen.add(name)
        fit = _fit_models(req, name, pool=pool, supply=supply, policy=policy)
        if (not any(supply.usable((mid, name), *host) for mid in fit) if usable
                else _free(fit, name, supply) <= 0):
            busy.append(name)
            continue
        unused = 1 - req.memory_mib / c[2]
        if c is smallest:
            return c, f"smallest fitting, with a free instance{where}"
        if policy.contention != "ceiling" or unused <= policy.waste_ceiling:
            return c, f"smallest with a free instance{where} ({', '.join(busy)}: {none})"
        if wasteful is None:
            wasteful = (name, int(unused * 100))
    if wasteful is not None:
        return smallest, (f"smallest fitting: none free within the waste ceiling "
                          f"({wasteful[0]} would leave {wasteful[1]}% unused, more than "
                          f"{int(policy.waste_ceiling * 100)}%)")
    return smallest, f"smallest fitting: no fitting profile has a free instance{where}"


def _fit_models(
    req: requests.GpuRequest, name: profiles.ProfileName, *,
    pool: Sequence[profiles.GpuModel], supply: view.Supply, policy: Policy,
) -> tuple[profiles.ModelId, ...]:
    """The models whose profile ``name`` holds ``req``."""
    return tuple(m.id for m in pool if m.has_profile(name)
                 and usable_mib(m, m.profile(name), supply=supply, policy=policy)
                 >= req.memory_mib and meets(m.profile(name), req))


def _free(fit: Iterable[profiles.ModelId], name: profiles.ProfileName,
          supply: view.Supply) -> int:
    return sum(supply.offers[(mid, name)].free for mid in fit if (mid, name) in supply.offers)


def _too_big(
    req: requests.GpuRequest,
    *,
    key: str,
    value: str,
    pool: Sequence[profiles.GpuModel],
    supply: view.Supply,
    policy: Policy,
) -> str:
    where = (f"on {supply.scope}" if supply.scope
             else "in this cluster" if supply.available and supply.models
             else "configured (--gpu-models)")
    constrained = [(m, p) for m in pool for p in m.profiles if meets(p, req)]
    wants = []
    if req.compute is not None:
        wants.append(f"at least {req.compute} compute slices")
    if req.media:
        wants.append("media engines (+me)")
    if not constrained:
        most = max((p.compute_slices for m in pool for p in m.profiles), default=0)
        fixes = ([f"lower {requests.GPU_COMPUTE}"] if req.compute is not None else []) + (
            [f"remove {requests.GPU_MEDIA}"] if req.media else [])
        most_text = f" (the most is {most}g)" if req.compute is not None else ""
        return (f"no MIG profile of the GPU models {where} ({names(pool)}) has "
                f"{' and '.join(wants)}{most_text}; {' or '.join(fixes)}")
    model, p = max(constrained, key=lambda c: (
        usable_mib(c[0], c[1], supply=supply, policy=policy), -c[1].compute_slices))
    largest = usable_mib(model, p, supply=supply, policy=policy)
    extra = f" with {' and '.join(wants)}" if wants else ""
    shown = quantity.format_mib(req.memory_mib)
    capped = req.memory_bytes == quantity.MAX_INT64  # apimachinery caps binary amounts there
    amount = (f"{requests.shorten(key, 100)}={requests.shorten(value)}"
              + (" (more than 8Ei)" if capped
                 else "" if shown == value or len(shown) > 16 else f" ({shown})"))
    # 1e100: no 84 digits
    # A whole GPU is a way out only where one holds the request (the GPU's whole memory).
    whole = max((m.memory_mib for m in pool), default=0)
    way_out = (ANY_GPU if req.memory_mib <= whole else
               f"split the work over several GPUs: no GPU model {where} has that much memory "
               f"(the largest GPU has {quantity.format_mib(whole)} in all)")
    return (f"{amount} is more than the largest "
            f"MIG profile{extra} of the GPU models {where}: {p.name} on {model.id} "
            f"({quantity.format_mib(largest)} usable); ask for at most "
            f"{quantity.format_mib(largest)}, or {way_out}")


def names(models: Iterable[profiles.GpuModel]) -> str:
    """``A100-80GB, H100-80GB`` (``none`` for none)."""
    return ", ".join(m.id for m in models) or "none"


# ---------------------------------------------------------------- planning a pod


def pool_of(supply: view.Supply, policy: Policy, warnings: list[str]
            ) -> Sequence[profiles.GpuModel]:
    """The GPU models to decide against, or Denied when there are none."""
    if supply.available and supply.models:
        return supply.models
    if policy.fallback_models:
        pool = policy.fallback_models
        if supply.available:
            warnings.append(f"no node has a known MIG GPU; decided from --gpu-models "
                            f"({names(pool)})")
        else:
            warnings.append(f"migfit has no cluster view yet; decided from the catalog of "
                            f"{names(pool)}")
        return pool
    if supply.available:
        raise Denied("no node in the cluster has a MIG-capable GPU that migfit knows; label "
                     "the GPU nodes (GPU Feature Discovery) or remove "
                     f"{requests.GPU_MEMORY} and {ANY_GPU}")
    raise Denied("migfit has no view of the cluster yet and no --gpu-models to fall back "
                 "on; retry in a few seconds")


def plan(
    reqs: Sequence[requests.GpuRequest],
    by_name: Mapping[str, Container],
    *,
    annotations: Mapping[str, str],
    supply: view.Supply,
    policy: Policy,
    warnings: list[str],
    host: Host = NO_HOST,
    node_name: str | None = None,
) -> tuple[list[Plan], requests.Strategy, bool]:
    """A profile per requesting container, the strategy to ask for it under (``host``:
    the pod's cpu and memory, which ``usable`` reads), and whether the supply's snapshot
    (its sums per profile) decided it: False when the plan read nodes one by one.
    ``node_name``: the pod's spec.nodeName (it skips the scheduler: the warnings say what
    the kubelet does instead of waiting).

    One node serves a whole pod: when no one node advertises all the containers' choices
    (``_together``), they are made again among each kind of node (``_rechoose``), and the
    better set kept, with a warning that names both."""
    pool = pool_of(supply, policy, warnings)
    reads = _Reads()
    many = len(reqs) > 1
    asked = [_asked(r, annotations) for r in reqs]
    choices = _choose_all(reqs, asked, pool=pool, supply=supply, policy=policy, host=host)
    strategy = _strategy(choices, supply=supply, policy=policy, reads=reads)
    if many and supply.available:
        together = _together(choices, strategy, supply, reads)
        # Made again only where no node could hold them all now: when one advertises
        # them all but has them busy, taking larger free ones instead is a contention
        # policy, as ``Policy.contention`` is for one instance, not measured yet.
        if not together.advertised:
            better = _rechoose(reqs, asked, choices, _rank(choices, together),
                               pool=pool, supply=supply, policy=policy, host=host,
                               reads=reads)
            if better is not None:
                before = _listed(reqs, choices)
                choices, _kind, strategy = better
                was = ("no one node could hold them all" if not together.possible
                       else "no one node advertises them all")
                model = choices[0].model.id
                why = (f"; so that the pod's instances are on one {model} node "
                       f"({strategy} strategy)")
                choices = [_widened(c, r, pool=pool, supply=supply, policy=policy,
                                    reason=c.reason + why)
                           for c, r in zip(choices, reqs, strict=True)]
                # Where the pod may go now: every model its record allows, not only the
                # one the set was made on (an H100 may have them free).
                together = _together(choices, strategy, supply, reads)
                now = ("one node has them all free" if together.free
                       else "one node advertises them all" if together.advertised
                       else "a re-layout could put them on one node")
                warnings.append(f"the smallest fitting profiles ({before}): {was}; chose "
                                f"{_listed(reqs, choices)} on {model} nodes under the "
                                f"{strategy} strategy: {now}")
        _warn_one_node(reqs, choices, together, supply, warnings, strategy=strategy,
                       pinned=node_name is not None)
        # Told it can never be scheduled as it is (too few GPUs on any node, or profiles
        # no one node could hold): its containers' warnings promise no re-layout or freed
        # instance that would place it.
        never = not together.possible
    else:
        never = False
    plans: list[Plan] = []
    # Each warning text once, with the containers it is about (a pod of 64 containers
    # asking alike would otherwise get 64 lines, and kube-apiserver may drop some).
    about: dict[str, list[str]] = {}
    for r, (key, value), choice in zip(reqs, asked, choices, strict=True):
        plans.append(Plan(
            container=by_name[r.container],
            request_mib=r.memory_mib,
            profile=choice.profile.name,
            models=choice.fit_models if choice.restricted else (),
            fit_models=choice.fit_models,
            reason=choice.reason,
        ))
        res = (resource(choice.profile.name, strategy,
                        renamed=renamed(plans[-1], supply, strategy))
               if node_name is not None else "")  # named only for a pinned pod's kubelet
        for text in _warn(choice, r, key=key, asked=value, pool=pool, supply=supply,
                          policy=policy, strategy=strategy, resource_name=res,
                          pinned=node_name is not None, never=never):
            about.setdefault(text, []).append(r.container)
    for text, containers in about.items():
        warnings.append(_about(text, containers) if many
                        else _about_one(text, containers[0]))
    return plans, strategy, not reads.by_node


#: Stands for the container's name in the annotation keys a warning names (``_warn``), so
#: that the warnings of containers asking alike read the same (no valid name has ``<``).
_CONTAINER: Final = "<container>"


def _about(text: str, containers: Sequence[str]) -> str:
    """``c1, c2 and c3: text``, its annotation keys those of the one container, or
    ``…<container>`` for several; as many names as leave ``text`` whole (``_some``)."""
    body = _about_one(text, containers[0] if len(containers) == 1 else None)
    names = [requests.shorten(c, requests.NAME_LIMIT) for c in containers]
    return f"{_some(names, room=WARNING_CHARS - len(body.encode()) - 2)}: {body}"


def _about_one(text: str, container: str | None) -> str:
    """``text`` with the annotation keys of ``container`` (as they are for None)."""
    if container is None:
        return text
    for prefix in (requests.GPU_MEMORY_PREFIX, requests.GPU_COMPUTE_PREFIX):
        text = text.replace(prefix + _CONTAINER, requests.shorten(prefix + container, 100))
    return text


def _some(names: Sequence[str], *, room: int | None = None) -> str:
    """``a, b, c``: at most ``_SHOWN`` names, and no more than fit in ``room`` bytes of
    UTF-8 (one at least), then ``and N more``."""
    shown = min(len(names), _SHOWN)
    while True:
        out = ", ".join(names[:shown]) + (
            f" and {len(names) - shown} more" if len(names) > shown else "")
        if shown <= 1 or room is None or len(out.encode()) <= room:
            return out
        shown -= 1


@dataclasses.dataclass(slots=True)
class _Reads:
    """What a plan read of the supply: ``by_node`` when it went node by node
    (``Supply.holds``), which the supply's snapshot does not sum, so no memo may keep it."""

    by_node: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class _Together:
    """Whether one node could hold all of a pod's choices: its GPU model has every profile
    (where each request fits), and, under the single strategy, they are one profile
    (``possible``); one node advertises them all (``advertised``); one has them all free,
    not set aside for waiting pods (``free``)."""

    possible: bool
    advertised: bool
    free: bool
    #: Not possible because no node has enough GPUs: (at least this many needed, the most
    #: on one node of the models), else None.
    gpus: tuple[int, int] | None = None


def _choose_all(
    reqs: Sequence[requests.GpuRequest], asked: Sequence[tuple[str, str]], *,
    pool: Sequence[profiles.GpuModel], supply: view.Supply, policy: Policy, host: Host,
) -> list[Choice]:
    """``choose`` for each request, once per distinct request (containers of one pod often
    ask alike, and a pod may have 64 of them)."""
    made: dict[tuple[int, int | None, bool], Choice] = {}
    out: list[Choice] = []
    for r, (key, value) in zip(reqs, asked, strict=True):
        alike = (r.memory_bytes, r.compute, r.media)
        c = made.get(alike)
        if c is None:
            c = made[alike] = choose(r, key=key, value=value, pool=pool, supply=supply,
                                     policy=policy, host=host)
        out.append(c)
    return out


def _choose_one(
    reqs: Sequence[requests.GpuRequest], asked: Sequence[tuple[str, str]], *,
    pool: Sequence[profiles.GpuModel], supply: view.Supply, policy: Policy, host: Host,
) -> list[Choice]:
    """One profile for every request (a single-strategy node has one): the one ``choose``
    gives a request of the most memory and compute slices any of them asks for, with media
    engines if any asks for them."""
    most = dataclasses.replace(
        reqs[0], memory_bytes=max(r.memory_bytes for r in reqs),
        compute=max((r.compute for r in reqs if r.compute is not None), default=None),
        media=any(r.media for r in reqs))
    largest = max(range(len(reqs)), key=lambda i: reqs[i].memory_bytes)
    key, value = asked[largest]
    one = choose(most, key=key, value=value, pool=pool, supply=supply, policy=policy,
                 host=host)
    return [one] * len(reqs)


def _together(choices: Sequence[Choice], strategy: requests.Strategy, supply: view.Supply,
              reads: _Reads) -> _Together:
    """``_Together`` of ``choices`` asked for under ``strategy``: not possible where no node
    of their models has GPUs enough (``_too_few_gpus``). For one profile, read from the
    most one node of a model advertises and has free (``Offer.most``, ``most_free``); for
    several, or where an offer sums nodes of both strategies, node by node
    (``Supply.holds``; without it, from the most of each, which may be on different
    nodes)."""
    need = Counter(c.profile.name for c in choices)
    models = set(choices[0].fit_models).intersection(*(c.fit_models for c in choices[1:]))
    if not models or (strategy == "single" and len(need) > 1):
        return _Together(possible=False, advertised=False, free=False)
    kind = "single" if strategy == "single" else "mixed"
    short = _too_few_gpus(need, models, kind, supply)
    if short is not None:
        return _Together(possible=False, advertised=False, free=False, gpus=short)
    offered = [supply.offers.get((mid, p)) for mid in models for p in need]
    both = any(o is not None and len(o.strategies) > 1 for o in offered)
    if (len(need) > 1 or both) and supply.holds is not None:
        # Several profiles, or an offer whose counts sum nodes of both strategies: node by
        # node, under ``kind`` alone.
        reads.by_node = True
        advertised, free = supply.holds(need, frozenset(models), kind)
        return _Together(possible=True, advertised=advertised, free=free)
    advertised = False
    for mid in sorted(models):
        offers = [(supply.offers.get((mid, p)), n) for p, n in need.items()]
        if all(o is not None and kind in o.strategies and o.most >= n for o, n in offers):
            advertised = True
            if all(o is not None and min(o.most_free, o.free) >= n for o, n in offers):
                return _Together(possible=True, advertised=True, free=True)
    return _Together(possible=True, advertised=advertised, free=False)


def _too_few_gpus(need: Mapping[profiles.ProfileName, int], models: Iterable[profiles.ModelId],
                  kind: str, supply: view.Supply) -> tuple[int, int] | None:
    """(GPUs needed at least, the most on one node) when every model of ``models`` whose
    nodes' GPUs are known (``Supply.gpus``) has too few on each node for ``need`` and no
    model's are unknown; else None."""
    by_id = {m.id: m for m in supply.models}
    worst: tuple[int, int] | None = None
    for mid in models:
        most = supply.gpus.get((mid, kind))
        model = by_id.get(mid)
        if most is None or model is None:
            return None
        least = layouts.gpus_at_least(model, need)
        if least <= most:
            return None
        if worst is None or (least - most, least) < (worst[0] - worst[1], worst[0]):
            worst = (least, most)
    return worst


def _rank(choices: Sequence[Choice], together: _Together) -> tuple[int, ...]:
    """Lower is better: one node could hold them all, one advertises them all, each is
    advertised, one node has them all free, each has a free instance (when one node
    advertises them all: a set that waits for a re-layout gains nothing from them), the
    least usable memory in all, then the fewest compute slices (DESIGN §4's smallest)."""
    busy = sum(c.free <= 0 for c in choices) if together.advertised else 0  # moot else
    return (not together.possible, not together.advertised,
            sum(not c.advertised for c in choices), not together.free, busy,
            sum(c.usable for c in choices), sum(c.profile.compute_slices for c in choices))


def _rechoose(
    reqs: Sequence[requests.GpuRequest], asked: Sequence[tuple[str, str]],
    choices: Sequence[Choice], rank: tuple[int, ...], *,
    pool: Sequence[profiles.GpuModel], supply: view.Supply, policy: Policy, host: Host,
    reads: _Reads,
) -> tuple[list[Choice], view.Supply, requests.Strategy] | None:
    """The containers' choices made again among one kind of node at a time (a GPU model
    under one strategy); under contention, profiles no one node has enough of free are
    passed over as busy ones are. The best set by ``_rank`` (then model and strategy, for a
    deterministic answer), when better than ``rank``, the first set's; else None."""
    kinds = sorted({(mid, kind) for (mid, _p), o in supply.offers.items()
                    for kind in o.strategies})
    by_id = {m.id: m for m in pool}
    best: tuple[tuple[Any, ...], list[Choice], view.Supply, requests.Strategy] | None = None
    for mid, kind in kinds:
        model = by_id.get(mid)
        if model is None or policy.strategy not in ("auto", kind):
            continue
        strategy: requests.Strategy = "single" if kind == "single" else "mixed"
        sub = dataclasses.replace(
            supply, models=(model,),
            offers={k: o for k, o in supply.offers.items() if k[0] == mid and kind in o.strategies},
            products={mid: supply.products.get(mid, ())}, strategy={mid: strategy})
        passed = sub
        masked: set[str] = set()

        def consider(variant: list[Choice] | None, mid: profiles.ModelId = mid,
                     kind: str = kind, sub: view.Supply = sub,
                     strategy: requests.Strategy = strategy) -> _Together:
            """Keep ``variant`` when it ranks best so far; its ``_Together``."""
            nonlocal best
            if variant is None:
                return _Together(possible=False, advertised=False, free=False)
            together = _together(variant, strategy, sub, reads)
            mine = (*_rank(variant, together), mid, kind)
            if together.possible and (best is None or mine < best[0]):
                best = (mine, variant, sub, strategy)
            return together

        for _ in range(len(sub.offers) + 1):
            try:
                got = (_choose_all(reqs, asked, pool=(model,), supply=passed, policy=policy,
                                   host=host) if kind != "single"
                       else _choose_one(reqs, asked, pool=(model,), supply=passed,
                                        policy=policy, host=host))
            except Denied:
                break
            over = (f"smallest with as many free on one node as the pod takes "
                    f"({', '.join(sorted(masked))}: fewer on every node)")
            # the counts as they are, not as passed (once per distinct choice)
            counted: dict[int, Choice] = {}
            got = [counted.get(id(c)) or counted.setdefault(
                       id(c), _counted(c, sub, reason=over if masked else c.reason))
                   for c in got]
            together = consider(got)
            if together.gpus is not None and not masked:
                # More GPUs than one node has: the smallest fitting profiles of the model,
                # advertised or not (sixteen 30Gi: 3g.40gb two to a GPU, not 7g.80gb).
                consider(_relaid(reqs, asked, sub=sub, model=model, kind=kind, policy=policy,
                                 host=host))
            if together.free or policy.contention == "smallest":
                break
            short = _short(got, sub) - masked
            without = _without(passed, short)
            if kind != "single":
                consider(_keep_some(reqs, asked, got, short, sub=sub, without=without,
                                    model=model, policy=policy, host=host))
                if not short:
                    # No profile is short of free instances, yet no one node has them all:
                    # the containers of one profile at a time take the next free one (an
                    # 8Gi beside a 30Gi: 2g.20gb where a node has it with a 3g.40gb free).
                    for p in sorted({c.profile.name for c in got}):
                        consider(_moved(reqs, asked, got, p, sub=sub, passed=passed,
                                        model=model, policy=policy, host=host))
            if not short:
                break
            masked |= short
            passed = without
    if best is None or best[0][:len(rank)] >= rank:
        return None
    return best[1], best[2], best[3]


def _keep_some(
    reqs: Sequence[requests.GpuRequest], asked: Sequence[tuple[str, str]],
    got: Sequence[Choice], short: set[str], *, sub: view.Supply, without: view.Supply,
    model: profiles.GpuModel, policy: Policy, host: Host,
) -> list[Choice] | None:
    """``got`` where, of each profile in ``short`` (one node has fewer free than the pod
    takes), as many containers keep it as one node of ``sub`` has free, those asking least
    (the others lose less memory to a larger profile), and the rest are chosen again without
    the short profiles (``without``); None when no container could keep one."""
    keep: set[int] = set()
    for p in short:
        offer = sub.offers.get((model.id, profiles.ProfileName(p)))
        room = min(offer.most_free, offer.free) if offer is not None else 0
        having = sorted((i for i, c in enumerate(got) if c.profile.name == p),
                        key=lambda i: (reqs[i].memory_bytes, i))
        keep.update(having[:room])
    again = [i for i, c in enumerate(got) if c.profile.name in short and i not in keep]
    if not keep or not again:
        return None
    names = ", ".join(sorted(short))
    return _chosen_again(
        reqs, asked, got, again, without=without, sub=sub, model=model, policy=policy,
        host=host,
        reason=f"smallest of those one node has free beside the pod's others ({names}: taken)")


def _relaid(
    reqs: Sequence[requests.GpuRequest], asked: Sequence[tuple[str, str]], *,
    sub: view.Supply, model: profiles.GpuModel, kind: str, policy: Policy, host: Host,
) -> list[Choice] | None:
    """The smallest fitting profiles of ``model`` for ``reqs``, whether its nodes advertise
    them or not (a re-layout could create them), counted against ``sub``."""
    bare = dataclasses.replace(sub, offers={})
    try:
        made = (_choose_all(reqs, asked, pool=(model,), supply=bare, policy=policy, host=host)
                if kind != "single"
                else _choose_one(reqs, asked, pool=(model,), supply=bare, policy=policy,
                                 host=host))
    except Denied:
        return None
    why = "smallest fitting after a re-layout (the advertised ones need more GPUs than a node has)"
    counted: dict[int, Choice] = {}
    return [counted.get(id(c)) or counted.setdefault(id(c), dataclasses.replace(
                _counted(c, sub, reason=why),
                advertised=any((m, c.profile.name) in sub.offers for m in c.fit_models)))
            for c in made]


def _moved(
    reqs: Sequence[requests.GpuRequest], asked: Sequence[tuple[str, str]],
    got: Sequence[Choice], name: str, *, sub: view.Supply, passed: view.Supply,
    model: profiles.GpuModel, policy: Policy, host: Host,
) -> list[Choice] | None:
    """``got`` with the containers given ``name`` chosen again as if it had no free
    instance; None when that changes nothing."""
    again = [i for i, c in enumerate(got) if c.profile.name == name]
    if len(again) == len(got):
        return None
    out = _chosen_again(
        reqs, asked, got, again, without=_without(passed, {name}), sub=sub, model=model,
        policy=policy, host=host,
        reason=f"smallest free on a node that has the pod's other instances free ({name}: "
               f"not there)")
    return None if out is None or all(out[i].profile.name == name for i in again) else out


def _chosen_again(
    reqs: Sequence[requests.GpuRequest], asked: Sequence[tuple[str, str]],
    got: Sequence[Choice], again: Sequence[int], *, without: view.Supply, sub: view.Supply,
    model: profiles.GpuModel, policy: Policy, host: Host, reason: str,
) -> list[Choice] | None:
    """``got`` with the containers at ``again`` chosen anew from ``without`` and counted
    against ``sub`` with ``reason``; None when one of them fits nothing."""
    try:
        made = _choose_all([reqs[i] for i in again], [asked[i] for i in again],
                           pool=(model,), supply=without, policy=policy, host=host)
    except Denied:
        return None
    out = list(got)
    for i, c in zip(again, made, strict=True):
        out[i] = _counted(c, sub, reason=reason)
    return out


def _without(supply: view.Supply, names: set[str]) -> view.Supply:
    """``supply`` as if the offers of the profiles ``names`` had no free instance."""
    return dataclasses.replace(supply, offers={
        k: (dataclasses.replace(o, free=0) if k[1] in names else o)
        for k, o in supply.offers.items()})


def _counted(c: Choice, supply: view.Supply, *, reason: str) -> Choice:
    """``c`` with its free count read from ``supply``, and ``reason``."""
    return dataclasses.replace(c, free=_free(c.fit_models, c.profile.name, supply),
                               reason=reason)


def _short(choices: Sequence[Choice], supply: view.Supply) -> set[str]:
    """The profiles of ``choices`` that no one node has free as many of as they take."""
    need = Counter(c.profile.name for c in choices)
    return {p for p, n in need.items()
            if not any(min(o.most_free, o.free) >= n for (_m, q), o in supply.offers.items()
                       if q == p)}


def _warn_one_node(reqs: Sequence[requests.GpuRequest], choices: Sequence[Choice],
                   together: _Together, supply: view.Supply, warnings: list[str], *,
                   strategy: requests.Strategy, pinned: bool) -> None:
    """Warn when no one node could hold, advertises, or has free now, all the instances the
    pod's containers were given. Not "advertises" when a container's profile is advertised
    nowhere (its own warning says so), nor "free" when one has no free instance at all.
    ``pinned``: the pod has spec.nodeName (the kubelet refuses it at once, no waiting; but
    only for want of instances unallocated there, not of those waiting pods ask for)."""
    need = Counter(c.profile.name for c in choices)
    what = ", ".join(f"{n} × {p}" if n > 1 else p for p, n in need.items())
    if together.gpus is not None:
        least, most = together.gpus
        worth = "GPU's" if most == 1 else "GPUs'"
        warnings.append(f"no node has GPUs enough for all of the pod's instances ({what}: "
                        f"at least {least} GPUs; the most on one node is {most}): the pod "
                        f"can never be scheduled; split it into pods of at most {most} "
                        f"{worth} worth of instances")
        return
    if not together.possible:
        warnings.append(f"no one node could hold all of the pod's profiles "
                        f"({_listed(reqs, choices)}): they are on different GPU models or "
                        f"device-plugin strategies; give the containers requests one GPU "
                        f"model holds, or split the pod")
        return
    if together.free or not all(c.advertised for c in choices):
        return
    one = pinned and bool(supply.scope)  # decided for the pod's spec.nodeName alone
    nodes = supply.scope if one else f"none of {supply.scope}" if supply.scope else "no node"
    kubelet = f"; {_FAILS} (never retried): "
    if not together.advertised:
        verb = "does not advertise" if one else "advertises"
        profile = choices[0].profile.name  # under single, they are one profile
        then = (kubelet + _pinned_fix("that has them all free", split=True) if pinned
                else f"; the pod stays Pending until {_relayout(strategy, profile)}, or split "
                     f"the pod")
        warnings.append(f"{nodes} {verb} all of the pod's instances ({what}) together{then}")
    elif all(c.free > 0 for c in choices):
        if pinned and _free_but_claimed(need, supply):
            # The kubelet counts only the pods bound to the node, not those waiting to be:
            # it fails the pod only if one of them is bound there first.
            where = supply.scope if one else "a node"
            warnings.append(f"{where} has the pod's instances ({what}) free, but waiting "
                            f"pods ask for some; {_FAILS} if they are not free when it "
                            f"arrives: {_pinned_fix('with them all free')}")
            return
        verb = "does not have" if one else "has"
        then = (kubelet + _pinned_fix("that has them all free") if pinned
                else f"; the pod waits until {'it does' if one else 'one node does'}")
        warnings.append(f"{nodes} {verb} all of the pod's instances ({what}) free now{then}")


def _free_but_claimed(need: Mapping[profiles.ProfileName, int], supply: view.Supply) -> bool:
    """Whether, profile by profile, a node has ``need`` (instances per profile) free,
    counting the instances that waiting pods ask for (``Offer.claimed``) as free, as the
    kubelet does: for a pod's spec.nodeName alone, whether that node has them unallocated."""
    return all(any(min(o.most_free, o.free + o.claimed) >= n
                   for (_m, q), o in supply.offers.items() if q == p)
               for p, n in need.items())


def _asked(r: requests.GpuRequest, annotations: Mapping[str, str]) -> tuple[str, str]:
    """The annotation ``r`` came from: its key and value."""
    key = (requests.GPU_MEMORY_PREFIX + r.container
           if requests.GPU_MEMORY_PREFIX + r.container in annotations
           else requests.GPU_MEMORY)
    return key, annotations[key]


def _listed(reqs: Sequence[requests.GpuRequest], choices: Sequence[Choice]) -> str:
    """``a: 1g.5gb, b: 3g.40gb`` (at most ``_SHOWN`` containers)."""
    return _some([f"{requests.shorten(r.container, requests.NAME_LIMIT)}: {c.profile.name}"
                  for r, c in zip(reqs, choices, strict=True)])


def _widened(c: Choice, r: requests.GpuRequest, *, pool: Sequence[profiles.GpuModel],
             supply: view.Supply, policy: Policy, reason: str) -> Choice:
    """``c``, made among one kind of node, with the models of the whole pool where its
    profile holds ``r`` (what the product affinity restricts the pod to) and ``reason``."""
    fit = _fit_models(r, c.profile.name, pool=pool, supply=supply, policy=policy)
    having = [m for m in pool if m.has_profile(c.profile.name)]
    return dataclasses.replace(c, fit_models=fit, restricted=len(fit) < len(having),
                               reason=reason)


#: Where a pod with spec.nodeName lacks its instances: it skips the scheduler, and the
#: kubelet does not wait for them but fails the pod at once (kubernetes/kubernetes#44438).
_FAILS: Final = "the kubelet fails the pod at once"


def _pinned_fix(what: str, *, split: bool = False) -> str:
    """What to change in a pod with spec.nodeName whose node lacks ``what`` (``split``:
    splitting the pod would do too)."""
    if split:
        return f"remove spec.nodeName, name a node {what}, or split the pod"
    return f"remove spec.nodeName or name a node {what}"


def _relayout(strategy: requests.Strategy, name: str) -> str:
    """What the pod waits for when no node advertises ``name``: ``migfit advise`` plans
    re-layouts of mixed-strategy nodes only; a single-strategy node lays out all its GPUs
    as one profile, as its ``nvidia.com/mig.config`` label says."""
    if strategy == "single":
        return (f"a single-strategy node's GPUs are re-partitioned as {name} (its "
                f"nvidia.com/mig.config label)")
    return "a GPU is re-partitioned (see migfit advise)"


def _warn(
    choice: Choice,
    req: requests.GpuRequest,
    *,
    key: str,
    asked: str,
    pool: Sequence[profiles.GpuModel],
    supply: view.Supply,
    policy: Policy,
    strategy: requests.Strategy,
    resource_name: str,
    pinned: bool,
    never: bool = False,
) -> list[str]:
    """The warnings about one container's choice, its per-container annotation keys named
    with ``_CONTAINER`` for its name. ``pinned``: the pod has spec.nodeName; ``strategy``
    and ``resource_name``: what the pod asks for; ``never``: the pod was told it can never
    be scheduled as it is, so no re-layout or freed instance is said to place it."""
    out: list[str] = []
    name = choice.profile.name
    on = f" on {supply.scope}" if supply.scope else ""
    shown = (key if key == requests.GPU_MEMORY
             else requests.GPU_MEMORY_PREFIX + _CONTAINER)  # named by the caller
    if supply.available and not choice.advertised:
        nobody = f"{name} is not advertised{on}" if on else f"no node advertises {name}"
        if pinned:
            out.append(f"{nobody} now; {_FAILS} (never retried), or starts it without one if "
                       f"the node has no {resource_name}: "
                       f"{_pinned_fix(f'with a free {name}')}")
        elif never:
            out.append(f"{nobody} now")
        else:
            out.append(f"{nobody} now; the pod stays Pending until "
                       f"{_relayout(strategy, name)}")
    elif supply.available and choice.free <= 0:
        busy = (f"every {name} instance{on} is in use now or asked for by pods already "
                f"waiting")
        alternative = _free_alternative(choice, req, key=key, shown=shown, pool=pool,
                                        supply=supply, policy=policy)
        if pinned:  # a line of its own: with the alternative, one would be cut at 256
            out.append(busy + alternative)
            out.append(f"a pod with spec.nodeName skips the scheduler and does not wait: "
                       f"{_FAILS} if no {name} is free there (OutOf{resource_name}, never "
                       f"retried); {_pinned_fix(f'with a free {name}')}")
        elif never:
            out.append(busy + alternative)
        else:
            out.append(f"{busy}; the pod waits for one to be freed{alternative}")
    unused = 1 - req.memory_mib / choice.usable
    if unused > policy.waste_warning:
        out.append(f"{requests.shorten(asked)} was rounded up to {name} "
                   f"({quantity.format_mib(choice.usable)}): {int(unused * 100)}% of its "
                   f"memory unused")
    return out


def _free_alternative(
    choice: Choice,
    req: requests.GpuRequest,
    *,
    key: str,
    shown: str,
    pool: Sequence[profiles.GpuModel],
    supply: view.Supply,
    policy: Policy,
) -> str:
    """``; 1g.18gb (16Gi) also fits and has 5 free: ask for it with migfit.io/gpu-memory:
    10Gi``,
    or "" when no free advertised profile holds the request (or no hint would get it).
    ``key`` is the annotation the request came from, ``shown`` that key as the hint names it.

    The hint is checked: asked that way, ``choose`` really picks the free profile (a compute
    hint when the free one has more slices, else the least larger request that gets it).
    """
    free = [c for c in _advertised(req, pool=pool, supply=supply, policy=policy)
            if c[1].name != choice.profile.name
            and _free(_fit_models(req, c[1].name, pool=pool, supply=supply, policy=policy),
                      c[1].name, supply) > 0]
    if not free:
        return ""
    _, alt, alt_usable = min(free, key=_order)
    count = _free(_fit_models(req, alt.name, pool=pool, supply=supply, policy=policy),
                  alt.name, supply)
    container = (shown[len(requests.GPU_MEMORY_PREFIX):] if shown != requests.GPU_MEMORY
                 else None)
    hints: list[tuple[str, requests.GpuRequest]] = []
    if alt.compute_slices > choice.profile.compute_slices:
        ckey = (requests.GPU_COMPUTE if container is None
                else requests.GPU_COMPUTE_PREFIX + container)
        hints.append((f'{requests.shorten(ckey, 100)}: "{alt.compute_slices}"',
                      dataclasses.replace(req, compute=alt.compute_slices)))
    gib = -(-(choice.usable + 1) // 1024) * 1024  # the next whole GiB above the chosen one
    for mib in dict.fromkeys((gib, alt_usable)):
        if req.memory_mib < mib <= alt_usable:
            hints.append((f"{requests.shorten(shown, 100)}: {quantity.format_mib(mib)}",
                          dataclasses.replace(req, memory_bytes=mib * 2**20)))
    for text, hinted in hints:
        got = choose(hinted, key=key, value="", pool=pool, supply=supply, policy=policy)
        if got.profile.name == alt.name:
            return (f"; {alt.name} ({quantity.format_mib(alt_usable)}) also fits and has "
                    f"{count} free: ask for it with {text}")
    return ""


def _strategy(
    choices: Sequence[Choice], *, supply: view.Supply, policy: Policy, reads: _Reads
) -> requests.Strategy:
    """The device-plugin strategy to ask for the choices under: that of the nodes
    advertising them (of the models' own when none does: a re-layout could create them).
    One node serves the whole pod and a node has one strategy: single only when nothing
    that could serve a container is under mixed. When the choices are advertised under
    both, the one under which a node has them all free, node by node (else advertises
    them all; else mixed)."""
    if policy.strategy != "auto":
        return policy.strategy
    seen: set[str] = set()
    for c in choices:
        for mid in c.fit_models:
            offer = supply.offers.get((mid, c.profile.name))
            if offer is not None:
                seen |= offer.strategies
    if not seen:
        seen = {supply.strategy[mid] for c in choices for mid in c.fit_models
                if mid in supply.strategy}
    if seen != {"single", "mixed"} or supply.holds is None:
        return "single" if seen == {"single"} else "mixed"
    need = Counter(c.profile.name for c in choices)
    models = frozenset(choices[0].fit_models).intersection(*(c.fit_models for c in choices[1:]))
    reads.by_node = True
    mixed = supply.holds(need, models, "mixed")  # (advertised, free), node by node
    if mixed[1] or len(need) > 1:  # a single-strategy node has one profile
        return "mixed"
    single = supply.holds(need, models, "single")
    return "single" if single[1] or (single[0] and not mixed[0]) else "mixed"


def resource(profile: str, strategy: requests.Strategy, *, renamed: bool = False) -> str:
    """The extended resource that asks for ``profile`` under ``strategy`` (``renamed``: under
    the device plugin's renamed shared name, ``….shared``)."""
    if strategy == "single":
        return profiles.GPU_RESOURCE + (profiles.SHARED_SUFFIX if renamed else "")
    return profiles.resource_name(profile, shared=renamed)


def renamed(plan: Plan, supply: view.Supply, strategy: requests.Strategy) -> bool:
    """Whether every node that advertises ``plan``'s profile under ``strategy`` on the
    models it may use advertises it by the renamed shared name (time-slicing or MPS with
    the device plugin's ``renameByDefault``): the pod must then ask for ``….shared``. Where
    some such nodes rename it and some do not, the plain name (those nodes)."""
    kind = "single" if strategy == "single" else "mixed"
    models = plan.models or tuple(m.id for m in supply.models)
    offers = [o for m in models if (o := supply.offers.get((m, profiles.ProfileName(
        plan.profile)))) is not None and kind in o.strategies]
    return bool(offers) and all(kind in o.renamed for o in offers)


def reuse(
    prior: requests.DecisionRecord | None,
    reqs: Sequence[requests.GpuRequest],
    by_name: Mapping[str, Container],
) -> tuple[list[Plan], requests.Strategy] | None:
    """The recorded decision, when it was made for exactly this request (reinvocation,
    ``reinvocationPolicy: IfNeeded``): deciding again could pick differently if the cluster
    changed in between, and a webhook called again must not change what it did."""
    if prior is None:
        return None
    wanted = [(r.container, r.memory_mib) for r in reqs]
    recorded = [(c["container"], c["request_mib"]) for c in prior["containers"]]
    if wanted != recorded:
        return None
    plans = []
    for c in prior["containers"]:
        if c["resource"] not in (resource(c["profile"], prior["strategy"]),
                                 resource(c["profile"], prior["strategy"], renamed=True)):
            return None
        models = tuple(profiles.ModelId(m) for m in c["models"])
        plans.append(Plan(container=by_name[c["container"]], request_mib=c["request_mib"],
                          profile=c["profile"], models=models, fit_models=models,
                          reason=c.get("reason", "")))
    return plans, prior["strategy"]


def fitting_in(plans: Sequence[Plan], reqs: Sequence[requests.GpuRequest], *,
               supply: view.Supply, policy: Policy) -> list[Plan]:
    """``plans`` (one per request, in order) with the models each request fits among those
    of ``supply`` (and those it was chosen to fit: the nodes it may go to may label the
    profile's memory higher than the least of the whole cluster), and restricted to them
    when fewer than the models with its profile."""
    out = []
    for pl, r in zip(plans, reqs, strict=True):
        wider = set(pl.fit_models).union(_fit_models(
            r, profiles.ProfileName(pl.profile), pool=supply.models, supply=supply,
            policy=policy))
        fit = tuple(m.id for m in supply.models if m.id in wider) + tuple(
            sorted(wider - {m.id for m in supply.models}))
        having = [m for m in supply.models if m.has_profile(pl.profile)]
        out.append(dataclasses.replace(pl, fit_models=fit,
                                       models=fit if len(fit) < len(having) else ()))
    return out


def single_products(bases: Iterable[str], profile: str, *, shared: bool) -> list[str]:
    """The ``nvidia.com/gpu.product`` values GPU Feature Discovery writes under the single
    strategy for ``profile`` on GPUs named ``bases``: the MIG device's name
    (``keys.device_name``: ``…-MIG-1g.10gb.me``), and ``-SHARED`` follows when the device
    is time-sliced or shared with MPS (k8s-device-plugin internal/lm/resource.go).
    ``shared``: some node of the model is labelled so; the sharing config outlives a
    re-layout, so both spellings are allowed then."""
    label = keys.device_name(profile)
    tails = ("", "-SHARED") if shared else ("",)
    return [f"{base}-MIG-{label}{tail}" for base in bases for tail in tails]


def _shared_products(supply: view.Supply, mid: profiles.ModelId) -> bool:
    """Whether some node of model ``mid`` has a ``…-SHARED`` product label."""
    return any(v.upper().endswith("-SHARED") for (m, _p), o in supply.offers.items()
               if m == mid for v in o.mig_products)


def affinity_values(
    plans: Sequence[Plan],
    *,
    strategy: requests.Strategy,
    supply: view.Supply,
    warnings: list[str],
) -> list[str] | None:
    """The nvidia.com/gpu.product values the pod must be restricted to, or None for none."""
    sets: list[tuple[str, set[str]]] = []
    for pl in plans:
        if strategy == "single":
            values: set[str] = set()
            for mid in pl.fit_models or tuple(m.id for m in supply.models):
                offer = supply.offers.get((mid, profiles.ProfileName(pl.profile)))
                if offer is not None:
                    values.update(offer.mig_products)
                # supply.products holds base names already (view strips -MIG-<profile>).
                values.update(single_products(supply.products.get(mid, ()), pl.profile,
                                              shared=_shared_products(supply, mid)))
            sets.append((pl.container.name, values))
        elif pl.models:
            values = {v for mid in pl.models for v in supply.products.get(mid, ())}
            sets.append((pl.container.name, values))
    if not sets:
        return None
    if not supply.available or any(not v for _, v in sets):
        warnings.append("no GPU product labels are known yet; no nvidia.com/gpu.product node "
                        "affinity was added")
        return None
    common = set.intersection(*(v for _, v in sets))
    if not common:
        # At most _SHOWN containers: a pod may have up to reading.MAX_INSTANCES of them.
        detail = "; ".join(f"{requests.shorten(c, requests.NAME_LIMIT)}: {', '.join(sorted(v))}"
                           for c, v in sets[:_SHOWN])
        if len(sets) > _SHOWN:
            detail += f"; and {len(sets) - _SHOWN} more"
        raise Denied(f"the containers need GPUs no single node has ({detail}); give them "
                     f"requests that fit the same profile and GPU model, or split the pod")
    return sorted(common)
