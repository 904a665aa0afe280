"""The one place the simulator calls the servers' pure code: decision, filter, score, advice.

The simulator must run the same code as the webhook and the extender, never a copy. The
core package may not import the server packages statically (the import-linter contract in
pyproject.toml), so, like the CLI's composition root, this module names them as strings and
imports them on first use. A piece that is not part of this build is reported as missing
(``sources()``) and a plainly labelled stand-in takes its place, so the simulator still runs:

- decision stand-in: the trace mapping's profile (``workload.expected_profile``);
- extender filter stand-in: a node passes when it has enough free instances (what the
  scheduler's resource fit already checks);
- extender score stand-in: 0 for every node (the ``migfit`` policy is then ``default``);
The advisor (``migfit.advisor``) is core code and is imported by the engine directly.
"""

from __future__ import annotations

import functools
import importlib
import types
from collections.abc import Mapping, Sequence
from typing import Any

from migfit import cluster, profiles


@functools.cache
def _module(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):
            return None
        raise


def _has(module: str, attr: str) -> bool:
    mod = _module(module)
    return mod is not None and hasattr(mod, attr)


def sources() -> dict[str, str]:
    """Which code each step runs: the module, or ``stand-in (...)`` when it is missing."""
    return {
        "decision": ("webhook.decision.decide_pod" if _has("webhook.decision", "decide_pod")
                     else "stand-in (trace mapping)"),
        "filter": ("extender.filtering.filter_nodes"
                   if _has("extender.filtering", "filter_nodes")
                   else "stand-in (free instances)"),
        "score": ("extender.scoring.score_nodes" if _has("extender.scoring", "score_nodes")
                  else "stand-in (0)"),
        "advisor": "migfit.advisor.advise (safe nodes only)",
    }


# ---------------------------------------------------------------- the webhook


class Decider:
    """The webhook's decision for pods arriving in a cluster; cached per request and supply.

    The decision reads only the pod's annotations and which (model, profile) offers exist
    with their memory labels (webhook.view.Supply), so verdicts are cached on those.
    """

    def __init__(self, view: cluster.Cluster) -> None:
        self._cluster = view
        self._decision = _module("webhook.decision")
        wv = _module("webhook.view")
        self._tracker: Any = wv.SupplyTracker(view) if wv is not None else None
        self._policy: Any = self._decision.Policy() if self._decision is not None else None
        self._cache: dict[tuple[Any, ...], tuple[tuple[str, ...], tuple[Any, ...], str]] = {}

    @property
    def real(self) -> bool:
        return self._decision is not None and self._tracker is not None

    def decide(self, pod: Mapping[str, Any], fallback: Sequence[str]
               ) -> tuple[tuple[str, ...], tuple[Any, ...], str]:
        """(profile per container, JSON Patch, denial message or ""); ``fallback`` when the
        webhook is missing."""
        if not self.real:
            return tuple(fallback), (), ""
        assert self._decision is not None
        supply = self._tracker.supply()
        meta = pod.get("metadata", {})
        ann = meta.get("annotations", {}) if isinstance(meta, dict) else {}
        conts = tuple(c.get("name") for c in pod.get("spec", {}).get("containers", ()))
        offers = frozenset((k, o.label_mib) for k, o in supply.offers.items())
        key = (tuple(sorted(ann.items())), conts, offers, tuple(m.id for m in supply.models))
        hit = self._cache.get(key)
        if hit is None:
            verdict = self._decision.decide_pod(pod, supply=supply, policy=self._policy)
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
        self._cluster = view
        self._filtering = _module("extender.filtering")
        scoring = _module("extender.scoring")
        self._scoring = scoring if scoring is not None and hasattr(scoring,
                                                                   "score_nodes") else None

    def request(self, pod: cluster.PodRecord) -> Any:
        """The pod's decoded request (decoded once per scheduling cycle)."""
        if self._filtering is not None:
            return self._filtering.request_of(pod)
        return pod

    def filter(self, request: Any, names: Sequence[str]) -> list[str]:
        if self._filtering is not None:
            result = self._filtering.filter_nodes(self._cluster, request, names)
            return list(result.passed)
        pod: cluster.PodRecord = request
        wants = pod.mig_requests
        out = []
        for name in names:
            state = self._cluster.node(name)
            if state is not None and all(state.free.get(p, 0) >= n for p, n in wants.items()):
                out.append(name)
        return out

    def score(self, request: Any, names: Sequence[str]) -> dict[str, int]:
        """0..10 per node (MaxExtenderPriority)."""
        if self._scoring is None:
            return dict.fromkeys(names, 0)
        result = self._scoring.score_nodes(self._cluster, request, names)
        return _scores(result)


def _scores(result: Any) -> dict[str, int]:
    """``score_nodes``' answer (NodeScore tuples: node, score, ...) as a name -> int map."""
    if isinstance(result, Mapping):
        return {str(k): int(v) for k, v in result.items()}
    return {str(item[0]): int(item[1]) for item in result}


def resource(profile: str) -> str:
    return profiles.RESOURCE_PREFIX + profile
