"""A node started from a vernemq.conf as a VerneMQ operator has one (docs/configuration.md, "Starting from a
vernemq.conf"): the default files of VerneMQ 1.13 and 2.2 (tests/data, rebuilt from VerneMQ's schemas) start
once their paths, addresses and cookie are adapted, naming the keys with no meaning here in one warning line on
stderr; log.console = both writes the file too, and the limits it sets (listener.max_connections,
max_subscriptions_per_client, topic_max_depth) hold for real clients; a misspelled key still stops the start
with its line."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import zygote
from tests.integration.clients import DISCONNECT, RawClient, unique
from tests.integration.conftest import REPO, free_port, port_open, wait_until
from tests.integration.node_processes import Node, env_for, nodes, run_start, write_conf
from vmqpy import config

STOCK = {"1.13": REPO / "tests" / "data" / "vernemq-1.13.conf", "2": REPO / "tests" / "data" / "vernemq-2.conf"}

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("reading a VerneMQ configuration file")]

__all__ = ["nodes"]  # the fixture this module's tests take


def stock_lines(tmp_path, port: int) -> list[str]:
    """The shape of a stock vernemq.conf: plugin switches, Erlang and LevelDB tuning, VerneMQ's log keys."""
    return [
        "## a vernemq.conf, as VerneMQ's package installs it (abridged)",
        "allow_anonymous = on",
        "allow_register_during_netsplit = off",
        "allow_multiple_sessions = off",
        "coordinate_registrations = on",
        "max_inflight_messages = 20",
        "max_message_rate = 0",
        "upgrade_outgoing_qos = off",
        "retry_interval = 20",
        "systree_enabled = on",
        "systree_interval = 20000",
        "max_subscriptions_per_client = 2",
        "listener.max_connections = 3",
        "listener.nr_of_acceptors = 10",
        f"listener.tcp.default = 127.0.0.1:{port}",
        "listener.mountpoint = off",
        "plugins.vmq_passwd = on",
        "plugins.vmq_acl = off",
        "plugins.vmq_diversity = off",
        "plugins.vmq_webhooks = off",
        "vmq_acl.acl_reload_interval = 10",
        "vmq_passwd.password_reload_interval = 10",
        "log.console = both",
        f"log.console.file = {tmp_path / 'log' / 'console.log'}",
        f"log.error.file = {tmp_path / 'log' / 'error.log'}",
        "log.syslog = off",
        "log.crash = on",
        "leveldb.maximum_memory.percent = 70",
        "erlang.async_threads = 64",
        "erlang.max_ports = 262144",
        "erlang.distribution.port_range.minimum = 6000",
        "metadata_plugin = vmq_swc",
        "graphite_enabled = off",
        "nodename = vmqpy@127.0.0.1",
        f"platform_data_dir = {tmp_path / 'data'}",
        "distributed_cookie = vmq",
    ]


def test_a_stock_vernemq_conf_starts_and_its_limits_hold(tmp_path, nodes):
    port = free_port()
    node = Node(write_conf(tmp_path, stock_lines(tmp_path, port), "vernemq.conf"))
    nodes.append(node)
    node.wait_listening(port)

    warning = [line for line in node.log.read_text().splitlines() if "configuration keys ignored" in line]
    assert len(warning) == 1, node.log.read_text()
    for key in ("leveldb.maximum_memory.percent", "erlang.max_ports", "plugins.vmq_diversity",
                "listener.nr_of_acceptors", "log.error.file"):
        assert key in warning[0], f"{key} not named in {warning[0]}"
    assert "vernemq.conf:" in warning[0], "each ignored key is named with its file and line"

    subscriber = RawClient(port, version=5)
    subscriber.connect(unique("vconf-sub"))
    topics = [unique("vconf/a/"), unique("vconf/b/"), unique("vconf/c/")]
    ack = subscriber.subscribe(*topics, qos=1, check=False)
    assert ack.reason_codes == [1, 1, 0x97], f"the third filter is over the quota of 2: {ack!r}"

    others = [RawClient(port), RawClient(port)]
    for client in others:
        client.connect(unique("vconf-"))
    fourth = RawClient(port)
    fourth.wait_closed(5)  # three connections held: the fourth is closed before anything is read

    others[0].publish(topics[0], b"through", qos=1)
    got = subscriber.recv_publishes(1)
    assert got[0].payload == b"through"
    for client in [subscriber, *others]:
        client.close()

    log_file = tmp_path / "log" / "console.log"
    wait_until(lambda: log_file.exists() and "node started" in log_file.read_text(), 5, what="the log file")
    assert node.stop() == 0
    assert "node started" in node.log.read_text(), "log.console = both: the lines go to stderr as well"


def test_a_misspelled_key_is_refused_with_a_suggestion(tmp_path):
    lines = stock_lines(tmp_path, free_port())
    lines[16] = "plugins.vmq_paswd = on"  # near plugins.vmq_passwd: not taken for an ignored plugins.* key
    conf = write_conf(tmp_path, lines, "vernemq.conf")
    result = run_start(conf)
    assert result.returncode == 2, result.stderr
    assert "vernemq.conf:17" in result.stderr and "plugins.vmq_passwd" in result.stderr, result.stderr


def test_the_acl_file_of_a_vernemq_conf_is_enforced(tmp_path, nodes):
    """plugins.vmq_acl = on with vmq_acl.acl_file: the file is enforced (SUBACK 0x87 outside it)."""
    acl = tmp_path / "vmq.acl"
    acl.write_text("topic read open/#\ntopic write open/#\n")
    port = free_port()
    lines = [line for line in stock_lines(tmp_path, port) if line != "plugins.vmq_acl = off"]
    node = Node(write_conf(tmp_path, [*lines, "plugins.vmq_acl = on", f"vmq_acl.acl_file = {acl}"], "vernemq.conf"))
    nodes.append(node)
    node.wait_listening(port)
    client = RawClient(port, version=5)
    client.connect(unique("vconf-acl-"))
    ack = client.subscribe("open/x", "closed/x", qos=1, check=False)
    assert ack.reason_codes == [1, 0x87], ack
    client.close()


def test_a_bad_acl_line_stops_the_start_naming_file_and_line(tmp_path):
    acl = tmp_path / "vmq.acl"
    acl.write_text("topic read open/#\n# a comment\ntopic raed closed/#\n")
    lines = [*stock_lines(tmp_path, free_port()), "plugins.vmq_acl = on", f"vmq_acl.acl_file = {acl}"]
    result = run_start(write_conf(tmp_path, lines, "vernemq.conf"))
    assert result.returncode == 2, result.stderr
    assert f"{acl}:3:" in result.stderr and "raed" in result.stderr, result.stderr


def adapted(stock: Path, tmp_path: Path, port: int) -> Path:
    """The stock file as an operator adapts it before a first start: the MQTT, admin and cluster addresses, the
    paths that are relative to VerneMQ's installation directory, the data directory and the cookie. Every other
    line stays where it is (so the ignored keys keep their line numbers)."""
    etc, log = tmp_path / "etc", tmp_path / "log"
    etc.mkdir()
    (etc / "vmq.acl").write_text("topic #\n")
    subprocess.run([sys.executable, "-m", "vmqpy", "passwd", str(etc / "vmq.passwd"), "alice", "--password",
                    "secret-pw"], check=True, cwd=str(REPO), env=env_for(), timeout=30)
    values = {
        "listener.tcp.name": f"127.0.0.1:{port}",  # 1.13's MQTT listener, named `name`
        "listener.vmq.clustering": f"127.0.0.1:{free_port()}",
        "listener.http.default": f"127.0.0.1:{free_port()}",
        "vmq_passwd.password_file": str(etc / "vmq.passwd"),
        "vmq_acl.acl_file": str(etc / "vmq.acl"),
        "log.console.file": str(log / "console.log"),
        "distributed_cookie": "a-long-random-secret-0123456789",
    }
    lines = []
    for line in stock.read_text().splitlines():
        key = line.partition(" = ")[0]
        lines.append(f"{key} = {values[key]}" if key in values and not line.startswith("#") else line)
    if not any(line.startswith("listener.tcp.name = ") for line in lines):
        lines.append(f"listener.tcp.default = 127.0.0.1:{port}")  # 2.x writes no MQTT listener
    lines.append(f"platform_data_dir = {tmp_path / 'data'}")
    path = tmp_path / "vernemq.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


class StartedNode:
    """`vmqpy start --config FILE` with stderr kept apart from stdout, stopped (SIGTERM) at the end."""

    def __init__(self, conf: Path):
        self.stderr_path = conf.with_suffix(".stderr")
        self.stderr = open(self.stderr_path, "wb")
        self.proc = zygote.popen([sys.executable, "-m", "vmqpy", "start", "--config", str(conf)],
                                 stdout=subprocess.DEVNULL, stderr=self.stderr, cwd=str(REPO), env=env_for(),
                                 start_new_session=True)

    def wait_listening(self, port: int) -> None:
        wait_until(lambda: port_open(port) or self.proc.poll() is not None, 20, what=f"port {port}")
        assert self.proc.poll() is None, f"node exited {self.proc.returncode}: {self.stderr_path.read_text()}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.stderr.close()


@pytest.fixture
def started():
    running: list[StartedNode] = []
    yield running
    for node in running:
        node.stop()


@pytest.mark.parametrize("version", sorted(STOCK))
def test_a_stock_vernemq_conf_starts(tmp_path, started, version):
    port = free_port()
    conf = adapted(STOCK[version], tmp_path, port)
    node = StartedNode(conf)
    started.append(node)
    node.wait_listening(port)

    client = RawClient(port, version=5)
    client.connect(unique("stock-"), username="alice", password=b"secret-pw")
    topic = unique("stock/")
    client.subscribe(topic, qos=1)
    client.publish(topic, b"served", qos=1)
    assert client.recv_publishes(1)[0].payload == b"served"
    anonymous = RawClient(port, version=5)
    anonymous.connect(unique("anon-"), expect_rc=0x87)  # allow_anonymous = off, as the stock file says
    client.close()
    anonymous.close()

    node.stop()
    stderr = node.stderr_path.read_text().splitlines()
    warnings = [line for line in stderr if "configuration keys ignored" in line]
    assert len(warnings) == 1, stderr
    expected = config.load(conf, environ={}).ignored
    assert len(expected) > 30
    for entry in expected:
        assert entry in warnings[0], f"{entry} not named in {warnings[0]}"
    named = re.findall(r"([\w.*$]+) \(" + re.escape(str(conf)) + r":(\d+)\)", warnings[0])
    assert len(named) == len(expected), warnings[0]
    for key in ("topic_max_depth", "prometheus_namespace", "log.console.rotation.size", "max_inflight_messages"):
        assert f"{key} (" not in warnings[0], f"{key} is read, not ignored"
    log_file = tmp_path / "log" / "console.log"
    assert "node started" in log_file.read_text(), "log.console = file: the log is in log.console.file"


def test_topic_max_depth_holds_for_real_clients(tmp_path, nodes):
    port = free_port()
    lines = [line for line in stock_lines(tmp_path, port) if not line.startswith("max_subscriptions_per_client")]
    node = Node(write_conf(tmp_path, [*lines, "topic_max_depth = 3"], "vernemq.conf"))
    nodes.append(node)
    node.wait_listening(port)

    subscriber = RawClient(port, version=5)
    subscriber.connect(unique("depth-sub"))
    ack = subscriber.subscribe("a/b/c", "a/b/c/d", "a/+/#", "$share/g/a/b/c", "$share/g/a/b/c/d", qos=1,
                               check=False)
    assert ack.reason_codes == [1, 0x8F, 1, 1, 0x8F], ack
    v3 = RawClient(port, version=4)
    v3.connect(unique("depth-v3"))
    assert v3.subscribe("x/y/z/w", qos=1, check=False).reason_codes == [0x80]

    publisher = RawClient(port, version=5)
    publisher.connect(unique("depth-pub"))
    publisher.publish("a/b/c", b"three levels", qos=1)
    assert subscriber.recv_publishes(1)[0].payload == b"three levels"
    publisher.publish("a/b/c/d", b"four levels")
    got = publisher.wait_closed(5)
    assert [(p.type, p.reason_code) for p in got] == [(DISCONNECT, 0x90)], got
    v3.publish("a/b/c/d", b"four levels")
    assert v3.wait_closed(5) == []
    subscriber.assert_silent(0.3)

    will = RawClient(port, version=5)
    ack = will.connect(unique("depth-will"), will={"topic": "w/x/y/z", "payload": b"gone"}, expect_rc=None)
    assert ack.reason_code == 0x90, ack
    subscriber.close()
