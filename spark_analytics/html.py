"""report.html: one self-contained page (inline CSS and SVG, no script) drawn from summary.json."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from typing import Any

PHASE_COLORS = {"all": "#444444", "normal": "#1f77b4", "partition": "#d62728", "after_heal": "#2ca02c"}
CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.safety{display:flex;gap:1em;margin:1em 0}.box{padding:.8em 1.4em;border-radius:6px;min-width:8em;text-align:center}
.box .n{font-size:2.4em;font-weight:bold}.ok{background:#e3f5e1;color:#17641b}.bad{background:#fde2e1;color:#a11}
.off{background:#eee;color:#555}.note{color:#666;font-size:.9em}
svg text{font-size:11px;font-family:system-ui,sans-serif}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _fmt(value: Any) -> str:
    if value is None:
        return "&ndash;"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return _e(value)


def _ms(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:g} s"
    return f"{value:g} ms"


def line_chart(
    series: Sequence[tuple[str, str, Sequence[tuple[float, float]]]],
    x_ticks: Sequence[tuple[float, str]],
    y_ticks: Sequence[tuple[float, str]],
    x_range: tuple[float, float],
    y_range: tuple[float, float],
    title: str,
    width: int = 720,
    height: int = 300,
    step: bool = False,
    shades: Sequence[tuple[float, float, str]] = (),
) -> str:
    """An SVG line chart; x and y already transformed (e.g. log) by the caller, ticks given in those units.
    `shades` are (x0, x1, color) bands behind the lines."""
    left, right, top, bottom = 60, 150, 24, 36
    pw, ph = width - left - right, height - top - bottom
    (x0, x1), (y0, y1) = x_range, y_range
    sx = (lambda x: left + (x - x0) / (x1 - x0) * pw) if x1 > x0 else (lambda x: left + pw / 2)
    sy = (lambda y: top + ph - (y - y0) / (y1 - y0) * ph) if y1 > y0 else (lambda y: top + ph)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">',
           f"<title>{_e(title)}</title>"]
    for a, b, color in shades:
        out.append(f'<rect x="{sx(a):.1f}" y="{top}" width="{max(sx(b) - sx(a), 1):.1f}" height="{ph}" '
                   f'fill="{color}" opacity="0.15"/>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    for x, label in x_ticks:
        px = sx(x)
        out.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{top + ph}" stroke="#eee"/>')
        out.append(f'<text x="{px:.1f}" y="{top + ph + 14}" text-anchor="middle">{_e(label)}</text>')
    for y, label in y_ticks:
        py = sy(y)
        out.append(f'<line x1="{left}" y1="{py:.1f}" x2="{left + pw}" y2="{py:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{py + 4:.1f}" text-anchor="end">{_e(label)}</text>')
    for i, (name, color, points) in enumerate(series):
        coords: list[str] = []
        prev: tuple[float, float] | None = None
        for x, y in points:
            if step and prev is not None:
                coords.append(f"{sx(x):.1f},{sy(prev[1]):.1f}")
            coords.append(f"{sx(x):.1f},{sy(y):.1f}")
            prev = (x, y)
        if coords:
            out.append(f'<polyline class="series" data-name="{_e(name)}" fill="none" stroke="{color}" '
                       f'stroke-width="2" points="{" ".join(coords)}"/>')
        ly = top + 14 + 18 * i
        out.append(f'<line x1="{left + pw + 12}" y1="{ly - 4}" x2="{left + pw + 32}" y2="{ly - 4}" '
                   f'stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{left + pw + 36}" y="{ly}">{_e(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def pbs_chart(vis: dict[str, Any]) -> str:
    """Fraction of (write, other node) pairs visible within Δ, per phase; x is log10(1 + Δ ms)."""
    deltas = vis.get("deltas_ms", [])
    series = []
    for phase in ("all", "normal", "partition", "after_heal"):
        curve = vis.get("pbs", {}).get(phase)
        if not curve:
            continue
        pts = [(math.log10(1 + d), f) for d, f in zip(deltas, curve["fractions"], strict=True) if f is not None]
        series.append((f"{phase} ({curve['pairs']:,})", PHASE_COLORS.get(phase, "#888"), pts))
    ticks = [(math.log10(1 + d), _ms(d) if d else "0") for d in (0, 1, 10, 100, 1_000, 10_000, 100_000)]
    x_max = math.log10(1 + max(deltas, default=1))
    y_ticks = [(y / 4, f"{y * 25}%") for y in range(5)]
    return line_chart(series, ticks, y_ticks, (0, x_max), (0, 1), "PBS: fraction of replicas holding a write "
                      "Δ after it", step=False)


def timeline_chart(conv: dict[str, Any], max_points: int = 1500) -> str:
    """Divergent keys per second; partitions shaded red."""
    tl = conv.get("timeline", {})
    counts: list[int] = tl.get("divergent_keys", [])
    start_s: int = tl.get("start_s", 0)
    bucket = max(1, math.ceil(len(counts) / max_points))
    pts = [(float(i), float(max(counts[i:i + bucket]))) for i in range(0, len(counts), bucket)]
    if pts:
        pts.append((float(len(counts)), pts[-1][1]))
    top = max((y for _, y in pts), default=0)
    y_max = _nice(top)
    n = max(len(counts), 1)
    x_ticks = [(float(x), f"{x}s") for x in _tick_steps(n)]
    y_ticks = [(y_max * i / 4, f"{y_max * i / 4:g}") for i in range(5)]
    shades = []
    for p in conv.get("partitions", []):
        a = p["start_ts"] / 1e9 - start_s
        b = (p["end_ts"] / 1e9 - start_s) if p["end_ts"] is not None else float(n)
        shades.append((max(a, 0.0), min(b, float(n)), "#d62728"))
    label = "divergent keys" + (f" (max per {bucket} s)" if bucket > 1 else "")
    return line_chart([(label, "#9467bd", pts)], x_ticks, y_ticks, (0, float(n)), (0, y_max),
                      "Divergent keys per second", step=True, shades=shades)


def _nice(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 5, 10):
        if value <= m * exp:
            return float(m * exp)
    return float(10 * exp)


def _tick_steps(n: int) -> list[int]:
    step = int(_nice(n / 6))
    return list(range(0, n + 1, max(step, 1)))


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _safety(s: dict[str, Any]) -> str:
    if not s.get("checked"):
        return ('<div class="safety"><div class="box off"><div class="n">&ndash;</div>safety not checked: '
                "no <code>--history</code> given</div></div>")
    boxes = []
    for name in ("lost", "unexpected", "duplicated", "resurrected"):
        n = s.get(name, 0)
        boxes.append(f'<div class="box {"ok" if n == 0 else "bad"}" id="safety-{name}"><div class="n">{n}</div>'
                     f"{name}</div>")
    notes = []
    if not s.get("deliveries_checked"):
        notes.append("no drain in the history: lost publishes not checked")
    if not s.get("final_read_checked"):
        notes.append("no final read in the history: retained values and subscriptions not checked")
    rows = [[f"{check}: {what}", n] for check, whats in s.get("details", {}).items() for what, n in whats.items()]
    examples = [[check, json.dumps(e)] for check, found in s.get("examples", {}).items() for e in found]
    detail = _table(["violation", "count"], rows) + (_table(["check", "example"], examples) if examples else "")
    return (f'<div class="safety">{"".join(boxes)}</div><p class="note">{_e("; ".join(notes))}</p>'
            f"<details{' open' if rows else ''}><summary>details</summary>{detail}</details>")


def _partitions(conv: dict[str, Any], faults: dict[str, Any]) -> str:
    """The partitions counted, those the views showed but that are not faults (and why), and the cross-check
    with the nemesis's own record when there is one."""
    counted = conv.get("partitions", [])
    out = [_table(["partition", "start", "end", "seconds"],
                  [[p["partition"], p["start"], p["end"], p["duration_s"]] for p in counted])]
    dropped = conv.get("partitions_not_counted", [])
    if dropped:
        out.append(f'<p class="note">{len(dropped)} split view(s) not counted as partitions:</p>')
        out.append(_table(["start", "end", "why not"], [[d["start"], d["end"], d["reason"]] for d in dropped]))
    if faults.get("recorded"):
        found = len(faults.get("windows", []))
        same = "the same number" if found == len(counted) else "a different number: read the two tables"
        out.append(f'<p class="note" id="fault-windows">The nemesis recorded {found} fault window(s); the views '
                   f"show {len(counted)} partition(s), {same}. The views see a fault about a detection time "
                   f"({_fmt(conv.get('detect_timeout_s'))} s) after the nemesis made it.</p>")
        out.append(_table(["window", "start", "end", "seconds", "steps"],
                          [[w["window"], w["start"], w["end"], w["duration_s"], "; ".join(w["steps"])]
                           for w in faults.get("windows", [])]))
    return "".join(out)


def _by_faults(faults: dict[str, Any]) -> str:
    if not faults.get("recorded"):
        return ""
    lag_rows = [[phase, v["pairs"], v["visible_fraction"], v.get("p50_ms"), v.get("p99_ms"), v.get("p99_9_ms"),
                 v["max_ms"]] for phase, v in sorted(faults["lag"].items())]
    heal_rows = [[h["window"], h.get("heal"), h["keys"], h["divergent_at_heal"], h["unconverged"],
                  h["seconds_to_converge"]] for h in faults["heals"]]
    return "".join([
        "<h2>By the nemesis's fault times</h2>",
        '<p class="note">The same figures with the phases taken from the fault windows the nemesis recorded '
        "instead of the nodes' views.</p>",
        _table(["phase", "pairs", "visible", "p50 ms", "p99 ms", "p99.9 ms", "max ms"], lag_rows),
        _table(["window", "heal", "keys written before", "divergent at heal", "never converged",
                "seconds to converge"], heal_rows),
    ])


def _queue_replicas(q: dict[str, Any]) -> str:
    if not q.get("recorded"):
        return ('<p class="note">no <code>queue_replicas</code> line in the logs (queue.replicas = 1, or nodes of an '
                "earlier version): nothing to count.</p>")
    totals = [("windows", q["windows"]), ("still open at the end of the logs", q["open_at_end"]),
              ("seconds under-replicated (all nodes)", q["total_s"]), ("longest window (s)", q["longest_s"]),
              ("peak sessions", q["peak_sessions"]), ("peak messages", q["peak_messages"]),
              ("peak acknowledged writes missing a copy", q["peak_writes"])]
    rows = [[n, v["windows"], v["total_s"], v["longest_s"]] for n, v in q["by_node"].items()]
    return _table(["", ""], totals) + _table(["node", "windows", "seconds", "longest s"], rows)


def render(summary: dict[str, Any]) -> str:
    """The HTML page of a summary (report.analyze)."""
    run, vis, conv = summary["run"], summary["visibility"], summary["convergence"]
    sib, stale, ae = summary["siblings"], summary["staleness"], summary["anti_entropy"]
    missing = run.get("missing_nodes") or []
    meta = [
        ("nodes", ", ".join(run["nodes"])),
        *([("MISSING: nodes in the views without a log line (their visibility is not measured)",
            ", ".join(missing))] if missing else []), ("start", run["start"]), ("end", run["end"]),
        ("duration (s)", run["duration_s"]), ("events", run["events"]), ("malformed lines", run["malformed_lines"]),
        ("applies without a logged write", run["applies_without_write"]),
    ] + [(k, run[k]) for k in ("experiment", "mode", "seed") if k in run]
    lag_rows = [
        [phase, v["pairs"], v["visible_fraction"], v.get("p50_ms"), v.get("p99_ms"), v.get("p99_9_ms"), v["max_ms"]]
        for phase, v in sorted(vis["lag"].items())
    ]
    heal_rows = [
        [h["partition"], h.get("heal"), h["keys"], h["divergent_at_heal"], h["unconverged"], h["seconds_to_converge"]]
        for h in conv["heals"]
    ]
    ae_rows = [
        [node, v["exchanges"], v["per_minute"], v["objects_received"], v["repaired"], v["bytes_per_repaired"],
         v["hit_ratio"], v["mean_duration_s"]]
        for node, v in sorted(ae["by_node"].items(), key=lambda kv: (kv[0] == "all", kv[0]))
    ]
    stale_rows = [
        [via, v["applies"], v["stale"], v["stale_fraction"], v["mean_versions_behind"], v["max_versions_behind"]]
        for via, v in sorted(stale["by_via"].items())
    ]
    parts = [
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>vmqpy convergence report</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>vmqpy convergence report</h1>",
        "<h2>Safety</h2>", _safety(summary["safety"]),
        "<h2>Run</h2>", _table(["", ""], meta),
        "<h2>Visibility (PBS)</h2>",
        '<p class="note">Fraction of (write, other node) pairs where the node holds the write (or a newer version '
        "of the key) Δ after it was written. Quantiles are over the pairs that became visible.</p>",
        pbs_chart(vis),
        _table(["phase", "pairs", "visible", "p50 ms", "p99 ms", "p99.9 ms", "max ms"], lag_rows),
        "<h2>Convergence</h2>",
        timeline_chart(conv),
        _partitions(conv, summary.get("faults", {})),
        _table(["partition", "heal", "keys written before", "divergent at heal", "never converged",
                "seconds to converge"], heal_rows),
        _table(["", ""], [("writes never visible everywhere", conv["writes_never_converged"]),
                          ("keys divergent at the end", conv["keys_divergent_at_end"]),
                          ("max divergent keys in a second", conv["max_divergent_keys"])]),
        _by_faults(summary.get("faults", {})),
        "<h2>Siblings</h2>",
        _table(["", ""], [("keys with siblings", sib["keys_with_siblings"]), ("episodes", sib["episodes"]),
                          ("unresolved", sib["unresolved"]), ("p50 ms", sib["p50_ms"]), ("p99 ms", sib["p99_ms"]),
                          ("max ms", sib["max_ms"]), ("write-backs", sib["writebacks"])]),
        "<h2>Staleness (versions behind when applied)</h2>",
        _table(["via", "applies", "stale", "fraction", "mean", "max"], stale_rows),
        _table(["versions behind", "applies"], list(stale["histogram"].items())),
        "<h2>Anti-entropy</h2>",
        _table(["node", "exchanges", "per minute", "received", "repaired", "bytes / repaired", "hit ratio",
                "mean s"], ae_rows),
        _table(["result", "exchanges"], list(ae["results"].items())),
        _table(["node", "gc runs", "dots pruned", "keys deleted"],
               [[n, v["runs"], v["dots_pruned"], v["keys_deleted"]] for n, v in ae["gc"].items()]),
        "<h2>Queue replicas: under-replication windows</h2>", _queue_replicas(summary.get("queue_replicas", {})),
        f'<p class="note">generated {_e(summary["generated_at"])}; every figure is in summary.json '
        "(docs/analytics.md).</p>",
        "</body></html>",
    ]
    return "\n".join(parts)
