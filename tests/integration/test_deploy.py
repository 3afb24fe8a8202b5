"""The deployment files as shipped (docs/operations.md, "Deployment"):

- deploy/systemd/vmqpy.service passes `systemd-analyze verify` (and its hardening scores as systemd's "OK"), its
  ExecStart line starts a real node, and the node sends READY=1 to `$NOTIFY_SOCKET` once its MQTT port listens
  and STOPPING=1 when SIGTERM stops it (what `Type=notify` waits for);
- deploy/haproxy/haproxy.cfg starts as shipped (only the addresses and the stats socket's path replaced) under the
  documented descriptor limit, takes that many connections in its frontend, and brings an MQTT client to a real
  node; the `maxconn` it shipped before could not start there.
"""

from __future__ import annotations

import csv
import io
import os
import pwd
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.processes import spawn, stop
from tests.integration.clients import PahoClient
from tests.integration.conftest import HOST, REPO, free_port, port_open, vmqpy_config_text, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("the vmqpy deployment files")]

UNIT = REPO / "deploy" / "systemd" / "vmqpy.service"
HAPROXY_CFG = REPO / "deploy" / "haproxy" / "haproxy.cfg"
HAPROXY = Path("/usr/sbin/haproxy")
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
VMQPY = Path(sys.executable).parent / "vmqpy"  # the console script `pip install` made, as ExecStart names it
#: The descriptor limit HAProxy's shipped maxconn is planned for (docs/deployment.md, "Descriptors").
DESCRIPTOR_LIMIT = 20_000
#: systemd-analyze security's exposure score (0 best, 10 worst) the unit must stay within: below 2 is "OK".
MAX_EXPOSURE = 2.0


def unit_setting(name: str) -> list[str]:
    """The values of `name=` in the shipped unit."""
    return [line.split("=", 1)[1] for line in UNIT.read_text().splitlines() if line.startswith(f"{name}=")]


def local_unit(tmp_path: Path) -> Path:
    """The shipped unit with ExecStart's program replaced by this checkout's `vmqpy` (verify requires it to
    exist); the rest unchanged."""
    shipped = UNIT.read_text()
    [exec_start] = unit_setting("ExecStart")
    program = shlex.split(exec_start)[0]
    local = tmp_path / "vmqpy.service"
    local.write_text(shipped.replace(f"ExecStart={program} ", f"ExecStart={VMQPY} ", 1))
    changed = [a for a, b in zip(shipped.splitlines(), local.read_text().splitlines(), strict=True) if a != b]
    assert len(changed) == 1 and changed[0].startswith("ExecStart="), changed
    return local


# -- systemd --------------------------------------------------------------------------------------------------------
@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (Debian package systemd)")
def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    assert SYSTEMD_ANALYZE is not None
    local = local_unit(tmp_path)
    verify = subprocess.run([SYSTEMD_ANALYZE, "verify", str(local)], capture_output=True, text=True, timeout=60)
    # verify also loads the units this one names (network-online.target, ...): only its own lines count
    own = [line for line in (verify.stdout + verify.stderr).splitlines() if "vmqpy" in line]
    assert verify.returncode == 0 and own == [], verify.stdout + verify.stderr
    security = subprocess.run([SYSTEMD_ANALYZE, "security", "--offline=yes", "--no-pager", str(local)],
                              capture_output=True, text=True, timeout=60)
    found = re.search(r"Overall exposure level for vmqpy\.service: (\d+\.\d+)", security.stdout + security.stderr)
    assert found, security.stdout + security.stderr
    assert float(found.group(1)) <= MAX_EXPOSURE, security.stdout


def test_the_unit_matches_the_docs() -> None:
    assert unit_setting("Type") == ["notify"] and unit_setting("Restart") == ["on-failure"]
    assert unit_setting("User") == ["vmqpy"]
    [limit] = unit_setting("LimitNOFILE")
    operations = (REPO / "docs" / "operations.md").read_text()
    assert f"LimitNOFILE={limit}" in operations, "docs/operations.md names another descriptor limit for the unit"
    [exec_start] = unit_setting("ExecStart")
    assert shlex.split(exec_start)[1:] == ["start", "--config", "/etc/vmqpy/vmqpy.conf"]


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, Path]]:
    """A datagram socket where systemd's would be, as `$NOTIFY_SOCKET` names it."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.setblocking(False)
        yield sock, path


def receive(sock: socket.socket, proc: subprocess.Popen[bytes], timeout: float) -> dict[str, str]:
    """The next notification, as assignments; polls (the node must stay alive) until `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            payload = sock.recv(4096)
        except BlockingIOError:
            assert proc.poll() is None or proc.returncode == 0, f"the node exited with {proc.returncode}"
            time.sleep(0.02)
            continue
        return dict(line.split("=", 1) for line in payload.decode().split("\n"))
    raise AssertionError(f"no notification within {timeout}s")


def test_the_node_notifies_ready_once_its_mqtt_port_listens_and_stopping_at_sigterm(
        tmp_path: Path, notify_socket: tuple[socket.socket, Path]) -> None:
    sock, path = notify_socket
    port, http_port = free_port(), free_port()
    config = tmp_path / "vmqpy.conf"
    config.write_text(vmqpy_config_text(port, tmp_path / "data", {"listener.http.default": f"{HOST}:{http_port}"}))
    [exec_start] = unit_setting("ExecStart")
    command = [str(VMQPY), *(str(config) if arg == "/etc/vmqpy/vmqpy.conf" else arg
                             for arg in shlex.split(exec_start)[1:])]
    env = {**os.environ, "NOTIFY_SOCKET": str(path), "PYTHONPATH": str(REPO)}
    proc = spawn(command, tmp_path / "node.log", REPO, env)
    try:
        ready = receive(sock, proc, 30)
        listening = port_open(port) and port_open(http_port, HOST)  # right when READY=1 arrives
        assert ready["READY"] == "1" and "started" in ready["STATUS"], ready
        assert listening, "READY=1 came before the node's ports listened"
        client = PahoClient(port, 5, "notify-check")
        try:
            client.connect()
        finally:
            client.client.disconnect()
            client.stop()
        proc.send_signal(signal.SIGTERM)
        stopping = receive(sock, proc, 30)
        assert stopping["STOPPING"] == "1", stopping
        assert proc.wait(30) == 0
    finally:
        stop(proc)


# -- HAProxy --------------------------------------------------------------------------------------------------------
def haproxy_missing() -> str | None:
    if not HAPROXY.exists():
        return f"HAProxy is not installed ({HAPROXY}; scripts/debian-deps.sh)"
    if os.geteuid() != 0:
        return "the shipped file chroots and changes user: HAProxy must start as root (as its service does)"
    try:
        pwd.getpwnam("haproxy")
    except KeyError:
        return "no user haproxy (the Debian package makes it)"
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < DESCRIPTOR_LIMIT:
        return f"this process's hard descriptor limit {hard} is below {DESCRIPTOR_LIMIT}"
    return None


def with_addresses(shipped: str, bind: tuple[str, int], servers: list[tuple[int, int]], stats: Path) -> str:
    """The shipped file with its bind address, its servers' addresses (MQTT port, admin port) and the stats
    socket's path replaced; every other line as shipped."""
    out, server_lines = [], iter(servers)
    for line in shipped.splitlines():
        words = line.split()
        if words[:1] == ["bind"]:
            line = f"    bind {bind[0]}:{bind[1]}"
        elif words[:1] == ["server"]:
            mqtt, admin = next(server_lines)
            line = f"    server {words[1]} {HOST}:{mqtt} check port {admin}"
        elif words[:2] == ["stats", "socket"]:
            line = line.replace(words[2], str(stats))
        out.append(line)
    return "\n".join(out) + "\n"


def runtime_api(stats: Path, command: str) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(stats))
        sock.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def stat_rows(stats: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(runtime_api(stats, "show stat").lstrip("# "))))


def limited(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def start_haproxy(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """HAProxy in the foreground (`-db`: what a service manager runs) under the documented descriptor limit."""
    with log.open("ab") as out:
        return subprocess.Popen([str(HAPROXY), "-db", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=lambda: limited(DESCRIPTOR_LIMIT))


def stop_by_pid(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_the_shipped_haproxy_config_starts_under_the_documented_descriptor_limit(broker_factory: Any,
                                                                                  tmp_path: Path) -> None:
    if (why := haproxy_missing()) is not None:
        pytest.skip(why)
    http_port = free_port()
    node = broker_factory(**{"listener.tcp.default.proxy_protocol": "on",
                             "listener.http.default": f"{HOST}:{http_port}"})
    shipped = HAPROXY_CFG.read_text()
    [maxconn] = [int(line.split()[1]) for line in shipped.splitlines() if line.split()[:1] == ["maxconn"]]
    assert 2 * maxconn + 100 <= DESCRIPTOR_LIMIT, "the comment's arithmetic: 2 x maxconn + HAProxy's own"
    documented = (REPO / "docs" / "deployment.md").read_text()
    assert f"{DESCRIPTOR_LIMIT:,}" in shipped and f"{DESCRIPTOR_LIMIT:,}" in documented
    bind = (HOST, free_port())
    stats = tmp_path / "haproxy.sock"
    # n1 the real node; n2 and n3 addresses where nothing listens (they stay DOWN)
    servers = [(node.port, http_port), (free_port(), free_port()), (free_port(), free_port())]
    config = tmp_path / "haproxy.cfg"
    config.write_text(with_addresses(shipped, bind, servers, stats))
    check = subprocess.run([str(HAPROXY), "-c", "-f", str(config)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    proc = start_haproxy(config, tmp_path / "haproxy.log")
    try:
        wait_until(lambda: proc.poll() is not None or (port_open(bind[1], bind[0]) and stats.exists()), 15,
                   what="HAProxy listening")
        assert proc.poll() is None, (tmp_path / "haproxy.log").read_text()
        info = dict(line.split(": ", 1) for line in runtime_api(stats, "show info").splitlines() if ": " in line)
        assert int(info["Maxconn"]) == maxconn and int(info["Maxsock"]) <= DESCRIPTOR_LIMIT, info
        [frontend] = [r for r in stat_rows(stats) if r["pxname"] == "mqtt_in" and r["svname"] == "FRONTEND"]
        assert int(frontend["slim"]) == maxconn, frontend  # the frontend is not capped lower by a default
        wait_until(lambda: any(r["svname"] == "n1" and r["status"].startswith("UP") for r in stat_rows(stats)),
                   15, what="n1 UP in HAProxy")
        client = PahoClient(bind[1], 5, "through-haproxy", host=bind[0])
        try:
            client.connect()
        finally:
            client.client.disconnect()
            client.stop()
    finally:
        stop_by_pid(proc)

    # the control: the maxconn shipped before (100,000) cannot start under the same limit
    before = tmp_path / "haproxy-100000.cfg"
    before.write_text(re.sub(r"(?m)^    maxconn \d+$", "    maxconn 100000", config.read_text()))
    old = start_haproxy(before, tmp_path / "haproxy-100000.log")
    try:
        assert old.wait(15) != 0
    finally:
        stop_by_pid(old)
    assert "Cannot raise FD limit" in (tmp_path / "haproxy-100000.log").read_text()
