"""Run whole-cluster histories in a process of their own: `python -m tests.sim.cluster.run [--mutant NAME] SEED...`.

A history is deterministic only when every set of strings iterates in the same order, that is under one
PYTHONHASHSEED: the tests run the histories through `play` (a child process with PYTHONHASHSEED=0), never in
the pytest process. Prints one JSON line per seed: the seed, the problems `check` found, the CPU seconds, the
counts of publishes sent and acknowledged, and (with --trace, or when there are problems) the history and the
clients' events.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).absolute().parents[3]
HASH_SEED = "0"
#: histories per profile in `make test` (about 0.5 s of CPU each); `make test-long` plays 25 times as many
HISTORIES = {"calm": 16, "clocks": 8, "partitions": 10, "crashes": 10, "churn": 10}


@dataclass
class Result:
    seed: int
    problems: list[str]
    cpu: float
    sent: int
    acked: int
    history: str = ""
    trace: list[str] = field(default_factory=list)


def play(seeds: list[int], profile: str = "all", mutant: str | None = None, *, trace: bool = False,
         timeout: float = 900, pure: bool = False) -> list[Result]:
    """The results of `seeds` played in a child process (see the module docstring); `pure`: on the pure modules
    of the core (VMQPY_PURE=1), whatever build the checkout has."""
    command = [sys.executable, "-m", "tests.sim.cluster.run", "--profile", profile, *map(str, seeds)]
    if mutant is not None:
        command += ["--mutant", mutant]
    if trace:
        command.append("--trace")
    env = {**os.environ, "PYTHONHASHSEED": HASH_SEED}
    if pure or mutant is not None:  # a mutant patches Python functions: compiled callers would not see it
        env["VMQPY_PURE"] = "1"
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    results = [Result(**json.loads(line)) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or len(results) != len(seeds):
        raise RuntimeError(f"the simulation process failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return results


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:  # run by hand: start again under the histories' hash seed
        os.execve(sys.executable, [sys.executable, "-m", "tests.sim.cluster.run", *(argv or sys.argv[1:])],
                  {**os.environ, "PYTHONHASHSEED": HASH_SEED})
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("seeds", nargs="+", type=int)
    parser.add_argument("--profile", default="all", help="the faults the histories draw from (histories.PROFILES)")
    parser.add_argument("--mutant", default=None, help="a bug of tests/sim/cluster/mutants.py put back in")
    parser.add_argument("--trace", action="store_true", help="print the history and the events of every seed")
    args = parser.parse_args(argv)
    from .histories import PROFILES, check, generate, simulate
    from .mutants import MUTANTS

    for seed in args.seeds:
        with ExitStack() as stack:
            if args.mutant is not None:
                stack.enter_context(MUTANTS[args.mutant].patch())
            history = generate(seed, faults=PROFILES[args.profile])
            outcome = simulate(history)
        problems = check(outcome)
        result: dict[str, Any] = {
            "seed": seed, "problems": problems, "cpu": round(outcome.cpu, 3), "sent": len(outcome.sent),
            "acked": sum(1 for sent in outcome.sent.values() if sent.acked_at is not None),
        }
        if args.trace or problems:
            result["history"] = str(history)
            result["trace"] = outcome.trace
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
