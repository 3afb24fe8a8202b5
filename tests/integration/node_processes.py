"""vmqpy nodes started as `vmqpy start --config FILE` processes of their own (not through the broker fixture):
the configuration file, the environment, a start expected to fail, and a node stopped by signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import zygote
from tests.integration.conftest import REPO, port_open, wait_until


def base_lines(data_dir: Path, port: int) -> list[str]:
    """The lines of a configuration that starts: a data dir, a TCP listener on `port`, anonymous clients."""
    return [
        "# test config",
        "nodename = vmqpy@127.0.0.1",
        f"platform_data_dir = {data_dir}",
        f"listener.tcp.default = 127.0.0.1:{port}",
        "allow_anonymous = on",
        "log.console = console",
    ]


def env_for(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without any VMQPY_ variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMQPY_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra or {})
    return env


def run_start(conf: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 10.0):
    """Run `vmqpy start` expected to fail fast; a node that wrongly starts is killed at the timeout."""
    cmd = [sys.executable, "-m", "vmqpy", "start", "--config", str(conf), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(REPO),
                          env=env or env_for())


class Node:
    """A vmqpy node started directly (not through the broker fixture), stopped at the end."""

    def __init__(self, conf: Path, *args: str, env: dict[str, str] | None = None):
        self.log = conf.with_suffix(".log")
        self.logf = open(self.log, "wb")
        self.proc = zygote.popen([sys.executable, "-m", "vmqpy", "start", "--config", str(conf), *args],
                                 stdout=self.logf, stderr=subprocess.STDOUT, cwd=str(REPO),
                                 env=env or env_for(), start_new_session=True)

    def wait_listening(self, port: int) -> None:
        wait_until(lambda: port_open(port) or self.proc.poll() is not None, 15, what=f"port {port}")
        assert self.proc.poll() is None, f"node exited {self.proc.returncode}: {self.log.read_text()}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise AssertionError(f"node did not stop within {timeout}s after signal {sig}") from None
        self.logf.close()
        return self.proc.returncode


@pytest.fixture
def nodes():
    """The nodes a test appends here are killed at its end if they still run."""
    started: list[Node] = []
    yield started
    for n in started:
        if n.proc.poll() is None:
            n.proc.kill()
            n.proc.wait(5)
        n.logf.close()


def write_conf(tmp_path: Path, lines: list[str], name: str = "vmqpy.conf") -> Path:
    """`lines` written as the file `tmp_path`/`name`."""
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p
