"""The scoring log: one JSON line and one short human line per prioritize call, for operators.

The JSON line carries the pod, its profile, each node's score and the figures behind it
(``scoring.NodeScore``), and the call's duration. kube-scheduler may send thousands of nodes,
so at most ``max_nodes`` of the best are written in full (0: all), with a histogram of all
scores and the number left out. Lines go to the ``migfit.scoring`` logger; the command
line attaches a handler that writes the bare message.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

from extender import filtering, scoring

LogFormat = Literal["json", "text", "both"]
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "text", "both")

logger = logging.getLogger("migfit.scoring")


def _figures(s: scoring.NodeScore) -> dict[str, Any]:
    if not s.fits:
        return {"node": s.node, "score": s.score, "fits": False}
    return {"node": s.node, "score": s.score, "fits": True, "pack": round(s.pack, 3),
            "fresh": s.fresh, "scarce": round(s.scarce, 3), "tight": round(s.tight, 3),
            "slack": round(s.slack, 3), "raw": round(s.raw, 4)}


def _best(scores: Sequence[scoring.NodeScore], n: int) -> list[scoring.NodeScore]:
    ranked = sorted(scores, key=lambda s: (-s.score, -s.raw, s.node))
    return ranked if n <= 0 else ranked[:n]


class ScoringLog:
    """Writes the lines of each prioritize call in the chosen format."""

    def __init__(self, *, log_format: LogFormat = "both", max_nodes: int = 50,
                 target: logging.Logger = logger) -> None:
        self.format = log_format
        self.max_nodes = max_nodes
        self.logger = target

    def json_line(self, request: filtering.PodRequest, scores: Sequence[scoring.NodeScore],
                  duration_s: float, *, now: datetime.datetime | None = None) -> str:
        best = _best(scores, self.max_nodes)
        when = (now or datetime.datetime.now(datetime.UTC)).isoformat(timespec="milliseconds")
        record = {
            "time": when.replace("+00:00", "Z"),
            "event": "prioritize",
            "pod": request.key,
            "uid": request.uid,
            "profile": request.describe(),
            "nodes": len(scores),
            "fit": sum(1 for s in scores if s.fits),
            "duration_ms": round(duration_s * 1000, 3),
            "scores": [_figures(s) for s in best],
            "omitted": len(scores) - len(best),
            "histogram": {str(k): v for k, v in sorted(Counter(s.score for s in scores).items())},
        }
        return json.dumps(record, separators=(",", ":"))

    def text_line(self, request: filtering.PodRequest, scores: Sequence[scoring.NodeScore],
                  duration_s: float) -> str:
        best = _best(scores, 3)
        fit = sum(1 for s in scores if s.fits)
        parts = []
        for s in best:
            if not s.fits:
                parts.append(f"{s.node}=0 (does not fit)")
                continue
            idle = "idle node" if s.fresh else "busy node"
            parts.append(f"{s.node}={s.score} (pack {s.pack:.2f}, {idle}, scarce {s.scarce:.2f},"
                         f" tight {s.tight:.2f}, slack {s.slack:.2f})")
        top = "; ".join(parts) or "no nodes"
        return (f"prioritize {request.key} {request.describe()}: {top} — {len(scores)} nodes, "
                f"{fit} fit, {duration_s * 1000:.2f} ms")

    def record(self, request: filtering.PodRequest, scores: Sequence[scoring.NodeScore],
               duration_s: float) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        if self.format in ("json", "both"):
            self.logger.info(self.json_line(request, scores, duration_s))
        if self.format in ("text", "both"):
            self.logger.info(self.text_line(request, scores, duration_s))
