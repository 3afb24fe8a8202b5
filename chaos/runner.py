"""One experiment from start to verdict: start the cluster, join it, run the workloads and the nemesis, heal,
wait for the quiet period, read, drain, dump, stop every process, collect the logs, check, write the verdict.

Everything started is undone in `finally` blocks (processes by PID, iptables rules), and SIGTERM is turned into
KeyboardInterrupt so that an interrupted run cleans up the same way."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from chaos import iptables, replog
from chaos.checkers.convergence import check_convergence
from chaos.checkers.outages import check_outages
from chaos.checkers.queues import check_queues
from chaos.checkers.registration import check_registration
from chaos.checkers.result import Check
from chaos.checkers.retained import check_retained
from chaos.checkers.subscriptions import check_subscriptions
from chaos.cluster import REPO, Cluster, HarnessError, attach, build
from chaos.haproxy import Balancer, Server
from chaos.history import Recorder, pair
from chaos.nemesis import Nemesis, Network
from chaos.ports import free_port
from chaos.progress import Progress
from chaos.proxy import ProxyNetwork
from chaos.reads import dumps, final_reads
from chaos.schedule import Experiment, plan
from chaos.verdict import table, verdict
from chaos.via import balanced_listener, balancer_host, effective_via, refusal
from chaos.via import workloads as run_workloads
from chaos.workloads import Context, Endpoint, Workload
from chaos.workloads.queues import Queues
from chaos.workloads.registration import Registration
from chaos.workloads.retained import Retained
from chaos.workloads.roaming import RoamingQueues
from chaos.workloads.steady import PROCESS_PREFIX as STEADY
from chaos.workloads.steady import Steady
from chaos.workloads.subscriptions import Subscriptions

WORKLOADS: dict[str, type[Workload]] = {"subscriptions": Subscriptions, "retained": Retained, "queues": Queues,
                                        "registration": Registration, "steady": Steady,
                                        "queues-roaming": RoamingQueues}
#: How long a run waits after its workload time for the nemesis to finish its steps (a rolling restart whose
#: nodes come back slowly runs past its planned times).
NEMESIS_OVERRUN_S = 240.0


@dataclass(frozen=True)
class Options:
    nodes: int = 3
    seed: int = 1
    duration: float | None = None
    mode: str = "stop-serving"
    out: Path = Path("chaos-runs")
    base: str = "127.0.0.11"
    backend: str = "auto"  # auto (iptables when root), iptables, proxy
    quiet_s: float = 5.0
    keep_data: bool = False
    attach: Path | None = None  # run against the running cluster configured in this directory
    source: Path | None = None  # the vmqpy source tree the nodes run (default: this checkout)
    via: str = "direct"  # direct: clients connect to the nodes; haproxy: only through HAProxy (chaos/via.py)


def choose_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    return "iptables" if iptables.available() is None else "proxy"


def build_info(source: Path) -> dict[str, Any]:
    """The commit the nodes run, and whether the broker's files differ from it (for the record of a run)."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=str(source), capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    return {"source": str(source), "commit": git("rev-parse", "HEAD") or None,
            "vmqpy_modified": bool(git("status", "--porcelain", "--", "vmqpy", "admin"))}


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(experiment: Experiment, opts: Options, log: TextIO = sys.stderr) -> tuple[dict[str, Any], int]:
    """Run one experiment; the verdict and the exit code (0 safe, 1 a safety property failed, 2 no verdict)."""
    out = opts.out
    out.mkdir(parents=True, exist_ok=True)
    duration = experiment.duration if opts.duration is None else opts.duration
    steps = plan(experiment, opts.nodes, opts.seed, duration)
    backend = choose_backend(opts.backend)
    if backend == "iptables" and (why := iptables.available()) is not None:
        raise HarnessError(f"the iptables backend cannot be used: {why} (try --backend proxy)")
    via = effective_via(experiment, opts.via)
    if (why := refusal(experiment, via, opts.attach is not None,
                       Balancer.missing() if via == "haproxy" else None)) is not None:
        raise HarnessError(why)
    opts = replace(opts, via=via)
    workdir = Path(tempfile.mkdtemp(prefix="vmqpy-chaos-"))
    source = (opts.source or REPO).resolve()
    if not (source / "vmqpy" / "__main__.py").is_file():
        raise HarnessError(f"{source} is not a vmqpy source tree (no vmqpy/__main__.py)")
    skewable = any(s.action == "skew" for s in steps)
    mode = opts.mode
    if opts.attach is not None:
        cluster, mode = attach(opts.attach)
        if backend != "iptables":
            raise HarnessError("an attached cluster can only be partitioned with iptables (the proxy needs its own "
                               "node configuration)")
        if any(s.action not in ("cut", "heal") for s in steps):
            raise HarnessError(f"{experiment.name} kills, pauses or skews nodes: an attached cluster only gets "
                               "network faults")
        steps = plan(experiment, len(cluster.nodes), opts.seed, duration)
        opts = replace(opts, mode=mode, nodes=len(cluster.nodes))
    else:
        cluster = build(workdir, opts.nodes, opts.base, opts.mode, proxy=backend == "proxy", skewable=skewable,
                        source=source)
        for node in cluster.nodes:  # the experiment's own node configuration (e.g. queue.replicas)
            node.settings.update(dict(experiment.settings))
    balancer = None
    if via == "haproxy":
        servers = []
        for node in cluster.nodes:
            port = free_port(node.host)
            node.settings.update(balanced_listener(node.host, port))
            servers.append(Server(node.short, node.host, port, node.http_port))
        balancer = Balancer(workdir / "haproxy", servers, proxy_protocol=True,
                            host=balancer_host(opts.base, len(cluster.nodes)))
    network: Network
    if backend == "proxy":
        network = ProxyNetwork([n.host for n in cluster.nodes], [n.cluster_port for n in cluster.nodes],
                               delay_ms=experiment.proxy_delay_ms, loss=experiment.proxy_loss, seed=opts.seed)
    else:
        network = iptables.IptablesNetwork([n.host for n in cluster.nodes])
    meta: dict[str, Any] = {
        "experiment": experiment.name, "description": experiment.description, "mode": opts.mode,
        "seed": opts.seed, "nodes": cluster.names, "backend": backend, "duration_s": duration,
        "via": via, "settings": dict(experiment.settings),
        "quiet_s": opts.quiet_s, "build": build_info(source),
        "schedule": [{"at": s.at, "step": s.describe(cluster.names)} for s in steps],
        "replay": f"python -m chaos run {experiment.name} --nodes {opts.nodes} --seed {opts.seed} "
                  f"--duration {duration:g} --mode {opts.mode} --backend {backend}"
                  + (f" --attach {opts.attach}" if opts.attach is not None else "")
                  + (f" --vmqpy-root {opts.source}" if opts.source is not None else "")
                  + (" --via haproxy" if via == "haproxy" and not experiment.balancer else ""),
    }
    (out / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
    history_path = out / "history.jsonl"
    errors: list[str] = []
    views: dict[str, Any] = {}
    data: dict[str, Any] = {}
    previous = signal.signal(signal.SIGTERM, _sigterm)
    started = time.time()
    try:
        with history_path.open("w", encoding="utf-8") as history_file:
            recorder = Recorder(history_file)
            nemesis = Nemesis(cluster, network, recorder, steps, balancer)
            progress = Progress(lambda: recorder.completed, lambda: nemesis.current, log)
            progress.start()
            try:
                _drive(experiment, opts, duration, cluster, network, recorder, nemesis, progress, views, data,
                       errors)
            finally:
                progress.set_phase("stopping")
                progress.stop()
                recorder.flush()
                try:
                    if balancer is not None:
                        balancer.stop()
                    network.teardown()
                finally:
                    cluster.stop()
                    _collect(cluster, out, views, data)
                    if balancer is not None and balancer.log.exists():
                        shutil.copyfile(balancer.log, out / "haproxy.log")
                    if not opts.keep_data:
                        shutil.rmtree(workdir, ignore_errors=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    meta["started"] = started
    meta["ended"] = time.time()
    meta["heals_ns"] = data.get("heals", [])
    meta["faults_ns"] = data.get("faults", [])
    meta["pids"] = {n.name: n.pids for n in cluster.nodes}
    checks = check_run(out, opts.mode, data)
    result = verdict(meta, checks, errors)
    (out / "verdict.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    log.write(f"\n{experiment.name} ({opts.mode}, seed {opts.seed}, {len(cluster.names)} nodes, {backend})\n")
    log.write(table(checks) + "\n")
    for error in errors:
        log.write(f"error: {error}\n")
    log.write(f"verdict: {'valid' if result['valid'] else 'INVALID'} -> {out / 'verdict.json'}\n")
    if errors and not result["failed"]:
        return result, 2
    return result, 0 if result["valid"] else 1


def _drive(experiment: Experiment, opts: Options, duration: float, cluster: Cluster, network: Network,
           recorder: Recorder, nemesis: Nemesis, progress: Progress, views: dict[str, Any],
           data: dict[str, Any], errors: list[str]) -> None:
    progress.set_phase("cluster")
    if all(node.owned for node in cluster.nodes):
        cluster.start()
        network.setup()
        cluster.join()
    else:
        network.setup()
        if not cluster.wait_ready(30):
            raise HarnessError(f"the attached cluster is not ready: {cluster.views()}")
    views["after_join"] = cluster.views()
    endpoints = [Endpoint(n.name, n.host, n.mqtt_port) for n in cluster.nodes]
    if nemesis.balancer is not None:
        progress.set_phase("haproxy")
        balancer = nemesis.balancer.start()
        endpoints = [Endpoint("haproxy", balancer.host, balancer.port)]
    ctx = Context(recorder, endpoints, opts.seed, locate=lambda client_id: locate_session(cluster, client_id))
    workloads = [WORKLOADS[name]() for name in run_workloads(experiment, opts.via)]
    progress.set_phase("setup")
    for w in workloads:
        w.setup(ctx)
    progress.set_phase("workload")
    t0 = time.monotonic()
    nemesis.start(t0)
    for w in workloads:
        w.start(ctx)
    ctx.stop.wait(duration)
    if any(s.action == "roll" for s in nemesis.steps) and not nemesis.wait_done(NEMESIS_OVERRUN_S):
        errors.append(f"the rolling restart was not over {NEMESIS_OVERRUN_S:.0f} s after the workload time")
    ctx.stop.set()
    nemesis.stop()
    for w in workloads:
        w.join()
    progress.set_phase("heal")
    nemesis.heal_everything()
    data["heals"] = nemesis.heals
    data["faults"] = nemesis.faults
    if not cluster.wait_ready(60):
        errors.append("the cluster was not ready 60 s after the final heal")
    views["after_heal"] = cluster.views()
    progress.set_phase("quiet")
    time.sleep(opts.quiet_s)
    progress.set_phase("read")
    subs, retained = final_reads(cluster, recorder)
    data["subscriptions"], data["retained"] = subs, retained
    progress.set_phase("drain")
    for w in workloads:
        w.finish(ctx)
    progress.set_phase("converge")
    data["dumps"] = dumps(cluster)
    views["end"] = cluster.views()
    data["members"] = cluster.names
    for w in workloads:
        errors.extend(w.errors)
    errors.extend(nemesis.errors)


def locate_session(cluster: Cluster, client_id: str) -> str | None:
    """The node where the cluster says `client_id`'s session lives (`vmq-admin session show`, which answers for
    the whole cluster, asked of each node in turn until one answers; the first node it lists); None when none
    holds it or none answers."""
    for node in cluster.nodes:
        if node.proc is None:
            continue
        answer = node.admin_cli("session", "show", f"--client_id={client_id}", "--node", "--json", timeout=20)
        if answer.returncode != 0:
            continue
        try:
            rows = [r for r in json.loads(answer.stdout) if isinstance(r, dict) and r.get("node")]
        except ValueError:
            continue
        return str(rows[0]["node"]) if rows else None
    return None


_ROTATED = re.compile(r"replication\.log\.(\d+)(\.gz)?")


def replication_logs(directory: Path) -> list[Path]:
    """A node's replication log files in `directory`, oldest first: the rotated ones the node keeps
    (`replication.log.N.gz`, the highest N the oldest; `replication.log.0` not yet compressed), then the live one
    (docs/replication-log.md, "Rotation")."""
    rotated: list[tuple[int, Path]] = []
    if directory.is_dir():
        for path in directory.iterdir():
            match = _ROTATED.fullmatch(path.name)
            if match and path.is_file():
                rotated.append((int(match.group(1)), path))
    live = directory / "replication.log"
    return [p for _i, p in sorted(rotated, key=lambda ip: -ip[0])] + ([live] if live.is_file() else [])


def _log_text(path: Path) -> str:
    """A log file's text; of a compressed file cut short, what decompresses (its last line is then damaged and
    skipped by the checkers, chaos/replog.py)."""
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
        except zlib.error:
            data = b""
    return data.decode(errors="replace")


def _collect(cluster: Cluster, out: Path, views: dict[str, Any], data: dict[str, Any]) -> None:
    """Each node's replication log and node log into OUT/nK/, the views and the dumps into OUT."""
    for node in cluster.nodes:
        target = out / node.short
        target.mkdir(parents=True, exist_ok=True)
        rotated = [(p, p.name) for p in replication_logs(node.data_dir) if p.name != "replication.log"]
        for src, name in ((node.data_dir / "replication.log", "replication.log"), *rotated,
                          (node.log_path, "node.log"), (node.workdir / "vmqpy.conf", "vmqpy.conf")):
            if src.exists():
                shutil.copyfile(src, target / name)
    (out / "views.json").write_text(json.dumps(views, indent=2, default=str) + "\n")
    if "dumps" in data:
        (out / "dumps.json").write_text(json.dumps(data["dumps"], indent=1) + "\n")


def check_run(out: Path, mode: str, data: dict[str, Any]) -> list[Check]:
    """Every checker on what the run left (the history file and the collected logs)."""
    from chaos.history import read

    events, _malformed = read(out / "history.jsonl")
    ops = pair(events)
    read_ops = [op for op in ops if op.f == "read"]
    read_started = min((op.invoked for op in read_ops), default=None)
    log_lines: list[str] = []
    for node_dir in sorted(p for p in out.glob("n*") if p.is_dir()):
        for path in replication_logs(node_dir):
            log_lines.extend(_log_text(path).splitlines())
    traded = mode == "trade-consistency"
    skipped_subscriptions: list[str] = []
    skipped_retained: list[str] = []
    checks = [
        check_subscriptions(ops, data.get("subscriptions", {}),
                            replog.subscription_changes(log_lines, skipped_subscriptions),
                            read_started, consistency_traded=traded),
        check_retained(ops, data.get("retained", {}), replog.retain_writes(log_lines, skipped_retained),
                       read_started, consistency_traded=traded),
        check_queues(ops, loss_allowed=traded, faults=data.get("faults", [])),
        check_registration(ops, data.get("heals", [])),
        check_convergence(data.get("dumps", {}), data.get("members", [])),
    ]
    if any(op.process.startswith(STEADY) for op in ops):  # clients that mean to stay connected
        checks.append(check_outages(ops, STEADY, f"{STEADY}sub"))
    for check, skipped in ((checks[0], skipped_subscriptions), (checks[1], skipped_retained)):
        check.figures["log_lines_skipped"] = len(skipped)  # damaged replication-log lines (chaos/replog.py)
        if skipped:
            check.figures["log_lines_skipped_examples"] = skipped[:5]
    return checks


def recheck(out: Path, log: TextIO = sys.stderr) -> tuple[dict[str, Any], int]:
    """Judge a finished run again from what it left (history, logs, dumps, run.json, verdict.json) with the
    checkers of this version, and rewrite its verdict.json."""
    from chaos.history import read

    meta: dict[str, Any] = json.loads((out / "run.json").read_text())
    previous = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").exists() else {}
    for key in ("started", "ended", "heals_ns", "faults_ns", "pids"):
        if key in previous:
            meta[key] = previous[key]
    events, _ = read(out / "history.jsonl")
    subs: dict[str, Any] = {}
    retained: dict[str, Any] = {}
    for op in pair(events):
        if op.f == "read" and op.acknowledged and isinstance(op.result, dict):
            subs[op.node] = op.result.get("subscriptions", {})
            retained[op.node] = op.result.get("retained", {})
    dumps_path = out / "dumps.json"
    data = {"subscriptions": subs, "retained": retained, "heals": meta.get("heals_ns", []),
            "faults": meta.get("faults_ns", []), "members": meta.get("nodes", []),
            "dumps": json.loads(dumps_path.read_text()) if dumps_path.exists() else {}}
    checks = check_run(out, str(meta.get("mode")), data)
    result = verdict(meta, checks, previous.get("errors", []))
    (out / "verdict.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    log.write(f"{meta.get('experiment')} ({meta.get('mode')}, seed {meta.get('seed')}) rechecked\n")
    log.write(table(checks) + "\n")
    return result, 0 if result["valid"] else 1


def options_dict(opts: Options) -> dict[str, Any]:
    return {k: str(v) for k, v in asdict(opts).items()}
