"""The extender's HTTP adapter: kube-scheduler's extender/v1 wire format around filter and score.

Handlers parse, call the pure steps (``filtering``, ``scoring``), serialise — nothing more.
Wire facts (WIRE.md 1.1, 1.2): the JSON keys are the Go field names, written in PascalCase
and read case-insensitively (an exact match first, as Go's encoding/json does); no field has
``omitempty``, so ``Nodes``, ``NodeNames``, ``FailedNodes``, ``FailedAndUnresolvableNodes``
and ``Error`` are always present, the unused one of ``Nodes``/``NodeNames`` as null. The
answer uses the mode the scheduler used: ``NodeNames`` in, names out (``nodeCacheCapable``);
a ``Nodes`` list in, the passing Node objects out, exactly as sent. Every returned name was
in the input; every input node gets exactly one outcome.

``make_app`` builds the application (typed ``web.AppKey`` state; the cluster source, when
given, runs for the app's lifetime through ``cleanup_ctx``), so ``migfit extender`` and
``migfit serve`` share it. Everything it works on (the cluster, its ``figures.Index``, the
advice cache) is handed in by the command that assembles it, or made for this app alone:
nothing is process-wide, so two apps in one process share nothing. ``serve`` runs it through
``migfit.serving`` (bounded connections, timeouts, graceful drain), as the webhook does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

import prometheus_client

try:
    import orjson
except ImportError:  # pragma: no cover - migfit.jsonwire's fallback: the standard library
    orjson = None  # type: ignore[assignment]
try:
    import msgspec
except ImportError:  # pragma: no cover - full Nodes are then parsed whole (orjson, stdlib)
    msgspec = None  # type: ignore[assignment]
from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from migfit import cluster, errors, jsonwire, requests, serving
from migfit import metrics as common_metrics
from migfit.certs import metrics as cert_metrics
from migfit.certs import reloading
from migfit.extender import advice, answers, figures, filtering, scoring, scoring_log

log = logging.getLogger(__name__)

# migfit's scheduler configurations set nodeCacheCapable: true, so a call carries node names
# (15,000 take well under 1 MiB). Without it a call carries whole Nodes: an outside probe's
# Nodes shaped like `kubectl get node -o json` (60 labels, 4 managedFields entries, 50
# images: 22 KB each) fit about 1,500 to a call, lean ones (8.3 KB) about 4,000; such a
# cluster raises --max-body, or sets nodeCacheCapable.
DEFAULT_MAX_BODY = 32 * 2**20
MAX_NODES: Final = 15_000
"""Node names (or Nodes) one call may carry; more get 400 before any node is looked at.
kube-scheduler sends at most every node of the cluster, and Kubernetes supports clusters of
up to 5,000 nodes: three times that, so that no cluster meets it while a call stays small."""


class Source(Protocol):
    """What keeps the cluster model current (the Kubernetes watch or the file source)."""

    async def run(self) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ExtenderSettings:
    """How the extender server behaves; the defaults suit a production scheduler."""

    max_body_bytes: int = DEFAULT_MAX_BODY
    """Larger request bodies get 413 (kube-scheduler's non-cache mode sends whole Nodes)."""
    log_format: scoring_log.LogFormat = "both"
    """The scoring log's lines: ``json``, ``text`` or ``both``."""
    log_nodes: int = 50
    """Nodes written in full per scoring-log JSON line (the best ones); 0 writes all."""
    host: str = ""  # every address, IPv4 and IPv6 (IPv6-only clusters reach the pod on ::)
    port: int = 8443
    tls_cert: Path | None = None
    """Serving certificate (PEM); with ``tls_key`` the extender speaks HTTPS (TLS 1.2+)."""
    tls_key: Path | None = None
    client_ca: Path | None = None
    """When set, clients must present a certificate signed by it (kube-scheduler's
    ``tlsConfig.certFile``)."""
    reload_interval: float = 10.0
    """Seconds between checks of the TLS files (Secret mounts give no inotify)."""
    shutdown_timeout: float = 10.0
    drain_delay: float = 0.0
    """On SIGTERM keep serving this long with /readyz failing before the listener closes."""
    limits: serving.Limits = dataclasses.field(default_factory=serving.Limits)
    """Connection bounds: keep-alive, body, handshake and write timeouts, connections at once,
    bytes of bodies in flight (by default ``serving.BUDGET_BODIES`` × ``max_body_bytes``)."""
    score_all_pods: bool = False
    """Score pods without MIG requests too (toward nodes where their cpu and memory strand
    no instance); for an extender registered without ``managedResources``."""


# ---------------------------------------------------------------- the wire: ExtenderArgs


class WireError(Exception):
    """A request body that is not an ExtenderArgs; the message says what is wrong."""


def _count_nodes(count: int, where: str, what: str) -> None:
    """WireError when ``where`` holds more than ``MAX_NODES`` ``what``."""
    if count > MAX_NODES:
        raise WireError(f"{where} holds {count:,} {what}, more than the {MAX_NODES:,} this "
                        f"extender takes in one call (Kubernetes supports clusters of up to "
                        f"5,000 nodes); send at most {MAX_NODES:,}")


def field(obj: Mapping[str, Any], name: str) -> Any:
    """``obj[name]`` the way Go's encoding/json matches keys: exact, else case-insensitive."""
    if name in obj:
        return obj[name]
    lower = name.lower()
    for key, value in obj.items():
        if key.lower() == lower:
            return value
    return None


def last_field(obj: Mapping[str, Any], name: str) -> Any:
    """``field`` for a struct's own keys as Go's encoding/json decodes them: every key equal
    to ``name`` ignoring case sets the field, so the last of them in the document wins
    (``{"Pod": a, "pod": b}`` is ``b``). For the few keys of ExtenderArgs; ``field``, which
    stops at the exact key, for the keys of every Node."""
    lower = name.lower()
    found = None
    for key, value in obj.items():
        if key == name or key.lower() == lower:
            found = value
    return found


class RawNodes(Mapping[str, Mapping[str, Any]]):
    """Full Nodes kept as the bytes they came in (``decode_args``'s fast path): name -> the
    Node object, decoded only when asked; ``echo`` gives a Node's wire bytes for the answer
    without decoding it."""

    def __init__(self, raw: dict[str, Any], meta: Mapping[str, Any]) -> None:
        self._raw = raw  # name -> msgspec.Raw of the item (the first of that name)
        # ``{**meta, "items": [`` as ``wire_json`` writes it: the answer's NodeList head.
        self.head = wire_json(dict(meta))[:-1] + (b',"items":[' if meta else b'"items":[')

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        value: Mapping[str, Any] = msgspec.json.decode(self._raw[name])
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def echo(self, name: str) -> bytes:
        """The Node's bytes as ``wire_json`` would write them: the body had no escape and
        no byte beyond ASCII (``_decode_raw``), so minified they are those bytes (a float,
        which no v1.Node field carries, keeps its spelling: the same number)."""
        out: bytes = msgspec.json.format(self._raw[name], indent=-1)
        return out


@dataclasses.dataclass(slots=True)
class Args:
    """A decoded ``ExtenderArgs``. ``pod_raw``: the Pod's bytes as sent, when the body was
    read with msgspec (the key of the server's ``PodRequests``); the Pod object is then
    decoded from them only when asked (``pod``)."""

    _pod: Mapping[str, Any] | None
    names: list[str]
    node_list: Mapping[str, Any] | None  # the NodeList when the scheduler sent Nodes
    nodes: Mapping[str, Mapping[str, Any]]  # name -> Node object as sent (Nodes mode)
    exotic: bool = False  # only the standard library read the body (a lone surrogate)
    pod_raw: bytes | None = None

    @property
    def pod(self) -> Mapping[str, Any]:
        """The Pod object; WireError when its bytes (``pod_raw``) hold no JSON object."""
        if self._pod is None:
            self._pod = _pod_object(self.pod_raw or b"")
        return self._pod

    @property
    def cache_mode(self) -> bool:
        return self.node_list is None

    @property
    def raw(self) -> RawNodes | None:
        """The Nodes as sent, undecoded (``decode_args``'s fast path), else None."""
        return self.nodes if isinstance(self.nodes, RawNodes) else None


def _pod_object(raw: bytes) -> Mapping[str, Any]:
    pod: Any = None
    try:
        if msgspec is not None:
            pod = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # e.g. an integer beyond 64 bits
        pass
    if pod is None:
        try:
            pod, _ = _loads(raw)
        except (ValueError, RecursionError) as exc:
            raise WireError(f"request body is not valid JSON: {jsonwire.not_json(exc)}") from None
    if not isinstance(pod, dict):
        raise WireError("ExtenderArgs.Pod must be a Pod object")
    return pod


def _decoded(pod: Mapping[str, Any]) -> filtering.PodRequest:
    """``filtering.decode_pod``; WireError (a 400) for a GPU request no API server admits."""
    try:
        return filtering.decode_pod(pod)
    except filtering.BadPod as exc:
        raise WireError(str(exc)) from None


class PodRequests:
    """Pods' MIG requests by the bytes of the Pod as sent: kube-scheduler sends the same Pod
    to filter and then to prioritize in each scheduling cycle, so the second call skips
    decoding it. Bounded: ``entries`` pods (least recently used dropped), each at most
    ``max_bytes`` long; longer ones are decoded every time."""

    def __init__(self, *, entries: int = 64, max_bytes: int = 64 * 1024) -> None:
        self.entries = entries
        self.max_bytes = max_bytes
        self._known: dict[bytes, filtering.PodRequest] = {}

    def of(self, args: Args) -> filtering.PodRequest:
        """``filtering.decode_pod(args.pod)``, from the table when the same bytes came
        before; WireError as ``args.pod`` raises it, or for ``decode_pod``'s BadPod."""
        raw = args.pod_raw
        if raw is None or len(raw) > self.max_bytes:
            return _decoded(args.pod)
        known = self._known
        hit = known.pop(raw, None)
        if hit is None:
            hit = _decoded(args.pod)
            while len(known) >= self.entries:
                del known[next(iter(known))]
        known[raw] = hit
        return hit

    def __len__(self) -> int:
        return len(self._known)


def _loads(body: bytes) -> tuple[Any, bool]:
    """The body parsed by orjson, else by the standard library held to RFC 8259
    (``jsonwire.loads_standard``: no NaN, no Infinity, no number beyond a 64-bit float, which
    orjson refuses too and Go's encoding/json cannot read back); True when only the standard
    library could read it (a lone surrogate escape)."""
    if orjson is not None:
        # A full NodeList (Nodes mode) is megabytes of fresh, acyclic dicts: the cyclic GC
        # would walk them several times while they are built, for nothing.
        paused = len(body) > _GC_PAUSE_BYTES and gc.isenabled()
        if paused:
            gc.disable()
        try:
            return orjson.loads(body), False
        except orjson.JSONDecodeError:
            pass
        finally:
            if paused:
                gc.enable()
    return jsonwire.loads_standard(body), orjson is not None


_GC_PAUSE_BYTES = 2**20


def wire_json(value: Any, *, exotic: bool = False) -> bytes:
    """``value`` as compact JSON, the very bytes ``json.dumps`` writes (ASCII escapes) for
    anything kube-scheduler sends: orjson, unless its output holds a byte that the standard
    library escapes (non-ASCII, DEL), or the body held what only the standard library reads
    (``exotic``). Floats, which no v1.Node field carries, may be spelled otherwise (1e16,
    not 1e+16): the same number. Never NaN or Infinity, which are not JSON (``decode_args``
    reads none; ValueError, a 500, rather than an answer Go cannot read)."""
    if not exotic:
        out = jsonwire.dumps(value)
        if out.isascii() and b"\x7f" not in out:
            return out
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


if msgspec is not None:
    class _Meta(msgspec.Struct):
        name: str | None = None

    class _Item(msgspec.Struct):
        metadata: _Meta | None = None

    _RAW_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
    _RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
    _ITEMS = msgspec.json.Decoder(list[_Item])
    _NAMES = msgspec.json.Decoder(list[str] | None)


def _exact(obj: Mapping[str, Any], name: str) -> bool:
    """No key matches ``name`` in another case (so that the key as spelled, or nothing, is
    what ``last_field`` would read)."""
    lower = name.lower()
    return not any(k != name and k.lower() == lower for k in obj)


def _decode_names(body: bytes) -> Args | None:
    """A NodeNames-mode ``ExtenderArgs`` (``"Nodes":null``) read by
    msgspec: the names straight into a list of strings, the Pod kept as its bytes. None
    where anything is unusual (as ``_decode_raw``)."""
    if b"\\" in body or not body.isascii() or b"\x7f" in body:
        return None
    try:
        top = _RAW_OBJECT.decode(body)
        if not (_exact(top, "Pod") and _exact(top, "Nodes") and _exact(top, "NodeNames")):
            return None
        raw_pod, raw_nodes, raw_names = top.get("Pod"), top.get("Nodes"), top.get("NodeNames")
        if raw_pod is None or raw_nodes is None or bytes(raw_nodes) != b"null":
            return None
        if raw_names is not None:
            # No escapes: every quote opens or closes a string, so this counts the names
            # before a single one is made.
            _count_nodes(bytes(raw_names).count(b'"') // 2, "ExtenderArgs.NodeNames", "names")
        names = [] if raw_names is None else _NAMES.decode(raw_names)
        pod_raw = bytes(raw_pod)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not pod_raw.startswith(b"{"):
        return None  # not an object (or null): the usual read says what is wrong
    return Args(None, names if names is not None else [], None, {}, pod_raw=pod_raw)


def _decode_raw(body: bytes) -> Args | None:
    """A full-Nodes ``ExtenderArgs`` read without building its Node objects (msgspec): the
    top level and the NodeList as raw values, each item's ``metadata.name`` alone, the Pod
    whole; a NodeNames one by ``_decode_names``. None where the body is anything else or
    anything unusual (keys in another case, escapes, bytes beyond ASCII, an error):
    ``decode_args`` then reads it the usual way, with the same answers and the same error
    messages. More than ``MAX_NODES`` Nodes are refused before any is looked at. The Nodes'
    numbers are held to JSON's syntax (no NaN, no Infinity) but never read: one beyond a
    64-bit float (``1e999``) is echoed as sent, valid JSON that never becomes Infinity, where
    the usual read, which would turn it into ``inf``, refuses it (finding it here would mean
    one more pass over every byte, most of this read's time)."""
    if msgspec is None:
        return None
    # kube-scheduler writes the Pod, then ``"Nodes":null`` in NodeNames mode: seen early.
    at = body.find(b'"Nodes":')
    if at < 0:
        return None
    if body[at + 8:at + 24].lstrip().startswith(b"null"):
        return _decode_names(body)
    if b"\\" in body or not body.isascii() or b"\x7f" in body:
        return None
    try:
        top = _RAW_OBJECT.decode(body)
        if not (_exact(top, "Pod") and _exact(top, "Nodes") and _exact(top, "NodeNames")):
            return None
        names_raw = top.get("NodeNames")
        if ("Pod" not in top or "Nodes" not in top
                or (names_raw is not None and bytes(names_raw) != b"null")):
            return None
        pod = msgspec.json.decode(top["Pod"])
        node_list = _RAW_OBJECT.decode(top["Nodes"])
        if not isinstance(pod, dict) or "items" not in node_list:
            return None
        items = _RAW_LIST.decode(node_list["items"])
        _count_nodes(len(items), "ExtenderArgs.Nodes.items", "Nodes")
        heads = _ITEMS.decode(node_list["items"])
        meta = {k: msgspec.json.decode(v) for k, v in node_list.items() if k.lower() != "items"}
    except (msgspec.DecodeError, RecursionError):
        return None
    names: list[str] = []
    by_name: dict[str, Any] = {}
    for head, raw in zip(heads, items, strict=True):
        name = None if head.metadata is None else head.metadata.name
        if not name:
            return None
        names.append(name)
        by_name.setdefault(name, raw)
    return Args(pod, names, meta, RawNodes(by_name, meta), pod_raw=bytes(top["Pod"]))


def decode_args(body: bytes) -> Args:
    """Parse an ``ExtenderArgs`` body; WireError with a precise message when it is not one."""
    fast = _decode_raw(body)
    if fast is not None:
        return fast
    try:
        raw, exotic = _loads(body)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"request body is not valid JSON: {jsonwire.not_json(exc)}") from None
    if not isinstance(raw, dict):
        raise WireError("request body must be a JSON object (ExtenderArgs)")
    pod = last_field(raw, "Pod")
    if not isinstance(pod, dict):
        raise WireError("ExtenderArgs.Pod must be a Pod object")
    names_raw = last_field(raw, "NodeNames")
    nodes_raw = last_field(raw, "Nodes")
    if names_raw is not None:
        if isinstance(names_raw, list):
            _count_nodes(len(names_raw), "ExtenderArgs.NodeNames", "names")
        # set(map(type, ...)): one C-level pass; thousands of names arrive on every call.
        if not isinstance(names_raw, list) or not set(map(type, names_raw)) <= {str}:
            raise WireError("ExtenderArgs.NodeNames must be a list of strings or null")
        return Args(pod, names_raw, None, {})
    if nodes_raw is None:
        return Args(pod, [], None, {})
    if not isinstance(nodes_raw, dict):
        raise WireError("ExtenderArgs.Nodes must be a NodeList object or null")
    items = field(nodes_raw, "items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise WireError("ExtenderArgs.Nodes.items must be a list of Node objects")
    _count_nodes(len(items), "ExtenderArgs.Nodes.items", "Nodes")
    names: list[str] = []
    by_name: dict[str, Mapping[str, Any]] = {}
    for i, item in enumerate(items):
        meta = field(item, "metadata") if isinstance(item, dict) else None
        name = field(meta, "name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise WireError(f"ExtenderArgs.Nodes.items[{i}] has no metadata.name")
        names.append(name)
        by_name.setdefault(name, item)
    return Args(pod, names, nodes_raw, by_name, exotic=exotic)


def filter_result(args: Args, result: filtering.FilterResult, error: str = "",
                  messages: filtering.Messages | None = None) -> dict[str, Any]:
    """An ``ExtenderFilterResult`` in the mode of ``args``; reasons flattened to text here
    (through the app's ``messages`` cache when given)."""
    text = filtering.node_message if messages is None else messages.of
    failed = {n: text(r) for n, r in result.failed.items()}
    unresolvable = {n: text(r) for n, r in result.unresolvable.items()}
    if args.cache_mode:
        nodes: Any = None
        names: Any = result.passed
    else:
        meta = {k: v for k, v in (args.node_list or {}).items() if k.lower() != "items"}
        nodes = {**meta, "items": [args.nodes[n] for n in result.passed]}
        names = None
    return {"Nodes": nodes, "NodeNames": names, "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable, "Error": error}


def _error_filter_result(message: str) -> dict[str, Any]:
    return {"Nodes": None, "NodeNames": None, "FailedNodes": {},
            "FailedAndUnresolvableNodes": {}, "Error": message}


# ---------------------------------------------------------------- metrics


class _ClusterCollector(Collector):
    """Gauges computed at scrape time from the cache, never on the request path."""

    def __init__(self, index: figures.Index) -> None:
        self._index = index
        self._cluster = index.cluster

    def collect(self) -> Iterator[GaugeMetricFamily]:
        index = self._index
        index.refresh()
        free = GaugeMetricFamily("migfit_extender_free_instances",
                                 "Free MIG instances per node and profile",
                                 labels=["node", "profile"])
        alloc = GaugeMetricFamily("migfit_extender_allocatable_instances",
                                  "Advertised MIG instances per node and profile",
                                  labels=["node", "profile"])
        frag = GaugeMetricFamily(
            "migfit_extender_node_fragmentation",
            "1 - largest free instance / free memory slices, per node (0: unfragmented)",
            labels=["node"])
        for name, fig in sorted(index.figures.items()):
            for p, a, f in fig.advertised:
                free.add_metric([name, p], f)
                alloc.add_metric([name, p], a)
            if fig.total_slices:  # a node without MIG instances has nothing to fragment
                frag.add_metric([name], fig.fragmentation)
        demand = GaugeMetricFamily("migfit_extender_pending_instances",
                                   "MIG instances requested by pending pods, per profile",
                                   labels=["profile"])
        for p, n in sorted(index.demand_profiles().items()):
            demand.add_metric([p], n)
        synced = GaugeMetricFamily("migfit_extender_cache_synced",
                                   "1 once the cluster cache has synced")
        synced.add_metric([], 1.0 if self._cluster.synced else 0.0)
        yield from (free, alloc, frag, demand, synced)


@dataclasses.dataclass(frozen=True, slots=True)
class Metrics:
    registry: prometheus_client.CollectorRegistry
    calls: prometheus_client.Counter
    latency: prometheus_client.Histogram
    filtered: prometheus_client.Counter


class _ScoringLogCollector(Collector):
    """The scoring log's dropped calls, read at scrape time."""

    def __init__(self, log_: scoring_log.ScoringLog) -> None:
        self._log = log_

    def collect(self) -> Iterator[CounterMetricFamily]:
        dropped = CounterMetricFamily(
            "migfit_extender_scoring_log_dropped",
            "Prioritize calls whose scoring-log lines were dropped (the log's queue was full)")
        dropped.add_metric([], self._log.dropped)
        yield dropped


def _metrics(index: figures.Index, advice_cache: advice.AdviceCache,
             registry: prometheus_client.CollectorRegistry | None = None) -> Metrics:
    if registry is None:
        registry = common_metrics.registry()
    calls = prometheus_client.Counter("migfit_extender_requests", "Extender calls per verb",
                                      ["verb", "code"], registry=registry)
    latency = prometheus_client.Histogram(
        "migfit_extender_request_duration_seconds", "Extender call latency per verb", ["verb"],
        buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0),
        registry=registry)
    filtered = prometheus_client.Counter(
        "migfit_extender_filtered_nodes", "Nodes filtered out, by outcome and reason code",
        ["outcome", "reason"], registry=registry)
    registry.register(_ClusterCollector(index))
    # What computing the advice costs this server's loop (the fork, unpickling the result).
    registry.register(advice_cache.loop_blocked)
    return Metrics(registry=registry, calls=calls, latency=latency, filtered=filtered)


class Waiting:
    """What the extender waits for before it is Ready, besides its cache: one reason per thing
    (the advice publisher's Kubernetes client, while its credentials cannot be had), set by
    whoever gets it and cleared once it is had. /readyz says them; /healthz does not wait."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}

    def wait(self, what: str, reason: str) -> None:
        """Not Ready until ``done(what)``, for ``reason`` (one line, said by /readyz)."""
        self._reasons[what] = reason

    def done(self, what: str) -> None:
        self._reasons.pop(what, None)

    def reasons(self) -> list[str]:
        return list(self._reasons.values())


# ---------------------------------------------------------------- the application

SETTINGS = web.AppKey("settings", ExtenderSettings)
CLUSTER = web.AppKey("cluster", cluster.Cluster)
METRICS = web.AppKey("metrics", Metrics)
SCORING_LOG = web.AppKey("scoring_log", scoring_log.ScoringLog)
POD_REQUESTS = web.AppKey("pod_requests", PodRequests)
INDEX = web.AppKey("index", figures.Index)
ADVICE = web.AppKey("advice", advice.AdviceCache)
MESSAGES = web.AppKey("messages", filtering.Messages)
TABLES = web.AppKey("tables", answers.Tables)
DRAINING = web.AppKey("draining", asyncio.Event)
WAITING = web.AppKey("waiting", Waiting)
_HOST_PREFIXES = ("wire", "host prefix")  # the index's memo of HostPriority prefixes


def _json(data: Any, status: int = 200) -> web.Response:
    return _bytes(wire_json(data), status)


def _bytes(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def host_priority_list(scores: Sequence[scoring.NodeScore],
                       index: figures.Index | None = None) -> str:
    """The ``HostPriorityList`` JSON, ``[{"Host": name, "Score": n}, ...]``.

    With ``index``, built from an escaped prefix per node name kept in the index's memo:
    thousands of nodes arrive on every call and the names barely change, so this is a join
    instead of encoding dicts each time. Only names of the index's nodes are kept (a deleted
    node's prefix goes with it); other names are encoded on each call.
    """
    prefix: dict[str, str] = {} if index is None else index.memo(_HOST_PREFIXES)
    known: Mapping[str, object] = {} if index is None else index.figures
    parts = []
    for s in scores:
        head = prefix.get(s.node)
        if head is None:
            head = '{"Host":' + json.dumps(s.node) + ',"Score":'
            if s.node in known:
                prefix[s.node] = head
        parts.append(f"{head}{s.score}}}")
    return "[" + ",".join(parts) + "]"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_MESSAGE_LIMIT = 1000  # characters of a node's filter message in a debug line (names inside)


def _shown(text: str, limit: int = scoring_log.NAME_LIMIT) -> str:
    """A client-supplied value for a log line: escaped, on one line, and cut after ``limit``
    characters (``requests.shorten``, as the webhook logs; a name of any real node whole)."""
    return requests.shorten(text, limit)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """No traceback ever reaches a client: unexpected errors become a JSON 500."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.content_type != "application/json":
            response = _json({"Error": serving.error_text(exc)}, status=exc.status)
            serving.keep_headers(exc, response)
            return response
        raise
    except Exception as exc:
        log.exception("extender: %s %s failed", _shown(request.method), _shown(request.path))
        return _json({"Error": f"internal error ({type(exc).__name__}); see the extender log"},
                     status=500)


def _certified(handler: Handler) -> Handler:
    """``handler`` for clients that presented a certificate of ``--client-ca``, when set.

    The TLS layer asks every client for one and refuses a certificate it cannot verify, but
    lets a client without one through (``CERT_OPTIONAL``): the kubelet's probes and a
    Prometheus scrape present none, and a handshake that required one failed them all, so
    the pod never became Ready. The scheduler's verbs and ``/advice`` (pending pods' names)
    answer 403 to such a client; ``/healthz``, ``/readyz`` and ``/metrics`` answer anyone."""
    async def certified(request: web.Request) -> web.StreamResponse:
        if request.app[SETTINGS].client_ca is not None and (
                request.transport is None or not request.transport.get_extra_info("peercert")):
            return _json({"Error": f"{_shown(request.path)} needs a client certificate signed "
                                   f"by the extender's --client-ca (kube-scheduler: the "
                                   f"extender's tlsConfig.certFile and keyFile)"}, status=403)
        return await handler(request)
    return certified


async def _body(request: web.Request) -> bytes:
    settings = request.app[SETTINGS]
    if request.content_length is not None and request.content_length > settings.max_body_bytes:
        raise serving.too_large(settings.max_body_bytes, request.content_length)
    return await serving.read_body(request, settings.limits.body_timeout)


def _not_ready(model: cluster.Cluster) -> str | None:
    return None if model.synced else "the extender's cluster cache has not synced yet; retry"


Answer = Callable[[Args, filtering.PodRequest, float], web.Response]


async def _verb(request: web.Request, *, verb: str, error: Callable[[str], Any],
                answer: Answer) -> web.Response:
    """What both verbs share: readiness (503), decoding (400), the body limit (413), the
    budget of bodies in flight (503, ``serving.read_body``), the calls-and-latency metrics.
    ``answer`` gets the decoded args, the pod's request and the start time; ``error`` shapes
    an error body for the verb's wire type."""
    model, metrics, pods = request.app[CLUSTER], request.app[METRICS], request.app[POD_REQUESTS]
    start = time.perf_counter()
    code = 200
    try:
        not_ready = _not_ready(model)
        if not_ready is not None:
            code = 503
            return _json(error(not_ready), status=code)
        try:
            args = decode_args(await _body(request))
            pod = pods.of(args)
        except WireError as exc:
            code = 400
            return _json(error(str(exc)), status=code)
        return answer(args, pod, start)
    except web.HTTPRequestEntityTooLarge as exc:
        code = 413
        return _json(error(exc.text or "request body too large"), status=code)
    except web.HTTPServiceUnavailable as exc:  # the bodies in flight fill the budget
        code = 503
        response = _json(error(exc.text or "busy; retry"), status=code)
        serving.keep_headers(exc, response)  # Retry-After, Connection: close
        return response
    except web.HTTPException as exc:  # a slow body's 408, a client gone mid-body's 400
        code = exc.status
        raise
    except Exception:
        code = 500  # the error middleware answers it
        raise
    finally:
        metrics.calls.labels(verb, str(code)).inc()
        metrics.latency.labels(verb).observe(time.perf_counter() - start)


async def _filter(request: web.Request) -> web.Response:
    index, metrics, messages = request.app[INDEX], request.app[METRICS], request.app[MESSAGES]
    tables = request.app[TABLES]

    def answer(args: Args, pod: filtering.PodRequest, start: float) -> web.Response:
        if not log.isEnabledFor(logging.DEBUG):
            done = tables.filter(pod, args.names)
            for (bad, reason_code), n in done.codes.items():
                metrics.filtered.labels("unresolvable" if bad else "failed",
                                        reason_code.value).inc(n)
            if args.cache_mode:
                return _bytes(done.names_body())
            raw = args.raw
            if raw is not None:
                return _bytes(b'{"Nodes":' + raw.head + b",".join(map(raw.echo, done.passed_names))
                              + b']},"NodeNames":null,' + done.failures() + b"}")
            meta = {k: v for k, v in (args.node_list or {}).items() if k.lower() != "items"}
            nodes = {**meta, "items": [args.nodes[n] for n in done.passed_names]}
            return _bytes(b'{"Nodes":' + wire_json(nodes, exotic=args.exotic)
                          + b',"NodeNames":null,' + done.failures() + b"}")
        result = filtering.filter_nodes(index, pod, args.names)
        # One counter update per reason code, not per node (labels() costs microseconds).
        for (bad, reason_code), n in result.codes.items():
            metrics.filtered.labels("unresolvable" if bad else "failed", reason_code.value).inc(n)
        if log.isEnabledFor(logging.DEBUG):
            key = _shown(pod.key, scoring_log.KEY_LIMIT)
            log.debug("filter %s %s: %d passed, %d failed, %d unresolvable", key,
                      _shown(pod.describe()), len(result.passed), len(result.failed),
                      len(result.unresolvable))
            for group in (result.unresolvable, result.failed):
                for name, reasons in group.items():
                    log.debug("filter %s: %s: %s (%s)", key, _shown(name),
                              _shown(messages.of(reasons), _MESSAGE_LIMIT),
                              _free_counts(index.figures.get(name)))
        return _json(filter_result(args, result, messages=messages))

    return await _verb(request, verb="filter", error=_error_filter_result, answer=answer)


def _free_counts(fig: figures.NodeFigures | None) -> str:
    """A node's free instances per profile, ``free 1g.10gb 0/7, 3g.40gb 2/2`` (free of
    advertised), for the debug log: the filter's messages leave the moment's counts out, so
    that kube-scheduler's event groups nodes with the same layout."""
    if fig is None or not fig.advertised:
        return "no MIG instances advertised"
    return "free " + ", ".join(f"{p} {free}/{alloc}" for p, alloc, free in fig.advertised)


async def _prioritize(request: web.Request) -> web.Response:
    tables, scoring_log_ = request.app[TABLES], request.app[SCORING_LOG]

    def answer(args: Args, pod: filtering.PodRequest, start: float) -> web.Response:
        done = tables.prioritize(pod, args.names)
        response = _bytes(done.body)
        # every call gets its lines (one for a pod without MIG requests says why all are 0)
        done.duration_s = time.perf_counter() - start
        scoring_log_.submit(done)  # written after the response
        return response

    return await _verb(request, verb="prioritize", error=lambda m: {"Error": m}, answer=answer)


async def _healthz(request: web.Request) -> web.Response:
    return _json({"ok": True})


async def _readyz(request: web.Request) -> web.Response:
    """200 once the cache has synced and nothing else is waited for (``Waiting``), until
    shutdown begins; else 503 with the reasons."""
    model = request.app[CLUSTER]
    reasons = ["shutting down"] if request.app[DRAINING].is_set() else []
    if not model.synced:
        reasons.append("the cluster cache has not synced yet")
    reasons += request.app[WAITING].reasons()
    if not reasons:
        return _json({"ready": True, "nodes": len(model)})
    return _json({"ready": False, "nodes": len(model), "reason": "; ".join(reasons)},
                 status=503)


async def _metrics_handler(request: web.Request) -> web.Response:
    body = prometheus_client.generate_latest(request.app[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})


async def _advice(request: web.Request) -> web.Response:
    """Re-layout advice for the cluster (the ``migfit advise --json`` document), cached per
    generation and computed off the event loop (``AdviceCache.fresh``): filter and
    prioritize are answered meanwhile. 503 when none could be computed yet."""
    try:
        got = await request.app[ADVICE].fresh(request.app[CLUSTER])
    except advice.AdviceUnavailable as exc:
        return _json({"Error": exc.message}, status=exc.status)
    return _json(got.to_json())


def make_app(
    *,
    settings: ExtenderSettings,
    cluster: cluster.Cluster,
    index: figures.Index | None = None,
    advice_cache: advice.AdviceCache | None = None,
    source: Source | None = None,
    registry: prometheus_client.CollectorRegistry | None = None,
    certificate: cert_metrics.HasExpiry | None = None,
    waiting: Waiting | None = None,
) -> web.Application:
    """The extender application over ``cluster``; ``source`` (when given) runs for its lifetime.

    ``index`` (the figures of ``cluster``) and ``advice_cache`` (what ``/advice`` answers
    from, shared with the advice publisher) are the composition root's; when not given, this
    app makes its own.

    ``registry`` (default: ``migfit.metrics.registry()``) is where the metrics go, so that the
    advisor's and the re-layout's gauges share the extender's ``/metrics``. ``certificate``
    (the ``CertificateReloader`` when serving TLS) adds the certificate-expiry gauge.
    ``waiting``: what /readyz waits for besides the cache (``Waiting``; none when not given).

    Routes: ``POST /filter``, ``POST /prioritize``, ``GET /healthz``, ``/readyz``, ``/metrics``,
    ``/advice``. It can be mounted under a prefix with ``add_subapp`` (``migfit serve``).
    """
    app = web.Application(client_max_size=settings.max_body_bytes,
                          middlewares=[serving.bodiless, _errors])
    serving.limit_bodies(app, settings.limits, settings.max_body_bytes)
    if index is None:
        index = figures.Index(cluster)
    elif index.cluster is not cluster:
        raise ValueError("the figures index given follows another cluster")
    app[SETTINGS] = settings
    app[CLUSTER] = cluster
    app[INDEX] = index
    app[ADVICE] = advice_cache if advice_cache is not None else advice.AdviceCache()
    app[MESSAGES] = filtering.Messages()
    app[DRAINING] = asyncio.Event()
    app[WAITING] = waiting if waiting is not None else Waiting()
    app[TABLES] = answers.Tables(index, all_pods=settings.score_all_pods)
    app[METRICS] = _metrics(index, app[ADVICE], registry)
    app[POD_REQUESTS] = PodRequests()
    # What aiohttp's parser rejects before any handler runs (serving.JsonErrors).
    app[serving.ERROR_ANSWER] = lambda status, message: _json({"Error": message}, status)
    if certificate is not None:
        cert_metrics.register(app[METRICS].registry, server="extender", source=certificate)
    app[SCORING_LOG] = scoring_log.ScoringLog(log_format=settings.log_format,
                                              max_nodes=settings.log_nodes,
                                              all_pods=settings.score_all_pods)
    app[METRICS].registry.register(_ScoringLogCollector(app[SCORING_LOG]))

    async def flush_log(app: web.Application) -> None:
        app[SCORING_LOG].flush()

    async def stop_advice(app: web.Application) -> None:
        await app[ADVICE].close()  # an advice computation in flight: its child killed

    app.on_cleanup.append(flush_log)
    app.on_cleanup.append(stop_advice)
    def refused(error: Callable[[str], Any]) -> Callable[[int], web.StreamResponse]:
        return lambda length: _json(error(
            serving.too_large(settings.max_body_bytes, length).text or ""), status=413)

    app.router.add_post("/filter", _certified(_filter), expect_handler=serving.expect_within(
        settings.max_body_bytes, refused(_error_filter_result)))
    app.router.add_post("/prioritize", _certified(_prioritize),
                        expect_handler=serving.expect_within(
                            settings.max_body_bytes, refused(lambda m: {"Error": m})))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics_handler)
    app.router.add_get("/advice", _certified(_advice))
    if source is not None:
        app.cleanup_ctx.append(serving.background("cluster source", source.run))
    return app


async def freeze_after_sync(model: cluster.Cluster, *, poll_s: float = 0.5) -> None:
    """Once the cache has synced, move it out of the cyclic GC's sight (``gc.freeze``).

    150,000 pod records make a full collection take a few hundred milliseconds — a p99 spike
    on whichever call triggers it. The records are immutable and long-lived, so collecting
    them is pointless; objects created later are still collected as usual.
    """
    while not model.synced:
        await asyncio.sleep(poll_s)
    gc.collect()
    gc.freeze()
    log.info("extender: cache synced (%d nodes); %d objects frozen for the GC", len(model),
             gc.get_freeze_count())


def tls_reloader(settings: ExtenderSettings) -> reloading.CertificateReloader | None:
    """The reloading TLS context of ``settings``, or None for plain HTTP."""
    if settings.tls_cert is None and settings.tls_key is None:
        if settings.client_ca is not None:
            raise errors.UsageError("--client-ca needs --tls-cert and --tls-key")
        return None
    if settings.tls_cert is None or settings.tls_key is None:
        raise errors.UsageError("give both --tls-cert and --tls-key for HTTPS")
    return reloading.CertificateReloader(cert_file=settings.tls_cert, key_file=settings.tls_key,
                                         client_ca=settings.client_ca)


def listen_of(settings: ExtenderSettings,
              reloader: reloading.CertificateReloader | None) -> serving.Listen:
    """Where and how the extender of ``settings`` listens."""
    return serving.Listen(host=settings.host, port=settings.port,
                          ssl_context=None if reloader is None else reloader.context,
                          limits=settings.limits, shutdown_timeout=settings.shutdown_timeout,
                          drain_delay=settings.drain_delay)


async def serve(
    settings: ExtenderSettings,
    model: cluster.Cluster,
    *,
    index: figures.Index | None = None,
    advice_cache: advice.AdviceCache | None = None,
    source: Source | None = None,
    stop: asyncio.Event | None = None,
    on_started: Callable[[int], None] | None = None,
    registry: prometheus_client.CollectorRegistry | None = None,
    background: Sequence[tuple[str, Callable[[], Awaitable[None]]]] = (),
    waiting: Waiting | None = None,
) -> None:
    """Serve the extender on ``settings.host:port`` until ``stop`` is set (or SIGTERM/SIGINT).

    HTTPS when a certificate is given (re-read when the files change), else HTTP.
    ``on_started`` receives the bound port (``port`` 0 picks a free one). ``background``
    tasks (name, coroutine factory: the advice publisher, the re-layout apply loop) run for
    the server's life, from before it listens, and are cancelled on shutdown; ``waiting``
    (``Waiting``) is what /readyz waits for besides the cache, what they have yet to get. On
    stop, /readyz fails for ``drain_delay`` s while calls are still answered
    (``serving.drain_and_stop``).
    """
    reloader = tls_reloader(settings)
    app = make_app(settings=settings, cluster=model, index=index, advice_cache=advice_cache,
                   source=source, registry=registry, certificate=reloader, waiting=waiting)
    for name, make in background:
        app.cleanup_ctx.append(serving.background(name, make))
    app.cleanup_ctx.append(serving.background("GC freeze", lambda: freeze_after_sync(model)))
    if reloader is not None:
        app.cleanup_ctx.append(serving.background(
            "TLS reload", lambda: reloader.run(settings.reload_interval)))

    def started(info: serving.Started) -> None:
        scheme = "http" if reloader is None else "https"
        log.info("extender serving %s://%s:%s (filter, prioritize)", scheme,
                 settings.host or "*", info.port)
        if on_started is not None:
            on_started(info.port)

    await serving.serve(app, listen_of(settings, reloader), stop=stop, on_started=started,
                        on_drain=app[DRAINING].set)
