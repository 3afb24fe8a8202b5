"""One real vmqpy node process on its own loopback address, with its own data directory and MQTT, HTTP admin and
cluster listeners: its configuration file, a start with a deadline, stop by PID, `kill -9`, SIGSTOP/SIGCONT,
libfaketime clock skew, the tail of its log, and the admin API and `vmq-admin` command line against it. The
chaos experiments and the integration tests both run their nodes through it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from chaos import processes, zygote
from chaos.errors import HarnessError
from chaos.ports import listening, port_open
from chaos.zygote import NodeProcess

REPO = Path(__file__).resolve().parents[1]
START_DEADLINE_S = 30.0
#: The payloads in the replication log (off by default since issue 33; the retained checker reads them).
VALUES_KEY = "metadata.replication_log.values"
#: Environment variables a node or `vmq-admin` must not inherit from the harness: vmqpy reads VMQPY_* as
#: settings, vmq-admin VMQ_*; a preload or a fake clock is only what the node's own `env` asks for.
NOT_INHERITED = ("VMQ", "LD_PRELOAD", "FAKETIME")


def inherited_env(drop: tuple[str, ...] = NOT_INHERITED) -> dict[str, str]:
    """The harness's environment without the variables whose names start with one of `drop`."""
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


@dataclass(eq=False)
class Node:
    index: int  # position in the cluster, from 0; the node is named n{index + 1}
    host: str
    mqtt_port: int
    http_port: int
    cluster_port: int
    workdir: Path
    settings: dict[str, str] = field(default_factory=dict)  # configuration keys over the defaults below
    cluster_host: str = ""  # what the node listens on and advertises for the cluster (default: its address)
    env: dict[str, str] = field(default_factory=dict)  # added to the process environment (libfaketime, ...)
    proc: NodeProcess | None = None
    paused: bool = False
    pids: list[int] = field(default_factory=list)  # every process started for this node
    owned: bool = True  # False: a node of an existing cluster (--attach), never started, stopped or signalled
    attached_name: str = ""
    attached_data: Path | None = None
    source: Path = REPO  # the vmqpy source tree the node runs (`--vmqpy-root`)

    @property
    def name(self) -> str:
        return self.attached_name or f"n{self.index + 1}@{self.cluster_host or self.host}"

    @property
    def short(self) -> str:
        return f"n{self.index + 1}"

    @property
    def data_dir(self) -> Path:
        return self.attached_data or self.workdir / "data"

    @property
    def config_path(self) -> Path:
        return self.workdir / "vmqpy.conf"

    @property
    def log_path(self) -> Path:
        return self.workdir / "node.log"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def discovery(self) -> str:
        return f"{self.name}:{self.cluster_port}"

    @property
    def faketime_file(self) -> Path:
        return self.workdir / "faketime.rc"

    def config_text(self) -> str:
        conf = {
            "nodename": self.name,
            "platform_data_dir": str(self.data_dir),
            "listener.tcp.default": f"{self.host}:{self.mqtt_port}",
            "listener.http.default": f"{self.host}:{self.http_port}",
            "listener.vmq.clustering": f"{self.cluster_host or self.host}:{self.cluster_port}",
            "distributed_cookie": "chaos-cookie",
            "cluster.detect_timeout": "1s",
            "metadata.sync_interval": "1s",
            "allow_anonymous": "on",
            "log.console.level": "info",
        }
        if self._knows(VALUES_KEY):  # the retained checker needs the payloads (chaos/replog.py); a tree of
            conf[VALUES_KEY] = "on"  # before the setting logged them always and refuses the key
        conf.update(self.settings)
        return "".join(f"{k} = {v}\n" for k, v in conf.items())

    def _knows(self, key: str) -> bool:
        """The vmqpy tree this node runs declares the configuration key `key`."""
        try:
            return f'"{key}"' in (self.source / "vmqpy" / "config_schema.py").read_text()
        except OSError:
            return False

    def _own(self, what: str) -> None:
        if not self.owned:
            raise HarnessError(f"cannot {what} {self.name}: it belongs to a cluster this harness did not start")

    def start(self, deadline_s: float = START_DEADLINE_S) -> Self:
        """Write the configuration, start the process and wait until its admin API listens, its API key is
        written and its MQTT listener listens. A node that exits or does not get there within `deadline_s` is
        stopped: HarnessError."""
        self._own("start")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text())
        env = inherited_env() | {"PYTHONPATH": str(self.source), "PYTHONUNBUFFERED": "1"} | self.env
        command = [sys.executable, "-m", "vmqpy", "start", "--config", str(self.config_path)]
        self.proc = processes.spawn(command, self.log_path, self.source, env)
        self.pids.append(self.proc.pid)
        self.paused = False
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                self.stop()
                raise HarnessError(f"{self.name} exited at start:\n{self.log_tail()}")
            # The admin API opens before the MQTT listener (vmqpy/node.py): a test that connects a client at once
            # was refused when the node had not opened it yet (a fresh clone's make test, test_metrics).
            if (port_open(self.host, self.http_port) and (self.data_dir / "api.key").exists()
                    and listening(self.host, self.mqtt_port)):
                return self
            time.sleep(0.1)
        self.stop()
        raise HarnessError(f"{self.name} did not listen within {deadline_s}s:\n{self.log_tail()}")

    @property
    def pid(self) -> int | None:
        """The PID of the node's process while it runs."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def signal(self, sig: signal.Signals) -> None:
        pid = self.pid
        if pid is not None:
            os.kill(pid, sig)

    def kill9(self) -> None:
        self._own("kill9")
        if self.proc is None:
            return
        processes.kill(self.proc)
        self.proc = None
        self.paused = False

    def pause(self) -> None:
        self._own("pause")
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self._own("resume")
        self.signal(signal.SIGCONT)
        self.paused = False

    def skew(self, seconds: float) -> None:
        """Offset the node's wall clock (libfaketime reads this file; monotonic time is left alone)."""
        self._own("skew")
        self.faketime_file.write_text(f"{seconds:+.0f}s\n" if seconds else "+0\n")

    def stop(self) -> None:
        """Stop the process by its PID (SIGCONT, SIGTERM, SIGKILL); nothing for a node not started here."""
        if self.proc is None or not self.owned:
            return
        processes.stop(self.proc)
        self.proc = None
        self.paused = False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"

    def api_key(self) -> str:
        return (self.data_dir / "api.key").read_text().strip()

    def api(self, command: str, params: dict[str, str] | None = None, method: str = "GET",
            timeout: float = 10.0) -> Any:
        """One admin API call; the answer's table or text. Raises HarnessError."""
        query = urllib.parse.urlencode(params or {}, safe="/+#$")
        url = f"{self.url}/api/v1/{command}" + (f"?{query}" if query else "")
        try:
            request = urllib.request.Request(url, method=method, headers={"x-api-key": self.api_key()})
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                body = json.loads(answer.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise HarnessError(f"{self.name}: {command}: {exc}") from None
        if body.get("type") == "table":
            return body["table"]
        return body.get("text")

    def admin_cli(self, *args: str, key: str | None = None,
                  timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """The real `vmq-admin` command line against this node (with `key`: that API key, not the node's file)."""
        env = inherited_env(("VMQ", "LD_PRELOAD"))
        env.update({"VMQ_ADMIN_URL": self.url, "VMQ_DATA_DIR": str(self.data_dir), "PYTHONPATH": str(self.source)})
        if key is not None:
            env["VMQ_API_KEY"] = key
        return zygote.run([sys.executable, "-m", "admin.cli.main", *args], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=str(self.source))
