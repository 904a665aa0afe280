"""The webhook's decision: from a pod's gpu-memory request to the smallest fitting MIG profile.

DESIGN.md §4 is the contract. This module is the entry point (``decide_review``,
``decide_pod``) and the verdict; the steps live by concept: ``reading`` (the Pod's annotations
and containers, checked), ``choice`` (the profile per container, the warnings, the strategy
and node affinity) and ``patching`` (the RFC 6902 JSON Patch). The result is a patch,
warnings, or a denial that says what to change. Pure: no I/O, no HTTP; the server only
parses, calls and serialises.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from migfit import decoding, errors, records, requests
from migfit.webhook import choice, patching, reading, view

# The public names of the decision, wherever they live.
Policy = choice.Policy
MemoryMatch = choice.MemoryMatch
MEMORY_MATCHES: Final = choice.MEMORY_MATCHES
StrategyChoice = choice.StrategyChoice
STRATEGY_CHOICES: Final = choice.STRATEGY_CHOICES
Contention = choice.Contention
CONTENTIONS: Final = choice.CONTENTIONS
usable_mib = choice.usable_mib
PatchOp = patching.PatchOp
escape = patching.escape
LABEL_PRODUCT: Final = patching.LABEL_PRODUCT
Denied = reading.Denied
Malformed = reading.Malformed

Outcome = Literal["patched", "unchanged", "skipped", "ignored", "denied", "invalid"]


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
    #: Whether a memo may keep it: not when containers ask differently, whose choices are
    #: checked node by node (``Supply.holds``), which the supply's content does not follow.
    memoisable: bool = True


def decide_review(
    request: Mapping[str, Any], *, supply: view.Supply, policy: Policy
) -> Verdict:
    """Decide one AdmissionRequest (the ``request`` of an AdmissionReview).

    Only CREATE of a Pod is acted on; every other operation, kind or subresource is allowed
    untouched. dryRun needs nothing special: the decision has no side effects.
    """
    pod = pod_to_decide(request)
    if pod is None:
        return Verdict(outcome="ignored", allowed=True)
    if not isinstance(pod, Mapping):
        return _verdict_for(Malformed("the AdmissionRequest has no Pod object"))
    return decide_pod(pod, supply=supply, policy=policy)


def pod_to_decide(request: Mapping[str, Any]) -> Any:
    """The ``object`` of an AdmissionRequest the decision acts on (maybe not a Pod object:
    ``decide_review`` refuses that), or None for one it ignores."""
    if request.get("operation") != "CREATE":
        return None
    kind = request.get("kind")
    if isinstance(kind, Mapping) and kind.get("kind") not in (None, "Pod"):
        return None
    if request.get("subResource"):
        return None
    obj = request.get("object")
    # A Pod's CREATE always carries the Pod: one without is malformed (decide_review says
    # so), not a request to let through untouched.
    return _NO_OBJECT if obj is None else obj


_NO_OBJECT: Any = ()  # not a Mapping: ``decide_review`` answers it as malformed


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


def _recorded(plan: choice.Plan, resource: str) -> requests.DecisionContainer:
    out = requests.DecisionContainer(
        container=plan.container.name,
        request_mib=plan.request_mib,
        profile=plan.profile,
        resource=resource,
        models=list(plan.models),
    )
    if plan.reason:  # a reinvocation keeps a record written before reasons as it was
        out["reason"] = plan.reason
    return out


def host_of(pod: Mapping[str, Any]) -> choice.Host:
    """The pod's effective cpu (milli) and memory (bytes) requests (Kubernetes' rules)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return choice.NO_HOST
    _gpus, _per_container, cpu, memory = decoding.effective_requests(spec)
    return int(cpu), int(memory)


def scoped(placement: reading.Placement, supply: view.Supply, warnings: list[str]
           ) -> view.Supply:
    """The supply of the nodes ``placement`` allows (an 8Gi pod pinned to the A100 nodes
    gets an A100 profile, not the H200's ``1g.18gb``). When none of them has a GPU migfit
    knows (a node pool scaled to zero, a label not yet set), every node's, with a warning."""
    if not placement.limited or supply.within is None:
        return supply
    where = placement.words()
    mine = supply.within(placement.constraints, placement.node_name, where)
    if mine is not None:
        return mine
    name = placement.node_name
    if name is None:
        warnings.append(f"none of {where} has a MIG GPU migfit knows now (a node pool scaled "
                        f"to zero?); decided as for any node")
        return supply
    alone = supply.within(records.NO_CONSTRAINTS, name, where)
    if alone is not None:  # a MIG node, but not one the pod's own selector or affinity allows
        selectors = placement.selectors()
        warnings.append(f"{where} is not one the pod's {selectors} "
                        f"select{'' if ' and ' in selectors else 's'}: the kubelet will "
                        f"refuse the pod there; decided for that node")
        return alone
    if supply.known(name):
        raise Denied(f"spec.nodeName names {requests.shorten(name, 80)}, a node without a "
                     f"MIG GPU migfit knows: no MIG instance can be given there; name a "
                     f"node with MIG GPUs, or remove spec.nodeName and let the scheduler "
                     f"choose")
    warnings.append(f"{where} is not in migfit's view (not yet seen?); decided as for any "
                    f"node")
    return supply


def _warn_own_gpus(containers: list[reading.Container], chosen: set[str],
                   warnings: list[str]) -> None:
    """Warn about GPU resources other containers ask for themselves: the pod's node must
    have them beside its MIG instances, and migfit's choice does not count them."""
    own = reading.own_gpus(containers, chosen)
    if not own:
        return
    named = ", ".join(f"{requests.quote_name(name)} ({requests.shorten(resource, 60)})"
                      for name, resource in own[:3]) + (
        f" and {len(own) - 3} more" if len(own) > 3 else "")
    # The fix first: kube-apiserver may cut a warning over 256 characters (WIRE.md 2.1), and
    # long container names cut the fix off the end (an outside check).
    if len(own) == 1:  # the annotation's key names the container
        how = (f"for migfit to choose, remove it and annotate the pod "
               f"{requests.shorten(requests.GPU_MEMORY_PREFIX + own[0][0], 100)}")
        who = f"a container asks for {requests.shorten(own[0][1], 60)} itself"
    else:
        how = (f"for migfit to choose, remove them and annotate the pod "
               f"{requests.GPU_MEMORY_PREFIX}<container> for each")
        who = f"containers {named} ask for a GPU resource themselves"
    whole = (" (under the mixed strategy a whole GPU, MIG off)"
             if any(resource == "nvidia.com/gpu" for _, resource in own) else "")
    warnings.append(f"{who}{whole}; {how}: migfit does not count it, and the pod's one node "
                    f"must have it too")


def _warn_init_gpus(inits: list[reading.Container], warnings: list[str]) -> None:
    """Warn about GPU resources init containers (sidecars included) ask for: the pod's one
    node must have them too, and migfit, which chooses only for the pod's containers, does
    not count them."""
    own = reading.own_gpus(inits, set())
    if not own:
        return
    named = ", ".join(f"{requests.quote_name(name)} ({requests.shorten(resource, 60)})"
                      for name, resource in own[:3]) + (
        f" and {len(own) - 3} more" if len(own) > 3 else "")
    who = (f"init container {named} asks for a GPU resource itself" if len(own) == 1
           else f"init containers {named} ask for GPU resources themselves")
    warnings.append(f"{who}; give it a resource of the GPU model the containers' profiles "
                    f"are on, or remove it: migfit chooses for the containers only, and the "
                    f"pod's one node must have it too")


def _kept_target(reqs: Sequence[requests.GpuRequest], prior: requests.DecisionRecord | None,
                 annotations: Mapping[str, str], by_name: Mapping[str, reading.Container],
                 ) -> Sequence[requests.GpuRequest]:
    """``reqs``, or the pod-wide request given back to the container an earlier invocation
    gave it to. The pod-wide key applies to the main container (the first, or the one
    kubectl's default-container annotation names), which a webhook called after migfit may
    change by inserting a container or setting that annotation; kube-apiserver then calls
    migfit again (``reinvocationPolicy: IfNeeded``), which must not give a second container
    an instance beside the first's (DESIGN §4: idempotent). Kept only while that container
    is still there and holds the resource recorded for it."""
    if (prior is None or len(reqs) != 1 or len(prior["containers"]) != 1
            or requests.GPU_MEMORY not in annotations
            or requests.GPU_MEMORY_PREFIX + reqs[0].container in annotations):
        return reqs
    (before,) = prior["containers"]
    name = before["container"]
    if name == reqs[0].container or name not in by_name \
            or before["request_mib"] != reqs[0].memory_mib \
            or (name, before["resource"]) not in reading.own_gpus([by_name[name]], set()):
        return reqs
    return [dataclasses.replace(reqs[0], container=name)]


def _decide(pod: Mapping[str, Any], *, supply: view.Supply, policy: Policy) -> Verdict:
    annotations = reading.annotations_of(pod)
    if not requests.has_request(annotations):
        # Not migfit's pod: its spec is none of our business (DESIGN §4 "never touch").
        parsed = requests.parse(annotations, containers=())
        return Verdict(outcome="skipped", allowed=True, warnings=parsed.notes)
    containers, init_names = reading.containers_of(pod)
    names = [c.name for c in containers]
    reading.check_instances(annotations, names)  # before the work that scales with them
    try:
        parsed = requests.parse(annotations, containers=names, init_containers=init_names)
    except requests.RequestError as exc:
        raise Denied(exc.message) from None
    by_name = {c.name: c for c in containers}
    warnings: list[str] = list(parsed.notes)

    prior = requests.decision_of(annotations)
    reqs = _kept_target(parsed.requests, prior, annotations, by_name)
    reused = choice.reuse(prior, reqs, by_name)
    exact = True  # decided by the supply's snapshot alone (choice.plan)
    if reused is not None:
        plans, strategy = reused
    else:
        spec = pod.get("spec")
        whole = supply
        placement = (reading.placement_of(pod)
                     if isinstance(spec, Mapping) and reading.placed(spec) else None)
        if supply.within is not None and placement is not None:
            supply = scoped(placement, supply, warnings)
        plans, strategy, exact = choice.plan(reqs, by_name, annotations=annotations,
                                      supply=supply, policy=policy, warnings=warnings,
                                      host=host_of(pod) if policy.contention == "usable"
                                      else choice.NO_HOST,
                                      node_name=None if placement is None
                                      else placement.node_name)
        if supply is not whole:
            # The models a request fits are those of the cluster (DESIGN §4), not only of
            # the nodes it may go to now: a node relabelled into its selection later
            # must not take it where it does not fit.
            plans = choice.fitting_in(plans, reqs, supply=whole, policy=policy)
    _warn_own_gpus(containers, {pl.container.name for pl in plans}, warnings)
    _warn_init_gpus(reading.init_containers_of(pod), warnings)
    if reused is not None and prior is not None:  # a reinvocation asks for what it asked
        resources = [c["resource"] for c in prior["containers"]]
    else:
        shared = [choice.renamed(pl, supply, strategy) for pl in plans]
        resources = [choice.resource(pl.profile, strategy, renamed=r)
                     for pl, r in zip(plans, shared, strict=True)]
        if len(set(shared)) > 1:
            warnings.append(
                f"the pod asks for {', '.join(sorted(set(resources)))}: the device plugin "
                f"advertises some of these profiles under their renamed shared names "
                f"(….shared, time-slicing or MPS with renameByDefault) and others not, so "
                f"no one node may advertise them all; give these nodes one sharing config")
    record = requests.DecisionRecord(
        v=requests.DECISION_VERSION,
        strategy=strategy,
        containers=[_recorded(pl, res) for pl, res in zip(plans, resources, strict=True)],
    )
    spec = pod.get("spec")
    if reused is not None and patching.has_product_affinity(spec):
        values = None  # placed by the first invocation; the labels seen may have changed since
    else:
        values = choice.affinity_values(plans, strategy=strategy, supply=supply,
                                        warnings=warnings)
    ops: list[PatchOp] = []
    owned = {c["container"]: c["resource"] for c in prior["containers"]} if prior else {}
    for pl, res in zip(plans, resources, strict=True):
        ops.extend(patching.resource_ops(pl.container, res, owned=owned.get(pl.container.name)))
    if values is not None:
        ops.extend(patching.affinity_ops(spec, values))
    ops.extend(patching.scheduler_ops(spec, policy.scheduler_name))
    ops.extend(patching.annotation_ops(annotations, {
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
        memoisable=reused is not None or (exact and len(
            {(r.memory_bytes, r.compute, r.media) for r in reqs}) <= 1),
    )
