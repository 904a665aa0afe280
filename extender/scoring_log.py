"""The scoring log: one JSON line and one short human line per prioritize call, for operators.

The JSON line carries the pod, its profile, the formula's ``weights`` (``scoring.WEIGHTS``,
the terms with a weight only), each node's score with those terms' values before weighting
(``terms``) and the figures behind them (``scoring.NodeScore``), and the call's duration:
``raw = Σ weights[t] · terms[t]`` and, with the node's ``tie`` (a hash of its name,
``figures.tie_of``), ``score = clamp(⌊10·raw + 0.5 + 0.1·(tie − 0.5)⌋, 0, 10)`` can be
recomputed from the line alone (up to the rounding of the written figures). The human line
names, per node, the terms that weigh most (weight × value) and its tie. A call for a pod
without MIG requests (without ``--score-all-pods``) gets lines saying why every node scored
0 (``UNSCORED``) instead. kube-scheduler may send thousands of nodes,
so at most ``max_nodes`` of the best are written in full (0: all), with a histogram of all
scores and the number left out. The server hands calls over through ``submit``: a bounded
queue written on the event loop's next turn, after the response, from answer tables ranked
per score (O(logged nodes) per call); a full queue drops calls and counts them. Lines go to
the ``migfit.scoring`` logger, which ``migfit.logs`` writes bare in text (they are the
report) and as they are in JSON. Names come from the request (nodes, the pod's namespace,
name and uid, the profiles it asks for): each is cut after ``NAME_LIMIT`` characters, so a
call's lines stay a few kilobytes whatever it sends.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import functools
import heapq
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, Protocol

from migfit import logs, requests
from migfit.extender import figures, filtering, scoring

LogFormat = Literal["json", "text", "both"]
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "text", "both")

logger = logging.getLogger(logs.SCORING_LOGGER)

NAME_LIMIT: Final = 253
"""Characters of a client-supplied name that a log line keeps: the longest object name
Kubernetes allows (a DNS subdomain), so every real node and pod is logged whole and can be
matched; a longer name, which no real object has, is cut and marked ``… (N characters)``."""
KEY_LIMIT: Final = 63 + 1 + NAME_LIMIT  # namespace/name: a namespace has at most 63


def bounded(text: str, limit: int = NAME_LIMIT) -> str:
    """``text`` for a JSON line (``requests.cut``: JSON escapes it; the text line uses
    ``requests.shorten``, which escapes too)."""
    return requests.cut(text, limit)

# json.dumps(value, separators=(",", ":")) without building an encoder per call
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def weights(request: filtering.PodRequest | None = None) -> dict[str, float]:
    """The terms the score weighs (weight ≠ 0), from ``scoring.WEIGHTS`` (for a pod without
    MIG requests, scored with ``--score-all-pods``: ``scoring.HOST_ONLY_WEIGHTS``)."""
    table = (scoring.HOST_ONLY_WEIGHTS if request is not None and not request.mig
             else scoring.WEIGHTS)
    return {t: w for t, w in table.items() if w}


@functools.lru_cache(maxsize=8)
def _weights_json(items: tuple[tuple[str, float], ...]) -> str:
    return _dumps(dict(items))


def _r3(x: float) -> float:
    # round(x, 3) for the figures (in [0, 1]), at a third of its cost: 50 nodes a call.
    return int(x * 1e3 + 0.5) / 1e3


def _r4(x: float) -> float:
    return int(x * 1e4 + 0.5) / 1e4


def _figures(s: scoring.NodeScore, weighted: dict[str, float]) -> dict[str, Any]:
    if not s.fits:
        return {"node": bounded(s.node), "score": s.score, "fits": False}
    values = scoring.terms(s)
    return {"node": bounded(s.node), "score": s.score, "fits": True, "raw": _r4(s.raw),
            "tie": _r4(figures.tie_of(s.node)), "terms": {t: _r4(values[t]) for t in weighted},
            "strand": _r3(s.strand), "host": _r3(s.host), "pack": _r3(s.pack),
            "fresh": s.fresh, "scarce": _r3(s.scarce), "tight": _r3(s.tight),
            "slack": _r3(s.slack), "frag": _r4(s.frag),
            "mismatch": _r3(s.mismatch), "floor": _r3(s.floor)}


def _deciding(s: scoring.NodeScore, weighted: dict[str, float], shown: int = 3) -> str:
    """``raw 0.955 = 0.60×no_strand 1.00 + 0.30×host_free 0.85 + …; tie 0.41``: the largest
    terms, and the node's tie-break (the score is ⌊10·raw + 0.5 + 0.1·(tie − 0.5)⌋)."""
    values = scoring.terms(s)
    top = sorted((t for t in weighted if weighted[t] > 0),
                 key=lambda t: (-weighted[t] * values[t], t))
    parts = [f"{weighted[t]:.2f}×{t} {values[t]:.2f}" for t in top[:shown]]
    more = " + …" if len(top) > shown else ""
    # a term that weighs against (``spoils_plan``) is named whenever it takes something off
    against = "".join(f" − {-weighted[t]:.2f}×{t} {values[t]:.2f}" for t in sorted(weighted)
                      if weighted[t] < 0 and values[t] > 0)
    return (f"raw {s.raw:.3f} = {' + '.join(parts)}{more}{against}; "
            f"tie {figures.tie_of(s.node):.2f}")


def _described(s: scoring.NodeScore, weighted: dict[str, float]) -> str:
    """The node's part of the text line. Names come from the request: escaped, so that no
    handler can be fed a forged line or a lone surrogate it cannot encode, and cut."""
    name = requests.shorten(s.node, NAME_LIMIT)
    if not s.fits:
        return f"{name}=0 (does not fit)"
    return f"{name}={s.score} ({_deciding(s, weighted)})"


def _rank(s: scoring.NodeScore) -> tuple[float, str]:
    return (-s.raw, s.node)


@dataclasses.dataclass(frozen=True, slots=True)
class Summary:
    """What both lines need from one call's scores, computed once: no full sort."""

    best: list[scoring.NodeScore]  # the best ``n`` (all when n <= 0), best first
    histogram: dict[int, int]  # score -> nodes, by score
    fit: int
    nodes: int
    # The best nodes' entries already rendered (kept by the answer tables), when given:
    json: Sequence[str] | None = None  # each one's JSON entry of "scores", like ``best``
    text: Sequence[str] | None = None  # the first ``TEXT_NODES`` ones' text parts


Render = Callable[[scoring.NodeScore], str]  # one node's JSON entry, or its text part
TEXT_NODES = 3  # nodes the text line names


class Pending(Protocol):
    """One prioritize call waiting for its lines (``answers.Prioritized``): its summary comes
    from tables ranked per score, with the nodes' parts rendered once and kept, so writing
    it is one C-level pass over the nodes and O(logged nodes) Python work."""

    request: filtering.PodRequest
    duration_s: float

    def summary(self, n: int, render: Render | None = None,
                describe: Render | None = None) -> Summary: ...


def summarize(scores: Sequence[scoring.NodeScore], n: int) -> Summary:
    """``Summary`` of a list of scores: O(nodes), per-score buckets, no full sort."""
    buckets: dict[int, list[scoring.NodeScore]] = {}
    fit = 0
    for s in scores:
        bucket = buckets.get(s.score)
        if bucket is None:
            bucket = buckets[s.score] = []
        bucket.append(s)
        fit += s.fits
    best: list[scoring.NodeScore] = []
    for score in sorted(buckets, reverse=True):
        room = len(scores) if n <= 0 else n - len(best)
        if room <= 0:
            break
        bucket = buckets[score]
        best.extend(sorted(bucket, key=_rank) if len(bucket) <= room
                    else heapq.nsmallest(room, bucket, key=_rank))
    return Summary(best=best, histogram={k: len(v) for k, v in sorted(buckets.items())},
                   fit=fit, nodes=len(scores))


QUEUE = 64  # prioritize calls waiting for their lines; more are dropped and counted

UNSCORED: Final = (
    "the pod requests no MIG instance (nvidia.com/mig-<profile>, or nvidia.com/gpu with "
    "migfit's single-strategy decision), so every node scores 0 and kube-scheduler's own "
    "scores decide; migfit extender --score-all-pods scores such pods on cpu and memory")
"""Why every node of a call scored 0 (a pod without MIG requests, without
``--score-all-pods``): what the call's lines say instead of per-node figures."""


class ScoringLog:
    """Writes the lines of each prioritize call in the chosen format.

    ``record`` writes at once; ``submit`` queues a call (bounded: ``queue`` calls, then
    dropped and counted in ``dropped``) and writes it from the event loop's next turn, after
    the handler has returned and its response has been written to the socket.
    """

    def __init__(self, *, log_format: LogFormat = "both", max_nodes: int = 50,
                 target: logging.Logger = logger, queue: int = QUEUE,
                 all_pods: bool = False) -> None:
        self.format = log_format
        self.max_nodes = max_nodes
        self.all_pods = all_pods  # --score-all-pods: pods without MIG requests are scored
        self.logger = target
        self.queue = queue
        self.dropped = 0
        self._waiting: collections.deque[Pending] = collections.deque()

    def json_line(self, request: filtering.PodRequest, scores: Sequence[scoring.NodeScore],
                  duration_s: float, *, now: datetime.datetime | None = None,
                  summary: Summary | None = None,
                  render: Callable[[scoring.NodeScore], str] | None = None) -> str:
        summary = summary or summarize(scores, self.max_nodes)
        unscored = self.unscored(request)
        weighted = {} if unscored else weights(request)

        def plain(s: scoring.NodeScore) -> str:
            return _dumps(_figures(s, weighted))

        when = (now or datetime.datetime.now(datetime.UTC)).isoformat(timespec="milliseconds")
        # The bytes json.dumps(separators=(",", ":")) writes for the record {time, level,
        # logger, event, pod, uid, profile, nodes, fit, duration_ms, weights, scores,
        # omitted, histogram[, unscored]}, put together from its parts (a test holds it to
        # that): the node entries come rendered (and kept by the answer tables), the rest
        # is short.
        best = summary.best if self.max_nodes <= 0 else summary.best[:self.max_nodes]
        if unscored:  # no node has figures to show: the line says why they all scored 0
            best = []
        if summary.json is not None:
            parts: Sequence[str] = summary.json[:len(best)]
        else:
            parts = list(map(plain if render is None else render, best))
        histogram = ",".join([f'"{k}":{v}' for k, v in summary.histogram.items()])
        return "".join((
            '{"time":', _dumps(when.replace("+00:00", "Z")),
            ',"level":"INFO","logger":', _dumps(self.logger.name),  # every JSON log line's keys
            ',"event":"prioritize","pod":', _dumps(bounded(request.key, KEY_LIMIT)),
            ',"uid":', _dumps(bounded(request.uid)),
            ',"profile":', _dumps(bounded(request.describe())),
            ',"nodes":', str(summary.nodes), ',"fit":', str(summary.fit),
            ',"duration_ms":', float.__repr__(round(duration_s * 1000, 3)),
            ',"weights":', _weights_json(tuple(weighted.items())),
            ',"scores":[', ",".join(parts), '],"omitted":', str(summary.nodes - len(best)),
            ',"histogram":{', histogram, "}",
            ',"unscored":' + _dumps(UNSCORED) if unscored else "", "}"))

    def text_line(self, request: filtering.PodRequest, scores: Sequence[scoring.NodeScore],
                  duration_s: float, *, summary: Summary | None = None) -> str:
        summary = summary or summarize(scores, TEXT_NODES)
        fit = summary.fit
        if self.unscored(request):
            return (f"prioritize {requests.shorten(request.key, KEY_LIMIT)} "
                    f"{requests.shorten(request.describe(), NAME_LIMIT)}: {UNSCORED} — "
                    f"{summary.nodes} nodes, {duration_s * 1000:.2f} ms")
        if summary.text is not None:
            parts: Sequence[str] = summary.text[:TEXT_NODES]
        else:
            weighted = weights(request)
            parts = [_described(s, weighted) for s in summary.best[:TEXT_NODES]]
        top = "; ".join(parts) or "no nodes"
        return (f"prioritize {requests.shorten(request.key, KEY_LIMIT)} "
                f"{requests.shorten(request.describe(), NAME_LIMIT)}: {top} — "
                f"{summary.nodes} nodes, "
                f"{fit} fit, {duration_s * 1000:.2f} ms")

    def unscored(self, request: filtering.PodRequest) -> bool:
        """Every node of a call for ``request`` scores 0 without figures: a pod without MIG
        requests, without ``--score-all-pods`` (``scoring.score_nodes``)."""
        return not request.mig and not self.all_pods

    def _wanted(self) -> int:
        return TEXT_NODES if self.format == "text" else (
            0 if self.max_nodes <= 0 else max(self.max_nodes, TEXT_NODES))

    def record(self, request: filtering.PodRequest, scores: Sequence[scoring.NodeScore],
               duration_s: float) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        self._write(request, duration_s, summarize(scores, self._wanted()), None)

    def _write(self, request: filtering.PodRequest, duration_s: float, summary: Summary,
               render: Callable[[scoring.NodeScore], str] | None) -> None:
        # ``both``: the human line, then its JSON line (README, "Log format").
        if self.format in ("text", "both"):
            self._emit(self.text_line(request, (), duration_s, summary=summary))
        if self.format in ("json", "both"):
            self._emit(self.json_line(request, (), duration_s, summary=summary, render=render))

    def _emit(self, line: str) -> None:
        """``logger.info(line)`` without looking up the caller (no handler of migfit's shows
        it), which is most of what a record costs."""
        target = self.logger
        target.handle(target.makeRecord(target.name, logging.INFO, __file__, 0, line, (),
                                        None))

    def submit(self, call: Pending) -> None:
        """Queue ``call``'s lines for the loop's next turn (or write them now without a
        running loop); a full queue drops the call and counts it in ``dropped``."""
        if not self.logger.isEnabledFor(logging.INFO):
            return
        if len(self._waiting) >= self.queue:
            self.dropped += 1
            return
        self._waiting.append(call)
        if len(self._waiting) == 1:
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop: a caller outside the server
                self.flush()

    def pending(self) -> int:
        """Calls waiting for their lines."""
        return len(self._waiting)

    def flush(self) -> None:
        """Write every queued call's lines."""
        json_wanted = self.format in ("json", "both")
        text_wanted = self.format in ("text", "both")
        while self._waiting:
            call = self._waiting.popleft()
            weighted = weights(call.request)

            def render(s: scoring.NodeScore, weighted: dict[str, float] = weighted) -> str:
                return _dumps(_figures(s, weighted))

            def describe(s: scoring.NodeScore, weighted: dict[str, float] = weighted) -> str:
                return _described(s, weighted)

            if self.unscored(call.request):  # counts only: no node's figures are written
                summary = call.summary(1)
            else:
                summary = call.summary(self._wanted(), render if json_wanted else None,
                                       describe if text_wanted else None)
            self._write(call.request, call.duration_s, summary, render)
