"""Attaching to a running cluster from its node configurations (the demo's layout), without touching processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cluster import HarnessError, attach, read_config


def _conf(directory: Path, i: int, extra: str = "") -> None:
    node = directory / f"n{i}"
    node.mkdir(parents=True)
    (node / "vmqpy.conf").write_text(
        f"nodename = n{i}@127.0.0.1{i}\n# a comment\nplatform_data_dir = {node}/data\n"
        f"listener.tcp.default = 127.0.0.1{i}:1883\nlistener.http.default = 127.0.0.1{i}:8888\n"
        f"listener.vmq.clustering = 127.0.0.1{i}:44053  # cluster\n{extra}")


def test_attach_reads_names_addresses_and_mode(tmp_path: Path) -> None:
    for i in (1, 2, 3):
        _conf(tmp_path, i, "trade_consistency = on\n")
    cluster, mode = attach(tmp_path)
    assert cluster.names == ["n1@127.0.0.11", "n2@127.0.0.12", "n3@127.0.0.13"]
    assert mode == "trade-consistency"
    node = cluster.nodes[1]
    assert (node.host, node.mqtt_port, node.http_port, node.cluster_port) == ("127.0.0.12", 1883, 8888, 44053)
    assert node.data_dir == tmp_path / "n2" / "data"
    assert read_config(tmp_path / "n1" / "vmqpy.conf")["listener.vmq.clustering"] == "127.0.0.11:44053"


def test_attached_nodes_are_never_signalled_or_stopped(tmp_path: Path) -> None:
    for i in (1, 2):
        _conf(tmp_path, i)
    cluster, mode = attach(tmp_path)
    assert mode == "stop-serving"
    for action in (cluster.nodes[0].kill9, cluster.nodes[0].pause, cluster.nodes[0].start):
        with pytest.raises(HarnessError, match="did not start"):
            action()
    cluster.stop()  # nothing to stop: no error, no signal


def test_attach_needs_two_nodes(tmp_path: Path) -> None:
    _conf(tmp_path, 1)
    with pytest.raises(HarnessError, match="no cluster"):
        attach(tmp_path)
