"""A node started from a vernemq.conf as a VerneMQ operator has one (docs/configuration.md, "Starting from a
vernemq.conf"): VerneMQ's keys start the node, the keys with no meaning here are named in one warning line,
log.console = both writes the file too, and the limits it sets (listener.max_connections,
max_subscriptions_per_client) hold for real clients; a misspelled key still stops the start with its line."""

from __future__ import annotations

import pytest

from tests.integration.clients import RawClient, unique
from tests.integration.conftest import free_port, wait_until
from tests.integration.test_config import Node, nodes, run_start, write_conf  # noqa: F401 (nodes: a fixture)

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("reading a VerneMQ configuration file")]


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


def test_a_stock_vernemq_conf_starts_and_its_limits_hold(tmp_path, nodes):  # noqa: F811
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


def test_the_acl_file_of_a_vernemq_conf_is_enforced(tmp_path, nodes):  # noqa: F811
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
