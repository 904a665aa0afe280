"""The one place the simulator calls the servers' pure code: decision, filter, score.

The simulator must run the same code as the webhook and the extender, never a copy, so this
module imports them directly (the simulator sits in the commands layer, above both servers).
The advisor (``migfit.advisor``) is core code and is imported by the engine directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from migfit import advisor, cluster, profiles, records
from migfit.extender import figures, filtering, scoring
from migfit.webhook import decision, view


def _dotted(function: Callable[..., object]) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def sources() -> dict[str, str]:
    """Which code each step runs (recorded with every result)."""
    return {
        "decision": _dotted(decision.decide_pod),
        "filter": _dotted(filtering.filter_nodes),
        "score": _dotted(scoring.score_nodes),
        "advisor": f"{_dotted(advisor.advise)} (safe nodes only)",
    }


# ---------------------------------------------------------------- the webhook


class Decider:
    """The webhook's decision for pods arriving in a cluster; cached per request and supply.

    The decision reads only the pod's annotations and which (model, profile) offers exist
    with their memory labels (webhook.view.Supply), and, unless the policy's contention is
    ``smallest``, whether each offer has a free instance (a bit, never the count: the
    choice reads no more, and the bits change far less often than the counts), so verdicts
    are cached on those; under ``usable``, also on which offers have a free instance where
    the pod's cpu and memory fit.
    """

    def __init__(self, cluster_view: cluster.Cluster, *,
                 contention: decision.Contention | None = None) -> None:
        self._cluster = cluster_view
        self._tracker = view.SupplyTracker(cluster_view)
        self._policy = (decision.Policy() if contention is None
                        else decision.Policy(contention=contention))
        self._reads_free = self._policy.contention != "smallest"
        self._usable = self._policy.contention == "usable"
        self.misses = 0  # decisions made (not answered from the cache)
        self._cache: dict[tuple[Any, ...], tuple[tuple[str, ...], tuple[Any, ...], str]] = {}
        # The supply snapshot last read and what the cache key takes of it (snapshots are
        # immutable: the tracker hands out the same one until the supply changes).
        self._supply: view.Supply | None = None
        self._supply_key: tuple[frozenset[tuple[Any, ...]], tuple[str, ...]] = (
            frozenset(), ())

    @property
    def policy(self) -> decision.Policy:
        """The webhook policy the decisions are made under."""
        return self._policy

    def decide(self, pod: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[Any, ...], str]:
        """(profile per container, JSON Patch, denial message or "")."""
        supply = self._tracker.supply()
        meta = pod.get("metadata", {})
        ann = meta.get("annotations", {}) if isinstance(meta, dict) else {}
        conts = tuple(c.get("name") for c in pod.get("spec", {}).get("containers", ()))
        if supply is not self._supply:
            self._supply = supply
            self._supply_key = (
                frozenset((k, o.label_mib, self._reads_free and o.free > 0)
                          for k, o in supply.offers.items()),
                tuple(m.id for m in supply.models))
        key: tuple[Any, ...] = (tuple(sorted(ann.items())), conts, *self._supply_key)
        if self._usable:
            # What ``usable`` reads besides: per offer, a free instance where this pod's cpu
            # and memory fit.
            cpu, mem = decision.host_of(pod)
            key = (*key, frozenset(k for k in supply.offers if supply.usable(k, cpu, mem)))
        hit = self._cache.get(key)
        if hit is None:
            self.misses += 1
            verdict = decision.decide_pod(pod, supply=supply, policy=self._policy)
            hit = (tuple(verdict.profiles), tuple(verdict.patch),
                   "" if verdict.allowed else str(verdict.message))
            self._cache[key] = hit
        return hit


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(obj: dict[str, Any], patch: Sequence[Mapping[str, Any]]) -> None:
    """Apply RFC 6902 ``add``/``remove`` operations (all the webhook emits) in place."""
    for op in patch:
        parts = [_unescape(p) for p in str(op["path"]).split("/")[1:]]
        target: Any = obj
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        last = parts[-1]
        if op["op"] == "add":
            if isinstance(target, list):
                if last == "-":
                    target.append(op["value"])
                else:
                    target.insert(int(last), op["value"])
            else:
                target[last] = op["value"]
        elif op["op"] == "remove":
            if isinstance(target, list):
                del target[int(last)]
            else:
                del target[last]
        else:
            raise ValueError(f"unsupported patch op {op['op']!r}")


# ---------------------------------------------------------------- the extender


class Extender:
    """The extender's filter and score on the simulated cluster (same objects as the server)."""

    def __init__(self, view: cluster.Cluster) -> None:
        self._index = figures.Index(view)

    def request(self, pod: records.PodRecord) -> filtering.PodRequest:
        """The pod's decoded request (decoded once per scheduling cycle)."""
        return filtering.request_of(pod)

    def filter(self, request: filtering.PodRequest, names: Sequence[str]) -> list[str]:
        """The nodes that pass the extender's filter, in input order."""
        return list(filtering.filter_nodes(self._index, request, names).passed)

    def score(self, request: filtering.PodRequest, names: Sequence[str]) -> dict[str, int]:
        """0..10 per node (MaxExtenderPriority)."""
        return {s.node: s.score
                for s in scoring.score_nodes(self._index, request, names)}

    def scores(self, request: filtering.PodRequest, names: Sequence[str], *,
               all_pods: bool = False) -> list[int]:
        """0..10 per name of ``names`` (distinct, as kube-scheduler sends them), in order."""
        return [s.score for s in scoring.score_nodes(self._index, request, names,
                                                     all_pods=all_pods)]

    @staticmethod
    def host_request(uid: str, cpu_milli: int, memory_mib: int) -> filtering.PodRequest:
        """The decoded request of a pod without GPU requests (``--score-all-pods``)."""
        return filtering.PodRequest(uid=uid, namespace="sim", name=uid, wants=(),
                                    cpu_milli=cpu_milli, memory_bytes=memory_mib * 2**20)


def resource(profile: str) -> str:
    return profiles.resource_name(profile)
