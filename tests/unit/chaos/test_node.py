"""A node's configuration and names, and readiness read from `cluster show` rows (no process is started)."""

from __future__ import annotations

from pathlib import Path

from chaos.cluster import all_ready, read_config
from chaos.node import Node


def _node(tmp_path: Path, settings: dict[str, str] | None = None, cluster_host: str = "") -> Node:
    return Node(1, "127.0.0.12", 1883, 8888, 44053, tmp_path / "n2", settings or {}, cluster_host)


def test_a_node_is_named_by_its_position_from_one_and_its_address(tmp_path: Path) -> None:
    node = _node(tmp_path)
    assert (node.name, node.short, node.discovery) == ("n2@127.0.0.12", "n2", "n2@127.0.0.12:44053")
    assert node.url == "http://127.0.0.12:8888"
    assert (node.data_dir, node.config_path, node.log_path) == (
        tmp_path / "n2" / "data", tmp_path / "n2" / "vmqpy.conf", tmp_path / "n2" / "node.log")


def test_the_configuration_puts_every_listener_on_the_nodes_address_and_settings_win(tmp_path: Path) -> None:
    node = _node(tmp_path, settings={"distributed_cookie": "test-cookie", "cluster.readiness": "majority"})
    (tmp_path / "n2").mkdir()
    node.config_path.write_text(node.config_text())
    conf = read_config(node.config_path)
    assert conf["nodename"] == "n2@127.0.0.12"
    assert conf["listener.tcp.default"] == "127.0.0.12:1883"
    assert conf["listener.http.default"] == "127.0.0.12:8888"
    assert conf["listener.vmq.clustering"] == "127.0.0.12:44053"
    assert conf["platform_data_dir"] == str(tmp_path / "n2" / "data")
    assert (conf["distributed_cookie"], conf["cluster.readiness"]) == ("test-cookie", "majority")


def test_behind_the_proxy_a_node_listens_and_is_named_on_localhost(tmp_path: Path) -> None:
    node = _node(tmp_path, cluster_host="localhost")
    assert node.name == "n2@localhost"
    assert "listener.vmq.clustering = localhost:44053\n" in node.config_text()
    assert "listener.tcp.default = 127.0.0.12:1883\n" in node.config_text()


def test_a_node_not_started_has_no_pid_and_stopping_it_does_nothing(tmp_path: Path) -> None:
    node = _node(tmp_path)
    node.stop()
    node.kill9()
    assert node.pid is None and node.proc is None and node.log_tail() == "<no log>"


def _row(name: str, ready: bool = True, reachable: bool = True) -> dict[str, object]:
    return {"Node": name, "Ready": ready, "Reachable": reachable}


def test_ready_means_exactly_these_nodes_all_ready_and_reachable() -> None:
    names = {"n1@127.0.0.11", "n2@127.0.0.12"}
    assert all_ready(names, [_row("n1@127.0.0.11"), _row("n2@127.0.0.12")])
    assert not all_ready(names, [_row("n1@127.0.0.11")])
    assert not all_ready(names, [_row("n1@127.0.0.11"), _row("n2@127.0.0.12"), _row("n3@127.0.0.13")])
    assert not all_ready(names, [_row("n1@127.0.0.11"), _row("n2@127.0.0.12", reachable=False)])
    assert not all_ready(names, [_row("n1@127.0.0.11", ready=False), _row("n2@127.0.0.12")])


def test_the_replication_log_keeps_values_for_the_retained_checker_when_the_tree_knows_the_key(
        tmp_path: Path) -> None:
    """Payloads are off the replication log by default (issue 33); the retained checker reads them, so a chaos
    node turns them on, unless it runs a vmqpy tree from before the setting (which refuses unknown keys)."""
    node = _node(tmp_path)
    assert "metadata.replication_log.values = on\n" in node.config_text()
    old = tmp_path / "old"
    (old / "vmqpy").mkdir(parents=True)
    (old / "vmqpy" / "config_schema.py").write_text('"metadata.replication_log": 1\n')
    node.source = old
    assert "metadata.replication_log.values" not in node.config_text()
