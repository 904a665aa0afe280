"""Apply mode (``--apply-relayout``): drive safe re-layouts through NVIDIA's MIG Manager.

The MIG Manager does not drain pods or check safety (reference/MIG.md 5), so migfit does what
the GPU Operator documents, for safe nodes only (no bound pod uses a GPU there). What happens
to one node, and when, is the pure state machine of ``migfit.extender.relayout_machine``
(its docstring tells the protocol); this module is the loop that performs its calls through
``migfit.kube`` and feeds the answers back.

Every ``interval_s``, and only while this replica holds the Lease, a pass:

1. plans from the cluster view: re-layouts in flight (a taint or a ``tainted``/``applying``
   record on a node) that no task here drives are adopted, whoever started them;
2. with ``--apply-custom-configs``, writes the custom configs of the recommendations into the
   ConfigMap the MIG Manager reads (``relayout_machine.stage``); a re-layout to one starts
   only once it has been there ``--config-sync`` seconds;
3. when there is room for new work, lists the nodes again from the API, so that the bound
   ``--max-relayouts`` counts what every replica started (a watch cache may lag behind
   another replica's writes), and starts safe recommendations within it (to named configs,
   and to the staged custom configs that are ready).

On ``failed``, a timeout, a wedged node (state stuck in ``pending``) or a pod bound meanwhile
whose profile the new layout lacks, the taint stays, the record says ``"state": "failed"``
with the reason, ``migfit.io/relayout-failed`` is set, a Warning Event and a metric record
it, and the node is never retried until an operator removes the taint and both annotations
(``kubectl taint node NODE migfit.io/relayout-`` and ``kubectl annotate node NODE
migfit.io/relayout- migfit.io/relayout-failed-``). Until its taint goes, a failed node keeps
its place under ``--max-relayouts`` (``relayout_machine.holds_slot``; logged once, and the
``migfit_relayout_held_slots`` gauge), so a failure that fails every change stops at the
bound instead of taking one node after another out of service.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from migfit import advisor, cluster, decoding, keys, kube, migparted, records
from migfit.extender import advice as surfaces
from migfit.extender import leader as leadership
from migfit.extender import relayout_machine as machine

log = logging.getLogger(__name__)

ANNOTATION = keys.ANNOTATION_RELAYOUT
FAILED = keys.ANNOTATION_RELAYOUT_FAILED
LABEL_CONFIG = keys.LABEL_CONFIG
REASON_STARTED = machine.REASON_STARTED
REASON_DONE = machine.REASON_DONE
REASON_FAILED = machine.REASON_FAILED
REASON_ABORTED = machine.REASON_ABORTED
Settings = machine.Settings
BUSY_REST_S = 600.0  # a busy node whose run was aborted is not started again for this long
Outcome = machine.Outcome


class Relayouter:
    """A background task that applies safe recommendations while this replica leads."""

    def __init__(
        self,
        state: cluster.Cluster,
        api: kube.KubeClient | Any,
        *,
        elector: leadership.LeaseElector | None,
        cache: surfaces.AdviceCache | None = None,
        metrics: surfaces.Metrics | None = None,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        # A KubeClient (migfit.kube); a bare kubernetes-asyncio ApiClient is wrapped in one.
        self.api = kube.as_client(api)
        self.elector = elector
        self.cache = cache if cache is not None else surfaces.AdviceCache()
        self.metrics = metrics
        self.settings = settings or Settings()
        self.clock = clock
        self.wall_clock = wall_clock  # only for the "started" stamp other replicas read
        self._tasks: dict[str, asyncio.Task[Outcome]] = {}
        self.outcomes: list[Outcome] = []
        # --apply-custom-configs: when the next config written will be ready (wall clock)
        self._next_ready: float | None = None
        self._told: set[str] = set()  # staging problems already logged
        # Tainted nodes whose record a newer migfit wrote, and since when (this clock) they
        # have been left to it: failed once that is longer than the timeout (a rollback).
        self._newer: dict[str, float] = {}
        # --apply-custom-configs: the ClusterPolicy check's answer, and when it was made
        self._policy: tuple[float, bool | None, str] | None = None
        # Busy nodes whose last run was aborted, and until when (this clock) they are not
        # started again: the advice may stand while what aborted it does too (a pod the
        # DCGM report does not place), and tainting the node every pass would be a loop.
        self._resting: dict[str, float] = {}
        # Failed nodes still tainted that hold --max-relayouts slots, as last logged.
        self._holding: tuple[str, ...] = ()

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader

    @property
    def in_flight(self) -> list[str]:
        return sorted(n for n, t in self._tasks.items() if not t.done())

    async def run(self) -> None:
        """Until cancelled: adopt and start re-layouts while leading; otherwise only wait.

        Nothing is planned before the cluster view has synced (a half-listed cluster shows
        busy nodes as idle), and a replica that does not lead checks every second, so that
        a new leader takes over within a second rather than a whole interval.
        """
        try:
            while True:
                if not (self.leading and self.state.synced):
                    await asyncio.sleep(min(1.0, self.settings.interval_s))
                    continue
                try:
                    await self.step()
                except kube.ApiError as exc:  # the next pass tries again
                    log.warning("relayout: %s", exc)
                pause = self.settings.interval_s
                if self._next_ready is not None:
                    # A config written waits for the MIG Managers' volumes: come back then.
                    pause = min(pause, max(0.5, self._next_ready - self.wall_clock() + 0.5))
                await asyncio.sleep(pause)
        finally:
            for t in self._tasks.values():
                t.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def step(self) -> list[str]:
        """One pass: adopt re-layouts in flight, start new ones within the cluster-wide bound;
        the names of the nodes taken on. Nothing while this replica does not lead."""
        for name, t in list(self._tasks.items()):
            if t.done():
                del self._tasks[name]
        if not self.leading:
            return []
        try:
            advice = await self.cache.fresh(self.state)  # off the event loop
        except surfaces.AdviceUnavailable:  # logged; the next pass tries again
            return []
        now = self.clock()
        self._resting = {n: t for n, t in self._resting.items() if t > now}
        recommendations = [r for r in advice.recommendations if r.node not in self._resting]
        viewed = [st.node for st in self.state.nodes()]
        staged = None
        if self.settings.custom_configs is not None:
            staged = await self._stage(advice.recommendations)
            if not self.leading:
                return []
        overdue = frozenset(n for n, t in self._newer.items()
                            if now - t >= self.settings.timeout_s)
        chosen = machine.plan(viewed, running=self._tasks, staged=staged,
                              recommendations=recommendations, settings=self.settings,
                              bound=self.state.pods_on, overdue=overdue)
        if chosen.start:
            # New work: count what is in flight from the API, not from a view that may lag.
            listed = await self._list_nodes()
            if not self.leading:
                return []
            chosen = machine.plan(viewed if listed is None else listed, running=self._tasks,
                                  recommendations=() if listed is None
                                  else recommendations, settings=self.settings,
                                  staged=staged, bound=self.state.pods_on, overdue=overdue)
        for name, version in chosen.newer:
            if name not in self._newer:  # said once while it lasts
                log.warning("relayout: node %s is under a re-layout by a newer migfit (record "
                            "version %d; this one reads %d): left to it, taint and all, for "
                            "up to %.0fs, then failed; finish the upgrade", name, version,
                            keys.RELAYOUT_VERSION, self.settings.timeout_s)
        self._newer = {name: self._newer.get(name, now) for name, _ in chosen.newer}
        if chosen.holding != self._holding and chosen.holding:  # said once while it lasts
            full = len(chosen.holding) + len(chosen.in_flight) >= chosen.limit
            log.warning("relayout: %d failed re-layout(s) hold the --max-relayouts budget "
                        "(%d of %d slots, their taint still on): %s%s; once a node is fixed, "
                        "clear it with: %s", len(chosen.holding), len(chosen.holding),
                        chosen.limit, ", ".join(chosen.holding),
                        "; no new re-layout starts until they are cleared" if full else "",
                        machine.clear_command("NODE"))
        self._holding = chosen.holding
        taken = [*chosen.adopt, *chosen.start]
        for run in taken:
            self._tasks[run.node] = asyncio.create_task(self._apply(run),
                                                        name=f"migfit-relayout-{run.node}")
        if self.metrics is not None:
            # From the nodes, not a running count: they survive a restart or a change of
            # leader, and the failed count drops when an operator clears a node.
            self.metrics.in_progress.set(len(chosen.in_flight))
            self.metrics.failed_nodes.set(chosen.failed)
            self.metrics.held_slots.set(len(chosen.holding))
        return [run.node for run in taken]

    async def _stage(self, recommendations: Sequence[advisor.Recommendation]
                     ) -> frozenset[str]:
        """Write the custom configs of the recommendations the apply mode may start into the
        ConfigMap (``machine.stage``); the ones ready to start re-layouts to."""
        targets = {rec.target: rec.mig_parted for rec in recommendations
                   if rec.config is None and rec.mig_parted is not None
                   and machine.may_start(rec, self.settings)}
        self._next_ready = None
        if self.metrics is not None:
            self.metrics.configs_waiting.set(0)
        if not targets or not await self._policy_reads_configmap():
            return frozenset()
        try:
            seen = await self._read_configs()
        except kube.ApiError as exc:
            log.warning("relayout: cannot read the custom configs' ConfigMap (%s); no "
                        "re-layout to a custom config this pass", exc)
            return frozenset()
        staging = machine.stage(seen, targets, wall=self.wall_clock(), settings=self.settings)
        self._next_ready = staging.next_ready
        for problem in sorted(set(staging.problems) - self._told):
            log.warning("relayout: %s; re-layouts to it wait", problem)
        self._told = set(staging.problems)  # each said once while it lasts
        written = False
        if staging.body is not None and self.leading:
            assert self.settings.custom_configs is not None
            try:
                await self.api.patch_config_map(*self.settings.custom_configs,
                                                dict(staging.body))
            except kube.ApiError as exc:  # a 409 or an outage: the next pass writes them
                log.warning("relayout: adding %s to the ConfigMap failed (%s); the next pass "
                            "tries again", ", ".join(staging.added), exc)
            else:
                written = True
                if self.metrics is not None:
                    self.metrics.configs_added.inc(len(staging.added))
                log.info("relayout: added %s to the ConfigMap; re-layouts to them start in "
                         "%.0fs, once the MIG Managers' volumes have them",
                         ", ".join(staging.added), self.settings.config_sync_s)
                for rec in recommendations:
                    if rec.config is None and rec.target in staging.added:
                        await self._event(rec.node, machine.Emit(
                            machine.REASON_CONFIG, "Normal",
                            f"Added config {rec.target} to ConfigMap "
                            f"{'/'.join(self.settings.custom_configs)}; the re-layout starts "
                            f"in {self.settings.config_sync_s:.0f}s, once the MIG Manager's "
                            "file has it"))
        if self.metrics is not None:
            self.metrics.configs_waiting.set(
                len(staging.waiting) + (len(staging.added) if written else 0))
        return staging.ready

    async def _policy_reads_configmap(self) -> bool:
        """Whether the MIG Managers read the ConfigMap the custom configs go into, by the GPU
        Operator's ClusterPolicy, read every ``policy_check_s``: a custom config label on
        a node whose MIG Manager reads another file fails there, leaving the node tainted.
        Unknown (no ClusterPolicy, or not readable): go on, said once."""
        now = self.clock()
        if self._policy is None or now - self._policy[0] >= self.settings.policy_check_s:
            assert self.settings.custom_configs is not None
            try:
                items, _ = await self.api.list_cluster_policies()
                verdict, why = machine.policy_reads(items, self.settings.custom_configs)
            except kube.ApiError as exc:
                verdict, why = None, f"the ClusterPolicies could not be read ({exc})"
            before = self._policy
            self._policy = (now, verdict, why)
            if before is None or before[1:] != (verdict, why):
                if verdict is False:
                    log.error("relayout: %s: the MIG Managers would not find the custom "
                              "configs migfit writes; none is written or applied until it "
                              "names ConfigMap %s (docs/relayout.md, custom configs)", why,
                              "/".join(self.settings.custom_configs))
                elif verdict is None:
                    log.warning("relayout: %s; custom configs are written to %s without "
                                "checking that the MIG Managers read it", why,
                                "/".join(self.settings.custom_configs))
        return self._policy[1] is not False

    async def wait(self) -> list[Outcome]:
        """Wait for the re-layouts in flight (for tests and shutdown)."""
        done = await asyncio.gather(*self._tasks.values())
        return list(done)

    async def _list_nodes(self) -> list[records.NodeRecord] | None:
        try:
            items, _ = await self.api.list_nodes()
        except kube.ApiError as exc:
            log.warning("relayout: cannot list the nodes (%s); no new re-layout this pass", exc)
            return None
        return [decoding.node_from_api(obj, self.state.catalog) for obj in items]

    # ------------------------------------------------------------ one node

    async def _apply(self, run: machine.Run) -> Outcome:
        try:
            outcome = await self._drive(run)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a defect, not an API answer: what was written stays
            log.error("relayout %s: %s: %s", run.node, type(exc).__name__, exc)
            outcome = Outcome(run.node, "error", f"internal error: {exc}")
        if outcome.result in ("success", "skipped", "lost-leadership"):
            log.info("relayout %s: %s %s", run.node, outcome.result, outcome.reason)
        else:
            log.warning("relayout %s: %s: %s", run.node, outcome.result, outcome.reason)
        self.outcomes.append(outcome)
        if outcome.result == "aborted" and run.record.running:
            self._resting[run.node] = self.clock() + BUSY_REST_S
        if self.metrics is not None:
            self.metrics.applied.labels(result=outcome.result).inc()
        return outcome

    async def _drive(self, run: machine.Run) -> Outcome:
        seen: machine.Seen = None
        while True:
            step = machine.advance(run, seen, machine.Context(
                now=self.clock(), wall=self.wall_clock(), leading=self.leading,
                settings=self.settings))
            run = step.run
            for emit in step.emits:
                await self._event(run.node, emit)
            if isinstance(step.action, machine.Done):
                return step.action.outcome
            seen = await self._perform(run.node, step.action)

    async def _perform(self, name: str, action: machine.Action) -> machine.Seen:
        """Make the call ``action`` asks for; its answer as the machine reads it."""
        try:
            if isinstance(action, machine.ReadNode):
                obj = await self.api.read_node(name)
                spec = obj.get("spec") or {}
                taints = tuple(t for t in spec.get("taints") or [] if isinstance(t, Mapping))
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                return machine.NodeSeen(decoding.node_from_api(obj, self.state.catalog),
                                        taints=taints, resource_version=rv)
            if isinstance(action, machine.ListPods):
                items, _ = await self.api.list_pods(field_selector=f"spec.nodeName={name}")
                decoded = [(decoding.pod_from_api(obj), obj) for obj in items]
                bound = [(p, obj) for p, obj in decoded if p is not None and p.node == name]
                return machine.PodsSeen(tuple(p for p, _ in bound), restarts={
                    p.uid: decoding.restart_count(obj) for p, obj in bound})
            if isinstance(action, machine.ReadUsage):
                scraper = self.cache.usage
                got = None if scraper is None else scraper.placed(name)
                return machine.UsageSeen(None, None) if got is None else machine.UsageSeen(*got)
            if isinstance(action, machine.Patch):
                await self.api.patch_node(name, dict(action.body))
                return machine.Written()
            if isinstance(action, machine.ReadConfigMap):
                seen = await self._read_configs()
                if (self.settings.custom_configs is not None
                        and not await self._policy_reads_configmap()):
                    assert self._policy is not None
                    seen = dataclasses.replace(seen, unread=self._policy[2])
                return seen
            if isinstance(action, machine.PatchConfigMap):
                assert self.settings.custom_configs is not None
                await self.api.patch_config_map(*self.settings.custom_configs,
                                                dict(action.body))
                return machine.Written()
            if isinstance(action, machine.Sleep):
                await asyncio.sleep(action.seconds)
                return machine.Slept()
        except kube.ApiError as exc:
            return machine.CallFailed(brief=str(exc), retryable=exc.retryable,
                                      conflict=exc.conflict, not_found=exc.not_found)
        raise TypeError(f"not an action: {action!r}")

    async def _read_configs(self) -> machine.ConfigMapSeen:
        """The custom-config ConfigMap, and the configs the nodes use now (listed from the
        API, not the watch cache, which may not show this replica's last label yet: a config
        is removed only when no node's label or re-layout record names it). The nodes are
        listed only when some config migfit added is old enough to be removed."""
        assert self.settings.custom_configs is not None
        ns, name = self.settings.custom_configs
        obj = await self.api.read_config_map(ns, name)
        meta = obj.get("metadata") or {}
        data = obj.get("data") or {}
        text = data.get(migparted.CONFIGMAP_KEY) if isinstance(data, Mapping) else None
        if not isinstance(text, str):
            text = None
        annotations = meta.get("annotations") or {}
        added = keys.decode_configs(annotations.get(keys.ANNOTATION_CONFIGS))
        wall = self.wall_clock()
        prunable = any(wall - t >= self.settings.config_keep_s for t in added.values())
        items, _ = await self.api.list_nodes() if prunable else ([], "")
        in_use: set[str] = set()
        for node in items:
            labels = (node.get("metadata") or {}).get("labels") or {}
            notes = (node.get("metadata") or {}).get("annotations") or {}
            if isinstance(labels.get(LABEL_CONFIG), str):
                in_use.add(labels[LABEL_CONFIG])
            record = keys.relayout_of(notes) if isinstance(notes, Mapping) else None
            if record is not None and record.target:
                in_use.add(record.target)
            newer = keys.newer_relayout(notes) if isinstance(notes, Mapping) else None
            if newer is not None and newer["target"]:
                in_use.add(newer["target"])  # a newer migfit's run may still set it
        return machine.ConfigMapSeen(
            text=text, added=added, resource_version=str(meta.get("resourceVersion") or ""),
            in_use=frozenset(in_use))

    async def _event(self, name: str, emit: machine.Emit) -> None:
        try:
            await surfaces.emit_event(self.api, kind="Node", name=name, namespace="", uid=None,
                                      reason=emit.reason, message=emit.message,
                                      event_type=emit.type)
        except kube.ApiError as exc:
            log.warning("relayout %s: event %s not sent: %s", name, emit.reason, exc)
