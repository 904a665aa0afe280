"""Keeps a sink current with the cluster's Nodes and Pods: list, then watch, re-list on 410 Gone.

The API connection (configuration discovery, credentials, timeouts, error classification) is
migfit.kube's; this module is the list/watch protocol on top of it. :func:`list_once` is the
one-shot variant for workstation commands: one paginated list of each kind, no watch, and a
failure raised at once instead of retried.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import os
import random
import time
from collections.abc import Mapping
from typing import Any, Final, Literal, Protocol

from migfit import errors, kube

logger = logging.getLogger(__name__)

Kind = Literal["Node", "Pod"]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]

KINDS: Final[tuple[Kind, ...]] = ("Node", "Pod")

# Cluster-wide collection paths of the core/v1 API group.
_PATHS: Final[Mapping[Kind, str]] = {"Node": "/api/v1/nodes", "Pod": "/api/v1/pods"}
_EVENT_TYPES: Final[frozenset[str]] = frozenset({"ADDED", "MODIFIED", "DELETED"})


class Sink(Protocol):
    """What the source feeds: the cluster model implements it; objects are raw API JSON.

    A list arrives page by page, so that the raw JSON of 150,000 pods is never held at once:
    ``begin_list``, then ``list_page`` for each page (its objects applied as they come), then
    ``end_list`` when the list is complete (objects the sink holds that were not listed are
    removed). A list abandoned part way (its continue token expired) begins again."""

    def begin_list(self, kind: Kind) -> None:
        """A list of ``kind`` starts (again): forget what an abandoned one had seen."""

    def list_page(self, kind: Kind, objects: list[dict[str, Any]]) -> None:
        """One page of the list: each object as it is now."""

    def end_list(self, kind: Kind) -> None:
        """The list is complete: remove the objects of ``kind`` none of its pages held."""

    def apply(self, kind: Kind, event_type: EventType, obj: dict[str, Any]) -> None:
        """One change, already filtered: never a repeat of the version the sink holds, and
        never an older one where versions are integers (etcd)."""

    def mark_synced(self) -> None:
        """Called once, after the first complete list of both Nodes and Pods."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WatchSettings:
    """How the source talks to the API server; the defaults suit a production cluster."""

    page_size: int = 500
    """``limit`` of each list page; the list follows ``continue`` until the end."""
    watch_timeout_s: int = 300
    """The least ``timeoutSeconds`` asked of the server, which ends the stream there and the
    source re-watches; each watch asks a random value from it to twice it (``watch_timeout``)."""
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    """Longest silence on a list response before the request is abandoned."""
    watch_read_timeout_s: float | None = None
    """Silence after which a watch stream counts as dropped; None: the watch's timeout + 30."""
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0

    def watch_timeout(self) -> int:
        """``timeoutSeconds`` of one watch: from ``watch_timeout_s`` to twice it, at random."""
        # As client-go's reflector picks it (its minimum times 1 plus a random fraction), so
        # that the watches of many replicas, all opened at an API server's restart, do not
        # all end and re-open together again every timeout.
        return int(self.watch_timeout_s * (1.0 + random.random()))

    def backoff(self, attempt: int) -> float:
        """Jittered exponential delay before retry number ``attempt`` (0-based)."""
        ceiling = min(self.backoff_cap_s, self.backoff_base_s * (1 << min(attempt, 32)))
        # "Equal jitter": half the delay is fixed, half random, so many replicas do not
        # reconnect in lockstep after an API server restart but still back off.
        return ceiling / 2 + random.uniform(0, ceiling / 2)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WatchStatus:
    """A snapshot of the source's health, for ``/readyz`` and ``migfit status``."""

    synced: bool
    relists: int
    """Full lists after the first one of each kind (410 Gone, expired continue token)."""
    retries: int
    """Lists or watches retried after an error or a dropped stream."""
    skipped_events: int
    """Duplicate or stale events the source did not pass on, and watch lines it could not
    use (an unknown event type, a line that is not an event)."""
    consecutive_failures: int
    last_error: str | None
    last_error_at: float | None
    """Wall-clock time (``time.time()``) of ``last_error``."""
    resource_versions: Mapping[Kind, str | None]


class _Expired(Exception):
    """The server no longer has the resourceVersion asked for (HTTP 410 Gone): re-list."""


# Events arrive in order on one stream; a stale event about an object deleted more than this
# many deletions ago is not expected, so older tombstones are forgotten.
MAX_TOMBSTONES = 10_000


@dataclasses.dataclass(slots=True)
class _Version:
    resource_version: str | None
    deleted: bool


def _rv_of(obj: Mapping[str, Any]) -> str | None:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return None
    rv = metadata.get("resourceVersion")
    return rv if isinstance(rv, str) and rv else None


def _key_of(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return ""
    uid = metadata.get("uid")
    if isinstance(uid, str) and uid:
        return uid
    return f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"


def _newer(candidate: str, known: str) -> bool:
    """Whether ``candidate`` is a later version than ``known``.

    Kubernetes declares resourceVersions opaque; only etcd-backed servers make them
    increasing integers, so the order is used only when both parse as integers. Otherwise
    only equality is known: an equal version is a duplicate, any other counts as newer.
    """
    if candidate.isdecimal() and known.isdecimal():
        return int(candidate) > int(known)
    return candidate != known


def _not_older(candidate: str, known: str) -> bool:
    if candidate.isdecimal() and known.isdecimal():
        return int(candidate) >= int(known)
    return True


def _is_expired_status(status: Mapping[str, Any]) -> bool:
    # A watch from a compacted resourceVersion fails with a Status of code 410, reason
    # "Expired" (or "Gone"), message "too old resource version: X (Y)".
    message = str(status.get("message") or "").lower()
    return (
        status.get("code") == 410
        or status.get("reason") in ("Expired", "Gone")
        or "too old resource version" in message
    )


def _describe_status(http_status: int, body: bytes) -> str:
    try:
        status = json.loads(body)
    except ValueError:
        status = None
    if isinstance(status, dict) and status.get("message"):
        return f"HTTP {http_status} {status.get('reason') or ''}: {status['message']}".strip()
    return f"HTTP {http_status}: {body[:200].decode('utf-8', 'replace')}"


class _WatchError(Exception):
    """An ERROR event in a watch stream other than an expiry."""


class KubernetesSource:
    """Lists then watches Nodes and Pods cluster-wide and feeds every change to a sink.

    Duplicate and stale events are dropped here, before the sink: per object the last
    resourceVersion seen (and a tombstone for deleted ones, until the next full list) is
    kept, so any sink sees each version of an object at most once and never goes back.
    """

    def __init__(
        self,
        sink: Sink,
        *,
        kubeconfig: str | os.PathLike[str] | None = None,
        context: str | None = None,
        settings: WatchSettings | None = None,
        client: kube.KubeClient | None = None,
    ) -> None:
        """``kubeconfig`` None: found as kubectl finds it ($KUBECONFIG, ~/.kube/config, else
        the pod's service account; migfit.kube.discover). ``client``: an open connection to
        use instead (the caller closes it); then ``kubeconfig`` and ``context`` are unused."""
        self._sink = sink
        self._kubeconfig = kubeconfig
        self._context = context
        self._client = client
        self._settings = settings or WatchSettings()
        self.synced = asyncio.Event()
        self._listed: set[Kind] = set()
        self._versions: dict[Kind, dict[str, _Version]] = {kind: {} for kind in KINDS}
        # Deleted objects' keys, oldest first: tombstones are bounded (MAX_TOMBSTONES) so that
        # pod churn between two full lists (rare with bookmarks) cannot grow them for ever.
        self._tombstones: dict[Kind, collections.deque[str]] = {
            kind: collections.deque() for kind in KINDS}
        self._resource_versions: dict[Kind, str | None] = {kind: None for kind in KINDS}
        self._relists = 0
        self._retries = 0
        self._skipped = 0
        self._failures: dict[Kind, int] = {kind: 0 for kind in KINDS}
        self._connect_failures = 0
        # 410s in a row with no event in between: only these slow a re-list down.
        self._expiries: dict[Kind, int] = {kind: 0 for kind in KINDS}
        self._last_error: str | None = None
        self._last_error_at: float | None = None

    def status(self) -> WatchStatus:
        return WatchStatus(
            synced=self.synced.is_set(),
            relists=self._relists,
            retries=self._retries,
            skipped_events=self._skipped,
            consecutive_failures=max(self._connect_failures, *self._failures.values()),
            last_error=self._last_error,
            last_error_at=self._last_error_at,
            resource_versions=dict(self._resource_versions),
        )

    async def run(self) -> None:
        """Keep the sink current until cancelled; raises ConfigError at once for no config,
        a kubeconfig that cannot be one or an exec plugin that cannot run (migfit.kube.check).
        Credentials that cannot be had now are retried."""
        if self._client is not None:
            await self._run(self._client)
            return
        # What cannot change while the process runs is raised at once (kube.connect checks
        # it first: a missing or unparsable kubeconfig, a context, cluster or user it lacks,
        # an exec plugin that is not installed). Getting the credentials runs their source
        # (an exec plugin, an OIDC refresh), which fails the way a request does (a network
        # blip, an identity provider that is down): that is retried with the same backoff as
        # the watches (kube.connect_retrying tells the two apart).

        def failed(exc: kube.CredentialsError, delay: float) -> None:
            self._note_error("connect", "connecting to the API server", exc)
            self._connect_failures += 1
            self._retries += 1

        client = await kube.connect_retrying(
            kube.Connection(kubeconfig=self._kubeconfig, context=self._context,
                            connect_timeout_s=self._settings.connect_timeout_s),
            backoff=self._settings.backoff, failed=failed)
        self._connect_failures = 0
        async with client:
            await self._run(client)

    async def _run(self, client: kube.KubeClient) -> None:
        async with asyncio.TaskGroup() as group:
            for kind in KINDS:
                group.create_task(self._follow(client, kind))

    async def _follow(self, api: kube.KubeClient, kind: Kind) -> None:
        resource_version: str | None = None  # None: a full list is needed first
        while True:
            try:
                if resource_version is None:
                    resource_version = await self._list(api, kind)
                resource_version, progressed = await self._watch(api, kind, resource_version)
                if progressed:
                    self._failures[kind] = 0
                    self._expiries[kind] = 0
                    continue
                # A stream that ends with nothing in it: reconnect, but never in a hot loop.
                await asyncio.sleep(self._settings.backoff(self._failures[kind]))
                self._failures[kind] += 1
            except _Expired:
                logger.info("%s: resourceVersion %s expired, re-listing", kind, resource_version)
                resource_version = None
                self._relists += 1
                # The server answered: the backoff of an outage before it is over, re-list at
                # once. Only expiries in a row (a list, then at once 410 again) slow down.
                self._failures[kind] = 0
                if self._expiries[kind]:
                    await asyncio.sleep(self._settings.backoff(self._expiries[kind] - 1))
                self._expiries[kind] += 1
            except Exception as exc:  # any transport or server failure: back off, retry
                self._record_error(kind, exc)
                if resource_version is not None:
                    # A stream that failed after events (a cut connection, a read timeout)
                    # has moved on: _advance kept its last version. Resume there, not where
                    # the stream began, which a busy cluster may have compacted since (410
                    # Gone, a full re-list). After a failed list, list again (None).
                    resource_version = self._resource_versions[kind]
                await asyncio.sleep(self._retry_delay(kind, exc))
                self._failures[kind] += 1
                self._retries += 1

    def _retry_delay(self, kind: Kind, exc: BaseException) -> float:
        """The backoff before the next list or watch of ``kind``, and at least the server's
        Retry-After (429 from API Priority and Fairness, which sheds load by asking clients
        to slow down), up to the backoff's cap."""
        delay = self._settings.backoff(self._failures[kind])
        retry_after = exc.retry_after_s if isinstance(exc, kube.ApiError) else None
        if retry_after is not None:
            delay = max(delay, min(retry_after, self._settings.backoff_cap_s))
        return delay

    def _record_error(self, kind: Kind, exc: BaseException) -> None:
        self._note_error(kind, f"{kind} watch", exc)

    def _note_error(self, where: str, what: str, exc: BaseException) -> None:
        text = (str(exc) if isinstance(exc, kube.ApiError | _WatchError | errors.MigfitError)
                else f"{type(exc).__name__}: {exc}")
        self._last_error = f"{where}: {text}"
        self._last_error_at = time.time()
        logger.warning("%s failed: %s", what, text)

    async def _get(
        self,
        api: kube.KubeClient,
        *,
        kind: Kind,
        query: list[tuple[str, str]],
        read_timeout_s: float,
        action: str,
    ) -> Any:
        # The raw aiohttp response, never the generated model classes, which cost too much
        # time and memory for 150,000 pods.
        return await api.open_get(_PATHS[kind], query, action=action,
                                  read_timeout_s=read_timeout_s)

    async def _list(self, api: kube.KubeClient, kind: Kind) -> str:
        """One complete, paginated list, handed to the sink page by page (the raw JSON of
        one page held at a time); returns its resourceVersion."""
        versions: dict[str, _Version] = {}
        resource_version = ""
        token: str | None = None
        self._sink.begin_list(kind)
        while True:
            query = [("limit", str(self._settings.page_size))]
            if token:
                query.append(("continue", token))
            response = await self._get(
                api, kind=kind, query=query, read_timeout_s=self._settings.read_timeout_s,
                action=f"list {kind}s",
            )
            try:
                body: bytes = await response.read()
                if response.status == 410:
                    # The continue token outlived etcd compaction: start the list again.
                    raise _Expired(_describe_status(response.status, body))
                if response.status != 200:
                    raise api.error(response.status, body, action=f"list {kind}s",
                                    headers=response.headers)
            finally:
                response.release()
            page = json.loads(body)
            del body
            objects = [item for item in page.get("items") or [] if isinstance(item, dict)]
            for obj in objects:
                versions[_key_of(obj)] = _Version(_rv_of(obj), deleted=False)
            self._sink.list_page(kind, objects)
            metadata = page.get("metadata") or {}
            if token is None:
                # Every page of a paginated list is served from the first page's snapshot.
                resource_version = str(metadata.get("resourceVersion") or "")
            token = metadata.get("continue") or None
            if token is None:
                break

        self._versions[kind] = versions  # the list is authoritative: tombstones end here
        self._tombstones[kind].clear()
        self._resource_versions[kind] = resource_version
        self._sink.end_list(kind)
        first = kind not in self._listed
        self._listed.add(kind)
        if not first:
            logger.info("%s: re-listed %d objects", kind, len(versions))
        if first and self._listed.issuperset(KINDS):
            self._sink.mark_synced()
            self.synced.set()
        return resource_version

    async def _watch(
        self, api: kube.KubeClient, kind: Kind, resource_version: str
    ) -> tuple[str, bool]:
        """One watch stream; returns the resourceVersion to resume from and whether it made
        progress: a usable event arrived and the server sent no ERROR (lines it cannot use
        are skipped, not failures). Raises _Expired when the server needs a re-list."""
        timeout_s = self._settings.watch_timeout()
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_s)),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        response = await self._get(
            api,
            kind=kind,
            query=query,
            read_timeout_s=(
                self._settings.watch_read_timeout_s
                if self._settings.watch_read_timeout_s is not None
                else timeout_s + 30.0
            ),
            action=f"watch {kind}s",
        )
        progressed = False  # a usable event arrived (a change, a duplicate, a bookmark)
        failed = False  # the server sent an ERROR: back off, as for a failed request
        try:
            if response.status != 200:
                body: bytes = await response.read()
                if response.status == 410:
                    raise _Expired(_describe_status(response.status, body))
                raise api.error(response.status, body, action=f"watch {kind}s",
                                headers=response.headers)
            while True:
                line: bytes = await response.content.readline()
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    # A stream cut in the middle of an event ends with a partial line.
                    logger.warning("%s: skipping undecodable watch line %r", kind, line[:80])
                    self._skipped += 1
                    continue
                if isinstance(event, dict) and event.get("type") == "ERROR":
                    self._watch_error(kind, event)
                    failed = True
                    continue
                outcome = self._handle_event(kind, event)
                if outcome is None:
                    # One line this source cannot use does not undo the events around it.
                    self._skipped += 1
                    continue
                progressed = True
                if outcome:
                    resource_version = self._advance(kind, resource_version, outcome)
        finally:
            response.close()
        return resource_version, progressed and not failed

    def _advance(self, kind: Kind, current: str, candidate: str) -> str:
        # Never move the watch position backwards where versions are ordered.
        if current and not _not_older(candidate, current):
            return current
        self._resource_versions[kind] = candidate
        return candidate

    def _watch_error(self, kind: Kind, event: Mapping[str, Any]) -> None:
        """An ERROR event: raises _Expired for a 410, else records the server's Status."""
        obj = event.get("object")
        if not isinstance(obj, dict):
            obj = {}
        if _is_expired_status(obj):
            raise _Expired(str(obj.get("message") or "410 Gone"))
        self._record_error(
            kind,
            _WatchError(
                f"watch ERROR event: code {obj.get('code')} {obj.get('reason') or ''}: "
                f"{obj.get('message') or ''}"
            ),
        )

    def _handle_event(self, kind: Kind, event: Any) -> str | None:
        """Apply one watch event other than ERROR; returns its resourceVersion ("" if none),
        None if not usable (not an event, or a type this source does not know)."""
        if not isinstance(event, dict):
            logger.warning("%s: skipping a watch line that is not an event", kind)
            return None
        event_type = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            obj = {}
        rv = _rv_of(obj) or ""
        if event_type == "BOOKMARK":
            # A bookmark carries only metadata.resourceVersion: the position to resume from.
            return rv
        if event_type not in _EVENT_TYPES:
            logger.warning("%s: skipping watch event of unknown type %r", kind, event_type)
            return None
        self._apply(kind, event_type, obj)
        return rv

    def _apply(self, kind: Kind, event_type: EventType, obj: dict[str, Any]) -> None:
        versions = self._versions[kind]
        key = _key_of(obj)
        rv = _rv_of(obj)
        known = versions.get(key)
        if known is not None and rv is not None and known.resource_version is not None:
            if event_type == "DELETED":
                # A DELETED event carries the deletion's version, or (some servers) the last
                # one: either way not older than what is held. A repeated delete is a duplicate.
                stale = known.deleted or not _not_older(rv, known.resource_version)
            else:
                stale = not _newer(rv, known.resource_version)
            if stale:
                self._skipped += 1
                return
        elif known is not None and known.deleted and event_type == "DELETED":
            self._skipped += 1
            return
        self._sink.apply(kind, event_type, obj)
        versions[key] = _Version(rv, deleted=event_type == "DELETED")
        if event_type == "DELETED":
            graves = self._tombstones[kind]
            graves.append(key)
            while len(graves) > MAX_TOMBSTONES:
                old = graves.popleft()
                held = versions.get(old)
                if held is not None and held.deleted:
                    del versions[old]


async def list_once(sink: Sink, client: kube.KubeClient, *, page_size: int = 500) -> None:
    """One paginated list of Nodes and of Pods into ``sink``, then ``mark_synced``: the
    cluster view of a one-shot command. No watch, no retry loop: a kube.ApiError (401, 403,
    a refused connection after the client's few retries) is raised at once."""
    (nodes, _), (pods, _) = await asyncio.gather(
        client.list_nodes(page_size=page_size), client.list_pods(page_size=page_size))
    listed: tuple[tuple[Kind, list[dict[str, Any]]], ...] = (("Node", nodes), ("Pod", pods))
    for kind, objects in listed:
        sink.begin_list(kind)
        sink.list_page(kind, objects)
        sink.end_list(kind)
    sink.mark_synced()
