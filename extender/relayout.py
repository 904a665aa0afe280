"""Apply mode (``--apply-relayout``): drive safe re-layouts through NVIDIA's MIG Manager.

The MIG Manager does not drain pods or check safety (reference/MIG.md 5), so migfit does what
the GPU Operator documents, for safe nodes only (no bound pod uses a MIG instance there):

1. taint the node ``migfit.io/relayout=pending:NoSchedule`` (the extender also treats the
   node as unresolvable), then re-check that no pod was bound in the meantime;
2. set ``nvidia.com/mig.config`` to the target and record the attempt in the
   ``migfit.io/relayout`` annotation (``"state": "applying"``, and ``"started"``: the wall
   clock then, RFC 3339, so that a new leader adopting the node keeps the timeout and the
   wedge timer running from there instead of from zero);
3. wait for ``nvidia.com/mig.config.state=success`` and an allocatable equal to the target
   layout (the device plugin re-advertises, kubelet updates the node);
4. remove the taint and the marks.

Before anything on the node changed, a conflict (someone wrote the node between the read and
the taint: 409 on the resourceVersion precondition) or an unreadable node is a retryable skip:
nothing is marked and a later pass may try again. While waiting, a transient API error (429,
5xx, no connection) is retried with backoff until the timeout.

On ``failed``, a timeout, or a wedged node (state stuck in ``pending``) the taint stays, the
annotation says ``"state": "failed"`` with the reason, ``migfit.io/relayout-failed`` is set,
a Warning Event and a metric record it, and the node is never retried until an operator
removes that annotation and the taint. At most ``max_concurrent`` nodes change at once. Only
the Lease holder acts; a new leader adopts nodes it finds in ``"applying"`` (a taint is never
left unaccounted for).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from migfit import advisor, cluster, decoding, keys
from migfit.extender import advice as surfaces
from migfit.extender import kubeapi
from migfit.extender import leader as leadership

log = logging.getLogger(__name__)

TAINT = {"key": keys.TAINT_RELAYOUT, "value": "pending", "effect": "NoSchedule"}
ANNOTATION = keys.ANNOTATION_RELAYOUT
FAILED = advisor.ANNOTATION_RELAYOUT_FAILED
LABEL_CONFIG = keys.LABEL_CONFIG
REASON_STARTED = "MigRelayoutStarted"
REASON_DONE = "MigRelayoutSucceeded"
REASON_FAILED = "MigRelayoutFailed"


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    max_concurrent: int = 1  # nodes being re-laid out at once
    timeout_s: float = 1200.0  # from setting the label to success and the new allocatable
    wedge_s: float = 600.0  # mig.config.state stuck at pending this long: wedged
    poll_s: float = 5.0
    backoff_max_s: float = 60.0  # longest wait between polls while the API keeps failing
    interval_s: float = 30.0  # how often the advice is checked for new work


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    node: str
    result: str  # success | failed | timeout | wedged | skipped | lost-leadership
    reason: str = ""


def _patch_meta(**kwargs: Any) -> dict[str, Any]:
    return {"metadata": kwargs}


class Relayouter:
    """A background task that applies safe recommendations while this replica leads."""

    def __init__(
        self,
        state: cluster.Cluster,
        api: k8s.ApiClient,
        *,
        elector: leadership.LeaseElector | None,
        cache: surfaces.AdviceCache | None = None,
        metrics: surfaces.Metrics | None = None,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.api = api
        self.elector = elector
        self.cache = cache if cache is not None else surfaces.AdviceCache()
        self.metrics = metrics
        self.settings = settings or Settings()
        self.clock = clock
        self.wall_clock = wall_clock  # only for the "started" stamp other replicas read
        self._tasks: dict[str, asyncio.Task[Outcome]] = {}
        self.outcomes: list[Outcome] = []

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader

    @property
    def in_flight(self) -> list[str]:
        return sorted(n for n, t in self._tasks.items() if not t.done())

    async def run(self) -> None:
        """Until cancelled: adopt and start re-layouts while leading; otherwise only wait."""
        try:
            while True:
                if self.leading:
                    await self.step()
                await asyncio.sleep(self.settings.interval_s)
        finally:
            for t in self._tasks.values():
                t.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def step(self) -> list[str]:
        """Adopt unfinished re-layouts, then start new ones within the bound; the names started."""
        for name, t in list(self._tasks.items()):
            if t.done():
                del self._tasks[name]
        started: list[str] = []
        failed = 0
        for st in self.state.nodes():
            rec = st.node
            failed += FAILED in rec.annotations
            if (rec.relayout_tainted and st.name not in self._tasks
                    and FAILED not in rec.annotations):
                mark = _mark(rec.annotations.get(ANNOTATION))
                if mark.get("state") == "applying" and len(self._tasks) < \
                        self.settings.max_concurrent:
                    self._start(st.name, None, mark)
                    started.append(st.name)
        advice = self.cache.get(self.state)
        for r in advice.recommendations:
            if len(self._tasks) >= self.settings.max_concurrent:
                break
            if r.disruptive or r.node in self._tasks or r.config is None:
                # Custom configs must first be added to the ConfigMap by an operator.
                continue
            self._start(r.node, r, None)
            started.append(r.node)
        if self.metrics is not None:
            self.metrics.in_progress.set(len(self._tasks))
            # From the nodes, not a running count: it drops when an operator clears a node
            # and survives a restart or a change of leader.
            self.metrics.failed_nodes.set(failed)
        return started

    def _start(self, name: str, rec: advisor.Recommendation | None,
               mark: dict[str, Any] | None) -> None:
        self._tasks[name] = asyncio.create_task(self._apply(name, rec, mark),
                                                name=f"migfit-relayout-{name}")

    async def wait(self) -> list[Outcome]:
        """Wait for the re-layouts in flight (for tests and shutdown)."""
        done = await asyncio.gather(*self._tasks.values())
        return list(done)

    # ------------------------------------------------------------ one node

    async def _read(self, name: str) -> dict[str, Any]:
        return await kubeapi.read_json(
            await surfaces.core_api(self.api).read_node(name, _preload_content=False))

    async def _apply(self, name: str, rec: advisor.Recommendation | None,
                     mark: dict[str, Any] | None) -> Outcome:
        try:
            outcome = await self._drive(name, rec, mark)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an API error: the taint stays, recorded as a failure
            log.warning("relayout %s: %s", name, exc)
            outcome = await self._fail(name, "error", f"API error: {exc}", {})
        self.outcomes.append(outcome)
        if self.metrics is not None:
            self.metrics.applied.labels(result=outcome.result).inc()
        return outcome

    async def _drive(self, name: str, rec: advisor.Recommendation | None,
                     mark: dict[str, Any] | None) -> Outcome:
        core = surfaces.core_api(self.api)
        if mark is None:
            assert rec is not None
            try:
                obj = await self._read(name)
            except Exception as exc:
                if not isinstance(exc, (ApiException, ValueError, *TRANSIENT)):
                    raise
                return Outcome(name, "skipped", f"cannot read the node ({_brief(exc)}); "
                               "nothing was changed, a later pass tries again")
            node = decoding.node_from_api(obj, self.state.catalog)
            if node.relayout_tainted or FAILED in node.annotations:
                return Outcome(name, "skipped", "already under re-layout or failed")
            if node.config_state in keys.REPARTITIONING_STATES:
                return Outcome(name, "skipped", "the MIG Manager is busy on it")
            try:
                await self._add_taint(name, obj)
            except ApiException as exc:
                if exc.status != 409:
                    raise  # the taint may or may not be there: recorded as a failure
                return Outcome(name, "skipped", "the node changed between reading it and "
                               "tainting it (409 Conflict); nothing was changed, a later "
                               "pass tries again")
            # A pod may have been bound between the advice and the taint: then back out.
            busy = [p.key for p in self.state.pods_on(name)
                    if p.holds_instances and p.mig_requests]
            if busy:
                await self._remove_taint(name)
                return Outcome(name, "skipped", f"pods use MIG instances: {', '.join(busy)}")
            expected = Counter(p for g in rec.gpus for p in g.after)
            mark = {"state": "applying", "target": rec.target, "from": node.config,
                    "started": _rfc3339(self.wall_clock()),
                    "expected": dict(sorted(expected.items())),
                    "gpus": [dataclasses.asdict(g) for g in rec.gpus],
                    "unblocks": list(rec.unblocks), "disrupts": list(rec.disrupts)}
            await core.patch_node(name, _patch_meta(
                labels={LABEL_CONFIG: rec.target},
                annotations={ANNOTATION: json.dumps(mark, sort_keys=True)}),
                _content_type=surfaces.MERGE_PATCH)
            await self._event(name, REASON_STARTED, "Normal",
                              f"Re-laying out to {rec.target}: tainted {TAINT['key']}="
                              f"{TAINT['value']}:{TAINT['effect']}, set {LABEL_CONFIG}")
        return await self._wait(name, mark)

    async def _wait(self, name: str, mark: dict[str, Any]) -> Outcome:
        expected = {str(k): int(v) for k, v in (mark.get("expected") or {}).items()}
        target = str(mark.get("target", ""))
        # From when the label was set, also for a node adopted from another leader (its
        # record says when); a stamp from a clock ahead of ours counts as now.
        started = self.clock() - max(0.0, self.wall_clock() - _parse_time(
            mark.get("started"), default=self.wall_clock()))
        # The MIG Manager sets pending as soon as it sees the label: on adoption the state may
        # have been pending since then. Once another state is seen, pending counts anew.
        pending_since: float | None = started
        failing = 0  # API errors in a row
        while True:
            if not self.leading:
                # Leave taint and mark: the next leader adopts the node.
                return Outcome(name, "lost-leadership")
            try:
                node = decoding.node_from_api(await self._read(name), self.state.catalog)
            except Exception as exc:
                if not _transient(exc):
                    raise
                failing += 1
                now = self.clock()
                left = self.settings.timeout_s - (now - started)
                if left <= 0:
                    return await self._fail(name, "timeout", f"no success with the new "
                                            f"allocatable within {self.settings.timeout_s:.0f}s "
                                            f"(the API kept failing: {_brief(exc)})", mark)
                log.warning("relayout %s: reading the node failed (%s), retrying",
                            name, _brief(exc))
                await asyncio.sleep(min(left, self._backoff(failing)))
                continue
            failing = 0
            now = self.clock()
            state = node.config_state
            if node.config != target:
                return await self._fail(name, "failed", f"{LABEL_CONFIG} was changed to "
                                        f"{node.config!r} by someone else", mark)
            if state == "failed":
                return await self._fail(name, "failed", "the MIG Manager reported "
                                        "mig.config.state=failed", mark)
            if state == "success" and dict(node.advertised) == expected:
                try:
                    await self._succeed(name, mark)
                except Exception as exc:
                    if not _transient(exc):
                        raise
                    # Idempotent: the next round sees success again and finishes.
                    log.warning("relayout %s: removing the taint failed (%s), retrying",
                                name, _brief(exc))
                    failing += 1
                    await asyncio.sleep(self._backoff(failing))
                    continue
                return Outcome(name, "success")
            if state == "pending":
                pending_since = now if pending_since is None else pending_since
                if now - pending_since >= self.settings.wedge_s:
                    return await self._fail(name, "wedged", f"mig.config.state stuck at "
                                            f"pending for {now - pending_since:.0f}s", mark)
            else:
                pending_since = None
            if now - started >= self.settings.timeout_s:
                return await self._fail(name, "timeout", f"no success with the new allocatable "
                                        f"within {self.settings.timeout_s:.0f}s (state "
                                        f"{state!r}, advertised {dict(node.advertised)})", mark)
            await asyncio.sleep(self.settings.poll_s)

    async def _succeed(self, name: str, mark: dict[str, Any]) -> None:
        await self._remove_taint(name)
        await surfaces.core_api(self.api).patch_node(name, _patch_meta(
            labels={keys.LABEL_RELAYOUT_RECOMMENDED: None},
            annotations={ANNOTATION: None}), _content_type=surfaces.MERGE_PATCH)
        await self._event(name, REASON_DONE, "Normal",
                          f"Re-laid out to {mark.get('target')}; taint removed")

    async def _fail(self, name: str, result: str, reason: str,
                    mark: dict[str, Any]) -> Outcome:
        failed = {**mark, "state": "failed", "result": result, "reason": reason}
        try:
            await surfaces.core_api(self.api).patch_node(name, _patch_meta(annotations={
                ANNOTATION: json.dumps(failed, sort_keys=True),
                FAILED: json.dumps({"result": result, "reason": reason}, sort_keys=True)}),
                _content_type=surfaces.MERGE_PATCH)
            await self._event(name, REASON_FAILED, "Warning",
                              f"Re-layout to {mark.get('target')} {result}: {reason}. The "
                              f"taint {TAINT['key']} stays; remove it and the {FAILED} "
                              f"annotation once the node is fixed")
        except Exception as exc:
            log.error("relayout %s: recording the failure failed: %s", name, exc)
        if self.metrics is not None:
            self.metrics.failed_nodes.inc()
        return Outcome(name, result, reason)

    async def _event(self, name: str, reason: str, kind: str, message: str) -> None:
        try:
            await surfaces.emit_event(self.api, kind="Node", name=name, namespace="", uid=None,
                                      reason=reason, message=message, event_type=kind)
        except Exception as exc:
            log.warning("relayout %s: event %s not sent: %s", name, reason, exc)

    def _backoff(self, failing: int) -> float:
        """The wait after ``failing`` API errors in a row: doubling from ``poll_s``."""
        return float(min(self.settings.backoff_max_s,
                         self.settings.poll_s * 2 ** min(failing, 30)))

    async def _add_taint(self, name: str, obj: dict[str, Any]) -> None:
        """Add the taint to the taints read, with the resourceVersion read as precondition.

        A merge patch replaces the whole list, which is safe only because the API server
        answers 409 Conflict (and changes nothing) when the node was written since ``obj`` was
        read. (A JSON-patch ``test`` would fail with 422, indistinguishable from a bad patch.)
        """
        taints = list((obj.get("spec") or {}).get("taints") or [])
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        await surfaces.core_api(self.api).patch_node(name, {
            "metadata": {"resourceVersion": rv} if rv else {},
            "spec": {"taints": [*taints, dict(TAINT)]}}, _content_type=surfaces.MERGE_PATCH)

    async def _remove_taint(self, name: str) -> None:
        obj = await self._read(name)
        taints = list((obj.get("spec") or {}).get("taints") or [])
        for i, t in enumerate(taints):
            if isinstance(t, dict) and t.get("key") == TAINT["key"]:
                await surfaces.core_api(self.api).patch_node(name, [
                    {"op": "test", "path": f"/spec/taints/{i}/key", "value": TAINT["key"]},
                    {"op": "remove", "path": f"/spec/taints/{i}"}])
                return


TRANSIENT: tuple[type[BaseException], ...] = (aiohttp.ClientError, asyncio.TimeoutError,
                                              OSError)


def _transient(exc: BaseException) -> bool:
    """An API error worth retrying: throttled, a server error, or no connection."""
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        return status == 429 or status >= 500
    return isinstance(exc, TRANSIENT)


def _brief(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}".strip()
    return str(exc) or type(exc).__name__


def _rfc3339(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, tz=datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: Any, *, default: float) -> float:
    """An RFC 3339 stamp as POSIX seconds; ``default`` when missing or unreadable."""
    if not isinstance(value, str) or not value:
        return default
    try:
        ts = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return default
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=datetime.UTC)
    return ts.timestamp()


def _mark(value: str | None) -> dict[str, Any]:
    if not value:
        return {}
    try:
        doc = json.loads(value)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
