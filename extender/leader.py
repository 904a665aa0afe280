"""Leader election on a coordination.k8s.io/v1 Lease, so that only one replica writes advice
and applies re-layouts.

The usual client-go protocol: read the Lease; create it when missing; take it over when it
has expired; renew it while holding it. Like client-go, expiry is judged by this replica's own
monotonic clock, never by comparing the holder's ``renewTime`` with the local wall clock (the
machines' clocks may disagree): a replica remembers when it last saw the Lease's holder,
``renewTime`` or ``resourceVersion`` change, and the Lease has expired only when
``leaseDurationSeconds`` have passed since then with no change. (A replica that has just
started therefore waits one lease duration before taking over a Lease nobody renews.)
``renewTime`` and ``acquireTime`` are still written, as RFC 3339 MicroTime, for people. Every
write carries the ``resourceVersion`` read, so two candidates racing for an
expired Lease cannot both win (the API answers 409 Conflict to the loser). The write is a
merge patch with the resourceVersion as precondition, which has the semantics of a replace
here because the whole spec is written. A 409 is not read as a loss by itself: a renewal
whose answer was lost (a proxy's 504) is retried by the client with the resourceVersion it
has itself replaced, and answered 409; the Lease, read again, says who holds it, and a replica
it names goes on leading (as in client-go). A holder that
cannot renew within the lease duration stops calling itself leader before anyone else can
take over (it uses its own monotonic clock, not the server's time), with a margin (2 s of 15;
client-go's renewDeadline leaves 5) for the writes it has begun. On shutdown the holder
releases the Lease (no holder, ``leaseDurationSeconds`` 1, as client-go's ReleaseOnCancel), and
a Lease with no holder is free at once: another replica takes over at its next try, within
``renew_s``, not a whole lease duration later.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from migfit import kube

log = logging.getLogger(__name__)

DEFAULT_LEASE = "migfit-relayout"
# The most that a leader stops acting before its Lease may expire (``LeaseElector.margin_s``).
MARGIN_S = 2.0
# How long a shutdown waits for the Lease's release (``LeaseElector.release``).
RELEASE_TIMEOUT_S = 2.0


def default_identity() -> str:
    """``POD_NAME`` when set (the Downward API), else host name and a random suffix."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"


def _micro(ts: datetime.datetime) -> str:
    return ts.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Hold a Lease while running; ``is_leader`` says whether this replica may act now."""

    def __init__(
        self,
        api: kube.KubeClient | Any,
        *,
        namespace: str,
        name: str = DEFAULT_LEASE,
        identity: str | None = None,
        lease_s: float = 15.0,
        renew_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if renew_s >= lease_s:
            raise ValueError("renew_s must be shorter than lease_s")
        # A KubeClient (migfit.kube); a bare kubernetes-asyncio ApiClient is wrapped in one.
        self.api = kube.as_client(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_s = lease_s
        self.renew_s = renew_s
        # The leader stops acting this long before its Lease can expire for anyone else (as
        # client-go's renewDeadline, 10 s of 15, does): a write begun just before the end must still
        # land first. 2 s at most, and never so much that one failed renewal (the next try
        # comes ``renew_s`` later) would end a term that the try after it renews.
        self.margin_s = max(0.0, min(MARGIN_S, (lease_s - 2 * renew_s) / 2))
        self.clock = clock
        self._valid_until = 0.0
        # The Lease as last observed (holder, renewTime, resourceVersion), and when (clock()).
        self._observed: tuple[Any, Any, Any] | None = None
        self._observed_at = 0.0
        self.changed = asyncio.Event()  # set whenever leadership is gained or lost

    @property
    def is_leader(self) -> bool:
        return self.clock() < self._valid_until

    def _body(self, rv: str | None, *, transitions: int | None, acquired: str | None,
              holder: str | None = None, duration_s: int | None = None) -> dict[str, Any]:
        """The Lease as this replica writes it (a merge patch; ``rv``: its precondition):
        held by ``holder`` (this replica by default) for ``duration_s`` (the lease's), renewed
        now; ``transitions`` None leaves the count as it is."""
        now = _micro(datetime.datetime.now(tz=datetime.UTC))
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if rv:
            meta["resourceVersion"] = rv
        spec: dict[str, Any] = {
            "holderIdentity": self.identity if holder is None else holder,
            "leaseDurationSeconds": max(1, round(self.lease_s)) if duration_s is None
            else duration_s,
            "acquireTime": acquired or now, "renewTime": now}
        if transitions is not None:
            spec["leaseTransitions"] = transitions
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": spec}

    async def try_acquire(self) -> bool:
        """One round of the protocol; True when this replica holds the Lease afterwards."""
        started = self.clock()
        was = self.is_leader
        try:
            try:
                return await self._round(started, was)
            except kube.ApiError as exc:
                if not exc.conflict:
                    raise
            # 409 Conflict: someone else wrote first, or this replica did: a write whose answer
            # was lost (a proxy's 504, a timeout) is retried by the client with the
            # resourceVersion it has itself replaced. The Lease says which; client-go, too,
            # reads it again and goes on leading while it names this replica.
            return await self._round(self.clock(), was)
        except kube.ApiError as exc:
            if exc.conflict:  # again, after a fresh read: someone else wrote (or created it)
                return self._lost(was)
            log.warning("leader: lease %s/%s: %s", self.namespace, self.name, exc)
            return self.is_leader
        except Exception as exc:  # the API is unreachable: keep what is still valid
            log.warning("leader: lease %s/%s: %s", self.namespace, self.name, exc)
            return self.is_leader

    async def _round(self, started: float, was: bool) -> bool:
        """Read the Lease; create, take over or renew it: True when held afterwards, ApiError
        (409 when someone wrote in between) when a call failed."""
        api = self.api
        try:
            lease = await api.read_lease(self.namespace, self.name)
        except kube.ApiError as exc:
            if not exc.not_found:
                raise
            self._observe(await api.create_lease(
                self.namespace, self._body(None, transitions=0, acquired=None)))
            return self._won(started, was)
        self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        rv = (lease.get("metadata") or {}).get("resourceVersion")
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            acquired = spec.get("acquireTime")
        else:
            # A Lease with no holder (released: ``release``) is free at once, as in client-go.
            duration = float(spec.get("leaseDurationSeconds") or self.lease_s)
            if holder and self.clock() < self._observed_at + duration:
                return self._lost(was)
            transitions += 1
            acquired = None
        # A merge patch carrying the resourceVersion read: the API server treats it as a
        # precondition and answers 409 Conflict when someone else wrote in between.
        self._observe(await api.update_lease(
            self.namespace, self.name,
            self._body(rv, transitions=transitions, acquired=acquired)))
        return self._won(started, was)

    def _observe(self, lease: dict[str, Any]) -> None:
        """Remember when the Lease last changed, by this replica's monotonic clock."""
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"),
                  (lease.get("metadata") or {}).get("resourceVersion"))
        if record != self._observed:
            self._observed = record
            self._observed_at = self.clock()

    def _won(self, started: float, was: bool) -> bool:
        # Counted from before the request (the server may have seen it that early; a follower
        # that saw it counts its lease duration from later still), less the margin.
        self._valid_until = started + self.lease_s - self.margin_s
        if not was:
            log.info("leader: %s holds lease %s/%s", self.identity, self.namespace, self.name)
            self.changed.set()
        return True

    def _lost(self, was: bool) -> bool:
        self._valid_until = 0.0
        if was:
            log.info("leader: %s lost lease %s/%s", self.identity, self.namespace, self.name)
            self.changed.set()
        return False

    def resign_locally(self) -> None:
        """Stop acting as leader now; the Lease then expires on its own (``release`` frees it
        at once)."""
        self._lost(self.is_leader)

    async def release(self) -> None:
        """Stop acting as leader and, when this replica held the Lease, free it: one write
        with no holder, ``leaseDurationSeconds`` 1 and ``renewTime`` now, conditional on the
        resourceVersion of this replica's last write, as client-go's ReleaseOnCancel. Another
        replica then takes it at its next try instead of waiting a whole lease duration. Bounded
        by ``RELEASE_TIMEOUT_S``; a failure is logged and the Lease expires on its own."""
        held = self.is_leader
        self.resign_locally()
        holder, _, rv = self._observed or (None, None, None)
        if not held or holder != self.identity or not rv:
            return
        body = self._body(rv, transitions=None, acquired=None, holder="", duration_s=1)
        try:
            async with asyncio.timeout(RELEASE_TIMEOUT_S):
                self._observe(await self.api.update_lease(self.namespace, self.name, body))
        except Exception as exc:  # shutting down: the Lease expires on its own anyway
            log.warning("leader: could not release lease %s/%s: %s", self.namespace,
                        self.name, exc)
            return
        log.info("leader: %s released lease %s/%s", self.identity, self.namespace, self.name)

    async def run(self) -> None:
        """Try to acquire or renew every ``renew_s`` until cancelled; then release the Lease
        when held (the extender's shutdown cancels this task once the writers have stopped)."""
        try:
            while True:
                await self.try_acquire()
                await asyncio.sleep(self.renew_s)
        finally:
            await self.release()
