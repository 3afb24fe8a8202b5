"""`vmqpy start`: configuration errors (exit code 2, FILE:LINE on stderr), precedence file < env < --set,
and clean shutdown on SIGTERM / SIGINT (exit 0, port closed)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.clients import RawClient, unique
from tests.integration.conftest import REPO, free_port, port_open
from tests.integration.node_processes import Node, base_lines, env_for, nodes, run_start, write_conf

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's configuration and command line")]

__all__ = ["nodes"]  # the fixture this module's tests take


def assert_config_error(res, conf: Path, line: int) -> None:
    assert res.returncode == 2, f"exit code {res.returncode}, stderr: {res.stderr!r}"
    pattern = rf"(?:{re.escape(str(conf))}|{re.escape(conf.name)}):{line}\b"
    assert re.search(pattern, res.stderr), f"stderr must name {conf.name}:{line}: {res.stderr!r}"


@pytest.mark.parametrize("bad_line", [
    "no_such_key = 1",
    "max_inflight_messages = lots",
    "listener.tcp.default = nowhere",
    "listener.tcp.default = 127.0.0.1:99999",
    "max_offline_messages = -5",
    "allow_anonymous = perhaps",
    "persistent_client_expiration = soon",
    "log.console = loud",
    "this line has no equals sign",
])
def test_config_error_exit_2_names_file_and_line(tmp_path, bad_line):
    lines = base_lines(tmp_path / "data", free_port())
    lines.insert(3, bad_line)  # line 4 of the file
    conf = write_conf(tmp_path, lines)
    res = run_start(conf)
    assert_config_error(res, conf, 4)


def test_config_error_on_last_line_after_comments(tmp_path):
    lines = [*base_lines(tmp_path / "data", free_port()), "", "# a comment", "   ", "max_message_size = big"]
    conf = write_conf(tmp_path, lines, "other-name.conf")
    res = run_start(conf)
    assert_config_error(res, conf, len(lines))


def test_missing_config_file_is_an_error(tmp_path):
    # the --set flags keep a wrongly started node contained (local port, data dir under tmp_path)
    res = run_start(tmp_path / "does-not-exist.conf", "--set", f"platform_data_dir={tmp_path / 'data'}",
                    "--set", f"listener.tcp.default=127.0.0.1:{free_port()}")
    assert res.returncode != 0
    assert "does-not-exist.conf" in res.stderr, res.stderr


def test_bad_env_value_exit_2(tmp_path):
    conf = write_conf(tmp_path, base_lines(tmp_path / "data", free_port()))
    res = run_start(conf, env=env_for({"VMQPY_MAX_INFLIGHT_MESSAGES": "lots"}))
    assert res.returncode == 2, res.stderr
    assert "VMQPY_MAX_INFLIGHT_MESSAGES" in res.stderr, res.stderr


def test_bad_set_flag_exit_2(tmp_path):
    conf = write_conf(tmp_path, base_lines(tmp_path / "data", free_port()))
    res = run_start(conf, "--set", "max_inflight_messages=lots")
    assert res.returncode == 2, res.stderr
    assert "max_inflight_messages" in res.stderr, res.stderr
    res = run_start(conf, "--set", "no_such_key=1")
    assert res.returncode == 2, res.stderr
    assert "no_such_key" in res.stderr, res.stderr


def test_inline_comments_and_blank_lines_accepted(tmp_path, nodes):
    port = free_port()
    lines = [
        "",
        "# full-line comment",
        f"platform_data_dir = {tmp_path / 'data'}          # the node's data dir",
        f"listener.tcp.default = 127.0.0.1:{port}   # listener",
        "allow_anonymous = on",
        "max_inflight_messages = 20               # receive maximum",
        "persistent_client_expiration = never",
        "",
    ]
    n = Node(write_conf(tmp_path, lines))
    nodes.append(n)
    n.wait_listening(port)
    c = RawClient(port)
    c.connect(unique("cfg-"))
    c.close()
    assert n.stop() == 0


def test_env_overrides_file_and_set_overrides_env(tmp_path, nodes):
    file_port, env_port, set_port = free_port(), free_port(), free_port()
    conf = write_conf(tmp_path, base_lines(tmp_path / "data", file_port))
    n = Node(conf, env=env_for({"VMQPY_LISTENER__TCP__DEFAULT": f"127.0.0.1:{env_port}"}))
    nodes.append(n)
    n.wait_listening(env_port)
    assert not port_open(file_port), "the environment variable must override the file"
    assert n.stop() == 0

    n = Node(conf, "--set", f"listener.tcp.default=127.0.0.1:{set_port}",
             env=env_for({"VMQPY_LISTENER__TCP__DEFAULT": f"127.0.0.1:{env_port}"}))
    nodes.append(n)
    n.wait_listening(set_port)
    assert not port_open(env_port) and not port_open(file_port), "--set must override env and file"
    assert n.stop() == 0


def test_env_override_changes_behaviour(tmp_path, nodes):
    """VMQPY_MAX_INFLIGHT_MESSAGES=2 beats the file's 7: a subscriber that does not acknowledge gets exactly
    2 QoS 1 messages in flight."""
    port = free_port()
    conf = write_conf(tmp_path, [*base_lines(tmp_path / "data", port), "max_inflight_messages = 7"])
    n = Node(conf, env=env_for({"VMQPY_MAX_INFLIGHT_MESSAGES": "2"}))
    nodes.append(n)
    n.wait_listening(port)
    sub, pub = RawClient(port), RawClient(port)
    try:
        sub.connect(unique("envsub-"))
        sub.subscribe("env/x", qos=1)
        pub.connect(unique("envpub-"))
        for i in range(5):
            pub.publish("env/x", f"{i}", qos=1)
        got = sub.recv_publishes(2, ack=False)
        sub.assert_silent(0.5)
        assert [p.payload for p in got] == [b"0", b"1"]
    finally:
        sub.close()
        pub.close()
    assert n.stop() == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_cleanly_and_closes_port(tmp_path, nodes, sig):
    port = free_port()
    n = Node(write_conf(tmp_path, base_lines(tmp_path / "data", port)))
    nodes.append(n)
    n.wait_listening(port)
    c = RawClient(port)
    c.connect(unique("sig-"))  # a connected client must not prevent the shutdown
    rc = n.stop(sig)
    assert rc == 0, f"exit code {rc} after {sig!r}: {n.log.read_text()[-2000:]}"
    assert not port_open(port), "port still accepting after the node exited"
    c.close()


def test_data_dir_created_and_used(tmp_path, nodes):
    port = free_port()
    data = tmp_path / "nested" / "data"
    n = Node(write_conf(tmp_path, base_lines(data, port)))
    nodes.append(n)
    n.wait_listening(port)
    c = RawClient(port)
    c.connect(unique("dd-"), clean=False)
    c.subscribe("dd/x", qos=1)
    c.close()
    assert n.stop() == 0
    assert data.is_dir() and any(data.iterdir()), f"nothing written to {data}"


def test_config_error_does_not_listen(tmp_path):
    port = free_port()
    lines = [*base_lines(tmp_path / "data", port), "max_inflight_messages = lots"]
    res = run_start(write_conf(tmp_path, lines))
    assert res.returncode == 2
    assert not port_open(port)


BAD_LINES = [
    "nodename = nohost",
    "max_inflight_messages = lots",
    "# a comment",
    "max_inflight = 3",
    "just words",
    "listener.ssl.ciphers = ECDHE-RSA-AES256-GCM-SHA384",
    "erlang.max_ports = 65536",
]


def run_check(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vmqpy", "config", "check", str(conf), *args], capture_output=True,
                          text=True, timeout=30, cwd=str(REPO), env=env_for())


def test_config_check_reports_every_problem_at_once(tmp_path):
    conf = write_conf(tmp_path, [*base_lines(tmp_path / "data", free_port()), *BAD_LINES])
    result = run_check(conf)
    assert result.returncode == 2, result.stdout
    errors = [line for line in result.stdout.splitlines() if line.startswith("error: ")]
    assert [line.split(": ")[1] for line in errors] == [f"{conf}:{n}" for n in (7, 8, 10, 11, 12)], errors
    assert "did you mean 'max_inflight_messages'" in errors[2]
    assert "VerneMQ's listener option ciphers is not supported" in errors[4]
    assert result.stdout.splitlines()[-1] == f"{conf}: 5 errors, 0 keys ignored: the node would not start"


def test_config_check_reports_every_file_the_configuration_names_that_cannot_be_used(tmp_path):
    """Once the keys are right, the files they name are read as the start reads them: all problems at once."""
    conf = write_conf(tmp_path, [*base_lines(tmp_path / "data", free_port()),
                                 f"password_file = {tmp_path / 'absent.passwd'}",
                                 f"acl_file = {tmp_path / 'absent.acl'}",
                                 f"listener.vmq.clustering = 127.0.0.1:{free_port()}", "distributed_cookie = vmq"])
    result = run_check(conf)
    assert result.returncode == 2, result.stdout
    errors = [line for line in result.stdout.splitlines() if line.startswith("error: ")]
    assert [line.split(": ")[1] for line in errors] == [f"{conf}:{n}" for n in (7, 8, 9)], errors
    assert "absent.passwd: cannot read the password file" in errors[0]
    assert "absent.acl: cannot read the ACL file" in errors[1]
    assert "distributed_cookie is the public default" in errors[2]


def test_config_check_of_a_good_file_names_the_ignored_keys_and_exits_0(tmp_path):
    conf = write_conf(tmp_path, [*base_lines(tmp_path / "data", free_port()), "erlang.max_ports = 65536",
                                 "topic_max_depth = 12"])
    result = run_check(conf)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"ignored: erlang.max_ports ({conf}:7): Erlang VM tuning (schedulers, ports, distribution buffers): vmqpy "
        "is a Python process",
        f"{conf}: 0 errors, 1 key ignored: the node would start",
    ]
    assert not (tmp_path / "data").exists(), "a check starts nothing and writes nothing"


def test_config_check_takes_the_overrides_start_takes(tmp_path):
    conf = write_conf(tmp_path, base_lines(tmp_path / "data", free_port()))
    assert run_check(conf, "--set", "max_inflight_messages=0").returncode == 2
    assert run_check(conf, "--set", "max_inflight_messages=5").returncode == 0


def test_start_reports_every_problem_of_the_file_at_once(tmp_path):
    conf = write_conf(tmp_path, [*base_lines(tmp_path / "data", free_port()), *BAD_LINES])
    result = run_start(conf)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert [line.split(": ")[2] for line in lines] == [f"{conf}:{n}" for n in (7, 8, 10, 11, 12)], lines
    assert all(line.startswith("vmqpy: config error: ") for line in lines), lines
