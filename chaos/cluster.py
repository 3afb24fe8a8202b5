"""A cluster of real vmqpy node processes (chaos.node): one per loopback address, joined with `vmq-admin`, read
through the HTTP admin API; `build` lays out the nodes of an experiment, `attach` reads a cluster that is already
running. Every process is stopped by its PID (never by name), also when the harness exits on an error or a
signal (`stop_all`)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.errors import HarnessError
from chaos.node import REPO, Node
from chaos.ports import common_port, free_port, host_of, loopback
from chaos.processes import stop_all

__all__ = ["FAKETIME_LIBS", "MODES", "NSS_WRAPPER_LIBS", "REPO", "Cluster", "HarnessError", "Node", "attach",
           "build", "faketime_env", "read_config", "stop_all"]

FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1", "/usr/lib/faketime/libfaketimeMT.so.1")
NSS_WRAPPER_LIBS = ("/usr/lib/x86_64-linux-gnu/libnss_wrapper.so", "/usr/lib/libnss_wrapper.so")
MODES = {"stop-serving": {}, "trade-consistency": {"trade_consistency": "on"},
         "majority": {"cluster.readiness": "majority"}}
JOIN_DEADLINE_S = 40.0
READY_POLL_S = 0.2


def first_existing(paths: tuple[str, ...]) -> str | None:
    return next((p for p in paths if os.path.exists(p)), None)


def all_ready(names: set[str], rows: list[dict[str, Any]]) -> bool:
    """Whether one node's `cluster show` rows list exactly `names`, every one ready and reachable."""
    return {r["Node"] for r in rows} == names and all(r["Ready"] and r["Reachable"] for r in rows)


@dataclass
class Cluster:
    nodes: list[Node]

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def join(self, deadline_s: float = JOIN_DEADLINE_S) -> None:
        """Join every node to the first with the real `vmq-admin cluster join`, then wait until ready."""
        first = self.nodes[0]
        for node in self.nodes[1:]:
            answer = node.admin_cli("cluster", "join", f"discovery-node={first.discovery}")
            if answer.returncode != 0:
                raise HarnessError(f"join of {node.name} failed: {answer.stderr.strip()}\n{node.log_tail()}")
        if not self.wait_ready(deadline_s):
            raise HarnessError(f"the cluster was not ready within {deadline_s}s: {self.views()}")

    def ready(self) -> bool:
        """Every node sees every node, ready and reachable (a node that does not answer: not ready)."""
        names = set(self.names)
        for node in self.nodes:
            try:
                rows = node.api("cluster/show")
            except HarnessError:
                return False
            if not all_ready(names, rows):
                return False
        return True

    def wait_ready(self, deadline_s: float) -> bool:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.ready():
                return True
            time.sleep(READY_POLL_S)
        return False

    def views(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for node in self.nodes:
            try:
                out[node.name] = node.api("cluster/show")
            except HarnessError as exc:
                out[node.name] = str(exc)
        return out

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def faketime_env(clock_file: Path) -> dict[str, str]:
    """The libfaketime settings of a node whose wall clock the nemesis steps: the offset read from `clock_file`
    (re-read every second), monotonic time left alone, and libfaketime's own `pthread_cond_timedwait` for
    monotonic condition variables (its "monotonic fix") off. With that fix on, every timed wait of a thread (the
    storage writer's group commit waits on its queue with a timeout) went through libfaketime's
    re-implementation, which cost a node three times its CPU per connect (185-230 us without the preload, 570-915
    us with it, 265 us with the fix off) and, under an experiment's load, starved the event loop long enough for
    peers to declare it silent: the link flaps of docs/chaos.md finding 4. Timed waits keep their length with the
    fix off, at offsets of -60 s, 0 and +60 s (checked with queue, Event and Lock timeouts)."""
    return {"FAKETIME_TIMESTAMP_FILE": str(clock_file), "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_FORCE_MONOTONIC_FIX": "0"}


def build(workdir: Path, nodes: int, base: str, mode: str, *, proxy: bool, skewable: bool,
          source: Path = REPO) -> Cluster:
    """The nodes of one experiment (not started). With `proxy`, every node's cluster address is the name
    `localhost`, which each node resolves (nss_wrapper) to its own address, where the fault proxy listens on
    every other node's cluster port."""
    hosts = [host_of(base, i) for i in range(nodes)]
    faketime = first_existing(FAKETIME_LIBS)
    nss = first_existing(NSS_WRAPPER_LIBS)
    if skewable and faketime is None:
        raise HarnessError("clock skew needs libfaketime (Debian package libfaketime)")
    if proxy and nss is None:
        raise HarnessError("the fault proxy needs nss_wrapper (Debian package libnss-wrapper)")
    cluster_ports = [common_port(hosts) for _ in hosts]
    out: list[Node] = []
    for i, host in enumerate(hosts):
        node = Node(i, host, free_port(host), free_port(host), cluster_ports[i], workdir / f"n{i + 1}",
                    dict(MODES[mode]), source=source)
        node.workdir.mkdir(parents=True, exist_ok=True)
        preload: list[str] = []
        if skewable and faketime is not None:
            node.skew(0)
            preload.append(faketime)
            node.env.update(faketime_env(node.faketime_file))
        if proxy and nss is not None:
            hosts_file = node.workdir / "hosts"
            hosts_file.write_text(f"{host} localhost\n")
            preload.append(nss)
            node.env["NSS_WRAPPER_HOSTS"] = str(hosts_file)
            node.cluster_host = "localhost"
        if preload:
            node.env["LD_PRELOAD"] = " ".join(preload)
        out.append(node)
    return Cluster(out)


def read_config(path: Path) -> dict[str, str]:
    """`key = value` lines of a node's configuration file (comments and blank lines skipped)."""
    conf: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            key, value = line.split("=", 1)
            conf[key.strip()] = value.strip()
    return conf


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return loopback(host.strip("[]")), int(port)


def attach(directory: Path) -> tuple[Cluster, str]:
    """The running cluster whose node configurations are `directory/*/vmqpy.conf` (the demo's layout), and the
    netsplit mode they are configured for. Its nodes are read and partitioned, never started or stopped."""
    nodes: list[Node] = []
    modes: set[str] = set()
    for i, path in enumerate(sorted(directory.glob("*/vmqpy.conf"))):
        conf = read_config(path)
        try:
            host, mqtt = _address(conf["listener.tcp.default"])
            _, http = _address(conf["listener.http.default"])
            _, cluster_port = _address(conf["listener.vmq.clustering"])
        except (KeyError, ValueError) as exc:
            raise HarnessError(f"{path}: cannot attach to this node: {exc}") from None
        data = Path(conf.get("platform_data_dir", "data"))
        if not data.is_absolute():
            data = next((c for c in (Path.cwd() / data, path.parent / data, REPO / data) if c.exists()), data)
        node = Node(i, host, mqtt, http, cluster_port, path.parent, owned=False,
                    attached_name=conf.get("nodename", f"n{i + 1}@{host}"), attached_data=data)
        nodes.append(node)
        if conf.get("trade_consistency", "off") == "on":
            modes.add("trade-consistency")
        elif conf.get("cluster.readiness", "all") == "majority":
            modes.add("majority")
        else:
            modes.add("stop-serving")
    if len(nodes) < 2:
        raise HarnessError(f"no cluster to attach to in {directory}: expected DIR/NODE/vmqpy.conf for 2 nodes or more")
    mode = modes.pop() if len(modes) == 1 else "mixed"
    return Cluster(nodes), mode
