"""The simulator's output: a terminal table, a JSON document, and a self-contained HTML page.

The HTML page has no script and loads nothing: styles are inline and charts are inline SVG
(allocation against arrived demand per policy, pending pods over time, and each GPU's
instances at one moment, coloured by profile), so it opens offline.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from migfit.simulate import metrics

COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (figure, header, format)
    ("gpu_pods_placed", "GPU pods placed", "int"),
    ("pods_placed", "all placed", "int"),
    ("allocated_share", "allocated", "pct"),
    ("unallocated_share", "unallocated", "pct"),
    ("fragmentation_share", "frag", "pct"),
    ("pending_p50_s", "wait p50 s", "int"),
    ("pending_p99_s", "wait p99 s", "int"),
    ("blocked_by_fragmentation", "blocked/frag", "int"),
    ("relayouts", "re-layouts", "int"),
    ("pods_disrupted", "disrupted", "int"),
    ("memory_wasted_share", "mem rounded", "pct"),
    ("wall_s", "wall s", "float"),
)
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
PROFILE_COLOURS = ("#1f77b4", "#9467bd", "#2ca02c", "#ff7f0e", "#d62728", "#8c564b",
                   "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


def _fmt(value: float, kind: str) -> str:
    if kind == "pct":
        return f"{value * 100:.1f}%"
    if kind == "int":
        return f"{value:.0f}"
    return f"{value:.2f}"


def cell(summary: Mapping[str, float], kind: str) -> str:
    """``mean`` or ``mean ±stdev`` when the seeds disagree."""
    text = _fmt(summary["mean"], kind)
    if summary["stdev"] > 0:
        spread = _fmt(summary["stdev"], kind)
        text += f" ±{spread}"
    return text


def table(summary: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """A fixed-width table: one row per policy."""
    headers = ["policy", *(h for _, h, _ in COLUMNS)]
    rows = [[policy, *(cell(figs[k], kind) for k, _, kind in COLUMNS)]
            for policy, figs in summary.items()]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                       for i, (h, w) in enumerate(zip(headers, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                               for i, (v, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


def markdown(summary: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    headers = ["policy", "GPU pods placed", "all pods placed", "unallocated at end",
               "fragmentation", "re-layouts", "disrupted"]
    keys = [("gpu_pods_placed", "int"), ("pods_placed", "int"), ("unallocated_share", "pct"),
            ("fragmentation_share", "pct"), ("relayouts", "int"), ("pods_disrupted", "int")]
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for policy, figs in summary.items():
        out.append("| " + " | ".join([policy, *(cell(figs[k], f) for k, f in keys)]) + " |")
    return "\n".join(out)


def write_json(path: Path, document: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n", encoding="utf-8")


# ---------------------------------------------------------------- SVG


def _line_chart(series: Mapping[str, Sequence[tuple[float, float]]], *, title: str,
                xlabel: str, ylabel: str, diagonal: bool = False, percent_y: bool = True,
                percent_x: bool = False) -> str:
    w, h, left, bottom, top, right = 760, 360, 60, 40, 30, 170
    pts = [p for s in series.values() for p in s]
    xmax = max((x for x, _ in pts), default=1.0) or 1.0
    ymax = max((y for _, y in pts), default=1.0) or 1.0
    if diagonal:
        xmax = ymax = max(xmax, ymax)
    ymax *= 1.05
    pw, ph = w - left - right, h - top - bottom

    def sx(x: float) -> float:
        return left + x / xmax * pw

    def sy(y: float) -> float:
        return top + ph - y / ymax * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" role="img"><title>{html.escape(title)}</title>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" '
           f'stroke="#ccc"/>',
           f'<text x="{left}" y="18" font-size="14" font-weight="bold">'
           f'{html.escape(title)}</text>']
    for i in range(6):
        yv = ymax * i / 5
        xv = xmax * i / 5
        ylab = f"{yv * 100:.0f}%" if percent_y else f"{yv:.0f}"
        xlab = f"{xv * 100:.0f}%" if percent_x else _short(xv)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}" '
                   f'stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 6}" y="{sy(yv) + 4:.1f}" font-size="10" '
                   f'text-anchor="end">{ylab}</text>')
        out.append(f'<text x="{sx(xv):.1f}" y="{top + ph + 14}" font-size="10" '
                   f'text-anchor="middle">{xlab}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{h - 6}" font-size="11" text-anchor="middle">'
               f'{html.escape(xlabel)}</text>')
    out.append(f'<text x="14" y="{top + ph / 2}" font-size="11" text-anchor="middle" '
               f'transform="rotate(-90 14 {top + ph / 2})">{html.escape(ylabel)}</text>')
    if diagonal:
        out.append(f'<line x1="{sx(0)}" y1="{sy(0)}" x2="{sx(xmax)}" y2="{sy(xmax)}" '
                   f'stroke="#999" stroke-dasharray="4 3"/>')
    for i, (name, s) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        dash = ' stroke-dasharray="6 3"' if "+advisor" not in name else ""
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8"{dash} '
                   f'points="{path}"/>')
        ly = top + 12 + i * 16
        out.append(f'<line x1="{left + pw + 12}" x2="{left + pw + 34}" y1="{ly}" y2="{ly}" '
                   f'stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{left + pw + 38}" y="{ly + 4}" font-size="11">'
                   f'{html.escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _short(v: float) -> str:
    if v >= 86400 * 2:
        return f"{v / 86400:.0f}d"
    if v >= 7200:
        return f"{v / 3600:.0f}h"
    return f"{v:.0f}"


def profile_colours(snapshots: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, str]:
    names: set[str] = set()
    for snap in snapshots:
        for node in snap:
            for gpu in node["gpus"]:
                names.update(inst[2] for inst in gpu)

    def order(name: str) -> tuple[int, int, str]:
        g, _, rest = name.partition("g.")
        mem = "".join(ch for ch in rest if ch.isdigit())
        return (int(g) if g.isdigit() else 99, int(mem) if mem else 0, name)

    return {n: PROFILE_COLOURS[i % len(PROFILE_COLOURS)]
            for i, n in enumerate(sorted(names, key=order))}


def gpu_picture(snapshot: Sequence[Mapping[str, Any]], *, title: str,
                colours: Mapping[str, str], memory_slices: int = 8) -> str:
    """Every GPU as a bar of memory slices; instances coloured by profile, solid when a pod
    holds them, pale when idle; nodes being re-laid out framed in red."""
    cell_w, gpu_h, gap = 2, 8, 2
    per_row = 64
    gpu_w = memory_slices * cell_w
    gpus = [(node, gpu) for node in snapshot for gpu in node["gpus"]]
    rows = max(1, -(-len(gpus) // per_row))
    w = per_row * (gpu_w + gap) + 20
    h = rows * (gpu_h + gap) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" shape-rendering="crispEdges" role="img">'
           f'<title>{html.escape(title)}</title>',
           f'<text x="10" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    for k, (node, gpu) in enumerate(gpus):
        x0 = 10 + (k % per_row) * (gpu_w + gap)
        y0 = 26 + (k // per_row) * (gpu_h + gap)
        out.append(f'<rect x="{x0}" y="{y0}" width="{gpu_w}" height="{gpu_h}" fill="#eee"'
                   + (' stroke="#d00" stroke-width="1"' if node.get("relayout") else "")
                   + "/>")
        for start, size, profile, used in gpu:
            colour = colours.get(profile, "#888")
            op = "1" if used else "0.25"
            out.append(f'<rect x="{x0 + start * cell_w}" y="{y0}" width="{size * cell_w}" '
                       f'height="{gpu_h}" fill="{colour}" fill-opacity="{op}"/>')
    out.append("</svg>")
    return "\n".join(out)


def legend(colours: Mapping[str, str]) -> str:
    items = "".join(
        f'<span class="key"><span class="sw" style="background:{c}"></span>'
        f'{html.escape(p)}</span>' for p, c in colours.items())
    return (f'<p>{items}<span class="key"><span class="sw" style="background:#1f77b4;'
            f'opacity:.25"></span>pale = idle instance</span><span class="key">'
            f'<span class="sw" style="background:#eee"></span>no instance</span>'
            f'<span class="key"><span class="sw" style="border:1px solid #d00"></span>'
            f're-layout in progress</span></p>')


_STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px}
th{background:#f3f3f3}td.n{text-align:right}code,pre{background:#f6f6f6;padding:2px 4px}
pre{white-space:pre-wrap;font-size:12px}.key{margin-right:14px;font-size:12px;white-space:nowrap}
.sw{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
"""


def html_page(document: Mapping[str, Any], *, pictures: Sequence[str]) -> str:
    """The report page for ``document`` (the JSON output), with GPU pictures of ``pictures``."""
    summary: Mapping[str, Mapping[str, Mapping[str, float]]] = document["summary"]
    runs: Sequence[Mapping[str, Any]] = document["runs"]
    setup: Mapping[str, Any] = document["setup"]
    first_seed = runs[0]["seed"] if runs else 0
    first = {r["policy"]: r for r in runs if r["seed"] == first_seed}
    fill = setup["mode"] == "fill"
    alloc: dict[str, list[tuple[float, float]]] = {}
    pend: dict[str, list[tuple[float, float]]] = {}
    for name, r in first.items():
        if fill:
            alloc[name] = [(p["arrived_share"], p["allocated_share"]) for p in r["series"]]
            pend[name] = [(p["arrived_share"], p["pending"]) for p in r["series"]]
        else:
            alloc[name] = [(p["t"], p["allocated_share"]) for p in r["series"]]
            pend[name] = [(p["t"], p["pending"]) for p in r["series"]]
    xlabel = ("arrived demand (compute slices of the chosen profiles / capacity)" if fill
              else "trace time (s)")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>migfit simulate</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>migfit simulate</h1>",
        f"<p><code>{html.escape(setup['command'])}</code></p>",
        "<ul>",
        *(f"<li><b>{html.escape(k)}</b>: {html.escape(str(v))}</li>" for k, v in setup.items()
          if k not in ("command", "definitions")),
        "</ul>",
        "<h2>Results</h2><table><tr><th>policy</th>",
        *(f"<th>{html.escape(h)}</th>" for _, h, _ in COLUMNS),
        "</tr>",
    ]
    for policy, figs in summary.items():
        parts.append(f"<tr><td>{html.escape(policy)}</td>")
        parts.extend(f"<td class='n'>{html.escape(cell(figs[k], kind))}</td>"
                     for k, _, kind in COLUMNS)
        parts.append("</tr>")
    parts.append("</table>")
    parts.append(f"<p>Seeds: {setup['seeds']}; figures are the mean, ± the sample standard "
                 f"deviation across seeds. Charts show seed {first_seed}.</p>")
    parts.append("<h2>Allocation against arrived demand</h2>")
    parts.append(_line_chart(alloc, title="allocated compute slices / capacity",
                             xlabel=xlabel, ylabel="allocated", diagonal=fill,
                             percent_x=fill))
    parts.append("<h2>Pending pods</h2>")
    parts.append(_line_chart(pend, title="pods waiting", xlabel=xlabel, ylabel="pods",
                             percent_y=False, percent_x=fill))
    snaps = [first[p]["snapshot"] for p in pictures if p in first and first[p]["snapshot"]]
    colours = profile_colours(snaps)
    parts.append("<h2>GPU slices</h2>")
    parts.append("<p>Each bar is one GPU's memory slices at the moment arrivals stop; each "
                 "instance is coloured by profile.</p>")
    parts.append(legend(colours))
    for p in pictures:
        run = first.get(p)
        if run is None or not run["snapshot"]:
            continue
        parts.append(gpu_picture(run["snapshot"], title=f"{p} (seed {first_seed})",
                                 colours=colours))
    parts.append("<h2>Definitions</h2>")
    parts.append(f"<pre>{html.escape(setup.get('definitions', metrics.__doc__ or ''))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)
