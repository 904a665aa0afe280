"""The webhook's HTTPS adapter: AdmissionReview v1 in and out around the pure decision.

Handlers parse, call ``decision.decide_review`` and serialise; nothing else. Bad input never
produces a traceback or a 5xx: a body that is not an AdmissionReview gets a 400 JSON error, a
too large one a 413, and a review that names a uid always gets a well-formed AdmissionReview
back (WIRE.md §2.1: the uid echoed, ``patch`` base64 with ``patchType: JSONPatch``). Only a
request the server has no room for yet (its budget of bodies in flight, ``serving.read_body``)
gets a 503, with Retry-After and before its body is read: kube-apiserver retries it. A request
like one answered before against the same supply is answered from the ``memo.DecisionMemo``
the composition root hands in (only the uid is new). JSON goes through ``migfit.jsonwire``
(orjson when installed), and every client-supplied value logged is shortened and escaped.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from aiohttp import web

try:
    import msgspec
except ImportError:  # pragma: no cover - msgspec is a dependency; only the exact memo needs it
    msgspec = None  # type: ignore[assignment]
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from migfit import cluster as cluster_mod
from migfit import errors, flagtypes, jsonwire, requests, serving
from migfit import metrics as common_metrics
from migfit.certs import metrics as cert_metrics
from migfit.certs import reloading
from migfit.webhook import choice, decision, memo, reading, view
from migfit.webhook.memo import DecisionMemo

log = logging.getLogger(__name__)

MUTATE_PATH: Final = "/mutate"
API_VERSION: Final = "admission.k8s.io/v1"
DEFAULT_PORT: Final = 8443
# Whatever kube-apiserver accepts: its request bodies are at most 3 MiB (--max-request-bytes'
# default; a pod itself at most etcd's 1.5 MiB). An AdmissionReview carries the whole pod, and
# the webhook fails closed: at 1 MiB, a valid pod of 1.1 MiB (a large inline env) was refused
# with a 413 that kube-apiserver reports as a failed webhook call, not what to change.
DEFAULT_MAX_BODY: Final = 3 * 1024 * 1024
# kube-apiserver truncates warnings over 256 characters (WIRE.md §2.1).
_WARNING_LIMIT: Final = choice.WARNING_CHARS
_MAX_WARNINGS: Final = 16


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """Everything the webhook server needs; ``migfit webhook`` flags map onto it."""

    policy: decision.Policy = dataclasses.field(default_factory=decision.Policy)
    # A webhook must be reachable by kube-apiserver (its Service): every address, IPv4 and
    # IPv6 (IPv6-only clusters reach the pod on ::).
    host: str = ""
    port: int = DEFAULT_PORT
    tls_cert: Path | None = None
    tls_key: Path | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY
    reload_interval: float = reloading.DEFAULT_INTERVAL  # seconds between TLS file polls
    shutdown_timeout: float = 10.0  # seconds in-flight requests get to finish on shutdown
    #: On SIGTERM keep serving this long with /readyz failing, so that the Service's endpoints
    #: drop the pod before its listener closes (endpoint removal is asynchronous).
    drain_delay: float = 0.0
    access_log: bool = False
    #: Connection bounds (keep-alive, body, handshake and write timeouts, connections at
    #: once, bytes of bodies in flight: by default serving.WEBHOOK_BUDGET_BODIES × max_body_bytes).
    limits: serving.Limits = dataclasses.field(default_factory=serving.Limits)


class Metrics:
    """The webhook's Prometheus metrics, in a registry of their own (or a shared one)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.admissions = Counter(
            "migfit_webhook_admissions", "Admission reviews answered, by outcome and profile.",
            ["outcome", "profile", "dry_run"], registry=registry)
        self.latency = Histogram(
            "migfit_webhook_admission_duration_seconds",
            "Time to decide and answer one admission review.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=registry)
        self.bad_requests = Counter(
            "migfit_webhook_bad_requests", "Requests that were not an AdmissionReview, by status.",
            ["status"], registry=registry)
        self.cluster_view = Gauge(
            "migfit_webhook_cluster_view", "1 when decisions use a synced cluster view, 0 when "
            "they fall back on --gpu-models.", registry=registry)
        # labels() takes a lock and builds a key per call: the children, once per labels
        # (outcome × profile × dry run: bounded by the catalog, ``answer_for``).
        self._admitted: dict[tuple[str, str, str], Any] = {}

    def admitted(self, outcome: str, profile: str, dry_run: str) -> None:
        """Count one answered review."""
        key = (outcome, profile, dry_run)
        child = self._admitted.get(key)
        if child is None:
            child = self._admitted[key] = self.admissions.labels(*key)
        child.inc()


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """A verdict with its AdmissionResponse encoded but for the uid (what the memo keeps)."""

    verdict: decision.Verdict
    tail: bytes  # ``,"allowed":…}}``: the response after its uid, and the review's end
    profile: str = ""  # the metrics' profile label: its profiles, sorted, comma-separated


@dataclasses.dataclass(slots=True)
class State:
    """The app's state: settings, the cluster view, its supply tracker, the memo, metrics."""

    settings: Settings
    cluster: cluster_mod.Cluster | None
    tracker: view.SupplyTracker | None
    metrics: Metrics
    memo: memo.DecisionMemo[Answer] = dataclasses.field(default_factory=memo.DecisionMemo)
    draining: bool = False
    _fallback: view.Supply = dataclasses.field(init=False, repr=False)
    #: Answers by the exact bytes of the request but its uid (``_exact_key``): a pod of a
    #: workload's burst is answered without being parsed. As many entries as ``memo`` holds,
    #: at most ``EXACT_ENTRIES``, each key at most ``EXACT_BYTES``, and bounded in bytes as
    #: ``memo`` is (an answer kept in both counts in both).
    exact: DecisionMemo[Answer] = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._fallback = view.Supply.from_catalog(self.settings.policy.fallback_models)
        self.exact = memo.DecisionMemo(min(self.memo.capacity, EXACT_ENTRIES),
                                       max_bytes=self.memo.max_bytes,
                                       max_entry_bytes=self.memo.max_entry_bytes)

    @property
    def synced(self) -> bool:
        """Whether decisions use a synced cluster view."""
        return self.tracker is not None and self.cluster is not None and self.cluster.synced

    def can_decide(self) -> bool:
        """False while every annotated pod would be denied for want of any GPU model to decide
        against: no synced cluster view and no ``--gpu-models``."""
        return self.synced or bool(self.settings.policy.fallback_models)

    @property
    def memoises(self) -> bool:
        """Whether answers may come from the memos: not under ``--choice usable``, whose
        answer reads every node's cpu and memory left, which moves with pods (cpu-only ones
        too) that the supply's content does not see."""
        return self.settings.policy.contention != "usable"

    def supply(self) -> view.Supply:
        """What to decide against now: the cluster's snapshot once synced, else the catalog
        of ``--gpu-models`` (built once)."""
        if self.tracker is None or not self.synced:
            return self._fallback
        return self.tracker.supply()


STATE: Final = web.AppKey("migfit_webhook_state", State)


# ---------------------------------------------------------------- responses


def _json(body: Any, *, status: int = 200) -> web.Response:
    return _bytes(jsonwire.dumps(body), status=status)


def _bytes(body: bytes, *, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message, "status": status}, status=status)


def review_response(uid: str, verdict: decision.Verdict) -> dict[str, Any]:
    """The AdmissionReview v1 answering ``uid`` with ``verdict``."""
    response: dict[str, Any] = {"uid": uid, **_response_fields(verdict)}
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def _response_fields(verdict: decision.Verdict) -> dict[str, Any]:
    """The AdmissionResponse of ``verdict`` but for its uid."""
    response: dict[str, Any] = {"allowed": verdict.allowed}
    if verdict.allowed and verdict.patch:
        patch = jsonwire.dumps(list(verdict.patch))
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(patch).decode("ascii")
    if not verdict.allowed:
        response["status"] = {"code": verdict.code, "message": verdict.message,
                              "reason": "BadRequest" if verdict.code == 400 else "Forbidden"}
    if verdict.warnings:
        response["warnings"] = [_fit_warning(w) for w in verdict.warnings[:_MAX_WARNINGS]]
    return response


def _fit_warning(text: str) -> str:
    """``text`` cut to at most ``_WARNING_LIMIT`` bytes of UTF-8, ending "..." when cut.

    Bytes, not characters: kube-apiserver's Go code measures strings in bytes, and a cut
    made in characters with a "…" (three bytes) went 2 bytes over, for it to cut inside that
    character (an outside check measured 258 bytes)."""
    raw = text.encode()
    if len(raw) <= _WARNING_LIMIT:
        return text
    return raw[:_WARNING_LIMIT - 3].decode("utf-8", "ignore") + "..."


# Every encoded review starts so; the uid follows, then an Answer's tail.
#: The admissions counter's ``profile`` for a pod whose containers got different profiles.
SEVERAL: Final = "several"
_HEAD: Final = (jsonwire.dumps({"apiVersion": API_VERSION, "kind": "AdmissionReview"})[:-1]
                + b',"response":{"uid":')


def answer_for(verdict: decision.Verdict) -> Answer:
    """``verdict`` with its response encoded but for the uid."""
    fields = jsonwire.dumps(_response_fields(verdict))  # {"allowed":…}
    # A label of few values: one of the catalog's profiles, "" (none), or SEVERAL for a pod
    # whose containers got different ones (their combinations would grow without bound).
    chosen = set(verdict.profiles)
    profile = SEVERAL if len(chosen) > 1 else next(iter(chosen), "")
    return Answer(verdict=verdict, tail=b"," + fields[1:] + b"}", profile=profile)


def encode_review(uid: str, ready: Answer) -> bytes:
    """The AdmissionReview answering ``uid``: equal to ``review_response`` encoded."""
    return _HEAD + jsonwire.dumps(uid) + ready.tail


class _BadReview(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _parse_review(body: bytes) -> tuple[str, dict[str, Any]]:
    try:
        review = jsonwire.loads(body)
    except (ValueError, RecursionError):
        raise _BadReview(400, "the body is not JSON; send an admission.k8s.io/v1 "
                              "AdmissionReview") from None
    if not isinstance(review, dict):
        raise _BadReview(400, "the body is not a JSON object; send an AdmissionReview")
    if review.get("kind") != "AdmissionReview" or review.get("apiVersion") != API_VERSION:
        raise _BadReview(400, f"expected kind AdmissionReview, apiVersion {API_VERSION}; list "
                              f"{API_VERSION.rsplit('/', 1)[1]} first in admissionReviewVersions")
    request = review.get("request")
    if not isinstance(request, dict):
        raise _BadReview(400, "the AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise _BadReview(400, "the AdmissionReview request has no uid")
    return uid, request


# ---------------------------------------------------------------- handlers


def answer(body: bytes, *, state: State) -> tuple[int, dict[str, Any]]:
    """The HTTP status and JSON body for one /mutate request body: an AdmissionReview (200)
    or a 400 error. Never raises for any input."""
    status, out = answer_bytes(body, state=state)
    return status, jsonwire.loads(out)


EXACT_ENTRIES: Final = 512
EXACT_BYTES: Final = 16 * 1024

if msgspec is not None:
    class _Review(msgspec.Struct):
        """What ``_exact_key`` reads of an AdmissionReview, undecoded (one pass)."""

        kind: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
        apiVersion: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
        request: dict[str, msgspec.Raw] | None = None

    _REVIEW = msgspec.json.Decoder(_Review)
_PLAIN_KIND: Final = b'"AdmissionReview"'
_PLAIN_VERSION: Final = b'"' + API_VERSION.encode() + b'"'

ExactKey = tuple[tuple[str, bytes], ...]
#: Fields that may limit a pod's nodes (``reading.memo_key``): a review holding one is not
#: memoised (a string value holding the name has its quotes escaped, so never matches).
_PLACED: Final = (b'"nodeSelector"', b'"nodeName"',
                  b'"requiredDuringSchedulingIgnoredDuringExecution"')


def _exact_key(body: bytes) -> tuple[str, ExactKey, dict[str, Any]] | None:
    """The uid, and the request's fields but the uid as the bytes they came in (msgspec
    Raw, undecoded), of a review spelled plainly: kind and apiVersion as written here, a
    string uid. None for anything else, or a review longer than ``EXACT_BYTES``: it is
    read the usual way. Two requests with the same key are the same request but for the uid
    (the same bytes decode the same), so they get the same answer against the same supply."""
    if msgspec is None or len(body) > EXACT_BYTES:  # the key is shorter than the body
        return None
    if any(marker in body for marker in _PLACED):  # decided against the pod's own nodes
        return None
    try:
        top = _REVIEW.decode(body)
        fields = top.request
        if (fields is None or bytes(top.kind) != _PLAIN_KIND
                or bytes(top.apiVersion) != _PLAIN_VERSION):
            return None
        raw_uid = fields.pop("uid", None)
        uid = None if raw_uid is None else msgspec.json.decode(raw_uid)
    except (msgspec.DecodeError, RecursionError):  # not an object, or not JSON
        return None
    if not isinstance(uid, str) or not uid:
        return None
    return uid, tuple([(k, bytes(v)) for k, v in fields.items()]), fields


# What a memo entry's answer holds, estimated from its encoded tail rather than walked
# (``memo.footprint`` over the verdict's patch objects took 30-odd µs per typical answer, on
# every miss): 7.2-7.5 times the tail for pods of 1 to 64 GPU containers; the key, a few
# small objects, is walked.
ANSWER_PER_TAIL_BYTE: Final = 8


def entry_size(key: Hashable, ready: Answer, limit: int) -> int:
    """About what a memo entry of ``key`` and ``ready`` holds (the answer's part an upper
    bound); the walk of the key stops past ``limit``."""
    return memo.footprint(key, limit) + ANSWER_PER_TAIL_BYTE * len(ready.tail)


def answer_bytes(body: bytes, *, state: State) -> tuple[int, bytes]:
    """``answer`` encoded: what ``POST /mutate`` sends."""
    started = time.perf_counter()
    exact = _exact_key(body) if state.exact.capacity and state.memoises else None
    if exact is not None:
        uid, key, fields = exact
        supply = state.supply()
        ready = state.exact.get(key, supply)
        if ready is not None:
            dry_run = fields.get("dryRun")

            def named() -> dict[str, Any]:
                return {k: msgspec.json.decode(fields[k]) for k in ("namespace", "name")
                        if k in fields}

            _count(state, ready, dry_run is not None and bytes(dry_run) == b"true", started,
                   named)
            return 200, encode_review(uid, ready)
    try:
        uid, admission = _parse_review(body)
    except _BadReview as exc:
        state.metrics.bad_requests.labels(str(exc.status)).inc()
        return exc.status, jsonwire.dumps({"error": exc.message, "status": exc.status})
    ready = _decided(uid, admission, state)
    if exact is not None and ready.verdict.code != 500 and ready.verdict.memoisable:
        state.exact.put(exact[1], supply, ready,
                        size=entry_size(exact[1], ready, state.exact.max_entry_bytes))
    _count(state, ready, admission.get("dryRun") is True, started, lambda: admission)
    return 200, encode_review(uid, ready)


def _count(state: State, ready: Answer, dry_run: bool, started: float,
           admission: Callable[[], Mapping[str, Any]]) -> None:
    """The admission's metrics, and its log line (``admission`` gives its namespace and
    name, only when the line is written)."""
    verdict = ready.verdict
    state.metrics.admitted(verdict.outcome, ready.profile, "true" if dry_run else "false")
    state.metrics.latency.observe(time.perf_counter() - started)
    if verdict.outcome in ("patched", "denied", "invalid") and log.isEnabledFor(logging.INFO):
        named = admission()
        log.info("%s %s/%s: %s", verdict.outcome, _shown(named.get("namespace", "")),
                 _shown(named.get("name", "") or "(generated)"),
                 verdict.message or counted(verdict.profiles))


def counted(profiles: Sequence[str]) -> str:
    """The profiles of a log line, each once in order of first use with how many times it
    was chosen when more than once: ``1g.10gb×3,3g.40gb`` (a pod's instances are bounded,
    ``reading.MAX_INSTANCES``, and its profiles by the catalog's)."""
    return ",".join(p if n == 1 else f"{p}×{n}" for p, n in collections.Counter(profiles).items())


_IGNORED: Final = answer_for(decision.Verdict(outcome="ignored", allowed=True))


def _decided(uid: str, admission: Mapping[str, Any], state: State) -> Answer:
    """The answer to ``admission``: from the memo when the same request was decided against
    the same supply, else decided (and remembered)."""
    pod = decision.pod_to_decide(admission)
    if pod is None:
        return _IGNORED
    supply = state.supply()
    key = reading.memo_key(pod) if isinstance(pod, Mapping) and state.memoises else None
    if key is not None:
        hit = state.memo.get(key, supply)
        if hit is not None:
            return hit
    try:
        verdict = decision.decide_review(admission, supply=supply, policy=state.settings.policy)
    except Exception:  # a bug must not turn into a 500 that blocks every pod
        log.exception("deciding admission %s failed", _shown(uid))
        return answer_for(decision.Verdict(
            outcome="invalid", allowed=False, code=500,
            message="the migfit webhook failed to decide; see its log"))
    ready = answer_for(verdict)
    if key is not None and verdict.memoisable:
        state.memo.put(key, supply, ready,
                       size=entry_size(key, ready, state.memo.max_entry_bytes))
    return ready


def _shown(value: Any) -> str:
    """A client-supplied value for a log line: short, on one line, escaped."""
    return requests.shorten(value if isinstance(value, str) else repr(value), 80)


async def mutate(request: web.Request) -> web.Response:
    """POST /mutate: the query string (``?timeout=10s``) is ignored (WIRE.md §2.1)."""
    state = request.app[STATE]
    limit = state.settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        return _too_large(state, limit)
    try:
        body = await serving.read_body(request, state.settings.limits.body_timeout)
    except serving.TooManyContainers as exc:  # what its parse would build
        state.metrics.bad_requests.labels("413").inc()
        return _error(413, exc.text or "too many JSON arrays and objects")
    except web.HTTPRequestEntityTooLarge:
        return _too_large(state, limit)
    except web.HTTPServiceUnavailable as exc:  # the bodies in flight fill the budget
        # kube-apiserver's client retries it after Retry-After (serving.RETRY_AFTER_S).
        response = _error(503, exc.text or "busy; retry")
        serving.keep_headers(exc, response)
        return response
    status, out = answer_bytes(body, state=state)
    return _bytes(out, status=status)


def _too_large(state: State, limit: int) -> web.Response:
    state.metrics.bad_requests.labels("413").inc()
    return _error(413, f"the request body is larger than {limit} bytes")


async def healthz(request: web.Request) -> web.Response:
    return _json({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready while it can decide (from the synced cluster view, or without one from
    --gpu-models), until shutdown begins. Without either it would deny every annotated pod,
    so it is not Ready: the Service sends kube-apiserver to a replica that can decide."""
    state = request.app[STATE]
    synced = state.synced
    fallback = [m.id for m in state.settings.policy.fallback_models]
    if state.draining:
        return _json({"ready": False, "reason": "shutting down"}, status=503)
    if not state.can_decide():
        return _json({"ready": False, "clusterView": "unavailable", "fallbackModels": [],
                      "reason": "no cluster view yet and no --gpu-models to decide from"},
                     status=503)
    return _json({"ready": True, "clusterView": "synced" if synced else "unavailable",
                  "fallbackModels": fallback})


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    synced = state.cluster is not None and state.cluster.synced
    state.metrics.cluster_view.set(1 if synced else 0)
    return web.Response(body=generate_latest(state.metrics.registry),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


@web.middleware
async def _json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """HTTP errors as JSON bodies; an unexpected error is logged, never sent as a traceback."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = _error(exc.status, serving.error_text(exc))
        serving.keep_headers(exc, response)
        return response
    except Exception:
        log.exception("handling %s %s failed", request.method, request.path)
        return _error(500, "internal error; see the migfit log")


# ---------------------------------------------------------------- the app


def make_app(
    settings: Settings,
    cluster: cluster_mod.Cluster | None,
    *,
    registry: CollectorRegistry | None = None,
    certificate: cert_metrics.HasExpiry | None = None,
    tracker: view.SupplyTracker | None = None,
    decisions: memo.DecisionMemo[Answer] | None = None,
) -> web.Application:
    """The webhook's aiohttp application: ``POST /mutate``, ``GET /healthz|/readyz|/metrics``.

    ``cluster`` is the live view a source keeps current (None: decide from
    ``settings.policy.fallback_models``); ``tracker`` its supply tracker and ``decisions``
    the memo of answers, both made by the composition root (made here when not given: tests
    and one-app callers). ``registry`` defaults to ``migfit.metrics.registry()``;
    pass a shared one to expose several servers' metrics together. ``certificate`` (a
    ``CertificateReloader``) adds the certificate-expiry gauge.
    """
    if registry is None:
        registry = common_metrics.registry()
    app = web.Application(client_max_size=settings.max_body_bytes,
                          middlewares=[serving.bodiless, _json_errors])
    serving.limit_bodies(app, settings.limits, settings.max_body_bytes,
                         bodies=serving.WEBHOOK_BUDGET_BODIES)
    if tracker is None and cluster is not None:
        tracker = view.SupplyTracker(cluster)
    app[STATE] = State(
        settings=settings,
        cluster=cluster,
        tracker=tracker,
        metrics=Metrics(registry),
        memo=memo.DecisionMemo() if decisions is None else decisions,
    )
    if certificate is not None:
        cert_metrics.register(registry, server="webhook", source=certificate)
    state = app[STATE]

    def malformed(status: int, message: str) -> web.Response:
        # What aiohttp's parser rejects before any handler runs (serving.JsonErrors).
        state.metrics.bad_requests.labels(str(status)).inc()
        return _error(status, message)

    app[serving.ERROR_ANSWER] = malformed
    app.router.add_post(MUTATE_PATH, mutate, expect_handler=serving.expect_within(
        settings.max_body_bytes, lambda _length: _too_large(state, settings.max_body_bytes)))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


async def serve(
    settings: Settings,
    cluster: cluster_mod.Cluster | None,
    *,
    source_run: Callable[[], Awaitable[None]] | None = None,
    stop: asyncio.Event | None = None,
    on_started: Callable[[int], None] | None = None,
    tracker: view.SupplyTracker | None = None,
    decisions: memo.DecisionMemo[Answer] | None = None,
) -> None:
    """Serve the webhook over HTTPS until ``stop`` is set (or SIGTERM/SIGINT).

    The TLS files are polled every ``reload_interval`` s and a changed pair is served from a
    new context (``certs.reloading``: new connections get exactly the new certificate; open
    ones keep theirs; an expired or mismatched pair is refused with a warning). ``source_run`` (a
    cluster source's ``run``) is run alongside; if it fails the webhook keeps serving from
    the fallback models. Shutdown is ``migfit.serving``'s: /readyz fails for ``drain_delay``
    seconds while requests are still served, then the listener closes and requests being
    handled get ``shutdown_timeout`` seconds. ``on_started`` receives the bound port.
    """
    cert_file, key_file = _check(settings)
    reloader = reloading.CertificateReloader(cert_file=cert_file, key_file=key_file)
    app = make_app(settings, cluster, certificate=reloader, tracker=tracker,
                   decisions=decisions)
    app.cleanup_ctx.append(serving.background(
        "webhook TLS reload", lambda: reloader.run(settings.reload_interval)))
    if source_run is not None:
        app.cleanup_ctx.append(serving.background(
            "the cluster source", _reported(source_run, app[STATE])))
    listen = serving.Listen(host=settings.host, port=settings.port,
                            ssl_context=reloader.context, limits=settings.limits,
                            shutdown_timeout=settings.shutdown_timeout,
                            drain_delay=settings.drain_delay, access_log=settings.access_log)

    def started(info: serving.Started) -> None:
        log.info("webhook serving https://%s:%s%s", settings.host or "*", info.port,
                 MUTATE_PATH)
        if not settings.policy.fallback_models:
            log.info("no --gpu-models: not Ready (/readyz 503) until the cluster view has "
                     "synced")
        if on_started is not None:
            on_started(info.port)

    def drain() -> None:
        app[STATE].draining = True

    await serving.serve(app, listen, stop=stop, on_started=started, on_drain=drain)


def _check(settings: Settings) -> tuple[Path, Path]:
    """The TLS files, after refusing settings that would fail later and quietly (a reload task
    that stops at once leaves the certificate frozen until its expiry)."""
    if settings.tls_cert is None or settings.tls_key is None:
        raise errors.UsageError("the webhook serves HTTPS only: give --tls-cert and --tls-key")
    if not settings.reload_interval > 0:
        raise errors.UsageError(f"--reload-interval {flagtypes.shown(settings.reload_interval)}: "
                                f"use a positive number of seconds")
    if settings.max_body_bytes <= 0:
        raise errors.UsageError(f"--max-body {settings.max_body_bytes}: use a positive number "
                                f"of bytes (default {DEFAULT_MAX_BODY})")
    try:
        settings.limits.body_budget(settings.max_body_bytes)
    except ValueError as exc:
        raise errors.UsageError(str(exc)) from None
    for flag, value in (("--shutdown-timeout", settings.shutdown_timeout),
                        ("--drain-delay", settings.drain_delay)):
        if not value >= 0:
            raise errors.UsageError(f"{flag} {flagtypes.shown(value)}: use 0 or more seconds")
    return settings.tls_cert, settings.tls_key


def without_source(state: State) -> str:
    """What the webhook decides from once its cluster source has stopped, in words."""
    fallback = state.settings.policy.fallback_models
    if state.synced:
        return ("deciding from the last view of the cluster, which no longer follows it; "
                "restart the webhook")
    if fallback:
        return f"deciding from --gpu-models ({choice.names(fallback)}) from now on"
    return ("no cluster view and no --gpu-models: /readyz fails and annotated pods are denied; "
            "restart the webhook, or give --gpu-models to decide without a view")


def _reported(run: Callable[[], Awaitable[None]], state: State
              ) -> Callable[[], Awaitable[None]]:
    """``run``, with a failure logged as one honest line (what decisions are made from now)."""
    async def wrapper() -> None:
        try:
            await run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("the cluster source stopped (%s); %s",
                      requests.shorten(str(exc), 200), without_source(state))
    return wrapper
