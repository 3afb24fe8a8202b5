"""What each worker of `vmqpy start --workers N` is: a node of its own, started from the same configuration with a
few keys overridden (`--set`), so that N nodes run on one host as one local cluster behind the MQTT ports of the
configuration (docs/scaling.md, "One command: vmqpy start --workers N").

Worker 1 is the node the configuration describes: its name, data directory, cluster and admin ports, so that a
node that ran alone keeps its sessions and its place in its cluster when it gets workers. Worker i (2..N) is
`NAME-wI@HOST`, with the data directory `DATA_DIR-wI` beside DATA_DIR, the cluster listener and the admin API
(HTTP, HTTPS) on the configured port + i - 1, and `cluster.discovery` naming worker 1 first: it joins worker 1 at
start-up, and the operator sees one cluster of N nodes (`vmq-admin cluster show` on any of them). A log file or a
replication log named in the configuration gets the suffix `-wI` for worker i. Every worker sets
`listener.reuse_port = on`: they all listen on the configured MQTT ports, and the kernel spreads new connections
over them (SO_REUSEPORT).

What a plan refuses (`WorkersRefused`, each with the key to change): a count below 1; no cluster listener
(`listener.vmq.clustering`: the workers must link); a port 0 on the cluster listener or on an MQTT listener
(each worker would be given a port of its own); a port + N - 1 above 65535.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vmqpy import config as config_module

__all__ = ["Worker", "WorkersRefused", "plan"]

MAX_WORKERS = 256


class WorkersRefused(ValueError):
    """The configuration cannot run as workers (the message names the key to change)."""


@dataclass(frozen=True)
class Worker:
    index: int  # 1..N
    nodename: str
    data_dir: Path
    overrides: tuple[str, ...]  # `--set KEY=VALUE` arguments that make the configuration this worker's

    @property
    def is_first(self) -> bool:
        return self.index == 1


def _suffixed(path: Path, index: int) -> Path:
    """`path` with `-wI` before its extension (console.log -> console-w2.log)."""
    return path.with_name(f"{path.stem}-w{index}{path.suffix}")


def _port(key: str, address: tuple[str, int], offset: int) -> str:
    host, port = address
    if port + offset > 65535:
        raise WorkersRefused(f"{key} = {host}:{port}: worker {offset + 1} would need port {port + offset}, "
                             f"above 65535")
    return f"{host}:{port + offset}"


def plan(cfg: config_module.Config, count: int) -> list[Worker]:
    """The `count` workers of `cfg` (see the module doc); WorkersRefused when it cannot run as workers."""
    if not 1 <= count <= MAX_WORKERS:
        raise WorkersRefused(f"--workers {count}: give a count from 1 to {MAX_WORKERS}")
    if cfg.cluster_listener is None:
        raise WorkersRefused("--workers needs listener.vmq.clustering (the workers join as a local cluster): "
                             "set it, e.g. listener.vmq.clustering = 127.0.0.1:44053")
    if cfg.cluster_listener[1] == 0:
        raise WorkersRefused("--workers needs a fixed port on listener.vmq.clustering, not 0 (the workers find "
                             "worker 1 there)")
    for kind, name, host, port in config_module.mqtt_listeners(cfg):
        if port == 0:
            raise WorkersRefused(f"--workers needs a fixed port on listener.{kind}.{name} = {host}:0 (the workers "
                                 f"share the port)")
    base, _, host = cfg.nodename.partition("@")
    first_peer = f"{cfg.nodename}:{cfg.cluster_listener[1]}"
    explicit_log = "log.file" in cfg.sources or "log.console.file" in cfg.sources
    workers = []
    for index in range(1, count + 1):
        offset = index - 1
        overrides = ["listener.reuse_port=on"]
        if index == 1:
            nodename, data_dir = cfg.nodename, cfg.data_dir
        else:
            nodename = f"{base}-w{index}@{host}"
            data_dir = cfg.data_dir.with_name(f"{cfg.data_dir.name}-w{index}")
            overrides += [f"nodename={nodename}", f"platform_data_dir={data_dir}",
                          f"listener.vmq.clustering={_port('listener.vmq.clustering', cfg.cluster_listener, offset)}",
                          "cluster.discovery=" + ",".join([first_peer, *cfg.cluster_discovery])]
            if cfg.http_listener is not None and cfg.http_listener[1] != 0:
                overrides.append(f"listener.http.default={_port('listener.http.default', cfg.http_listener, offset)}")
            if cfg.https_listener is not None and cfg.https_listener[1] != 0:
                overrides.append(
                    f"listener.https.default={_port('listener.https.default', cfg.https_listener, offset)}")
            if explicit_log:
                overrides.append(f"log.file={_suffixed(cfg.log_file, index)}")
            if cfg.replication_log is not None:
                overrides.append(f"metadata.replication_log={_suffixed(cfg.replication_log, index)}")
        workers.append(Worker(index, nodename, data_dir, tuple(overrides)))
    return workers
