"""Where the CPU of a test run goes: `python -m bench.suite_cpu [--out DIR] -- make test` (or any command that runs
pytest), then a report; `python -m bench.suite_cpu --report DIR` reports a folder again.

While the command runs, every process's CPU time (user + system, /proc/PID/stat) is read twice a second and each
increase is attributed to the pytest-xdist worker the process descends from (the workers' PIDs and a per-test
timeline come from the plugin bench.suite_timeline, which this puts in PYTEST_ADDOPTS) and to a class: the worker's
own Python, node processes (children of the fork server, chaos/zygote.py, which also runs `vmq-admin` calls),
the fork server itself, Spark's JVMs, other Python children by their `-m` module, other programs by name. A process
that starts and ends between two reads is missed; what a process used before its first read is counted at that
read.

The report: the main pass (first test's start to last test's end) with its CPU by class and the cores it kept
busy per 30 s, the CPU and wall time of each test group and of the costliest modules (everything their worker and
its children used while the module ran), and each worker's long modules in order. docs/testing.md, "Where the
time of `make test` goes", quotes one such report."""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")
PERIOD_S = 0.5
PLUGIN = "bench.suite_timeline"


@dataclass
class _Seen:
    start: str  # field 22 of /proc/PID/stat: tells a reused PID from the process it replaced
    cpu: float
    parent: int
    name: str
    command: str


@dataclass
class Sampler:
    """The processes of the machine, read again at each `sample`."""

    folder: Path
    seen: dict[int, _Seen] = field(default_factory=dict)

    def _workers(self) -> dict[int, str]:
        workers = {}
        for path in self.folder.glob("pid-*"):
            try:
                workers[int(path.read_text())] = path.name[4:]
            except (OSError, ValueError):
                continue
        return workers

    def sample(self) -> dict[str, float]:
        """CPU seconds used since the previous sample, keyed `WORKER|CLASS` (WORKER `none` outside the workers)."""
        workers = self._workers()
        used: dict[str, float] = collections.defaultdict(float)
        alive = set()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            name = stat[stat.find("(") + 1:stat.rfind(")")]
            fields = stat[stat.rfind(")") + 2:].split()
            parent, cpu, start = int(fields[1]), (int(fields[11]) + int(fields[12])) / HZ, fields[19]
            alive.add(pid)
            known = self.seen.get(pid)
            if known is None or known.start != start:
                try:
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    command = ""
                known = self.seen[pid] = _Seen(start, 0.0, parent, name, command)
            spent, known.cpu, known.parent = cpu - known.cpu, cpu, parent
            if spent > 0:
                used[f"{self._worker_of(pid, workers)}|{self._class_of(pid, workers)}"] += spent
        for pid in set(self.seen) - alive:
            del self.seen[pid]
        return dict(used)

    def _worker_of(self, pid: int, workers: dict[int, str]) -> str:
        for _ in range(16):
            if pid in workers:
                return workers[pid]
            known = self.seen.get(pid)
            if known is None:
                break
            pid = known.parent
        return "none"

    def _class_of(self, pid: int, workers: dict[int, str]) -> str:
        if pid in workers:
            return "worker"
        known = self.seen[pid]
        if "chaos.zygote" in known.command:
            parent = self.seen.get(known.parent)
            return "node" if parent is not None and "chaos.zygote" in parent.command else "fork server"
        if known.name == "java":
            return "jvm"
        words = known.command.split()
        if "-m" in words[:-1]:
            return f"python -m {words[words.index('-m') + 1]}"
        return known.name


def record(folder: Path, command: list[str]) -> int:
    """Run `command` with the timeline plugin, sampling until it exits; its exit status."""
    env = dict(os.environ)
    env["SUITE_CPU_DIR"] = str(folder)
    env["PYTEST_ADDOPTS"] = f"{env.get('PYTEST_ADDOPTS', '')} -p {PLUGIN}".strip()
    sampler = Sampler(folder)
    sampler.sample()  # what ran before: not this command's
    with (folder / "samples.tsv").open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(command, env=env)
        while proc.poll() is None:
            time.sleep(PERIOD_S)
            used = sampler.sample()
            out.write(f"{time.time():.2f}\t" + "\t".join(f"{k}={v:.3f}" for k, v in sorted(used.items())) + "\n")
            out.flush()
    return proc.returncode


def _group(module: str) -> str:
    parts = module.split("/")
    return parts[1] if len(parts) > 2 else module


def _most(table: dict[str, float], count: int) -> list[tuple[str, float]]:
    return sorted(table.items(), key=lambda item: -item[1])[:count]


def report(folder: Path) -> str:
    """The report (module docstring) of the samples and timelines in `folder`."""
    samples: list[tuple[float, dict[str, float]]] = []
    for line in (folder / "samples.tsv").read_text().splitlines():
        when, *pairs = line.split("\t")
        samples.append((float(when), {k: float(v) for k, v in (p.rsplit("=", 1) for p in pairs if p)}))
    spans: dict[str, list[tuple[str, float, float]]] = {}
    for path in sorted(folder.glob("timeline-*.tsv")):
        modules: list[tuple[str, float, float]] = []
        for line in path.read_text().splitlines():
            began, ended, nodeid = line.split("\t")
            module = nodeid.split("::")[0]
            if modules and modules[-1][0] == module:
                modules[-1] = (module, modules[-1][1], float(ended))
            else:
                modules.append((module, float(began), float(ended)))
        spans[path.stem[len("timeline-"):]] = modules
    workers = {w: m for w, m in spans.items() if w != "main"}
    if not samples or not workers:
        return "no samples or no timeline: was pytest run with xdist workers?"
    first = min(m[0][1] for m in workers.values())
    last = max(m[-1][2] for m in workers.values())
    lines = [f"main pass: {last - first:.0f} s from the first test's start to the last one's end"]
    by_class: dict[str, float] = collections.defaultdict(float)
    busy: dict[int, float] = collections.defaultdict(float)
    for stamp, used in samples:
        if first <= stamp <= last + PERIOD_S:
            for key, spent in used.items():
                by_class[key.split("|", 1)[1]] += spent
            busy[int((stamp - first) // 30)] += sum(used.values())
    lines.append(f"CPU in the main pass: {sum(by_class.values()):.0f} s; by class:")
    lines += [f"  {spent:7.1f}  {name}" for name, spent in _most(by_class, 15)]
    lines.append("cores busy per 30 s: " + " ".join(f"{busy[i] / 30:.2f}" for i in range(max(busy) + 1)))
    module_cpu: dict[str, float] = collections.defaultdict(float)
    module_wall: dict[str, float] = collections.defaultdict(float)
    for worker, modules in workers.items():
        for module, start, end in modules:
            module_wall[module] += end - start
            for stamp, used in samples:
                if start < stamp <= end + PERIOD_S:
                    module_cpu[module] += sum(v for k, v in used.items() if k.startswith(f"{worker}|"))
    groups: dict[str, float] = collections.defaultdict(float)
    for module, spent in module_cpu.items():
        groups[_group(module)] += spent
    lines.append("CPU by test folder: " + ", ".join(f"{g} {s:.0f} s" for g, s in _most(groups, len(groups))))
    lines.append("costliest modules (CPU s, wall s):")
    lines += [f"  {spent:6.1f} {module_wall[m]:6.1f}  {m}" for m, spent in _most(module_cpu, 25)]
    lines.append("long modules per worker (start-end, s from the first test):")
    for worker, modules in sorted(workers.items()):
        long = [f"{Path(m).stem} {s - first:.0f}-{e - first:.0f}" for m, s, e in modules if e - s > 15]
        lines.append(f"  {worker} (ends {modules[-1][2] - first:.0f}): " + ", ".join(long))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="folder for the samples and timelines (default: a new temporary one)")
    parser.add_argument("--report", type=Path, metavar="DIR", help="only report the folder DIR of an earlier run")
    parser.add_argument("command", nargs="*", help="the command to run, after --")
    args = parser.parse_args(argv)
    if args.report is not None:
        print(report(args.report))
        return 0
    if not args.command:
        parser.error("a command to run is needed (after --), or --report DIR")
    folder = args.out or Path(tempfile.mkdtemp(prefix="suite-cpu-"))
    folder.mkdir(parents=True, exist_ok=True)
    status = record(folder, args.command)
    text = report(folder)
    (folder / "report.txt").write_text(text + "\n")
    print(text)
    print(f"(samples and timelines in {folder}; the command exited with {status})")
    return status


if __name__ == "__main__":
    sys.exit(main())
