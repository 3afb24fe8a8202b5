"""The one table of `make bench` (bench.suite): rows from each bench's figures, the machine's description, and
the dated summary JSON under bench/results/.

Pure functions on the benches' results (dicts as they write them as JSON, and bench_idle's printed table), plus
`machine()`, which reads /proc and asks git and Mosquitto for their versions.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

Row = dict[str, Any]

COLUMNS = ("scenario", "broker", "rate", "ratio", "cpu_us", "p50_ms", "p99_ms", "rss", "note")
HEADER = ("| scenario | broker | rate /s | vmqpy/mosquitto | broker CPU us per unit | p50 ms | p99 ms | RSS | note |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---|")
_IDLE_ROW = re.compile(r"^\|\s*(vmqpy|mosquitto)\s*\|\s*([0-9.]+)\s*KiB\s*\|\s*([0-9.]+)\s*us\s*\|"
                       r"(?:\s*([0-9,]+)\s*KiB\s*\|)?")


def row(scenario: str, broker: str, *, rate: float | None = None, ratio: float | None = None,
        cpu_us: float | None = None, unit: str = "message", p50_ms: float | None = None,
        p99_ms: float | None = None, rss: str = "", note: str = "") -> Row:
    return {"scenario": scenario, "broker": broker, "rate": rate, "ratio": ratio, "cpu_us": cpu_us,
            "cpu_unit": unit, "p50_ms": p50_ms, "p99_ms": p99_ms, "rss": rss, "note": note}


def compare_rows(summary: list[dict[str, Any]]) -> list[Row]:
    """One row per (scenario, broker) of bench.compare's summary; CPU per message = CPU share / rate."""
    out = []
    for s in summary:
        rate, cpu = s.get("rate"), s.get("broker_cpu")
        cpu_us = cpu / 100 / rate * 1e6 if rate and cpu is not None else None
        note = ""
        if s.get("acked_lost") is not None:
            note = f"acked-but-lost {s['acked_lost']:,} of {s['acked']:,}"
        if s.get("failed"):
            note = (note + "; " if note else "") + f"{s['failed']} run(s) failed"
        rss = "" if s.get("rss_mib") is None else f"{s['rss_mib']:.1f} MiB peak"
        out.append({**row(s["scenario"], s["broker"], rate=rate, ratio=s.get("ratio"), cpu_us=cpu_us,
                          p50_ms=s.get("p50_ms"), p99_ms=s.get("p99_ms"), rss=rss, note=note),
                    "acked_lost": s.get("acked_lost")})
    return out


def idle_rows(text: str, connections: int) -> list[Row]:
    """bench_idle's printed table (`| broker | N KiB | M us | E KiB |`) as rows: the idle connections, and the
    empty broker (RSS 2 s after its start) where the table has that column; [] when it has none."""
    out = []
    for line in text.splitlines():
        m = _IDLE_ROW.match(line.strip())
        if m:
            out.append(row(f"idle connections ({connections:,})", m.group(1), cpu_us=float(m.group(3)),
                           unit="connect", rss=f"{float(m.group(2)):.2f} KiB/connection"))
            if m.group(4):
                kib = int(m.group(4).replace(",", ""))
                out.append(row("empty broker", m.group(1), rss=f"{kib / 1024:.1f} MiB ({kib:,} KiB)",
                               note="RSS 2 s after start, nothing connected"))
    return out


def subscription_rows(result: dict[str, Any]) -> list[Row]:
    """bench_subscriptions: one row per size; CPU per QoS 0 publish (three deliveries each)."""
    return [row(f"subscriptions {p['subscriptions']:,}", "vmqpy", rate=p["sent"] / p["window_s"],
                cpu_us=p["us_per_publish"], unit="publish",
                rss=f"{p['rss_kib'] / 1024:.0f} MiB, {p['rss_bytes_per_subscription']:,.0f} B/sub",
                note=f"restart {p['restart_s']:.2f} s; delivered {p['delivered']:,}/{p['expected']:,}")
            for p in result.get("points", [])]


def retained_rows(result: dict[str, Any]) -> list[Row]:
    """bench_retained: one row per size; rate and CPU of the wildcard delivery, the probe's round trips."""
    out = []
    for p in result.get("points", []):
        during = p.get("probe_during", {})
        cpu_us = p["deliver_cpu_s"] / p["delivered"] * 1e6 if p.get("delivered") else None
        out.append(row(f"retained {p['retained']:,}", "vmqpy", rate=p.get("deliver_per_s"), cpu_us=cpu_us,
                       unit="retained delivery", p50_ms=during.get("p50_ms"), p99_ms=during.get("p99_ms"),
                       rss=f"{p['rss_kib'] / 1024:.0f} MiB, {p['rss_bytes_per_retained']:,.0f} B/msg",
                       note=f"restart {p['restart_s']:.2f} s; ret/0/# {p['delivered']:,}/{p['matches']:,} "
                            f"in {p['deliver_s']:.1f} s; p50/p99 = probe round trip during it"))
    return out


def _num(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def render(rows: list[Row]) -> str:
    """The markdown table of `rows`."""
    lines = [HEADER]
    for r in rows:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        cpu = "-" if r["cpu_us"] is None else f"{r['cpu_us']:,.1f} / {r['cpu_unit']}"
        lines.append(f"| {r['scenario']} | {r['broker']} | {_num(r['rate'])} | {ratio} | {cpu} "
                     f"| {_num(r['p50_ms'], 1)} | {_num(r['p99_ms'], 1)} | {r['rss']} | {r['note']} |")
    return "\n".join(lines) + "\n"


HEADLINE_BROKERS = ("mosquitto", "vmqpy", "aedes")
_SHAPE = re.compile(r"^qos([01])-(pairs|fanout|fanin)(\d+)$")


def headline_label(scenario: str) -> str | None:
    """The headline's name for a row of the suite (None: not in the headline): bench.compare's scenarios, QoS 1
    paced at 1,000 msgs/s (bench.bench_latency) and the clean connects (bench.bench_connect)."""
    m = _SHAPE.match(scenario)
    if m:
        qos, shape, n = m.group(1), m.group(2), int(m.group(3))
        what = {"pairs": f"{n} pairs", "fanout": f"fan-out 1 -> {n}", "fanin": f"fan-in {n} -> 1"}[shape]
        return f"QoS {qos}, {what}"
    if scenario.startswith("latency qos1-pairs") and " at 1,000 msgs/s" in scenario:
        return "QoS 1 paced at 1,000/s"
    if scenario.startswith("clean connects"):
        return scenario
    return None


def headline(rows: list[Row]) -> str:
    """The table of issue 38, from the suite's rows: per scenario, rate, broker CPU per unit and p50 of Mosquitto,
    vmqpy and aedes side by side (a '-' where a broker did not run); acknowledged-but-lost QoS 1 messages after
    the rate."""
    table: dict[str, dict[str, Row]] = {}
    for r in rows:
        label = headline_label(r["scenario"])
        if label is not None and r["broker"] in HEADLINE_BROKERS:
            table.setdefault(label, {})[r["broker"]] = r
    brokers = [b for b in HEADLINE_BROKERS if any(b in by for by in table.values())]
    names = " / ".join(brokers)
    lines = [f"| scenario | rate /s {names} | broker CPU us per unit {names} | p50 ms mosquitto / vmqpy |",
             "|---|---|---|---|"]
    def rate(r: Row | None) -> str:
        if r is None:
            return "-"
        lost = r.get("acked_lost")
        return _num(r["rate"]) + (f" ({lost:,} lost)" if lost else "")

    for label, by in table.items():
        unit = next(iter(by.values()))["cpu_unit"]
        cpu = " / ".join(_num(by[b]["cpu_us"], 1) if b in by else "-" for b in brokers)
        p50 = " / ".join(_num(by[b]["p50_ms"], 2) if b in by else "-" for b in ("mosquitto", "vmqpy"))
        lines.append(f"| {label} | {' / '.join(rate(by.get(b)) for b in brokers)} | {cpu} per {unit} | {p50} |")
    return "\n".join(lines) + "\n"


def _run(cmd: list[str], cwd: Path) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=cwd).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def _proc_field(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key:
                return value.strip()
    except OSError:
        pass
    return "?"


def machine(repo: Path) -> dict[str, str]:
    """CPU model, cores, memory, kernel, Python, load average, git commit (and whether the tree was dirty)."""
    commit = _run(["git", "rev-parse", "HEAD"], repo)
    dirty = bool(_run(["git", "status", "--porcelain", "--untracked-files=no"], repo))
    try:
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        load = "?"
    mosquitto = _run(["/usr/sbin/mosquitto", "-h"], repo).splitlines()
    return {"cpu_model": _proc_field("/proc/cpuinfo", "model name"), "cores": str(os.cpu_count()),
            "memory": _proc_field("/proc/meminfo", "MemTotal"), "kernel": platform.release(),
            "python": sys.version.split()[0], "loadavg": load, "git_commit": commit,
            "git_dirty": str(dirty), "mosquitto": mosquitto[0] if mosquitto else "?"}


def summary_path(out_dir: Path, started: dt.datetime) -> Path:
    return out_dir / f"{started:%Y-%m-%dT%H%M%S}-summary.json"


def write_summary(out_dir: Path, started: dt.datetime, command: str, machine_desc: dict[str, str],
                  rows: list[Row], steps: dict[str, dict[str, Any]]) -> Path:
    """The dated summary: when, the command, the machine, the table's rows and each step's status."""
    path = summary_path(out_dir, started)
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {"date": started.isoformat(timespec="seconds"), "command": command, "machine": machine_desc,
           "steps": steps, "rows": rows, "headline": headline(rows), "table": render(rows)}
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return path
