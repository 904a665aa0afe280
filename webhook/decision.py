"""The webhook's decision: from a pod's gpu-memory request to the smallest fitting MIG profile.

DESIGN.md §4 is the contract. Candidates are what schedulable nodes advertise now; when none
fits, any profile of the GPU models present (a re-layout could create it); without a cluster
view, the catalog of the configured models. A profile fits when its usable memory covers the
request (a profile name is nominal: ``1g.10gb`` is 9728 MiB on an A100-80GB) and the compute
and media constraints hold. The result is an RFC 6902 JSON Patch, warnings, or a denial that
says what to change. Pure: no I/O, no HTTP; the server only parses, calls and serialises.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, NotRequired, TypedDict

from migfit import decoding, errors, keys, profiles, quantity, requests
from migfit.webhook import view

MemoryMatch = Literal["label", "catalog", "nominal"]
MEMORY_MATCHES: Final[tuple[MemoryMatch, ...]] = ("label", "catalog", "nominal")
StrategyChoice = Literal["auto", "mixed", "single"]
STRATEGY_CHOICES: Final[tuple[StrategyChoice, ...]] = ("auto", "mixed", "single")
Outcome = Literal["patched", "unchanged", "skipped", "ignored", "denied", "invalid"]

LABEL_PRODUCT: Final = keys.LABEL_PRODUCT
_NOMINAL: Final = re.compile(r"\.(\d+)gb")
_ANY_GPU: Final = "use a whole GPU (nvidia.com/gpu) instead"


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
    #: Hand annotated pods to this scheduler (the second-scheduler overlay's
    #: ``migfit-scheduler``); pods that name a scheduler other than the default keep theirs.
    scheduler_name: str | None = None


class PatchOp(TypedDict):
    """One RFC 6902 operation."""

    op: Literal["add", "remove"]
    path: str
    value: NotRequired[Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """The answer to one admission request, before it becomes an AdmissionResponse."""

    outcome: Outcome
    allowed: bool
    patch: tuple[PatchOp, ...] = ()
    warnings: tuple[str, ...] = ()
    message: str = ""  # why it was denied, and what to change
    code: int = 200  # the status code of a denial (AdmissionResponse.status.code)
    profiles: tuple[str, ...] = ()
    record: requests.DecisionRecord | None = None


class Denied(errors.UsageError):
    """A request migfit cannot honour; ``status`` is the AdmissionResponse status code."""

    status = 403


class Malformed(errors.UsageError):
    """An AdmissionRequest or Pod that is not shaped as Kubernetes sends them."""

    status = 400


def escape(token: str) -> str:
    """An RFC 6901 reference token: ``~`` as ``~0`` first, then ``/`` as ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


# ---------------------------------------------------------------- entry points


def decide_review(
    request: Mapping[str, Any], *, supply: view.Supply, policy: Policy
) -> Verdict:
    """Decide one AdmissionRequest (the ``request`` of an AdmissionReview).

    Only CREATE of a Pod is acted on; every other operation, kind or subresource is allowed
    untouched. dryRun needs nothing special: the decision has no side effects.
    """
    if request.get("operation") != "CREATE":
        return Verdict(outcome="ignored", allowed=True)
    kind = request.get("kind")
    if isinstance(kind, Mapping) and kind.get("kind") not in (None, "Pod"):
        return Verdict(outcome="ignored", allowed=True)
    if request.get("subResource"):
        return Verdict(outcome="ignored", allowed=True)
    pod = request.get("object")
    if not isinstance(pod, Mapping):
        return _verdict_for(Malformed("the AdmissionRequest has no Pod object"))
    return decide_pod(pod, supply=supply, policy=policy)


def decide_pod(pod: Mapping[str, Any], *, supply: view.Supply, policy: Policy) -> Verdict:
    """Decide for one Pod object being created."""
    try:
        return _decide(pod, supply=supply, policy=policy)
    except errors.UsageError as exc:
        return _verdict_for(exc)


def _verdict_for(exc: errors.UsageError) -> Verdict:
    code = exc.status if isinstance(exc, Denied | Malformed) else 403
    return Verdict(outcome="invalid" if isinstance(exc, Malformed) else "denied",
                   allowed=False, message=exc.message, code=code)


# ---------------------------------------------------------------- reading the pod


@dataclasses.dataclass(frozen=True, slots=True)
class _Container:
    index: int
    name: str
    resources: Any  # the raw ``resources`` value (may be absent or not an object)


def _annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    meta = pod.get("metadata")
    if meta is None:
        meta = {}
    if not isinstance(meta, Mapping):
        raise Malformed("the Pod's metadata is not an object")
    raw = meta.get("annotations")
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise Malformed("the Pod's metadata.annotations is not a map of strings")
    return dict(raw)


def _containers(pod: Mapping[str, Any]) -> tuple[list[_Container], list[str]]:
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise Malformed("the Pod has no spec")
    containers: list[_Container] = []
    raw_containers = spec.get("containers")
    if not isinstance(raw_containers, list):
        raise Malformed("the Pod's spec.containers is not a list")
    for i, c in enumerate(raw_containers):
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
            raise Malformed(f"spec.containers[{i}] has no name")
        containers.append(_Container(index=i, name=c["name"], resources=c.get("resources")))
    init = spec.get("initContainers")
    init_names = [c["name"] for c in init if isinstance(c, Mapping)
                  and isinstance(c.get("name"), str)] if isinstance(init, list) else []
    return containers, init_names


# ---------------------------------------------------------------- choosing a profile


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    """What one container gets."""

    container: _Container
    request_mib: int
    profile: str
    models: tuple[profiles.ModelId, ...]  # models where it fits; () = wherever advertised
    fit_models: tuple[profiles.ModelId, ...]


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


def _meets(profile: profiles.Profile, req: requests.GpuRequest) -> bool:
    if req.compute is not None and profile.compute_slices < req.compute:
        return False
    return not (req.media and not profile.media)


@dataclasses.dataclass(frozen=True, slots=True)
class _Choice:
    model: profiles.GpuModel
    profile: profiles.Profile
    usable: int
    advertised: bool
    free: int
    fit_models: tuple[profiles.ModelId, ...]
    restricted: bool  # some model with this profile name cannot hold the request


def _choose(
    req: requests.GpuRequest,
    *,
    key: str,
    value: str,
    pool: Sequence[profiles.GpuModel],
    supply: view.Supply,
    policy: Policy,
) -> _Choice:
    mib = req.memory_mib
    by_id = {m.id: m for m in pool}

    def order(c: tuple[profiles.GpuModel, profiles.Profile, int]) -> tuple[Any, ...]:
        model, p, usable = c
        # Smallest = least memory, then fewest compute slices, then without +me (DESIGN §4).
        return (usable, p.compute_slices, p.media, p.name, model.id)

    advertised: list[tuple[profiles.GpuModel, profiles.Profile, int]] = []
    for (mid, pname), _offer in supply.offers.items():
        model = by_id.get(mid)
        if model is None or not model.has_profile(pname):
            continue
        p = model.profile(pname)
        usable = usable_mib(model, p, supply=supply, policy=policy)
        if usable >= mib and _meets(p, req):
            advertised.append((model, p, usable))
    if advertised:
        model, p, usable = min(advertised, key=order)
    else:
        anywhere = [(m, p, usable_mib(m, p, supply=supply, policy=policy))
                    for m in pool for p in m.profiles]
        fitting = [c for c in anywhere if c[2] >= mib and _meets(c[1], req)]
        if not fitting:
            raise Denied(_too_big(req, key=key, value=value, pool=pool, supply=supply,
                                  policy=policy))
        model, p, usable = min(fitting, key=order)
    having = [m for m in pool if m.has_profile(p.name)]
    fit = tuple(m.id for m in having
                if usable_mib(m, m.profile(p.name), supply=supply, policy=policy) >= mib
                and _meets(m.profile(p.name), req))
    offers = [supply.offers[(mid, p.name)] for mid in fit if (mid, p.name) in supply.offers]
    return _Choice(
        model=model,
        profile=p,
        usable=usable,
        advertised=bool(offers),
        free=sum(o.free for o in offers),
        fit_models=fit,
        restricted=len(fit) < len(having),
    )


def _too_big(
    req: requests.GpuRequest,
    *,
    key: str,
    value: str,
    pool: Sequence[profiles.GpuModel],
    supply: view.Supply,
    policy: Policy,
) -> str:
    where = ("in this cluster" if supply.available and supply.models
             else "configured (--gpu-models)")
    constrained = [(m, p) for m in pool for p in m.profiles if _meets(p, req)]
    wants = []
    if req.compute is not None:
        wants.append(f"at least {req.compute} compute slices")
    if req.media:
        wants.append("media engines (+me)")
    if not constrained:
        most = max((p.compute_slices for m in pool for p in m.profiles), default=0)
        return (f"no MIG profile of the GPU models {where} ({_names(pool)}) has "
                f"{' and '.join(wants)} (the most is {most}g); lower "
                f"{requests.GPU_COMPUTE} or remove {requests.GPU_MEDIA}")
    model, p = max(constrained, key=lambda c: (
        usable_mib(c[0], c[1], supply=supply, policy=policy), -c[1].compute_slices))
    largest = usable_mib(model, p, supply=supply, policy=policy)
    extra = f" with {' and '.join(wants)}" if wants else ""
    shown = quantity.format_mib(req.memory_mib)
    amount = f"{key}={value}" + ("" if shown == value else f" ({shown})")
    return (f"{amount} is more than the largest "
            f"MIG profile{extra} of the GPU models {where}: {p.name} on {model.id} "
            f"({quantity.format_mib(largest)} usable); ask for at most "
            f"{quantity.format_mib(largest)}, or {_ANY_GPU}")


def _names(models: Iterable[profiles.GpuModel]) -> str:
    return ", ".join(m.id for m in models) or "none"


# ---------------------------------------------------------------- the decision


def _decide(pod: Mapping[str, Any], *, supply: view.Supply, policy: Policy) -> Verdict:
    annotations = _annotations(pod)
    if not requests.has_request(annotations):
        # Not migfit's pod: its spec is none of our business (DESIGN §4 "never touch").
        parsed = requests.parse(annotations, containers=())
        return Verdict(outcome="skipped", allowed=True, warnings=parsed.notes)
    containers, init_names = _containers(pod)
    names = [c.name for c in containers]
    try:
        parsed = requests.parse(annotations, containers=names, init_containers=init_names)
    except requests.RequestError as exc:
        raise Denied(exc.message) from None
    by_name = {c.name: c for c in containers}
    warnings: list[str] = list(parsed.notes)

    prior = requests.decision_of(annotations)
    reused = _reuse(prior, parsed.requests, by_name)
    if reused is not None:
        plans, strategy = reused
    else:
        plans, strategy = _plan(parsed.requests, by_name, annotations=annotations,
                                supply=supply, policy=policy, warnings=warnings)
    record = requests.DecisionRecord(
        v=requests.DECISION_VERSION,
        strategy=strategy,
        containers=[requests.DecisionContainer(
            container=pl.container.name,
            request_mib=pl.request_mib,
            profile=pl.profile,
            resource=_resource(pl.profile, strategy),
            models=list(pl.models),
        ) for pl in plans],
    )
    if reused is not None and _has_product_affinity(pod.get("spec")):
        values = None  # placed by the first invocation; the labels seen may have changed since
    else:
        values = _affinity_values(plans, strategy=strategy, supply=supply, warnings=warnings)
    ops: list[PatchOp] = []
    owned = {c["container"]: c["resource"] for c in prior["containers"]} if prior else {}
    for pl in plans:
        ops.extend(_resource_ops(pl.container, _resource(pl.profile, strategy),
                                 owned=owned.get(pl.container.name)))
    if values is not None:
        ops.extend(_affinity_ops(pod.get("spec"), values))
    ops.extend(_scheduler_ops(pod.get("spec"), policy.scheduler_name))
    ops.extend(_annotation_ops(annotations, {
        requests.PROFILE: requests.profile_annotation(record),
        requests.DECISION: requests.encode_decision(record),
    }))
    return Verdict(
        outcome="patched" if ops else "unchanged",
        allowed=True,
        patch=tuple(ops),
        warnings=tuple(warnings),
        profiles=tuple(pl.profile for pl in plans),
        record=record,
    )


def _scheduler_ops(spec: Any, scheduler_name: str | None) -> list[PatchOp]:
    """Set ``spec.schedulerName`` when a migfit scheduler is configured and the pod left the
    default (RFC 6902 ``add`` replaces an existing member)."""
    if scheduler_name is None or not isinstance(spec, Mapping):
        return []
    current = spec.get("schedulerName")
    if current == scheduler_name or current not in (None, "", "default-scheduler"):
        return []
    return [PatchOp(op="add", path="/spec/schedulerName", value=scheduler_name)]


def _resource(profile: str, strategy: requests.Strategy) -> str:
    return profiles.GPU_RESOURCE if strategy == "single" else profiles.resource_name(profile)


def _reuse(
    prior: requests.DecisionRecord | None,
    reqs: Sequence[requests.GpuRequest],
    by_name: Mapping[str, _Container],
) -> tuple[list[_Plan], requests.Strategy] | None:
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
        if c["resource"] != _resource(c["profile"], prior["strategy"]):
            return None
        models = tuple(profiles.ModelId(m) for m in c["models"])
        plans.append(_Plan(container=by_name[c["container"]], request_mib=c["request_mib"],
                           profile=c["profile"], models=models, fit_models=models))
    return plans, prior["strategy"]


def _plan(
    reqs: Sequence[requests.GpuRequest],
    by_name: Mapping[str, _Container],
    *,
    annotations: Mapping[str, str],
    supply: view.Supply,
    policy: Policy,
    warnings: list[str],
) -> tuple[list[_Plan], requests.Strategy]:
    pool: Sequence[profiles.GpuModel]
    if supply.available and supply.models:
        pool = supply.models
    elif policy.fallback_models:
        pool = policy.fallback_models
        if supply.available:
            warnings.append(f"no node has a known MIG GPU; decided from --gpu-models "
                            f"({_names(pool)})")
        else:
            warnings.append(f"migfit has no cluster view yet; decided from the catalog of "
                            f"{_names(pool)}")
    elif supply.available:
        raise Denied("no node in the cluster has a MIG-capable GPU that migfit knows; label "
                     "the GPU nodes (GPU Feature Discovery) or remove "
                     f"{requests.GPU_MEMORY} and {_ANY_GPU}")
    else:
        raise Denied("migfit has no view of the cluster yet and no --gpu-models to fall back "
                     "on; retry in a few seconds")
    many = len(reqs) > 1
    plans: list[_Plan] = []
    choices: list[_Choice] = []
    for r in reqs:
        key = (requests.GPU_MEMORY_PREFIX + r.container
               if requests.GPU_MEMORY_PREFIX + r.container in annotations
               else requests.GPU_MEMORY)
        value = annotations[key]
        choice = _choose(r, key=key, value=value, pool=pool, supply=supply, policy=policy)
        choices.append(choice)
        who = f"{r.container}: " if many else ""
        _warn(choice, r, asked=value, who=who, supply=supply, policy=policy, warnings=warnings)
        plans.append(_Plan(
            container=by_name[r.container],
            request_mib=r.memory_mib,
            profile=choice.profile.name,
            models=choice.fit_models if choice.restricted else (),
            fit_models=choice.fit_models,
        ))
    return plans, _strategy(choices, supply=supply, policy=policy)


def _warn(
    choice: _Choice,
    req: requests.GpuRequest,
    *,
    asked: str,
    who: str,
    supply: view.Supply,
    policy: Policy,
    warnings: list[str],
) -> None:
    name = choice.profile.name
    if supply.available and not choice.advertised:
        warnings.append(f"{who}no node advertises {name} now; the pod stays Pending until a "
                        f"GPU is re-partitioned (see migfit advise)")
    elif supply.available and choice.free <= 0:
        warnings.append(f"{who}every {name} instance is in use now; the pod waits for one "
                        f"to be freed")
    unused = 1 - req.memory_mib / choice.usable
    if unused > policy.waste_warning:
        warnings.append(f"{who}{asked} was rounded up to {name} "
                        f"({quantity.format_mib(choice.usable)}): {int(unused * 100)}% of its "
                        f"memory unused")


def _strategy(
    choices: Sequence[_Choice], *, supply: view.Supply, policy: Policy
) -> requests.Strategy:
    if policy.strategy != "auto":
        return policy.strategy
    seen: set[str] = set()
    for c in choices:
        for mid in c.fit_models:
            offer = supply.offers.get((mid, c.profile.name))
            if offer is not None:
                seen |= offer.strategies
            elif mid in supply.strategy:
                seen.add(supply.strategy[mid])
    # One node serves the whole pod and a node has one strategy: single only when nothing
    # that could serve any container advertises under mixed.
    return "single" if seen == {"single"} else "mixed"


def _affinity_values(
    plans: Sequence[_Plan],
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
                values.update(f"{base}-MIG-{pl.profile}"
                              for base in supply.products.get(mid, ()))
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
        detail = "; ".join(f"{c}: {', '.join(sorted(v))}" for c, v in sets)
        raise Denied(f"the containers need GPUs no single node has ({detail}); give them "
                     f"requests that fit the same profile and GPU model, or split the pod")
    return sorted(common)


# ---------------------------------------------------------------- the patch


def _is_one(value: Any) -> bool:
    try:
        return quantity.parse(value) == 1
    except errors.QuantityError:
        return False


def _resource_ops(c: _Container, resource: str, *, owned: str | None) -> list[PatchOp]:
    """Set ``resource: "1"`` in limits and requests (extended resources need both, equal),
    creating ``resources``/``limits``/``requests`` when absent (RFC 6902 add needs the parent)."""
    base = f"/spec/containers/{c.index}/resources"
    res = c.resources
    if not isinstance(res, Mapping):
        return [PatchOp(op="add", path=base,
                        value={"limits": {resource: "1"}, "requests": {resource: "1"}})]
    ops: list[PatchOp] = []
    for field in ("limits", "requests"):
        section = res.get(field)
        if not isinstance(section, Mapping):
            ops.append(PatchOp(op="add", path=f"{base}/{field}", value={resource: "1"}))
            continue
        has_target = False
        for name, value in section.items():
            if not isinstance(name, str) or not decoding.is_gpu_resource(name):
                continue
            if name == resource and _is_one(value):
                has_target = True
            elif name == owned:
                # Written by an earlier migfit decision for this container: replaced.
                if name != resource:
                    ops.append(PatchOp(op="remove", path=f"{base}/{field}/{escape(name)}"))
            else:
                raise Denied(
                    f"container {c.name!r} already requests {name}: {value}; remove that "
                    f"resource to let migfit choose, or remove the {requests.GPU_MEMORY} "
                    f"annotations to keep it")
        if not has_target:
            ops.append(PatchOp(op="add", path=f"{base}/{field}/{escape(resource)}", value="1"))
    return ops


def _affinity_ops(spec: Any, values: list[str]) -> list[PatchOp]:
    """Require ``nvidia.com/gpu.product In values``. nodeSelectorTerms are ORed, so the
    expression goes into every existing term (within a term, expressions are ANDed)."""
    expr = {"key": LABEL_PRODUCT, "operator": "In", "values": values}
    path = "/spec/affinity"
    affinity = spec.get("affinity") if isinstance(spec, Mapping) else None
    required = {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}
    if not isinstance(affinity, Mapping):
        return [PatchOp(op="add", path=path, value={"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": required}})]
    node = affinity.get("nodeAffinity")
    if not isinstance(node, Mapping):
        return [PatchOp(op="add", path=f"{path}/nodeAffinity",
                        value={"requiredDuringSchedulingIgnoredDuringExecution": required})]
    path += "/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    selector = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
    if not isinstance(terms, list) or not terms:
        return [PatchOp(op="add", path=path, value=required)]
    ops: list[PatchOp] = []
    for j, term in enumerate(terms):
        if _matches_nothing(term):
            continue  # AND-ing an expression into it would make it match GPU nodes
        exprs = term.get("matchExpressions")
        term_path = f"{path}/nodeSelectorTerms/{j}"
        if not isinstance(exprs, list):
            ops.append(PatchOp(op="add", path=f"{term_path}/matchExpressions", value=[expr]))
        elif not any(_same_expr(e, expr) for e in exprs):
            ops.append(PatchOp(op="add", path=f"{term_path}/matchExpressions/-", value=expr))
    return ops


def _matches_nothing(term: Any) -> bool:
    """A null or empty NodeSelectorTerm matches no node (core/v1 NodeSelectorTerm)."""
    return not isinstance(term, Mapping) or not (term.get("matchExpressions")
                                                 or term.get("matchFields"))


def _has_product_affinity(spec: Any) -> bool:
    """Every required nodeSelectorTerm that can match a node already constrains
    nvidia.com/gpu.product with In."""
    try:
        terms = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        live = [t for t in terms if not _matches_nothing(t)]
        return bool(live) and all(
            any(e.get("key") == LABEL_PRODUCT and e.get("operator") == "In"
                for e in term["matchExpressions"]) for term in live)
    except (KeyError, TypeError, AttributeError):
        return False


def _same_expr(have: Any, want: Mapping[str, Any]) -> bool:
    return (isinstance(have, Mapping) and have.get("key") == want["key"]
            and have.get("operator") == want["operator"]
            and isinstance(have.get("values"), list)
            and sorted(map(str, have["values"])) == sorted(want["values"]))


def _annotation_ops(current: Mapping[str, str], wanted: Mapping[str, str]) -> list[PatchOp]:
    # metadata.annotations exists: the gpu-memory annotation brought the pod here.
    return [PatchOp(op="add", path=f"/metadata/annotations/{escape(k)}", value=v)
            for k, v in wanted.items() if current.get(k) != v]
