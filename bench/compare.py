"""vmqpy against Mosquitto (and aedes), side by side in one run: `python -m bench.compare [--quick] [--runs N] ...`.

For every run and scenario, a fresh vmqpy, a fresh Mosquitto and, when installed (`make bench-deps`), a fresh
aedes are started (each on its own free port, one after the other, the order alternating between runs), the load
generator (`bench.loadgen`) runs the scenario against each, and the broker is stopped by its PID. The summary gives
medians over the runs, the broker's CPU time per delivered message, and the ratios vmqpy/Mosquitto and
vmqpy/aedes of delivered messages/s as the medians of the per-run ratios (both measured in the same run).
The markdown table is printed and written, with the command and the date, to --out (and the raw figures as
JSON next to it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import loadgen
from bench.brokers import AEDES_DIR, ALL_KINDS, KINDS, MOSQUITTO, REPO, BrokerProcess, aedes_missing, export_revision

DEFAULT_OUT = REPO / "bench" / "results" / "latest.md"
QOS0_TARGET = 0.3  # the team's target: vmqpy delivers at least 0.3x Mosquitto's msgs/s on QoS 0 pairs


def default_brokers(missing_aedes: str | None) -> list[str]:
    """vmqpy and Mosquitto, and aedes too when it is installed (`missing_aedes` is None)."""
    return [*KINDS] if missing_aedes else [*KINDS, "aedes"]


def broker_list(spec: str | None, missing_aedes: str | None) -> tuple[list[str], str | None]:
    """The brokers to run from `--brokers` (None: the default), and a note when aedes is dropped because it is
    missing (asked for or not, a run never fails for it). ValueError on an unknown name or an empty list."""
    names = default_brokers(missing_aedes) if spec is None else [b.strip() for b in spec.split(",") if b.strip()]
    for b in names:
        if b not in ALL_KINDS:
            raise ValueError(f"unknown broker {b!r}; expected some of {', '.join(ALL_KINDS)}")
    if not names:
        raise ValueError("--brokers names no broker")
    note = missing_aedes if missing_aedes and (spec is None or "aedes" in names) else None
    if missing_aedes:
        names = [b for b in names if b != "aedes"]
    if not names:
        raise ValueError(f"no broker left to run: {missing_aedes}")
    return list(dict.fromkeys(names)), note


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke check: 1 run of 3 s (warmup 0.5 s, drain 3 s)")
    ap.add_argument("--runs", type=int, default=None, help="runs per scenario and broker (default 3; quick 1)")
    ap.add_argument("--duration", type=float, default=None, help="measured seconds per run (default 8; quick 3)")
    ap.add_argument("--warmup", type=float, default=None, help="seconds before the window (default 1; quick 0.5)")
    ap.add_argument("--drain", type=float, default=None, help="max seconds to wait for stragglers (default 5; "
                                                             "quick 3)")
    ap.add_argument("--pairs", type=int, default=10, help="publisher/subscriber pairs (default 10)")
    ap.add_argument("--fanin", type=int, default=10, help="fan-in publishers (default 10)")
    ap.add_argument("--fanout", type=int, default=10, help="fan-out subscribers of one publisher (default 10)")
    ap.add_argument("--qos0-window", type=int, default=200,
                    help="QoS 0: messages per publisher sent and not yet received (default 200; 0 = flood)")
    ap.add_argument("--procs", type=int, default=2, help="load generator worker processes (default 2)")
    ap.add_argument("--scenarios", default="", help="comma-separated subset of: qos0-pairs, qos1-pairs, qos0-fanout, "
                                                       "qos1-fanout, qos0-fanin, qos1-fanin (default: all)")
    ap.add_argument("--brokers", default=None,
                    help="comma-separated subset of: vmqpy, mosquitto, aedes (default: vmqpy,mosquitto, and aedes "
                         f"when installed in {AEDES_DIR.relative_to(REPO)}/node_modules by `make bench-deps`)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"markdown report (default {DEFAULT_OUT})")
    ap.add_argument("--vmqpy-rev", default="", metavar="REV",
                    help="run vmqpy as committed in git revision REV (exported to a temporary directory with git "
                         "archive) instead of this working tree")
    ap.add_argument("--baseline", default="", metavar="REV",
                    help="also run vmqpy as committed in git revision REV (label vmqpy@REV, exported and built as "
                         "--vmqpy-rev), interleaved with the others: a change measured before and after in one run")
    args = ap.parse_args(argv)
    quick = args.quick
    args.runs = args.runs if args.runs is not None else (1 if quick else 3)
    args.duration = args.duration if args.duration is not None else (3.0 if quick else 8.0)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if quick else 1.0)
    args.drain = args.drain if args.drain is not None else (3.0 if quick else 5.0)
    if args.runs < 1 or args.duration <= 0 or min(args.pairs, args.fanin, args.fanout, args.procs) < 1:
        ap.error("--runs, --duration, --pairs, --fanin, --fanout and --procs must be positive")
    try:
        args.broker_list, note = broker_list(args.brokers, aedes_missing())
    except ValueError as e:
        ap.error(str(e))
    if note:
        print(f"note: {note}", file=sys.stderr, flush=True)
    if args.baseline:
        args.broker_list.insert(1, f"vmqpy@{args.baseline}")
    return args


def scenarios(args: argparse.Namespace) -> list[loadgen.Scenario]:
    all_sc = loadgen.default_scenarios(args.pairs, args.fanin, args.qos0_window, args.fanout)
    wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if not wanted:
        return all_sc
    out = [s for s in all_sc if any(s.name.startswith(w) for w in wanted)]
    if not out:
        raise SystemExit(f"no scenario matches {wanted}; known: {[s.name for s in all_sc]}")
    return out


def measure(kind: str, sc: loadgen.Scenario, args: argparse.Namespace) -> dict[str, Any]:
    """One broker, one scenario, one run: a fresh broker process, stopped (by PID) in the end."""
    row: dict[str, Any] = {"broker": kind, "scenario": sc.name, "qos": sc.qos}
    baseline = kind.startswith("vmqpy@")
    broker = BrokerProcess("vmqpy" if baseline else kind,
                           source=args.baseline_source if baseline else args.vmqpy_source)
    try:
        broker.start()
        res = loadgen.run(broker.host, broker.port, sc, args.duration, args.warmup, args.drain, args.procs,
                          probe=broker.cpu_seconds)
        row.update(res.to_dict())
        row["peak_rss_kib"] = broker.peak_rss_kib()
        if not broker.alive():
            row["errors"] = [*row["errors"], f"{kind} exited during the run:\n{broker.log_tail()}"]
    except Exception:
        row["failed"] = traceback.format_exc()
    finally:
        code = broker.stop()
        row["exit_code"] = code
    return row


def per_core(row: dict[str, Any]) -> float | None:
    """Delivered msg/s per core the broker used: its rate divided by its CPU share during the window."""
    cpu = row.get("broker_cpu")
    return row["rate"] / (cpu / 100) if cpu else None


def cpu_us_per_message(row: dict[str, Any]) -> float | None:
    """The broker's CPU time per delivered message, microseconds: its CPU share in the window over the rate."""
    cpu, rate = row.get("broker_cpu"), row.get("rate")
    return cpu / 100 / rate * 1e6 if cpu is not None and rate else None


def vmqpy_ratios(rows: list[dict[str, Any]], scenario: str, other: str) -> tuple[list[float], list[float]]:
    """Per run of `scenario`: vmqpy's rate / `other`'s rate, and vmqpy's msg/s per core / `other`'s, for the runs
    where both were measured (neither failed)."""
    by_run: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        if r["scenario"] == scenario and "failed" not in r:
            by_run.setdefault(r["run"], {})[r["broker"]] = r
    both = [runs for runs in by_run.values() if "vmqpy" in runs and other in runs]
    rates = [p["vmqpy"]["rate"] / p[other]["rate"] for p in both if p[other]["rate"] > 0]
    cores = []
    for p in both:
        mine, theirs = per_core(p["vmqpy"]), per_core(p[other])
        if mine is not None and theirs:
            cores.append(mine / theirs)
    return rates, cores


def median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def summarize(rows: list[dict[str, Any]], scs: list[loadgen.Scenario], kinds: list[str]) -> list[dict[str, Any]]:
    out = []
    for sc in scs:
        ratios, core_ratios = vmqpy_ratios(rows, sc.name, "mosquitto")
        aedes_ratios, aedes_core_ratios = vmqpy_ratios(rows, sc.name, "aedes")
        for kind in kinds:
            ok = [r for r in rows if r["scenario"] == sc.name and r["broker"] == kind and "failed" not in r]
            failed = sum(1 for r in rows if r["scenario"] == sc.name and r["broker"] == kind and "failed" in r)
            out.append({
                "scenario": sc.name, "qos": sc.qos, "broker": kind, "runs": len(ok), "failed": failed,
                "rate": median([r["rate"] for r in ok]),
                "rate_min": min((r["rate"] for r in ok), default=None),
                "rate_max": max((r["rate"] for r in ok), default=None),
                "ratio": median(ratios) if kind == "vmqpy" else None,
                "ratio_min": min(ratios, default=None) if kind == "vmqpy" else None,
                "ratio_max": max(ratios, default=None) if kind == "vmqpy" else None,
                "per_core": median([per_core(r) for r in ok]),
                "core_ratio": median(core_ratios) if kind == "vmqpy" else None,
                "ratio_aedes": median(aedes_ratios) if kind == "vmqpy" else None,
                "ratio_aedes_min": min(aedes_ratios, default=None) if kind == "vmqpy" else None,
                "ratio_aedes_max": max(aedes_ratios, default=None) if kind == "vmqpy" else None,
                "core_ratio_aedes": median(aedes_core_ratios) if kind == "vmqpy" else None,
                "cpu_us": median([cpu_us_per_message(r) for r in ok]),
                "p50_ms": median([r["p50_ms"] for r in ok]),
                "p99_ms": median([r["p99_ms"] for r in ok]),
                "acked_lost": sum(r["acked_lost"] for r in ok) if sc.qos else None,
                "acked": sum(r["acked"] for r in ok) if sc.qos else None,
                "lost": sum(r["lost"] for r in ok),
                "expected": sum(r["expected"] for r in ok),
                "rss_mib": median([r["peak_rss_kib"] / 1024 for r in ok]),
                "broker_cpu": median([r["broker_cpu"] for r in ok]),
                "loadgen_cpu": median([max(r["loadgen_cpu"], default=0.0) for r in ok]),
                "machine_cpu": median([r["machine_cpu"] for r in ok]),
            })
    return out


def render(args: argparse.Namespace, argv: list[str], started: dt.datetime, meta: dict[str, str],
           rows: list[dict[str, Any]], summary: list[dict[str, Any]]) -> str:
    cmd = " ".join(shlex.quote(a) for a in [".venv/bin/python", "-m", "bench.compare", *argv])
    lines = [
        "# vmqpy vs Mosquitto" + (" and aedes" if "aedes" in args.broker_list else ""),
        "",
        f"- date: {started.isoformat(timespec='seconds')} (finished {dt.datetime.now().astimezone():%H:%M:%S})",
        f"- command: `{cmd}`",
        f"- vmqpy: {args.vmqpy_desc}; checkout at git {meta['git']}; python {meta['python']}; {meta['mosquitto']}; "
        + (f"{meta['aedes']}; " if "aedes" in args.broker_list else "")
        + f"{meta['cpus']} CPUs; "
        f"load average at start {meta['loadavg']}",
        f"- per run: warmup {args.warmup:g} s, measured window {args.duration:g} s, drain up to {args.drain:g} s; "
        f"{args.runs} run(s); load generator in {args.procs} process(es); QoS 0 window {args.qos0_window} "
        "messages per publisher (0 = flood); QoS 1 window 20 PUBLISHes per publisher; 64-byte payloads; "
        "vmqpy and Mosquitto: max_inflight_messages 20, 1000 queued messages per client"
        + ("; aedes: its defaults (in-memory persistence, no inflight limit)" if "aedes" in args.broker_list else ""),
        "",
        f"## Summary (median of {args.runs} run(s); ratio = median of the per-run ratios)",
        "",
        *summary_table(summary, "aedes" in args.broker_list),
    ]
    lines += ["", "## Every run", "",
              "| run | scenario | broker | delivered msg/s | sent msg/s | p50 ms | p99 ms | acked | acked-but-lost "
              "| lost | unacked | dups | QoS 0 stalls | peak RSS MiB | broker CPU % | loadgen CPU % | machine CPU % "
              "| errors |",
              "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "failed" in r:
            err = r["failed"].strip().splitlines()[-1].replace("|", "/")
            lines.append(f"| {r['run']} | {r['scenario']} | {r['broker']} | FAILED: {err} |" + " |" * 14)
            continue
        errs = "; ".join(e.replace("|", "/").replace("\n", " ")[:120] for e in r["errors"]) or ""
        lines.append(
            f"| {r['run']} | {r['scenario']} | {r['broker']} | {fmt(r['rate'])} | {fmt(r['sent_rate'])} "
            f"| {fmt(r['p50_ms'], 1)} | {fmt(r['p99_ms'], 1)} | {r['acked'] if r['qos'] else '-'} "
            f"| {r['acked_lost'] if r['qos'] else '-'} | {r['lost']} | {r['unacked']} | {r['dups']} | {r['stalls']} "
            f"| {r['peak_rss_kib'] / 1024:.1f} | {fmt(r['broker_cpu'])} "
            f"| {'/'.join(fmt(c) for c in r['loadgen_cpu'])} | {fmt(r['machine_cpu'])} | {errs} |")
    lines += ["", "## Checks", ""]
    lines += checks(summary, rows, args)
    lines += ["", "## Definitions", "",
              "- delivered msg/s: PUBLISHes received by the subscribers during the measured window / its length.",
              "- p50/p99: end-to-end latency (send time in the payload to the subscriber's read), deliveries in "
              "the window. With the QoS 0 window the publishers keep the pipeline full, so QoS 0 latency is "
              "queueing at saturation (about pairs x window / throughput), not an idle round trip.",
              "- acked-but-lost (QoS 1): messages PUBACKed to their publisher that the subscriber had not "
              "received at the end of the drain.",
              "- lost / expected: expected deliveries (every message sent, acked or not) that never arrived; for "
              "QoS 0 the broker may drop by design.",
              "- peak RSS: VmHWM of the broker process at the end of the run (a fresh broker per run).",
              "- msg/s per broker core: delivered msg/s divided by the broker's CPU share in the window (a "
              "broker that got less CPU because of other load is not penalised); its ratio is again the median "
              "of per-run ratios.",
              "- CPU %: of one core during the window; machine CPU % is every process of the machine "
              f"(max {100 * (os.cpu_count() or 1)}): above the broker + load generator sum is other people's load.",
              ]
    return "\n".join(lines) + "\n"


def _ratio_cell(ratio: float | None, low: float | None, high: float | None) -> str:
    return "" if ratio is None or low is None or high is None else f"**{ratio:.2f}x** ({low:.2f}-{high:.2f})"


def summary_table(summary: list[dict[str, Any]], with_aedes: bool) -> list[str]:
    """The summary as markdown table lines; the vmqpy/aedes columns only `with_aedes`."""
    head = ("| scenario | broker | delivered msg/s | min-max | vmqpy/mosquitto "
            + ("| vmqpy/aedes " if with_aedes else "")
            + "| broker CPU us/msg | p50 ms | p99 ms | acked-but-lost | lost / expected | peak RSS MiB | broker CPU % "
            + "| msg/s per broker core (vmqpy/mosquitto" + (", vmqpy/aedes" if with_aedes else "") + ") "
            + "| loadgen CPU % (busiest worker) | machine CPU % |")
    lines = [head, "|---|---|" + "---:|" * (head.count("|") - 3)]
    for s in summary:
        acked_lost = "n/a (QoS 0)" if s["acked_lost"] is None else f"{s['acked_lost']:,} of {s['acked']:,}"
        runs = f" ({s['failed']} failed)" if s["failed"] else ""
        cores = [c for c in (s["core_ratio"], s.get("core_ratio_aedes") if with_aedes else None) if c is not None]
        core_ratio = f" ({', '.join(f'{c:.2f}x' for c in cores)})" if cores else ""
        aedes = (f"| {_ratio_cell(s.get('ratio_aedes'), s.get('ratio_aedes_min'), s.get('ratio_aedes_max'))} "
                 if with_aedes else "")
        lines.append(
            f"| {s['scenario']} | {s['broker']}{runs} | {fmt(s['rate'])} | {fmt(s['rate_min'])}-{fmt(s['rate_max'])} "
            f"| {_ratio_cell(s['ratio'], s['ratio_min'], s['ratio_max'])} {aedes}| {fmt(s.get('cpu_us'), 1)} "
            f"| {fmt(s['p50_ms'], 1)} | {fmt(s['p99_ms'], 1)} | {acked_lost} "
            f"| {s['lost']:,} / {s['expected']:,} | {fmt(s['rss_mib'], 1)} | {fmt(s['broker_cpu'])} "
            f"| {fmt(s['per_core'])}{core_ratio} "
            f"| {fmt(s['loadgen_cpu'])} | {fmt(s['machine_cpu'])} |")
    return lines


def checks(summary: list[dict[str, Any]], rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    out = []
    for s in summary:
        if s["broker"] == "vmqpy" and s["qos"] == 0 and s["scenario"].startswith("qos0-pairs") and s["ratio"]:
            verdict = "meets" if s["ratio"] >= QOS0_TARGET else "BELOW"
            out.append(f"- QoS 0 pairs: vmqpy/Mosquitto = {s['ratio']:.2f}x, {verdict} the {QOS0_TARGET}x target.")
        if s["broker"] == "vmqpy" and s["acked_lost"]:
            out.append(f"- **vmqpy lost {s['acked_lost']} acknowledged QoS 1 messages in {s['scenario']}.**")
        elif s["broker"] == "vmqpy" and s["qos"] and s["runs"]:
            out.append(f"- {s['scenario']}: vmqpy lost no acknowledged message ({s['acked']:,} acked).")
        if s["broker"] == "mosquitto" and s["acked_lost"]:
            out.append(f"- {s['scenario']}: Mosquitto acknowledged and then never delivered {s['acked_lost']:,} of "
                       f"{s['acked']:,} QoS 1 messages (consistent with its documented per-client queue limit, "
                       "max_queued_messages 1000: messages beyond it are dropped).")
    busy = [r for r in rows if "failed" not in r and max(r["loadgen_cpu"], default=0) >= 90]
    if busy:
        out.append(f"- load generator: a worker used >= 90% of a core in {len(busy)} measurement(s); it may have "
                   "limited those (try --procs).")
    else:
        out.append("- load generator: no worker reached 90% of a core (not the bottleneck by that measure).")
    cpus = os.cpu_count() or 1
    loaded = [r for r in rows if "failed" not in r and (r["machine_cpu"] or 0) >= 95 * cpus]
    if loaded:
        out.append(f"- the machine's CPUs were saturated in {len(loaded)} of {len(rows)} measurement(s) (machine CPU "
                   "% near the maximum); with other load on the machine the figures are noisy.")
    failed = [r for r in rows if "failed" in r]
    if failed:
        out.append(f"- {len(failed)} measurement(s) failed; see the JSON file for tracebacks.")
    return out


def metadata() -> dict[str, str]:
    def run(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=REPO).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "?"

    git = run(["git", "rev-parse", "--short", "HEAD"])
    if run(["git", "status", "--porcelain", "--untracked-files=no"]):
        git += " (with uncommitted changes)"
    mosq = run([MOSQUITTO, "-h"]).splitlines()
    try:
        aedes_pkg = json.loads((AEDES_DIR / "node_modules" / "aedes" / "package.json").read_text())
        aedes = f"aedes {aedes_pkg.get('version', '?')} on node {run(['node', '--version'])}"
    except (OSError, ValueError):
        aedes = "aedes not installed"
    try:
        load = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        load = ["?"]
    return {"git": git, "python": sys.version.split()[0], "mosquitto": mosq[0] if mosq else "mosquitto ?",
            "aedes": aedes,
            "cpus": str(os.cpu_count()), "loadavg": " ".join(load)}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    scs = scenarios(args)
    with tempfile.TemporaryDirectory(prefix="bench-vmqpy-src-") as tmp:
        args.vmqpy_source = None
        if args.vmqpy_rev:
            commit = export_revision(args.vmqpy_rev, Path(tmp))
            args.vmqpy_source = Path(tmp)
            args.vmqpy_desc = f"git {args.vmqpy_rev} = {commit[:12]} (exported with git archive)"
        else:
            args.vmqpy_desc = "this working tree"
        args.baseline_source = None
        if args.baseline:
            args.baseline_source = Path(tmp) / "baseline"
            commit = export_revision(args.baseline, args.baseline_source)
            args.vmqpy_desc += f"; baseline vmqpy@{args.baseline} = {commit[:12]}"
        return _main(args, argv, scs)


def _main(args: argparse.Namespace, argv: list[str], scs: list[loadgen.Scenario]) -> int:
    started = dt.datetime.now().astimezone()
    meta = metadata()
    rows: list[dict[str, Any]] = []
    total = args.runs * len(scs) * len(args.broker_list)
    t_start = time.monotonic()
    for run in range(args.runs):
        for sc in scs:
            order = args.broker_list if run % 2 == 0 else args.broker_list[::-1]
            for kind in order:
                row = measure(kind, sc, args)
                row["run"] = run + 1
                rows.append(row)
                if "failed" in row:
                    msg = "FAILED " + row["failed"].strip().splitlines()[-1]
                else:
                    msg = (f"{row['rate']:>9,.0f} msg/s  p50 {fmt(row['p50_ms'], 1)} ms  "
                           f"p99 {fmt(row['p99_ms'], 1)} ms  acked-lost {row['acked_lost'] if sc.qos else '-'}  "
                           f"lost {row['lost']}  "
                           f"broker CPU {fmt(row['broker_cpu'])}%  machine {fmt(row['machine_cpu'])}%")
                print(f"[{len(rows)}/{total} {time.monotonic() - t_start:5.0f}s] run {run + 1} {sc.name:<14} "
                      f"{kind:<9} {msg}", flush=True)
    summary = summarize(rows, scs, args.broker_list)
    text = render(args, argv, started, meta, rows, summary)
    print()
    print(text)
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    raw = out.with_suffix(".json")
    raw.write_text(json.dumps({"argv": argv, "meta": meta, "summary": summary, "rows": rows}, indent=1,
                              default=str))
    print(f"written: {out} and {raw}")
    bad = any(s["broker"] == "vmqpy" and s["acked_lost"] for s in summary)
    return 1 if bad or any("failed" in r for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
