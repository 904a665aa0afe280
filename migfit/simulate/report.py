"""The simulator's output: a terminal table, a JSON document, and a self-contained HTML page.

The HTML page has no script and loads nothing: styles are inline and charts are inline SVG
(allocation against arrived demand per policy, pending pods over time, and each GPU's
instances at one moment, coloured by profile), so it opens offline.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from migfit.simulate import metrics, policies

COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (figure, header, format)
    ("gpu_pods_placed", "GPU pods placed", "int"),
    ("unallocated_share", "unallocated", "pct"),
    ("unallocated_trace_gpus_share", "FGD's unit", "pct"),
    ("unallocated_share_time_avg", "unalloc avg", "pct"),
    ("fragmentation_share", "frag", "pct"),
    ("idle_while_pending_slice_hours", "idle while pending slice-h", "int"),
    ("gpu_pending_p50_s", "GPU wait p50 s", "int"),
    ("gpu_pending_p95_s", "GPU wait p95 s", "int"),
    ("relayouts", "re-layouts", "int"),
    ("gpus_relaid", "GPUs re-laid", "int"),
    ("pods_disrupted", "disrupted", "int"),
    ("memory_wasted_share", "mem rounded", "pct"),
    ("wall_s", "wall s", "float"),
)
MAX_PICTURE_NODES = 160  # nodes drawn per GPU picture (the summary table counts all)
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
PROFILE_COLOURS = ("#1f77b4", "#9467bd", "#2ca02c", "#ff7f0e", "#d62728", "#8c564b",
                   "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


#: How a wait of pods that were never placed (``math.inf``) is shown.
NEVER = "never"


def _fmt(value: float, kind: str) -> str:
    if math.isinf(value):
        return NEVER
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


# What a bound's row shows (``bound.py``): its unallocated shares and, in events mode, its GPU
# wait bounds (0, their trivial bound, in fill mode); pod counts are the LP's fractional
# optimum, not a bound, and the other figures are trivial zeros: "(LP)" and "-" instead.
_BOUND_FIGURES = frozenset({"unallocated_share", "unallocated_share_time_avg",
                            "gpu_pending_p50_s", "gpu_pending_p95_s", "wall_s"})
BOUND_NOTE = ("bound rows are LP optima, not replays (migfit/simulate/bound.py): unallocated "
              "and the GPU waits are bounds no policy can beat; (LP) and - are figures an LP "
              "does not have")


def _cell(policy: str, figs: Mapping[str, Mapping[str, float]], key: str, kind: str) -> str:
    """``cell``, or for a bound's row "(LP)" / "-" where the figure is no bound."""
    if policy in policies.BOUNDS and key not in _BOUND_FIGURES:
        return "(LP)" if key == "gpu_pods_placed" else "-"
    return cell(figs[key], kind)


def table(summary: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """A fixed-width table: one row per policy (and ``BOUND_NOTE`` under bound rows)."""
    headers = ["policy", *(h for _, h, _ in COLUMNS)]
    rows = [[policy, *(_cell(policy, figs, k, kind) for k, _, kind in COLUMNS)]
            for policy, figs in summary.items()]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                       for i, (h, w) in enumerate(zip(headers, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                               for i, (v, w) in enumerate(zip(r, widths, strict=True))))
    if any(policy in policies.BOUNDS for policy in summary):
        lines.append(BOUND_NOTE)
    return "\n".join(lines)


def never_placed(summary: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[str]:
    """Events mode: a line per policy that left GPU pods pending when its replay ended (no
    departure or re-layout was left to place them), saying how their waits count."""
    out = []
    for policy, figs in summary.items():
        left = figs.get("gpu_pods_pending", {}).get("mean", 0.0)
        if left > 0:
            pods = "GPU pod" if left == 1 else "GPU pods"
            out.append(f"{policy}: {_count(left)} {pods} never placed (per run); "
                       f"their waits count as {NEVER}, which the GPU wait percentiles show "
                       f"once they reach those pods")
    return out


def _count(mean: float) -> str:
    """A mean count over seeds: whole when it is, else one decimal below 10 (0.3 pods, not
    0)."""
    return f"{mean:.0f}" if mean == int(mean) or mean >= 10 else f"{mean:.1f}"


def waits_table(runs: Sequence[tuple[str, Mapping[str, Mapping[str, float]]]]) -> str:
    """GPU waits per pod class (``--waits-by-class``): for each policy and class, the mean
    over seeds of its pods and of those still waiting, the mean of its p50 and p95 wait over
    the seeds that had pods of it, its longest wait, and its share of the run's p95 tail
    (the pods that waited at least the run's GPU wait p95, all seeds together): which
    classes make the p95. Classes with most of the tail first."""
    by: dict[str, dict[str, list[Mapping[str, float]]]] = {}
    for policy, run in runs:
        for name, figs in run.items():
            by.setdefault(policy, {}).setdefault(name, []).append(figs)
    seeds = Counter(policy for policy, _ in runs)
    headers = ["policy", "pod class", "pods", "waiting", "p50 s", "p95 s", "max s",
               "of the p95 tail"]
    rows: list[list[str]] = []
    for policy, classes in by.items():
        n = seeds[policy]
        tails = {k: sum(f["in_run_p95_tail"] for f in v) for k, v in classes.items()}
        total = sum(tails.values())
        for name in sorted(classes, key=lambda k: (-tails[k],
                                                   -sum(f["pods"] for f in classes[k]), k)):
            v = classes[name]
            rows.append([policy, name, _count(sum(f["pods"] for f in v) / n),
                         _count(sum(f["waiting"] for f in v) / n),
                         _fmt(sum(f["p50_s"] for f in v) / len(v), "int"),
                         _fmt(sum(f["p95_s"] for f in v) / len(v), "int"),
                         _fmt(max(f["max_s"] for f in v), "int"),
                         f"{tails[name] / total:.0%}" if total else "-"])
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) if i < 2 else h.rjust(w)
                       for i, (h, w) in enumerate(zip(headers, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(v.ljust(w) if i < 2 else v.rjust(w)
                               for i, (v, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


def markdown(summary: Mapping[str, Mapping[str, Mapping[str, float]]], *,
             events: bool = False) -> str:
    """The table in Markdown; ``events``: with ``never_placed``'s lines under it."""
    headers = ["policy", "GPU pods placed", "unallocated at end", "FGD's unit",
               "time-averaged", "fragmentation", "idle while pending (slice-h)",
               "GPU wait p50 s", "GPU wait p95 s", "re-layouts", "disrupted"]
    keys = [("gpu_pods_placed", "int"), ("unallocated_share", "pct"),
            ("unallocated_trace_gpus_share", "pct"),
            ("unallocated_share_time_avg", "pct"), ("fragmentation_share", "pct"),
            ("idle_while_pending_slice_hours", "int"), ("gpu_pending_p50_s", "int"),
            ("gpu_pending_p95_s", "int"),
            ("relayouts", "int"), ("pods_disrupted", "int")]
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for policy, figs in summary.items():
        out.append("| " + " | ".join([policy, *(_cell(policy, figs, k, f) for k, f in keys)])
                   + " |")
    if any(policy in policies.BOUNDS for policy in summary):
        out += ["", BOUND_NOTE]
    never = never_placed(summary) if events else []
    out += ["", *never] if never else []
    return "\n".join(out)


def _json_safe(value: Any) -> Any:
    """``value`` with every infinite float (the wait of pods never placed) as None: JSON has
    no infinity, and Python's ``Infinity`` is not JSON that other tools read."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _picture_moment(setup: Mapping[str, Any]) -> str:
    """When the GPU pictures were taken (``engine``: fill, once the re-layouts in flight at
    the last arrival have finished; events, at the last arrival or ``--snapshot-at``)."""
    if setup.get("mode") == "fill":
        return "At the end (after the last arrival and the re-layouts then in flight)"
    at = setup.get("snapshot_at")
    if isinstance(at, int | float):
        return f"At {at:,.0f} s of trace time (--snapshot-at)"
    return "When arrivals stop"


def json_text(document: Mapping[str, Any]) -> str:
    """The document as ``--json`` writes it: a wait of pods never placed is ``null``."""
    return json.dumps(_json_safe(document), indent=1, sort_keys=False,
                      allow_nan=False) + "\n"


# ---------------------------------------------------------------- SVG


def nice_ticks(vmax: float, count: int = 4) -> list[float]:
    """Round tick values from 0 to at least ``vmax``: steps of 1, 2, 2.5 or 5 × 10^k."""
    if vmax <= 0:
        return [0.0, 1.0]
    raw = vmax / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw - 1e-12)
    n = math.ceil(vmax / step - 1e-9)
    return [round(i * step, 12) for i in range(n + 1)]


def _time_unit(vmax: float) -> tuple[float, str]:
    if vmax >= 2 * 86400:
        return 86400.0, "d"
    if vmax >= 2 * 3600:
        return 3600.0, "h"
    if vmax >= 120:
        return 60.0, "min"
    return 1.0, "s"


def _fmt_tick(v: float, kind: str, unit: tuple[float, str]) -> str:
    if kind == "pct":
        return f"{v * 100:g}%"
    if kind == "time":
        return f"{v / unit[0]:g}{unit[1]}" if v else "0"
    return f"{v:g}"


def _line_chart(series: Mapping[str, Sequence[tuple[float, float]]], *, title: str,
                xlabel: str, ylabel: str, xkind: str = "num", ykind: str = "num",
                diagonal: bool = False, signed: bool = False,
                marks: Sequence[tuple[float, str]] = (),
                colours: Mapping[str, str] | None = None) -> str:
    """Lines per policy; ``signed``: y may be negative (differences), centred on 0."""
    w, h, left, bottom, top, right = 820, 340, 64, 42, 30, 190
    pts = [p for s in series.values() for p in s]
    xmax = max((x for x, _ in pts), default=1.0) or 1.0
    ymax = max((abs(y) if signed else y for _, y in pts), default=1.0) or 1.0
    if diagonal:
        xmax = ymax = max(xmax, ymax)
    xunit = _time_unit(xmax) if xkind == "time" else (1.0, "")
    xt = [t * xunit[0] for t in nice_ticks(xmax / xunit[0])]
    yt = nice_ticks(ymax)
    xmax, ymax = xt[-1], yt[-1]
    ymin = -ymax if signed else 0.0
    yticks = [-v for v in reversed(yt[1:])] + yt if signed else yt
    pw, ph = w - left - right, h - top - bottom

    def sx(x: float) -> float:
        return left + x / xmax * pw

    def sy(y: float) -> float:
        return top + ph - (y - ymin) / (ymax - ymin) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" role="img"><title>{html.escape(title)}</title>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" '
           f'stroke="#ccc"/>',
           f'<text x="{left}" y="18" font-size="14" font-weight="bold">'
           f'{html.escape(title)}</text>']
    for yv in yticks:
        stroke = "#999" if signed and yv == 0 else "#e5e5e5"
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}" '
                   f'stroke="{stroke}"/>')
        label = ("+" if signed and yv > 0 else "") + _fmt_tick(yv, ykind, (1.0, ""))
        out.append(f'<text x="{left - 6}" y="{sy(yv) + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{html.escape(label)}</text>')
    for xv in xt:
        out.append(f'<line x1="{sx(xv):.1f}" x2="{sx(xv):.1f}" y1="{top + ph}" '
                   f'y2="{top + ph + 4}" stroke="#999"/>')
        out.append(f'<text x="{sx(xv):.1f}" y="{top + ph + 16}" font-size="11" '
                   f'text-anchor="middle">{html.escape(_fmt_tick(xv, xkind, xunit))}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{h - 6}" font-size="12" text-anchor="middle">'
               f'{html.escape(xlabel)}</text>')
    out.append(f'<text x="14" y="{top + ph / 2}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 14 {top + ph / 2})">{html.escape(ylabel)}</text>')
    if diagonal:
        out.append(f'<line x1="{sx(0)}" y1="{sy(0)}" x2="{sx(xmax)}" y2="{sy(xmax)}" '
                   f'stroke="#999" stroke-dasharray="4 3"/>')
    for x, label in marks:
        out.append(f'<line x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{top}" y2="{top + ph}" '
                   f'stroke="#555" stroke-dasharray="3 3"/><text x="{sx(x) + 4:.1f}" '
                   f'y="{top + 12}" font-size="11" fill="#555">{html.escape(label)}</text>')
    for i, (name, s) in enumerate(series.items()):
        colour = (colours or {}).get(name, PALETTE[i % len(PALETTE)])
        dash = ' stroke-dasharray="6 3"' if "+advisor" not in name else ""
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8"{dash} '
                   f'points="{path}"/>')
        ly = top + 12 + i * 16
        out.append(f'<line x1="{left + pw + 12}" x2="{left + pw + 34}" y1="{ly}" y2="{ly}" '
                   f'stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{left + pw + 38}" y="{ly + 4}" font-size="12">'
                   f'{html.escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _profile_order(name: str) -> tuple[int, int, str]:
    g, _, rest = name.partition("g.")
    mem = "".join(ch for ch in rest if ch.isdigit())
    return (int(g) if g.isdigit() else 99, int(mem) if mem else 0, name)


def profile_colours(snapshots: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, str]:
    names: set[str] = set()
    for snap in snapshots:
        for node in snap:
            for gpu in node["gpus"]:
                names.update(inst[2] for inst in gpu)
    return {n: PROFILE_COLOURS[i % len(PROFILE_COLOURS)]
            for i, n in enumerate(sorted(names, key=_profile_order))}


def gpu_summary(snapshot: Sequence[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per profile, (instances held by pods, idle instances); '' = GPUs with no instance."""
    out: dict[str, list[int]] = {}
    for node in snapshot:
        for gpu in node["gpus"]:
            if not gpu:
                out.setdefault("", [0, 0])[1] += 1
            for _start, _size, profile, used in gpu:
                out.setdefault(profile, [0, 0])[0 if used else 1] += 1
    return {p: (v[0], v[1]) for p, v in sorted(out.items(), key=lambda kv: _profile_order(kv[0]))}


def summary_table(snapshots: Mapping[str, Sequence[Mapping[str, Any]]],
                  colours: Mapping[str, str]) -> str:
    """Instances per profile, held and idle, per pictured policy (legible at any size)."""
    sums = {p: gpu_summary(s) for p, s in snapshots.items()}
    names = sorted({n for s in sums.values() for n in s}, key=_profile_order)
    head = "".join(f"<th>{html.escape(p)}<br>held / idle</th>" for p in sums)
    rows = []
    for n in names:
        sw = (f'<span class="sw" style="background:{colours.get(n, "#eee")}"></span>'
              if n else "")
        cells = "".join(
            f"<td class='n'>{sums[p].get(n, (0, 0))[0]:,} / {sums[p].get(n, (0, 0))[1]:,}</td>"
            for p in sums)
        label = html.escape(n) if n else "GPUs with no instance"
        rows.append(f"<tr><td>{sw}{label}</td>{cells}</tr>")
    return f"<table><tr><th>instances</th>{head}</tr>{''.join(rows)}</table>"


def gpu_picture(snapshot: Sequence[Mapping[str, Any]], *, title: str,
                colours: Mapping[str, str], memory_slices: int = 8,
                max_nodes: int = MAX_PICTURE_NODES) -> str:
    """Nodes grouped by initial layout kind, one block per node and one bar per GPU (memory
    slices); instances coloured by profile, solid when a pod holds them, pale when idle;
    nodes being re-laid out framed in red. At most ``max_nodes`` nodes, spread over the
    groups in proportion (the summary table counts every GPU)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for node in snapshot:
        key = node.get("group") or node.get("model", "")
        groups.setdefault(str(key), []).append(node)
    total = len(snapshot)
    picked: list[tuple[str, list[Mapping[str, Any]], int]] = []
    for key, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        share = max(1, round(max_nodes * len(members) / max(1, total)))
        picked.append((key, members[:share], len(members)))
    cell_w, gpu_h, _gap = 3, 12, 2
    gpus_max = max((len(n["gpus"]) for n in snapshot), default=1) or 1
    node_w = gpus_max * (memory_slices * cell_w + 1) + 8
    per_row = max(1, 1300 // node_w)
    y = 24
    body: list[str] = []
    for key, members, count in picked:
        body.append(f'<text x="10" y="{y + 12}" font-size="12">'
                    f'{html.escape(key)}: {count:,} nodes'
                    + (f" (first {len(members)} shown)" if len(members) < count else "")
                    + "</text>")
        y += 18
        for k, node in enumerate(members):
            x0 = 10 + (k % per_row) * node_w
            y0 = y + (k // per_row) * (gpu_h + 4)
            frame = ' stroke="#d00" stroke-width="1.5"' if node.get("relayout") else ""
            body.append(f'<g><title>{html.escape(str(node["node"]))}</title>'
                        f'<rect x="{x0 - 2}" y="{y0 - 1}" width="{node_w - 4}" '
                        f'height="{gpu_h + 2}" fill="#fff" stroke="#ccc"{frame}/>')
            for gi, gpu in enumerate(node["gpus"]):
                gx = x0 + gi * (memory_slices * cell_w + 1)
                body.append(f'<rect x="{gx}" y="{y0}" width="{memory_slices * cell_w}" '
                            f'height="{gpu_h}" fill="#eee"/>')
                for start, size, profile, used in gpu:
                    colour = colours.get(profile, "#888")
                    op = "1" if used else "0.25"
                    body.append(f'<rect x="{gx + start * cell_w}" y="{y0}" '
                                f'width="{size * cell_w}" height="{gpu_h}" fill="{colour}" '
                                f'fill-opacity="{op}"/>')
            body.append("</g>")
        y += (-(-len(members) // per_row)) * (gpu_h + 4) + 8
    w = per_row * node_w + 20
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{y + 10}" '
        f'viewBox="0 0 {w} {y + 10}" shape-rendering="crispEdges" role="img">'
        f'<title>{html.escape(title)}</title>',
        f'<text x="10" y="16" font-size="14" font-weight="bold">{html.escape(title)}</text>',
        *body, "</svg>"])


def legend(colours: Mapping[str, str]) -> str:
    items = "".join(
        f'<span class="key"><span class="sw" style="background:{c}"></span>'
        f'{html.escape(p)}</span>' for p, c in colours.items())
    return (f'<p>{items}<span class="key"><span class="sw" style="background:#1f77b4;'
            f'opacity:.25"></span>pale = idle instance</span><span class="key">'
            f'<span class="sw" style="background:#eee"></span>no instance</span>'
            f'<span class="key"><span class="sw" style="border:1px solid #d00"></span>'
            f're-layout in progress</span></p>')


def _inline(text: str) -> str:
    """``code`` and **bold** of a docstring line, escaped."""
    out = html.escape(text)
    out = re.sub(r"``(.+?)``", r"<code>\1</code>", out)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    return out


def doc_html(text: str) -> str:
    """A module docstring (paragraphs and ``- `` bullets) as HTML."""
    parts: list[str] = []
    items: list[str] = []
    para: list[str] = []

    def flush_para() -> None:
        if para:
            parts.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()

    def flush_items() -> None:
        if items:
            parts.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
            items.clear()

    for raw in text.strip().splitlines():
        line = raw.strip()
        if not line:
            flush_para()
            flush_items()
        elif line.startswith("- "):
            flush_para()
            items.append(line[2:])
        elif items and raw.startswith("  "):
            items[-1] += " " + line
        else:
            flush_items()
            para.append(line)
    flush_para()
    flush_items()
    return "\n".join(parts)


def _value(v: Any) -> str:
    """A setup value as text for people (no Python reprs)."""
    if isinstance(v, Mapping):
        return "; ".join(f"{k}: {_value(x)}" for k, x in v.items())
    if isinstance(v, list | tuple):
        if len(v) > 2 and all(isinstance(x, int) for x in v) and \
                list(v) == list(range(v[0], v[0] + len(v))):
            return f"{v[0]}..{v[-1]}"
        return ", ".join(_value(x) for x in v)
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


_STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;
padding:3px 8px}th{background:#f3f3f3}td.n{text-align:right}code{background:#f6f6f6;
padding:1px 3px}.key{margin-right:14px;font-size:12px;white-space:nowrap}
.sw{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 14px;font-size:13px}
dt{font-weight:bold}dd{margin:0}
"""


def html_page(document: Mapping[str, Any], *, pictures: Sequence[str]) -> str:
    """The report page for ``document`` (the JSON output), with GPU pictures of ``pictures``."""
    summary: Mapping[str, Mapping[str, Mapping[str, float]]] = document["summary"]
    runs: Sequence[Mapping[str, Any]] = document["runs"]
    setup: Mapping[str, Any] = document["setup"]
    first_seed = runs[0]["seed"] if runs else 0
    first = {r["policy"]: r for r in runs if r["seed"] == first_seed and r["series"]}
    fill = setup["mode"] == "fill"
    reference = "default" if "default" in first else next(iter(first), "")
    alloc: dict[str, list[tuple[float, float]]] = {}
    diff: dict[str, list[tuple[float, float]]] = {}
    pend: dict[str, list[tuple[float, float]]] = {}
    ref = first[reference]["series"] if reference else []
    for name, r in first.items():
        xs = ([p["arrived_share"] for p in r["series"]] if fill
              else [p["t"] for p in r["series"]])
        alloc[name] = [(x, p["allocated_share"]) for x, p in zip(xs, r["series"], strict=True)]
        pend[name] = [(p["t"], p["pending"]) for p in r["series"]]
        if name != reference:
            diff[name] = [(x, p["allocated_share"] - q["allocated_share"])
                          for x, p, q in zip(xs, r["series"], ref, strict=False)]
    lines = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(first)}
    ends = [r["figures"].get("arrivals_end_s", 0.0) for r in first.values()]
    marks = [(max(ends), "arrivals stop")] if fill and ends and max(ends) > 0 else []
    xkind = "pct" if fill else "time"
    xlabel = ("arrived demand (compute slices of the chosen profiles / capacity)" if fill
              else "trace time")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>migfit simulate</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>migfit simulate</h1>",
        f"<p><code>{html.escape(setup['command'])}</code></p>",
        "<dl>",
        *(f"<dt>{html.escape(k.replace('_', ' '))}</dt><dd>{html.escape(_value(v))}</dd>"
          for k, v in setup.items() if k not in ("command", "definitions")),
        "</dl>",
        "<h2>Results</h2><table><tr><th>policy</th>",
        *(f"<th>{html.escape(h)}</th>" for _, h, _ in COLUMNS),
        "</tr>",
    ]
    for policy, figs in summary.items():
        parts.append(f"<tr><td>{html.escape(policy)}</td>")
        parts.extend(f"<td class='n'>{html.escape(_cell(policy, figs, k, kind))}</td>"
                     if k in figs else "<td></td>" for k, _, kind in COLUMNS)
        parts.append("</tr>")
    parts.append("</table>")
    if any(policy in policies.BOUNDS for policy in summary):
        parts.append(f"<p>{html.escape(BOUND_NOTE)}</p>")
    if not fill:
        parts.extend(f"<p>{html.escape(line)}</p>" for line in never_placed(summary))
    parts.append(f"<p>Seeds {html.escape(_value(setup['seeds']))}; figures are the mean, ± "
                 f"the sample standard deviation across seeds. Charts show seed {first_seed}. "
                 f"The bounds are LP optima, not replays: they have no time series.</p>")
    if first:
        parts.append("<h2>Allocation against arrived demand</h2>")
        parts.append(_line_chart(alloc, title="allocated compute slices / capacity",
                                 xlabel=xlabel, ylabel="allocated", xkind=xkind,
                                 ykind="pct", diagonal=fill, colours=lines))
    if diff:
        parts.append(f"<h2>Each policy against {html.escape(reference)}</h2>")
        parts.append(f"<p>Allocated share minus {html.escape(reference)}'s at the same point "
                     f"(above 0: more allocated).</p>")
        parts.append(_line_chart(diff, title=f"allocated share − {reference}'s",
                                 xlabel=xlabel, ylabel="difference", xkind=xkind,
                                 ykind="pct", signed=True, colours=lines))
    if first:
        parts.append("<h2>Pending pods over time</h2>")
        parts.append("<p>On a time axis, so what happens after the last arrival (re-layouts "
                     "in flight finishing, departures) shows.</p>")
        parts.append(_line_chart(pend, title="pods waiting", xlabel="simulated time",
                                 ylabel="pods", xkind="time", marks=marks, colours=lines))
    snaps = {p: first[p]["snapshot"] for p in pictures if p in first and first[p]["snapshot"]}
    colours = profile_colours(list(snaps.values()))
    if snaps:
        parts.append("<h2>GPU instances</h2>")
        parts.append(f"<p>{html.escape(_picture_moment(setup))}: instances per profile "
                     "held by pods and idle, for every GPU.</p>")
        parts.append(summary_table(snaps, colours))
        parts.append(legend(colours))
        for p, snap in snaps.items():
            parts.append(gpu_picture(snap, title=f"{p} (seed {first_seed}): nodes by initial "
                                                  f"layout", colours=colours))
    parts.append("<h2>Definitions</h2>")
    parts.append(doc_html(setup.get("definitions", metrics.__doc__ or "")))
    parts.append("</body></html>")
    return "\n".join(parts)
