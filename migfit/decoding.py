"""Decoding Node and Pod API objects (plain JSON dicts) into migfit's compact records.

A Node's GPU labels and MIG resources are read by ``migfit.gpulabels``; this module adds the
rest (taints, readiness, host cpu/memory, migfit's annotations) and decodes a Pod's effective
requests by Kubernetes' rules.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from migfit import errors, fields, gpulabels, keys, profiles, records
from migfit.records import NodeRecord, PodRecord, Taint


def node_from_api(obj: Mapping[str, Any], catalog: profiles.Catalog) -> NodeRecord:
    """Decode a Node; an unknown GPU product leaves the model None with the reason."""
    meta = fields.as_dict(obj.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise errors.UsageError("a Node without metadata.name")
    labels = fields.str_map(meta.get("labels"))
    status = fields.as_dict(obj.get("status"))
    spec = fields.as_dict(obj.get("spec"))
    alloc_raw = fields.as_dict(status.get("allocatable"))
    gpus = gpulabels.gpu_view(labels, fields.as_dict(status.get("capacity")), alloc_raw,
                              catalog)
    taints = tuple(
        Taint(key=str(t.get("key", "")), value=str(t.get("value", "") or ""),
              effect=str(t.get("effect", "")))
        for t in fields.as_list(spec.get("taints")) if isinstance(t, dict)
    )
    ready = any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in fields.as_list(status.get("conditions"))
    ) or not status.get("conditions")
    try:
        cpu_milli = fields.milli(alloc_raw.get("cpu", 0))
        memory_bytes = fields.bytes_(alloc_raw.get("memory", 0))
    except errors.QuantityError:
        cpu_milli, memory_bytes = 0, 0
    return NodeRecord(
        name=name,
        resource_version=str(meta.get("resourceVersion", "")),
        model=gpus.model.id if gpus.model else None,
        model_error=gpus.model_error,
        gpu_count=gpus.gpu_count,
        strategy=gpus.strategy,
        capacity=gpus.capacity,
        allocatable=gpus.allocatable,
        memory_mib=gpus.memory_mib,
        whole_gpus=gpus.whole_gpus,
        config=labels.get(keys.LABEL_CONFIG),
        config_state=labels.get(keys.LABEL_CONFIG_STATE),
        unschedulable=bool(spec.get("unschedulable", False)),
        taints=taints,
        labels={k: v for k, v in labels.items() if k.startswith(keys.KEPT_LABEL_PREFIXES)},
        annotations=_migfit_annotations(meta),
        cpu_milli=cpu_milli,
        memory_bytes=memory_bytes,
        ready=ready,
        all_labels=fields.intern_map(labels),
        replicas=gpus.replicas,
        renamed=gpus.renamed,
        layout_written_at=_label_written_at(meta, keys.LABEL_CONFIG_STATE),
    )


def _label_written_at(meta: Mapping[str, Any], label: str) -> float | None:
    """When ``label`` was last written: the latest ``time`` of the ``metadata.managedFields``
    entries whose ``fieldsV1`` own it (``f:metadata`` / ``f:labels`` / ``f:<label>``, the API
    server's field set format); None when no entry does or its time does not read."""
    owned = f"f:{label}"
    latest: float | None = None
    for entry in fields.as_list(meta.get("managedFields")):
        if not isinstance(entry, dict):
            continue
        labels = fields.as_dict(fields.as_dict(
            fields.as_dict(entry.get("fieldsV1")).get("f:metadata")).get("f:labels"))
        stamp = entry.get("time")
        if owned not in labels or not isinstance(stamp, str):
            continue
        at = keys.parse_rfc3339(stamp)
        if at is not None and (latest is None or at > latest):
            latest = at
    return latest


def _migfit_annotations(meta: Mapping[str, Any]) -> Mapping[str, str]:
    return fields.intern_map({k: v for k, v in fields.str_map(meta.get("annotations")).items()
                              if k.startswith(keys.ANNOTATION_PREFIX)})


def is_gpu_resource(resource: str) -> bool:
    """A whole GPU or MIG resource, under its plain or its renamed shared name."""
    base = profiles.unshared(resource)[0]
    return base == profiles.GPU_RESOURCE or base.startswith(profiles.RESOURCE_PREFIX)


def _container_requests(container: Mapping[str, Any]) -> dict[str, Any]:
    """Requests of one container; for extended resources a missing request defaults to the limit."""
    res = fields.as_dict(container.get("resources"))
    out = dict(fields.as_dict(res.get("limits")))
    out.update(fields.as_dict(res.get("requests")))
    return out


def effective_requests(spec: Mapping[str, Any]) -> tuple[
        dict[str, int], tuple[tuple[str, str, int], ...], int, int]:
    """A pod's effective GPU requests by Kubernetes' rules, plus cpu (milli) and memory (bytes).

    Regular containers are summed; each non-restartable init container runs alone next to the
    sidecars started before it, so the pod needs the max of those; restartable init containers
    (sidecars, restartPolicy Always) run for the pod's life and add to the sum (KEP-753).
    Pod-level ``spec.resources`` (KEP-2837) stand for the containers' cpu or memory where
    set; ``spec.overhead`` (KEP-688) adds to cpu and memory.
    """
    per_container: list[tuple[str, str, int]] = []

    def decode(c: Mapping[str, Any]) -> dict[str, float]:
        out: dict[str, float] = {}
        cname = str(c.get("name", ""))
        for res, val in _container_requests(c).items():
            if is_gpu_resource(res):
                n = fields.count(val)
                # A renamed shared resource (….shared) counts as the resource it shares:
                # the node's is read so too (gpulabels).
                res = profiles.unshared(res)[0]
                out[res] = out.get(res, 0) + n
                if n:
                    per_container.append((cname, sys.intern(res), n))
            elif res == "cpu":  # never below 0 (the API server refuses a negative request)
                with contextlib.suppress(errors.QuantityError):
                    out[res] = max(fields.milli(val), 0)
            elif res == "memory":
                with contextlib.suppress(errors.QuantityError):
                    out[res] = max(fields.bytes_(val), 0)
        return out

    # Plain dicts, not Counters: this runs for every pod event.
    regular: dict[str, int] = {}
    for c in fields.as_list(spec.get("containers")):
        if isinstance(c, dict):
            for res, n in decode(c).items():
                regular[res] = regular.get(res, 0) + int(n)
    init = fields.as_list(spec.get("initContainers"))
    if not init:
        total = regular
    else:
        sidecars: dict[str, int] = {}
        init_max: dict[str, int] = {}
        for c in init:
            if not isinstance(c, dict):
                continue
            req = decode(c)
            if c.get("restartPolicy") == "Always":
                for res, n in req.items():
                    sidecars[res] = sidecars.get(res, 0) + int(n)
                for res, n in sidecars.items():
                    init_max[res] = max(init_max.get(res, 0), n)
            else:
                for res in set(req) | set(sidecars):
                    init_max[res] = max(init_max.get(res, 0),
                                        int(req.get(res, 0)) + sidecars.get(res, 0))
        total = {}
        for res in set(regular) | set(sidecars) | set(init_max):
            total[res] = max(regular.get(res, 0) + sidecars.get(res, 0), init_max.get(res, 0))
    cpu = total.pop("cpu", 0)
    mem = total.pop("memory", 0)
    # Pod-level resources (KEP-2837, beta and on by default from Kubernetes 1.34): where the
    # pod sets cpu or memory for itself, kube-scheduler counts that instead of its
    # containers' sum (its requests, else its limits, as the API defaults them).
    level = fields.as_dict(spec.get("resources"))
    pod_level = fields.as_dict(level.get("requests")) or fields.as_dict(level.get("limits"))
    with contextlib.suppress(errors.QuantityError):
        cpu = max(fields.milli(pod_level["cpu"]), 0) if "cpu" in pod_level else cpu
    with contextlib.suppress(errors.QuantityError):
        mem = max(fields.bytes_(pod_level["memory"]), 0) if "memory" in pod_level else mem
    # Pod overhead (RuntimeClass, KEP-688) is added to the pod's requests by the scheduler.
    overhead = fields.as_dict(spec.get("overhead"))
    with contextlib.suppress(errors.QuantityError):
        cpu += max(fields.milli(overhead["cpu"]), 0) if "cpu" in overhead else 0
    with contextlib.suppress(errors.QuantityError):
        mem += max(fields.bytes_(overhead["memory"]), 0) if "memory" in overhead else 0
    gpu = {sys.intern(r): n for r, n in total.items() if n > 0}
    return gpu, tuple(per_container), cpu, mem


class RequestMaps:
    """Identical request maps shared between pods, bounded (one table per cluster store).

    Most pods ask for one instance of a few profiles: 150,000 pods then cost one small dict
    per distinct request, not per pod. Past ``limit`` distinct maps, new ones are not kept.
    """

    def __init__(self, limit: int = 10_000) -> None:
        self._limit = limit
        self._maps: dict[tuple[tuple[str, int], ...], Mapping[str, int]] = {}
        self._constraints: dict[records.PodConstraints, records.PodConstraints] = {}

    def share(self, requests: dict[str, int]) -> Mapping[str, int]:
        key = tuple(sorted(requests.items()))
        shared = self._maps.get(key)
        if shared is not None:
            return shared
        if len(self._maps) >= self._limit:
            return requests
        shared = self._maps[key] = MappingProxyType(requests)
        return shared

    def __len__(self) -> int:
        return len(self._maps)

    def share_constraints(self, value: records.PodConstraints) -> records.PodConstraints:
        """The table's copy of constraints equal to ``value`` (most pods share a few)."""
        shared = self._constraints.get(value)
        if shared is not None:
            return shared
        if len(self._constraints) < self._limit:
            self._constraints[value] = value
        return value


def restart_count(obj: Mapping[str, Any]) -> int:
    """How often the pod's containers have restarted or ended in error: the sum of
    ``restartCount`` over its container, init container (sidecars) and ephemeral container
    statuses, plus one for each container now terminated with a non-zero exit code (with
    ``restartPolicy: Never`` a container that dies is not restarted)."""
    status = fields.as_dict(obj.get("status"))
    total = 0
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for entry in fields.as_list(status.get(key)):
            if not isinstance(entry, dict):
                continue
            count = entry.get("restartCount")
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                total += count
            ended = fields.as_dict(fields.as_dict(entry.get("state")).get("terminated"))
            code = ended.get("exitCode")
            if isinstance(code, int) and not isinstance(code, bool) and code != 0:
                total += 1
    return total


def pod_from_api(obj: Mapping[str, Any],
                 shared: RequestMaps | None = None) -> PodRecord | None:
    """Decode a Pod; None for pods migfit has no interest in (no GPU request, no annotation).

    With ``shared``, the record's request map is the table's copy of an equal one.
    """
    meta = fields.as_dict(obj.get("metadata"))
    annotations = _migfit_annotations(meta)
    spec = fields.as_dict(obj.get("spec"))
    requests, per_container, cpu, mem = effective_requests(spec)
    if not requests and not annotations:
        return None
    status = fields.as_dict(obj.get("status"))
    since = None
    for cond in fields.as_list(status.get("conditions")):
        if (isinstance(cond, dict) and cond.get("type") == "PodScheduled"
                and cond.get("status") == "False" and cond.get("reason") == "Unschedulable"):
            since = fields.timestamp(cond.get("lastTransitionTime")) or 0.0
    uid = uid_of(obj)
    node = spec.get("nodeName")
    constraints = records.NO_CONSTRAINTS
    if not (isinstance(node, str) and node):
        constraints = pod_constraints(spec)
        if shared is not None:
            constraints = shared.share_constraints(constraints)
    return PodRecord(
        uid=uid,
        namespace=sys.intern(str(meta.get("namespace") or "default")),
        name=str(meta.get("name") or meta.get("generateName") or ""),
        resource_version=str(meta.get("resourceVersion", "")),
        node=sys.intern(node) if isinstance(node, str) and node else None,
        phase=sys.intern(str(status.get("phase") or "Pending")),
        scheduler_name=sys.intern(str(spec.get("schedulerName") or "default-scheduler")),
        requests=shared.share(requests) if shared is not None else requests,
        container_requests=per_container,
        annotations=annotations,
        unschedulable_since=since,
        deleting=bool(meta.get("deletionTimestamp")),
        created=fields.timestamp(meta.get("creationTimestamp")),
        cpu_milli=int(cpu),
        memory_bytes=int(mem),
        constraints=constraints,
    )


def host_use(obj: Mapping[str, Any]) -> tuple[str, int, int] | None:
    """(node, cpu milli, memory bytes) a bound, running pod requests; None when it is not
    bound, has terminated or requests neither. For pods ``pod_from_api`` does not keep: their
    cpu and memory still take room on a GPU node."""
    spec = fields.as_dict(obj.get("spec"))
    node = spec.get("nodeName")
    if not (isinstance(node, str) and node):
        return None
    phase = fields.as_dict(obj.get("status")).get("phase")
    if phase in records.TERMINATED_PHASES:
        return None
    _requests, _per_container, cpu, mem = effective_requests(spec)
    if cpu <= 0 and mem <= 0:
        return None
    return sys.intern(node), int(cpu), int(mem)


def _requirements(items: Any) -> tuple[records.Requirement, ...]:
    out = []
    for r in fields.as_list(items):
        if isinstance(r, dict):
            values = tuple(str(v) for v in fields.as_list(r.get("values")))
            out.append(records.Requirement(key=str(r.get("key", "")),
                                           operator=str(r.get("operator", "")), values=values))
    return tuple(out)


def pod_constraints(spec: Mapping[str, Any]) -> records.PodConstraints:
    """An unbound pod's nodeSelector, required node affinity and tolerations.

    Only ``requiredDuringSchedulingIgnoredDuringExecution`` binds the scheduler; preferred
    terms are left out. An affinity whose ``nodeSelectorTerms`` is empty keeps ``()``, which
    no node satisfies, as kube-scheduler reads it.
    """
    selector = tuple(sorted(fields.str_map(spec.get("nodeSelector")).items()))
    affinity: tuple[records.SelectorTerm, ...] | None = None
    node_aff = fields.as_dict(fields.as_dict(spec.get("affinity")).get("nodeAffinity"))
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, dict):
        affinity = tuple(
            records.SelectorTerm(expressions=_requirements(t.get("matchExpressions")),
                                 fields=_requirements(t.get("matchFields")))
            for t in fields.as_list(required.get("nodeSelectorTerms")) if isinstance(t, dict))
    tolerations = tuple(
        records.Toleration(key=str(t.get("key") or ""), operator=str(t.get("operator") or
                                                                     "Equal"),
                           value=str(t.get("value") or ""), effect=str(t.get("effect") or ""))
        for t in fields.as_list(spec.get("tolerations")) if isinstance(t, dict))
    if not selector and affinity is None and not tolerations:
        return records.NO_CONSTRAINTS
    return records.PodConstraints(node_selector=selector, affinity=affinity,
                                  tolerations=tolerations)


def uid_of(obj: Mapping[str, Any]) -> str:
    """A Pod's uid, or namespace/name for objects without one (hand-written files)."""
    meta = fields.as_dict(obj.get("metadata"))
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")


# ---------------------------------------------------------------- disruption facts (--defrag)


def pod_facts(obj: Mapping[str, Any]) -> records.PodFacts:
    """A pod's labels, controller and placement constraints (``migfit advise --defrag``)."""
    meta = fields.as_dict(obj.get("metadata"))
    controller = None
    for ref in fields.as_list(meta.get("ownerReferences")):
        if isinstance(ref, dict) and ref.get("controller") is True:
            controller = (str(ref.get("kind") or ""), str(ref.get("name") or ""))
            break
    return records.PodFacts(labels=fields.str_map(meta.get("labels")), controller=controller,
                            constraints=pod_constraints(fields.as_dict(obj.get("spec"))))


def _int_or_string(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise errors.UsageError(f"{where} is {value!r}, not an integer or a percentage")
    text = str(value)
    digits = text[:-1] if text.endswith("%") else text
    if not digits.isascii() or not digits.isdigit():
        raise errors.UsageError(f"{where} is {value!r}, not an integer or a percentage")
    return text


def _status_int(status: Mapping[str, Any], name: str) -> int | None:
    value = status.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def label_selector(value: Any, where: str) -> records.LabelSelector | None:
    """A ``metav1.LabelSelector``; None when absent. A malformed one is a UsageError."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise errors.UsageError(f"{where} is not a mapping")
    exprs = []
    for i, e in enumerate(fields.as_list(value.get("matchExpressions"))):
        op = e.get("operator") if isinstance(e, dict) else None
        if op not in ("In", "NotIn", "Exists", "DoesNotExist") or not isinstance(
                e.get("key"), str):
            raise errors.UsageError(f"{where}.matchExpressions[{i}] needs a key and an "
                                    f"operator In, NotIn, Exists or DoesNotExist")
        exprs.append(records.Requirement(
            key=e["key"], operator=op,
            values=tuple(str(v) for v in fields.as_list(e.get("values")))))
    return records.LabelSelector(
        match_labels=tuple(sorted(fields.str_map(value.get("matchLabels")).items())),
        expressions=tuple(exprs))


def pdb_from_api(obj: Mapping[str, Any]) -> records.PdbRecord:
    """Decode a policy/v1 PodDisruptionBudget; a malformed spec is a UsageError."""
    meta = fields.as_dict(obj.get("metadata"))
    spec = fields.as_dict(obj.get("spec"))
    status = fields.as_dict(obj.get("status"))
    generation = meta.get("generation")
    return records.PdbRecord(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        selector=label_selector(spec.get("selector"), "spec.selector"),
        min_available=_int_or_string(spec.get("minAvailable"), "spec.minAvailable"),
        max_unavailable=_int_or_string(spec.get("maxUnavailable"), "spec.maxUnavailable"),
        disruptions_allowed=_status_int(status, "disruptionsAllowed"),
        current_healthy=_status_int(status, "currentHealthy"),
        desired_healthy=_status_int(status, "desiredHealthy"),
        expected_pods=_status_int(status, "expectedPods"),
        generation=generation if isinstance(generation, int) else None,
        observed_generation=_status_int(status, "observedGeneration"),
    )


def disruption(pods: Iterable[Mapping[str, Any]], pdbs: Iterable[Mapping[str, Any]]
               ) -> records.Disruption:
    """The PDBs and the facts of the bound, running pods with GPU requests among ``pods``."""
    facts: dict[str, records.PodFacts] = {}
    for obj in pods:
        record = pod_from_api(obj)
        if record is not None and record.holds_instances and record.requests:
            facts[record.key] = pod_facts(obj)
    return records.Disruption(pdbs=tuple(pdb_from_api(p) for p in pdbs),
                              pods=MappingProxyType(facts))
