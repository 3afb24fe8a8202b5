"""Latency under load, vmqpy against Mosquitto (issue 21): p99 at 50 % and 90 % of Mosquitto's saturation rate,
and at 1,000 msgs/s QoS 1.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_latency [--quick] [--rounds N] [--json PATH]

For each scenario (QoS 0 pairs and QoS 1 pairs by default, 10 pairs, 64-byte payloads; `--scenarios` adds
qos1-fanin), both brokers are started once (`bench.brokers.BrokerProcess`, each on a free loopback port, the
same limits as `bench.compare`), then:

1. saturation: a closed-loop run of the load generator (publishers as fast as their windows allow, exactly as
   `bench.compare` runs them) against Mosquitto gives its delivered msgs/s in this run, on this machine, now;
   vmqpy gets the same run for context (not in `--quick`);
2. for each level (`--levels`, 0.5 and 0.9) and each round, a fixed-rate run (`bench.loadgen`, open loop:
   latency from each message's due time) at level x that rate against each broker, the order alternating
   between rounds (interleaved, so the machine's other load hits both alike);
3. QoS 1 pairs also at `--low-rate` msgs/s (1,000).

`--floor` adds `bench.relay_floor` to the fixed-rate runs: a uvloop server that only relays the PUBLISHes
(label "relay floor"), the share of a message that no broker in Python on uvloop avoids.

Reported per (scenario, rate, broker), medians over the rounds: achieved msgs/s (deliveries of messages due in
the window / its length), p50/p99/p99.9/max latency, the broker's CPU time per message (its CPU share during the
window / achieved rate), lost, duplicates, messages the publishers never got out (behind) and the load
generator's own timer lag; and the p99 ratio vmqpy/Mosquitto as the median of the per-round ratios. Targets
(issue 21): ratio at most 2 at both levels; vmqpy's p99 under 1 ms at 1,000 msgs/s QoS 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench import loadgen
from bench.brokers import REPO, BrokerProcess, export_revision
from bench.suite_report import machine, row

SCENARIOS = {
    "qos0-pairs": lambda n: loadgen.Scenario(f"qos0-pairs{n}", "pairs", n, 0),
    "qos1-pairs": lambda n: loadgen.Scenario(f"qos1-pairs{n}", "pairs", n, 1),
    "qos1-fanout": lambda n: loadgen.Scenario(f"qos1-fanout{n}", "fanout", n, 1),
    "qos1-fanin": lambda n: loadgen.Scenario(f"qos1-fanin{n}", "fanin", n, 1),
}
FLOOR = "relay floor"
RATIO_TARGET = 2.0
LOW_RATE_P99_MS = 1.0
MEASURED = 0.99  # below this share of the messages due in the window delivered, a run's p99 is unbounded
REACHED = 0.97  # a broker "reached" the target rate when it delivered at least this share of it in the window


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_latency", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 round of 1.5 s, no vmqpy saturation run (under a minute)")
    ap.add_argument("--rounds", type=int, default=None, help="fixed-rate runs per rate and broker (default 3; quick 1)")
    ap.add_argument("--duration", type=float, default=None, help="measured seconds per run (default 4; quick 1.5)")
    ap.add_argument("--warmup", type=float, default=None, help="seconds before the window (default 1; quick 0.5)")
    ap.add_argument("--drain", type=float, default=3.0, help="max seconds to wait for stragglers (default 3)")
    ap.add_argument("--clients", type=int, default=10, help="pairs, or fan-in publishers (default 10)")
    ap.add_argument("--scenarios", default="qos0-pairs,qos1-pairs",
                    help=f"comma-separated subset of {', '.join(SCENARIOS)} (default qos0-pairs,qos1-pairs)")
    ap.add_argument("--levels", default="0.5,0.9",
                    help="shares of Mosquitto's saturation rate (default 0.5,0.9; 'none': no saturation run)")
    ap.add_argument("--rates", default="", metavar="R1,R2",
                    help="fixed rates in msgs/s for every scenario besides the levels (e.g. 5000: per-message CPU "
                         "well below capacity, issue 21)")
    ap.add_argument("--low-rate", type=float, default=1000.0,
                    help="a fixed rate for QoS 1 pairs besides the levels (default 1000; 0 = none)")
    ap.add_argument("--procs", type=int, default=2, help="load generator worker processes (default 2)")
    ap.add_argument("--json", type=Path, default=None, metavar="PATH", help="write every run and the summary here")
    ap.add_argument("--floor", action="store_true",
                    help="also run bench.relay_floor (label 'relay floor'), a uvloop server that only relays the "
                         "PUBLISHes: the event loop's, interpreter's and kernel's share of a message")
    ap.add_argument("--vmqpy-rev", default="", metavar="REV",
                    help="also run vmqpy as committed in git revision REV (label vmqpy@REV), interleaved")
    args = ap.parse_args(argv)
    q = args.quick
    args.rounds = args.rounds if args.rounds is not None else (1 if q else 3)
    args.duration = args.duration if args.duration is not None else (1.5 if q else 4.0)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if q else 1.0)
    if args.rounds < 1 or args.duration <= 0 or args.warmup < 0 or args.drain < 0 or args.clients < 1 \
            or args.procs < 1 or args.low_rate < 0:
        ap.error("--rounds, --duration, --clients and --procs must be positive; --warmup, --drain, --low-rate >= 0")
    try:
        args.level_list = [] if args.levels.strip().lower() == "none" else \
            [float(x) for x in args.levels.split(",") if x.strip()]
        args.rate_list = [float(x) for x in args.rates.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--levels, --rates: not a list of numbers: {args.levels!r}, {args.rates!r}")
    if (not args.level_list and args.levels.strip().lower() != "none") or not all(0 < x <= 2 for x in args.level_list):
        ap.error("--levels: shares in (0, 2], or 'none'")
    if not all(x > 0 for x in args.rate_list):
        ap.error("--rates: rates above 0")
    if not args.level_list and not args.rate_list and not args.low_rate:
        ap.error("--levels none needs --rates or --low-rate")
    args.scenario_list = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in args.scenario_list if s not in SCENARIOS]
    if unknown or not args.scenario_list:
        ap.error(f"--scenarios: unknown {unknown}; known: {', '.join(SCENARIOS)}")
    return args


def median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def cpu_us_per_msg(broker_cpu: float | None, rate: float | None) -> float | None:
    """Broker CPU time per delivered message in us: its CPU share (% of a core) during the window / msgs per s."""
    if broker_cpu is None or not rate:
        return None
    return broker_cpu / 100 / rate * 1e6


def measured_share(row: dict[str, Any]) -> float | None:
    """The share of the messages due in a fixed-rate run's window that arrived (and so have a latency)."""
    due = round(row["target_rate"] * row["window_s"])
    return row["latency_samples"] / due if due > 0 else None


def bounded(row: dict[str, Any]) -> bool:
    """A run's p99 is known when at least MEASURED of the messages due in its window arrived; otherwise the
    missing ones (never sent in time, dropped, or later than the drain) are its slowest and the p99 is unbounded."""
    share = measured_share(row)
    return share is not None and share >= MEASURED


def case_label(level: float | None, rate: float) -> str:
    return f"{level * 100:g} % of Mosquitto" if level is not None else f"{rate:,.0f} msgs/s"


def summarize(rows: list[dict[str, Any]], brokers: list[str]) -> list[dict[str, Any]]:
    """Medians per (scenario, case, broker) of the fixed-rate rows, and per case the median of the per-round p99
    ratios of each vmqpy against Mosquitto (pure; unit-tested)."""
    out = []
    cases: list[tuple[str, str]] = []
    for r in rows:
        if r.get("mode") == "fixed" and (r["scenario"], r["case"]) not in cases:
            cases.append((r["scenario"], r["case"]))
    for scenario, case in cases:
        mine = [r for r in rows if r.get("mode") == "fixed" and r["scenario"] == scenario and r["case"] == case]
        by_round: dict[int, dict[str, dict[str, Any]]] = {}
        for r in mine:
            if "failed" not in r and bounded(r):
                by_round.setdefault(r["round"], {})[r["broker"]] = r
        for broker in brokers:
            ok = [r for r in mine if r["broker"] == broker and "failed" not in r]
            ratios = [rd[broker]["p99_ms"] / rd["mosquitto"]["p99_ms"] for rd in by_round.values()
                      if broker in rd and "mosquitto" in rd and rd[broker]["p99_ms"] is not None
                      and rd["mosquitto"]["p99_ms"]] if broker != "mosquitto" else []
            target = mine[0]["target_rate"]
            rate = median([r["rate"] for r in ok])
            unbounded = sum(1 for r in ok if not bounded(r))
            over = bool(ok) and 2 * unbounded > len(ok)
            out.append({
                "scenario": scenario, "case": case, "level": mine[0]["level"], "target_rate": target,
                "broker": broker, "runs": len(ok), "failed": sum(1 for r in mine if r["broker"] == broker) - len(ok),
                "rate": rate,
                "reached": bool(ok) and rate is not None and rate >= REACHED * target,
                "p50_ms": median([r["p50_ms"] for r in ok]), "p99_ms": median([r["p99_ms"] for r in ok]),
                "p999_ms": median([r["p999_ms"] for r in ok]), "max_ms": median([r["max_ms"] for r in ok]),
                "unbounded_runs": unbounded, "p99_unbounded": over,
                "measured_share": median([measured_share(r) for r in ok]),
                "p99_ratio": median(list(ratios)) if ratios and not over else None,
                "p99_ratio_min": min(ratios, default=None), "p99_ratio_max": max(ratios, default=None),
                "cpu_us": median([cpu_us_per_msg(r["broker_cpu"], r["rate"]) for r in ok]),
                "lost": sum(r["lost"] for r in ok), "dups": sum(r["dups"] for r in ok),
                "acked_lost": sum(r["acked_lost"] for r in ok), "behind": sum(r["behind"] for r in ok),
                "lag_p99_ms": median([r["lag_p99_ms"] for r in ok]),
                "machine_cpu": median([r["machine_cpu"] for r in ok]),
            })
    return out


def checks(summary: list[dict[str, Any]], low_rate: float | None = None) -> list[str]:
    """The issue's targets, one line per case and vmqpy (pure); with `low_rate`, the 1 ms target is checked at that
    fixed rate only (not at the `--rates`; 0: nowhere)."""
    out = []
    for s in summary:
        if s["broker"] == "mosquitto":
            if s["runs"] and not s["reached"]:
                out.append(f"- {s['scenario']} at {s['case']} ({s['target_rate']:,.0f} msgs/s): Mosquitto did not "
                           "reach the rate either: the load generator or the machine limits this level, and the "
                           "ratio compares two queues.")
            continue
        where = f"{s['scenario']} at {s['case']} ({s['target_rate']:,.0f} msgs/s), {s['broker']}"
        if s["acked_lost"]:
            out.append(f"- **{where}: lost {s['acked_lost']} acknowledged messages.**")
        if s["p99_unbounded"]:
            out.append(f"- {where}: p99 unbounded: in {s['unbounded_runs']} of {s['runs']} runs more than "
                       f"{100 - MEASURED * 100:g} % of the messages due in the window never arrived (not sent in "
                       f"time, dropped, or later than the drain; median delivered {100 * s['measured_share']:.0f} "
                       "%)" + ("; target NOT met" if s["level"] is not None or s["scenario"].startswith("qos1")
                               else ""))
        elif s["level"] is not None:
            if s["p99_ratio"] is None:
                out.append(f"- {where}: no p99 ratio (a run failed or delivered nothing).")
            else:
                verdict = "met" if s["p99_ratio"] <= RATIO_TARGET else "NOT met"
                out.append(f"- {where}: p99 {s['p99_ratio']:.2f}x Mosquitto's: target (at most "
                           f"{RATIO_TARGET:g}x) {verdict}" + ("" if s["reached"] else
                                                              "; it did not sustain the rate"))
        elif s["p99_ms"] is not None and s["scenario"].startswith("qos1") \
                and (low_rate is None or s["target_rate"] == low_rate):
            verdict = "met" if s["p99_ms"] < LOW_RATE_P99_MS else "NOT met"
            out.append(f"- {where}: p99 {s['p99_ms']:.2f} ms: target (under {LOW_RATE_P99_MS:g} ms) {verdict}")
    return out


def fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _col(by: list[dict[str, Any]], key: str, digits: int = 1) -> str:
    return " / ".join(fmt(s[key], digits) for s in by)


def render(summary: list[dict[str, Any]], saturation: dict[str, dict[str, float | None]]) -> str:
    """One markdown table: a row per (scenario, rate), the brokers side by side as a / b / ... (pure)."""
    brokers: list[str] = []
    for s in summary:
        if s["broker"] not in brokers:
            brokers.append(s["broker"])
    names = " / ".join(brokers)
    lines = ["Saturation (closed loop, delivered msgs/s): " + "; ".join(
        f"{sc}: " + ", ".join(f"{b} {fmt(v, 0)}" for b, v in sat.items()) for sc, sat in saturation.items()), ""]
    if not any(saturation.values()):  # --levels none: no saturation run
        lines = []
    lines += [
        f"| scenario | target msgs/s | achieved msgs/s ({names}) | p50 ms | p99 ms | p99 ratio vs Mosquitto "
        f"| p99.9 ms | CPU us/msg | lost (all rounds) | dups (all rounds) | load generator lag p99 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    keys: list[tuple[str, str]] = []
    for s in summary:
        if (s["scenario"], s["case"]) not in keys:
            keys.append((s["scenario"], s["case"]))
    for scenario, case in keys:
        by = [s for b in brokers for s in summary
              if s["scenario"] == scenario and s["case"] == case and s["broker"] == b]
        achieved = " / ".join(fmt(s["rate"], 0) + ("" if s["reached"] else " (not reached)") for s in by)
        ratios = " / ".join(f"**{s['p99_ratio']:.2f}x**" for s in by if s["p99_ratio"] is not None) or "-"
        p99 = " / ".join("unbounded" if s["p99_unbounded"] else fmt(s["p99_ms"], 2) for s in by)
        lines.append(f"| {scenario} | {case}: {by[0]['target_rate']:,.0f} | {achieved} | {_col(by, 'p50_ms', 2)} "
                     f"| {p99} | {ratios} | {_col(by, 'p999_ms', 2)} | {_col(by, 'cpu_us')} "
                     f"| {_col(by, 'lost', 0)} | {_col(by, 'dups', 0)} | {_col(by, 'lag_p99_ms', 2)} |")
    return "\n".join(lines)


def suite_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows for bench.suite's table (bench.suite_report.row), one per (scenario, rate, broker)."""
    return [row(f"latency {s['scenario']} at {s['case']} ({s['target_rate']:,.0f} msgs/s)", s["broker"],
                rate=s["rate"], ratio=s["p99_ratio"], cpu_us=s["cpu_us"], p50_ms=s["p50_ms"], p99_ms=s["p99_ms"],
                note="; ".join(([] if s["p99_ratio"] is None else ["ratio = p99 vmqpy/Mosquitto"])
                               + ([] if s["reached"] else ["rate not reached"])))
            for s in data["summary"]]


RESULT_KEYS = ("window_s", "rate", "sent_rate", "target_rate", "p50_ms", "p99_ms", "p999_ms", "max_ms",
               "latency_samples", "sent", "acked", "acked_lost", "lost", "dups", "behind", "unacked", "lag_p99_ms",
               "lag_max_ms", "broker_cpu", "loadgen_cpu", "machine_cpu", "errors")


def measure(broker: BrokerProcess, label: str, sc: loadgen.Scenario, rate: float | None,
            args: argparse.Namespace) -> dict[str, Any]:
    """One run against a running broker: closed loop (rate None) or at a fixed rate; a row of figures."""
    row: dict[str, Any] = {"broker": label, "scenario": sc.name, "qos": sc.qos}
    try:
        res = loadgen.run(broker.host, broker.port, sc, args.duration, args.warmup, args.drain, args.procs,
                          probe=broker.cpu_seconds, rate=rate)
        d = res.to_dict()
        row.update({k: d[k] for k in RESULT_KEYS})
        if not broker.alive():
            row["failed"] = f"{label} exited during the run:\n{broker.log_tail()}"
    except Exception:
        row["failed"] = traceback.format_exc()
    return row


def progress(row: dict[str, Any], t_start: float) -> None:
    head = f"[{time.monotonic() - t_start:5.0f}s] {row['scenario']:<12} {row.get('case', 'saturation'):<18} " \
           f"{row['broker']:<14}"
    if "failed" in row:
        print(f"{head} FAILED {row['failed'].strip().splitlines()[-1]}", flush=True)
        return
    print(f"{head} {row['rate']:>9,.0f} msgs/s  p50 {fmt(row['p50_ms'], 2)}  p99 {fmt(row['p99_ms'], 2)} ms  "
          f"behind {row['behind']}  lost {row['lost']}  CPU {fmt(cpu_us_per_msg(row['broker_cpu'], row['rate']))} "
          f"us/msg  lag p99 {fmt(row['lag_p99_ms'], 2)} ms", flush=True)


def broker_kind(label: str) -> str:
    """The BrokerProcess kind of a label of this bench: mosquitto, the relay floor, or a vmqpy."""
    return {"mosquitto": "mosquitto", FLOOR: "relay-floor"}.get(label, "vmqpy")


def run_scenario(name: str, args: argparse.Namespace, sources: dict[str, Path | None], rows: list[dict[str, Any]],
                 t_start: float) -> dict[str, float | None]:
    """Start every broker once, find Mosquitto's saturation rate, then the fixed-rate rounds, interleaved."""
    sc = SCENARIOS[name](args.clients)
    labels = list(sources)
    procs = {label: BrokerProcess(broker_kind(label), source=src) for label, src in sources.items()}
    saturation: dict[str, float | None] = {}
    try:
        for p in procs.values():
            p.start()
        for label in ([] if not args.level_list else ["mosquitto"] if args.quick
                      else ["mosquitto", *[b for b in labels if b not in ("mosquitto", FLOOR)]]):
            row = measure(procs[label], label, sc, None, args)
            row.update(mode="closed", case="saturation", round=0, level=None)
            rows.append(row)
            progress(row, t_start)
            saturation[label] = None if "failed" in row else row["rate"]
        sat = saturation.get("mosquitto")
        if args.level_list and not sat:
            raise RuntimeError(f"{name}: no saturation rate for Mosquitto; not running the fixed rates")
        cases: list[tuple[float | None, float]] = [(lv, round(lv * (sat or 0))) for lv in args.level_list]
        cases += [(None, rate) for rate in args.rate_list]
        if args.low_rate and name == "qos1-pairs" and args.low_rate not in args.rate_list:
            cases.append((None, args.low_rate))
        for level, rate in cases:
            for rnd in range(args.rounds):
                for label in (labels if rnd % 2 == 0 else labels[::-1]):
                    row = measure(procs[label], label, sc, rate, args)
                    row.update(mode="fixed", case=case_label(level, rate), round=rnd + 1, level=level,
                               target_rate=rate)
                    rows.append(row)
                    progress(row, t_start)
    finally:
        for p in procs.values():
            p.stop()
    return saturation


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    meta = machine(REPO)
    rows: list[dict[str, Any]] = []
    saturation: dict[str, dict[str, float | None]] = {}
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-latency-src-") as tmp:
        sources: dict[str, Path | None] = {"vmqpy": None, "mosquitto": None}
        if args.vmqpy_rev:
            commit = export_revision(args.vmqpy_rev, Path(tmp))
            sources[f"vmqpy@{args.vmqpy_rev}"] = Path(tmp)
            meta["baseline"] = f"vmqpy@{args.vmqpy_rev} = {commit[:12]}"
        if args.floor:
            sources[FLOOR] = None
        errors = []
        for name in args.scenario_list:
            try:
                saturation[SCENARIOS[name](args.clients).name] = run_scenario(name, args, sources, rows, t_start)
            except Exception:
                errors.append(traceback.format_exc())
                traceback.print_exc()
    summary = summarize(rows, list(sources))
    cmd = " ".join(shlex.quote(a) for a in [".venv/bin/python", "-m", "bench.bench_latency", *argv])
    text = render(summary, saturation)
    lines = checks(summary, args.low_rate)
    print(f"\n# Latency under load, {started:%Y-%m-%d %H:%M} UTC ({time.monotonic() - t_start:.0f} s)\n")
    dirty = " (with uncommitted changes)" if meta["git_dirty"] == "True" else ""
    print(f"command: `{cmd}`; git {meta['git_commit'][:12]}{dirty}; {meta['mosquitto']}; {meta['cores']} CPUs; "
          f"{meta['cpu_model']}; load average at "
          f"start {meta['loadavg']}; {args.rounds} round(s) of {args.duration:g} s (warmup {args.warmup:g} s); "
          f"medians; p99 ratio = median of the per-round ratios\n")
    print(text)
    print()
    print("\n".join(lines))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"argv": argv, "command": cmd, "started": started.isoformat(), "meta": meta,
                                         "saturation": saturation, "summary": summary, "checks": lines,
                                         "rows": rows, "errors": errors}, indent=1, default=str))
        print(f"written: {args.json}")
    failed = errors or any("failed" in r for r in rows)
    lost = any(s["acked_lost"] for s in summary if s["broker"] != "mosquitto")
    return 1 if failed or lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
