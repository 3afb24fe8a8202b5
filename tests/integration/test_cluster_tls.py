"""Cluster links over TLS (`cluster.tls.cafile/certfile/keyfile`) between real node processes: three nodes join,
route, see a partition and heal; a node whose certificate comes from another CA never links (and it is logged);
a file that cannot be used stops the start with exit code 2; SIGHUP reloads and never stops a node.
Certificates are made here with trustme; nothing with a private key is checked in."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from chaos.ports import free_port
from tests.integration.clients import unique
from tests.integration.cluster import ClusterNode, cluster_ready, cut, heal, partition_chain, start_cluster
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy clustering")]


def tls_keys(directory: Path, ca: trustme.CA, name: str, trusted: trustme.CA | None = None) -> dict[str, str]:
    """The cluster.tls.* keys of one node: a certificate from `ca`, the CA it trusts (`trusted`, default `ca`)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert = ca.issue_cert(name)
    paths = {option: directory / f"{option}.pem" for option in ("cafile", "certfile", "keyfile")}
    (trusted or ca).cert_pem.write_to_path(str(paths["cafile"]))
    cert.cert_chain_pems[0].write_to_path(str(paths["certfile"]))
    cert.private_key_pem.write_to_path(str(paths["keyfile"]))
    return {f"cluster.tls.{option}": str(path) for option, path in paths.items()}


def view(node: ClusterNode) -> dict[str, dict[str, Any]]:
    return {row["Node"]: row for row in node.show()}


@pytest.fixture
def tls_cluster(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    ca = trustme.CA()
    # start_cluster gives every node the same extra keys: one certificate for the three (all from the cluster CA)
    nodes = start_cluster(tmp_path, tls_keys(tmp_path / "certs", ca, "vmqpy-cluster"))
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def test_three_nodes_link_over_tls_route_and_heal_a_partition(tls_cluster: list[ClusterNode]) -> None:
    n1, n2, n3 = tls_cluster
    for node in tls_cluster:
        log = node.log.read_text(errors="replace")
        assert "cluster listener started" in log and "tls=True" in log
    # routes across nodes
    topic = unique("tls/route/")
    subscriber = n3.client(5, unique("sub-"))
    subscriber.subscribe(topic, qos=1)
    wait_until(lambda: topic in n1.admin("subscription", "show", "--json").stdout, 10, interval=0.2,
               what="the subscription replicated to n1")
    n1.client(5, unique("pub-")).publish(topic, b"over tls", qos=1)
    (message,) = subscriber.collect(1, 10)
    assert message.payload == b"over tls"
    if shutil.which("iptables") is None:
        pytest.skip("iptables is installed by make test: the partition half needs it")
    with partition_chain():
        cut(n1, n3)
        wait_until(lambda: not view(n1)[n3.name]["Reachable"], 5, interval=0.1, what="n1 sees n3 unreachable")
        wait_until(lambda: not view(n3)[n1.name]["Reachable"], 5, interval=0.1, what="n3 sees n1 unreachable")
        assert view(n2)[n1.name]["Reachable"] and view(n2)[n3.name]["Reachable"]
        heal()
        wait_until(lambda: cluster_ready(tls_cluster), 15, interval=0.2, what="every node ready after the heal")
    # and routes again over the new TLS links
    n1.client(5, unique("pub-")).publish(topic, b"after the heal", qos=1)
    (message,) = subscriber.collect(1, 10)
    assert message.payload == b"after the heal"


def test_a_node_with_a_certificate_from_another_ca_never_links(tmp_path: Path) -> None:
    ca, rogue_ca = trustme.CA(), trustme.CA()
    good = ClusterNode(4, tmp_path, tls_keys(tmp_path / "good", ca, "good")).start()
    # the rogue node trusts the cluster's CA and knows the cookie: only its certificate is wrong
    rogue = ClusterNode(5, tmp_path, tls_keys(tmp_path / "rogue", rogue_ca, "rogue", trusted=ca)).start()
    try:
        answer = rogue.admin("cluster", "join", f"discovery-node={good.discovery}")
        assert answer.returncode != 0, answer.stdout
        wait_until(lambda: "cluster TLS handshake failed, connection refused" in good.log.read_text(errors="replace"),
                   10, what="the good node logs the refused handshake")
        line = next(line for line in good.log.read_text(errors="replace").splitlines()
                    if "cluster TLS handshake failed" in line)
        assert "warning" in line and f"remote={rogue.host}:" in line
        assert [r["Node"] for r in good.show()] == [good.name]
        assert "cluster link up" not in good.log.read_text(errors="replace")
        assert "cluster link up" not in rogue.log.read_text(errors="replace")
    finally:
        rogue.stop()
        good.stop()


@pytest.mark.parametrize("option", ["cafile", "certfile", "keyfile"])
def test_an_unusable_cluster_tls_file_stops_the_start_with_exit_code_2(tmp_path: Path, option: str) -> None:
    keys = tls_keys(tmp_path / "certs", trustme.CA(), "n")
    Path(keys[f"cluster.tls.{option}"]).write_text("not PEM\n")
    config = tmp_path / "vmqpy.conf"
    host = "127.0.0.17"
    lines = {"nodename": f"n7@{host}", "listener.tcp.default": f"{host}:{free_port(host)}",
             "listener.vmq.clustering": f"{host}:{free_port(host)}", "platform_data_dir": str(tmp_path / "data"),
             "distributed_cookie": "tls-test-cookie", **keys}
    config.write_text("".join(f"{key} = {value}\n" for key, value in lines.items()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMQPY_")}
    done = subprocess.run([sys.executable, "-m", "vmqpy", "start", "--config", str(config)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 2, done.stderr
    assert f"cluster.tls.{option}" in done.stderr and keys[f"cluster.tls.{option}"] in done.stderr


def assert_serves_hup_topics(node: ClusterNode, prefix: str) -> None:
    """A new client of `node` subscribes to hup/# (allowed by the reloaded ACL) and gets its own QoS 1 message."""
    client = node.client(5, unique(prefix))
    client.subscribe("hup/#", qos=1)
    client.publish("hup/x", b"alive", qos=1)
    (message,) = client.collect(1, 10)
    assert message.payload == b"alive"


def test_sighup_reloads_and_keeps_a_node_without_tls_listeners_running(tmp_path: Path) -> None:
    acl = tmp_path / "vmq.acl"
    acl.write_text("topic #\n")
    # no periodic look at the ACL file: only SIGHUP can reload it here
    node = ClusterNode(6, tmp_path, {"acl_file": acl, "vmq_acl.acl_reload_interval": "0"}).start()
    try:
        assert node.proc is not None
        for count in (1, 2):  # one at a time: signals sent together may be taken as one
            if count == 2:
                acl.write_text("topic hup/#\ntopic other/#\n")
            node.proc.send_signal(signal.SIGHUP)
            wait_until(lambda count=count: node.log.read_text(errors="replace").count("SIGHUP: reloading") == count,
                       10, what=f"reload {count} logged")
        wait_until(lambda: "ACL reloaded" in node.log.read_text(errors="replace"), 10, what="the new ACL in force")
        assert node.log.read_text(errors="replace").count("ACL reloaded") == 1  # the unchanged file was kept
        assert node.proc.poll() is None
        assert_serves_hup_topics(node, "after-hup-")
    finally:
        node.stop()


def test_a_sighup_while_the_node_starts_is_kept_and_acted_on_once_it_has_started(tmp_path: Path) -> None:
    """A SIGHUP every 20 ms from the node's first log line until it has started: the node starts and reloads once
    its listeners are open. Before, a SIGHUP before the listeners were open ended the node (CI, 2026-11-29)."""
    acl = tmp_path / "vmq.acl"
    acl.write_text("topic #\n")
    node = ClusterNode(6, tmp_path, {"acl_file": acl, "vmq_acl.acl_reload_interval": "0"})
    sent = []
    done = threading.Event()

    def hang_up() -> None:
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            proc = node.proc
            text = node.log.read_text(errors="replace") if node.log.exists() else ""
            if "node started" in text or (proc is not None and proc.poll() is not None):
                return
            if proc is not None and text.strip():  # `vmqpy start` logs nothing before it ignores SIGHUP
                proc.send_signal(signal.SIGHUP)
                sent.append(time.monotonic())
            time.sleep(0.02)

    signaller = threading.Thread(target=hang_up, daemon=True)
    signaller.start()
    try:
        node.start()
        wait_until(lambda: "node started" in node.log.read_text(errors="replace"), 30, what="node started")
        done.set()
        signaller.join(10)
        log_text = node.log.read_text(errors="replace")
        assert sent, "no SIGHUP was sent while the node started"
        assert "SIGHUP while the node starts" in log_text
        wait_until(lambda: "SIGHUP: reloading" in node.log.read_text(errors="replace"), 10,
                   what="the kept SIGHUP acted on")
        assert node.proc is not None and node.proc.poll() is None
        assert_serves_hup_topics(node, "hup-start-")
    finally:
        done.set()
        node.stop()


def test_sighup_reloads_the_cluster_certificates_and_a_bad_file_keeps_the_previous_ones(tmp_path: Path) -> None:
    ca = trustme.CA()
    keys = tls_keys(tmp_path / "certs", ca, "before")
    nodes = start_cluster(tmp_path, keys, count=2)
    _n1, n2 = nodes
    try:
        renewed = ca.issue_cert("after")
        renewed.cert_chain_pems[0].write_to_path(keys["cluster.tls.certfile"])
        renewed.private_key_pem.write_to_path(keys["cluster.tls.keyfile"])
        for node in nodes:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: all("cluster TLS certificates reloaded" in n.log.read_text(errors="replace")
                               for n in nodes), 10, what="both nodes reloaded")
        # a broken file later: the previous contexts stay, the node says so and keeps linking
        Path(keys["cluster.tls.keyfile"]).write_text("half-copied\n")
        assert n2.proc is not None
        n2.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "cluster TLS certificates not reloaded" in n2.log.read_text(errors="replace"), 10,
                   what="the failed reload logged")
        n2.stop()  # new links after a restart of n2 use the contexts in force on n1 (reloaded) and n2 (fresh)
        renewed.private_key_pem.write_to_path(keys["cluster.tls.keyfile"])
        n2.start()
        wait_until(lambda: cluster_ready(nodes), 20, interval=0.2, what="n2 linked again over TLS")
    finally:
        for node in nodes:
            node.stop()
