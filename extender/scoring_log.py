"""The scoring log: one JSON line and one short human line per prioritize call, for operators.

The JSON line carries the pod, its profile, the formula's ``weights`` (``scoring.WEIGHTS``,
the weighted terms only), each node's score with its weighted ``terms`` and the figures behind
them (``scoring.NodeScore``), and the call's duration: ``raw = Σ weights[t] · terms[t]`` can be
recomputed from the line alone. The human line names, per node, the terms that weigh most
(weight × value). kube-scheduler may send thousands of nodes,
so at most ``max_nodes`` of the best are written in full (0: all), with a histogram of all
scores and the number left out. Lines go to the ``migfit.scoring`` logger, which
``migfit.logs`` writes bare in text (they are the report) and as they are in JSON.
"""

from __future__ import annotations

import dataclasses
import datetime
import heapq
import json
import logging
from collections.abc import Sequence
from typing import Any, Literal

from migfit import logs
from migfit.extender import filtering, scoring

LogFormat = Literal["json", "text", "both"]
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "text", "both")

logger = logging.getLogger(logs.SCORING_LOGGER)


def weights() -> dict[str, float]:
    """The terms the score weighs (weight > 0), from ``scoring.WEIGHTS``."""
    return {t: w for t, w in scoring.WEIGHTS.items() if w}


def _r3(x: float) -> float:
    # round(x, 3) for the figures (in [0, 1]), at a third of its cost: 50 nodes a call.
    return int(x * 1e3 + 0.5) / 1e3


def _r4(x: float) -> float:
    return int(x * 1e4 + 0.5) / 1e4


def _figures(s: scoring.NodeScore, weighted: dict[str, float]) -> dict[str, Any]:
    if not s.fits:
        return {"node": s.node, "score": s.score, "fits": False}
    values = scoring.terms(s)
    return {"node": s.node, "score": s.score, "fits": True, "raw": _r4(s.raw),
            "terms": {t: _r4(values[t]) for t in weighted},
            "strand": _r3(s.strand), "host": _r3(s.host), "pack": _r3(s.pack),
            "fresh": s.fresh, "scarce": _r3(s.scarce), "tight": _r3(s.tight),
            "slack": _r3(s.slack)}


def _deciding(s: scoring.NodeScore, weighted: dict[str, float], shown: int = 3) -> str:
    """``raw 0.955 = 0.60×no_strand 1.00 + 0.30×host_free 0.85 + …``: the largest terms."""
    values = scoring.terms(s)
    top = sorted(weighted, key=lambda t: (-weighted[t] * values[t], t))
    parts = [f"{weighted[t]:.2f}×{t} {values[t]:.2f}" for t in top[:shown]]
    more = " + …" if len(top) > shown else ""
    return f"raw {s.raw:.3f} = {' + '.join(parts)}{more}"


def _rank(s: scoring.NodeScore) -> tuple[float, str]:
    return (-s.raw, s.node)


@dataclasses.dataclass(frozen=True, slots=True)
class _Summary:
    """What both lines need from one call's scores, computed once: O(nodes), no full sort."""

    best: list[scoring.NodeScore]  # the best ``n`` (all when n <= 0), best first
    histogram: dict[int, int]  # score -> nodes
    fit: int


def _summarize(scores: Sequence[scoring.NodeScore], n: int) -> _Summary:
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
    return _Summary(best=best, histogram={k: len(v) for k, v in sorted(buckets.items())},
                    fit=fit)


class ScoringLog:
    """Writes the lines of each prioritize call in the chosen format."""

    def __init__(self, *, log_format: LogFormat = "both", max_nodes: int = 50,
                 target: logging.Logger = logger) -> None:
        self.format = log_format
        self.max_nodes = max_nodes
        self.logger = target

    def json_line(self, request: filtering.PodRequest, scores: Sequence[scoring.NodeScore],
                  duration_s: float, *, now: datetime.datetime | None = None,
                  summary: _Summary | None = None) -> str:
        summary = summary or _summarize(scores, self.max_nodes)
        best = summary.best if self.max_nodes <= 0 else summary.best[:self.max_nodes]
        weighted = weights()
        when = (now or datetime.datetime.now(datetime.UTC)).isoformat(timespec="milliseconds")
        record = {
            "time": when.replace("+00:00", "Z"),
            "level": "INFO",  # the keys of every line of a JSON log (migfit.logs)
            "logger": self.logger.name,
            "event": "prioritize",
            "pod": request.key,
            "uid": request.uid,
            "profile": request.describe(),
            "nodes": len(scores),
            "fit": summary.fit,
            "duration_ms": round(duration_s * 1000, 3),
            "weights": weighted,
            "scores": [_figures(s, weighted) for s in best],
            "omitted": len(scores) - len(best),
            "histogram": {str(k): v for k, v in summary.histogram.items()},
        }
        return json.dumps(record, separators=(",", ":"))

    def text_line(self, request: filtering.PodRequest, scores: Sequence[scoring.NodeScore],
                  duration_s: float, *, summary: _Summary | None = None) -> str:
        summary = summary or _summarize(scores, 3)
        best = summary.best[:3]
        fit = summary.fit
        weighted = weights()
        # Names come from the request: escaped, so that no handler can be fed a forged line
        # or a lone surrogate it cannot encode.
        parts = [f"{logs.escape(s.node)}={s.score} ({_deciding(s, weighted)})" if s.fits
                 else f"{logs.escape(s.node)}=0 (does not fit)" for s in best]
        top = "; ".join(parts) or "no nodes"
        return (f"prioritize {logs.escape(request.key)} {request.describe()}: {top} — "
                f"{len(scores)} nodes, "
                f"{fit} fit, {duration_s * 1000:.2f} ms")

    def record(self, request: filtering.PodRequest, scores: Sequence[scoring.NodeScore],
               duration_s: float) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        wanted = 3 if self.format == "text" else (
            0 if self.max_nodes <= 0 else max(self.max_nodes, 3))
        summary = _summarize(scores, wanted)
        if self.format in ("json", "both"):
            self.logger.info(self.json_line(request, scores, duration_s, summary=summary))
        if self.format in ("text", "both"):
            self.logger.info(self.text_line(request, scores, duration_s, summary=summary))
