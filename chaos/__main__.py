"""`python -m chaos list` and `python -m chaos run NAME|--all [options]` (docs/chaos.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from chaos.cluster import MODES, HarnessError, stop_all
from chaos.experiments import EXPERIMENTS, SUITE, by_name
from chaos.runner import Options, recheck, run
from chaos.summary import markdown, verdicts
from chaos.via import VIAS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description="Chaos netsplit experiments")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the named experiments")
    checkp = sub.add_parser("check", help="judge finished runs again (rewrites their verdict.json)")
    checkp.add_argument("dirs", nargs="+", type=Path)
    sump = sub.add_parser("summary", help="a Markdown table of the verdicts under the given run directories")
    sump.add_argument("dirs", nargs="+", type=Path)
    runp = sub.add_parser("run", help="run one experiment, or the suite with --all")
    runp.add_argument("name", nargs="?", help="experiment name (python -m chaos list)")
    runp.add_argument("--all", action="store_true", help="run the suite")
    runp.add_argument("--nodes", type=int, default=3)
    runp.add_argument("--seed", type=int, default=1)
    runp.add_argument("--duration", type=float, default=None, help="seconds of workload (default: the experiment's)")
    runp.add_argument("--mode", choices=sorted(MODES), default="stop-serving")
    runp.add_argument("--out", type=Path, default=Path("chaos-runs"))
    runp.add_argument("--base-address", default="127.0.0.11", help="address of the first node (127.0.0.0/8)")
    runp.add_argument("--backend", choices=("auto", "iptables", "proxy"), default="auto",
                      help="auto: iptables when root, else the fault proxy")
    runp.add_argument("--quiet", type=float, default=5.0, help="seconds of quiet after the heal before reading")
    runp.add_argument("--keep-data", action="store_true", help="keep the nodes' data directories")
    runp.add_argument("--attach", type=Path, default=None, metavar="DIR",
                      help="run against the running cluster configured in DIR/*/vmqpy.conf (network faults only)")
    runp.add_argument("--vmqpy-root", type=Path, default=None, metavar="DIR",
                      help="the vmqpy source tree the nodes run (default: this checkout), e.g. a clone at a commit")
    runp.add_argument("--via", choices=VIAS, default="direct",
                      help="direct: clients connect to the nodes; haproxy: only through a real HAProxy in front of "
                           "them (the shipped configuration)")
    args = parser.parse_args(argv)
    if args.command == "list":
        for e in EXPERIMENTS:
            suite = "suite" if e.name in SUITE else "     "
            print(f"{e.name:<18} {suite} {e.duration:5.0f}s  {e.description}")
        return 0
    if args.command == "check":
        worst = 0
        for directory in args.dirs:
            for run_json in sorted(directory.glob("**/run.json")):
                worst = max(worst, recheck(run_json.parent)[1])
        return worst
    if args.command == "summary":
        print(markdown(verdicts(args.dirs)))
        return 0
    if args.all == bool(args.name):
        parser.error("give an experiment name or --all")
    names = list(SUITE) if args.all else [args.name]
    try:
        experiments = [by_name(n) for n in names]
    except KeyError as exc:
        parser.error(str(exc.args[0]))
    if args.nodes < 2:
        parser.error("--nodes must be at least 2")
    worst = 0
    summary: list[str] = []
    for experiment in experiments:
        out = args.out / experiment.name if args.all else args.out
        opts = Options(args.nodes, args.seed, args.duration, args.mode, out, args.base_address, args.backend,
                       args.quiet, args.keep_data, args.attach, args.vmqpy_root, args.via)
        try:
            result, code = run(experiment, opts)
        except HarnessError as exc:
            print(f"{experiment.name}: no verdict: {exc}", file=sys.stderr)
            summary.append(f"{experiment.name:<18} no verdict")
            worst = max(worst, 2)
            continue
        except KeyboardInterrupt:
            stop_all()
            print("interrupted: every node stopped, the network healed", file=sys.stderr)
            return 130
        status = "valid" if result["valid"] else "INVALID: " + ", ".join(result["failed"] or ["errors"])
        summary.append(f"{experiment.name:<18} {status}")
        worst = max(worst, code)
    if len(experiments) > 1:
        print("\n".join(["", "suite:", *summary]), file=sys.stderr)
    return worst


if __name__ == "__main__":
    sys.exit(main())
