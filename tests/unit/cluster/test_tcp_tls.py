"""ClusterNetwork over TLS (cluster.tls.*): certificates from the cluster CA link, others are refused and logged;
the contexts of vmqpy/broker/listeners/tls.py (files checked at start, reload). Certificates are made here with
trustme."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
import trustme

from vmqpy.broker.listeners.tls import ClusterContexts, build_client_context, cluster_settings
from vmqpy.cluster.errors import ClusterUsageError
from vmqpy.cluster.framing import FrameType
from vmqpy.cluster.tcp import ClusterNetwork
from vmqpy.config import ConfigError

from .helpers import COOKIE, A, B, C, wait_until

SETTLE = 5.0


def node_files(directory: Path, ca: trustme.CA, name: str, trusted: trustme.CA | None = None) -> dict[str, Path]:
    """cafile (the CA this node trusts: `trusted`, default `ca`), certfile and keyfile issued by `ca`."""
    directory.mkdir(parents=True, exist_ok=True)
    cert = ca.issue_cert(name)
    files = {"cafile": directory / "ca.pem", "certfile": directory / "cert.pem", "keyfile": directory / "key.pem"}
    (trusted or ca).cert_pem.write_to_path(str(files["cafile"]))
    cert.cert_chain_pems[0].write_to_path(str(files["certfile"]))
    cert.private_key_pem.write_to_path(str(files["keyfile"]))
    return files


def contexts(files: dict[str, Path]) -> ClusterContexts:
    settings = cluster_settings(files["cafile"], files["certfile"], files["keyfile"])
    assert settings is not None
    return ClusterContexts(settings)


MakeNet = Callable[..., ClusterNetwork]


@pytest.fixture
async def make_net() -> AsyncIterator[MakeNet]:
    created: list[ClusterNetwork] = []

    def make(name: str, host: str, tls: ClusterContexts | None) -> ClusterNetwork:
        extra: dict[str, Any] = {} if tls is None else {"tls_server": tls.server, "tls_client": tls.client}
        net = ClusterNetwork(name, 1, COOKIE, (host, 0), detect_timeout=1.0, reconnect_min=0.02,
                             reconnect_max=0.2, **extra)
        created.append(net)
        return net

    yield make
    for net in created:
        await net.stop()


async def test_two_nodes_with_certificates_of_the_cluster_ca_link_over_tls(tmp_path: Path, make_net: MakeNet) -> None:
    ca = trustme.CA()
    a = make_net("a", A, contexts(node_files(tmp_path / "a", ca, "a")))
    b = make_net("b", B, contexts(node_files(tmp_path / "b", ca, "b")))
    got: list[tuple[str, Any]] = []
    b.on_message(lambda peer, t, body: got.append((peer, body)))
    await a.start()
    await b.start()
    a.add_peer("b", *b.bound_address())
    await wait_until(lambda: a.reachable() == {"b"} and b.reachable() == {"a"}, SETTLE, "a TLS link")
    assert b.stats()["pending_links"] == 0  # established: no longer among the sockets before their handshake
    assert a.send_frame("b", FrameType.CONTROL, {"over": "tls"})
    await wait_until(lambda: got == [("a", {"over": "tls"})], SETTLE, "a frame over TLS")
    conn = next(iter(b._conns))  # the socket really is TLS: it has a cipher and the peer's certificate
    assert conn.transport is not None
    assert conn.transport.get_extra_info("cipher") is not None
    assert conn.transport.get_extra_info("peercert") is not None


async def test_a_node_with_a_certificate_of_another_ca_is_refused_and_logged(tmp_path: Path,
                                                                             make_net: MakeNet) -> None:
    ca, rogue_ca = trustme.CA(), trustme.CA()
    a = make_net("a", A, contexts(node_files(tmp_path / "a", ca, "a")))
    # the rogue node trusts the cluster CA (so it would accept a's certificate), but its own is from elsewhere
    rogue = make_net("rogue", C, contexts(node_files(tmp_path / "r", rogue_ca, "rogue", trusted=ca)))
    await a.start()
    await rogue.start()
    with structlog.testing.capture_logs() as logs:
        rogue.add_peer("a", *a.bound_address())
        await wait_until(lambda: any(e["event"] == "cluster TLS handshake failed, connection refused" for e in logs),
                         SETTLE, "the refusal logged by a")
        await asyncio.sleep(0.3)  # a few redials: none may come up
    assert a.reachable() == set() and rogue.reachable() == set()
    refusal = next(e for e in logs if e["event"] == "cluster TLS handshake failed, connection refused")
    assert refusal["log_level"] == "warning" and refusal["remote"].startswith(f"{C}:")
    assert a.stats()["handshakes_refused"] >= 1 and a.stats()["links_up"] == 0
    await rogue.stop()  # every refused TLS handshake gave its place among the pending links back
    await wait_until(lambda: a.stats()["pending_links"] == 0, SETTLE, "the pending links released")


async def test_a_node_that_does_not_trust_the_cluster_ca_refuses_the_listener(tmp_path: Path,
                                                                              make_net: MakeNet) -> None:
    ca, other_ca = trustme.CA(), trustme.CA()
    a = make_net("a", A, contexts(node_files(tmp_path / "a", ca, "a")))
    doubter = make_net("d", B, contexts(node_files(tmp_path / "d", ca, "d", trusted=other_ca)))
    await a.start()
    await doubter.start()
    with structlog.testing.capture_logs() as logs:
        doubter.add_peer("a", *a.bound_address())
        await wait_until(lambda: any(e["event"] == "cluster dial failed" for e in logs), SETTLE, "dial failure")
    failure = next(e for e in logs if e["event"] == "cluster dial failed")
    assert "CERTIFICATE_VERIFY_FAILED" in failure["error"] or "certificate verify failed" in failure["error"]
    assert a.reachable() == set() and doubter.reachable() == set()


async def test_a_plain_node_cannot_link_to_a_tls_listener(tmp_path: Path, make_net: MakeNet) -> None:
    a = make_net("a", A, contexts(node_files(tmp_path / "a", trustme.CA(), "a")))
    plain = make_net("p", B, None)
    await a.start()
    await plain.start()
    with structlog.testing.capture_logs() as logs:
        plain.add_peer("a", *a.bound_address())
        await wait_until(lambda: any(e["event"] == "cluster TLS handshake failed, connection refused" for e in logs),
                         SETTLE, "the refusal")
    assert a.reachable() == set() and plain.reachable() == set()


async def test_new_links_use_the_reloaded_certificate(tmp_path: Path, make_net: MakeNet) -> None:
    ca = trustme.CA()
    files_a = node_files(tmp_path / "a", ca, "a")
    tls_a = contexts(files_a)
    a = make_net("a", A, tls_a)
    b = make_net("b", B, contexts(node_files(tmp_path / "b", ca, "b")))
    await a.start()
    await b.start()
    a.add_peer("b", *b.bound_address())
    await wait_until(lambda: a.reachable() == {"b"}, SETTLE, "first link")

    def subject_b_sees() -> str:
        conn = next(c for c in b._conns if c.link is not None and c.link.peer_name == "a")
        assert conn.transport is not None
        cert = conn.transport.get_extra_info("peercert")
        return str(dict(item for rdn in cert["subject"] for item in rdn).get("organizationalUnitName", ""))

    first = subject_b_sees()
    renewed = ca.issue_cert("a", organization_unit_name="renewed")
    renewed.cert_chain_pems[0].write_to_path(str(files_a["certfile"]))
    renewed.private_key_pem.write_to_path(str(files_a["keyfile"]))
    tls_a.reload()
    a.remove_peer("b")  # a new link: the live one kept its certificate until now
    await wait_until(lambda: b.reachable() == set(), SETTLE, "old link closed")
    a.add_peer("b", *b.bound_address())
    await wait_until(lambda: a.reachable() == {"b"} and b.reachable() == {"a"}, SETTLE, "new link")
    assert first != "renewed" and subject_b_sees() == "renewed"


def test_only_both_contexts_make_a_tls_network() -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with pytest.raises(ClusterUsageError):
        ClusterNetwork("a", 1, COOKIE, (A, 0), tls_server=lambda: context)


# ------------------------------------------------------------------------------------------------ settings


def test_no_cluster_tls_keys_means_plain_links() -> None:
    assert cluster_settings(None, None, None) is None


def test_some_cluster_tls_keys_without_the_others_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cluster\.tls\.keyfile not set"):
        cluster_settings(tmp_path / "ca.pem", tmp_path / "cert.pem", None)


@pytest.mark.parametrize("option", ["cafile", "certfile", "keyfile"])
def test_an_unusable_file_is_a_config_error_naming_the_key_and_the_file(tmp_path: Path, option: str) -> None:
    files = node_files(tmp_path, trustme.CA(), "a")
    files[option].write_text("not PEM\n")
    settings = cluster_settings(files["cafile"], files["certfile"], files["keyfile"],
                                {f"cluster.tls.{option}": "vmqpy.conf:7"})
    assert settings is not None
    with pytest.raises(ConfigError) as caught:
        ClusterContexts(settings)
    assert f"vmqpy.conf:7: cluster.tls.{option}" in str(caught.value) and str(files[option]) in str(caught.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    files = node_files(tmp_path, trustme.CA(), "a")
    settings = cluster_settings(files["cafile"], tmp_path / "missing.pem", files["keyfile"])
    assert settings is not None
    with pytest.raises(ConfigError, match=r"cluster\.tls\.certfile: cannot read .*missing\.pem"):
        build_client_context(settings)


def test_a_failed_reload_keeps_the_contexts_in_force(tmp_path: Path) -> None:
    files = node_files(tmp_path, trustme.CA(), "a")
    tls = contexts(files)
    server, client = tls.server(), tls.client()
    files["keyfile"].write_text("half-copied\n")
    with pytest.raises(ConfigError):
        tls.reload()
    assert tls.server() is server and tls.client() is client


def _client_hello_first(address: tuple[str, int], context: ssl.SSLContext, hello_sent: threading.Event,
                        outcome: list[str]) -> None:
    """A TLS client that connects and sends its ClientHello at once (sets `hello_sent`), then finishes the
    handshake with a deadline; `outcome` gets "done" or the error."""
    try:
        with socket.create_connection(address, timeout=5.0) as sock:
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = context.wrap_bio(incoming, outgoing, server_side=False)
            while True:
                try:
                    tls.do_handshake()
                except ssl.SSLWantReadError:
                    pass
                else:
                    sock.sendall(outgoing.read())
                    outcome.append("done")
                    return
                sock.sendall(outgoing.read())
                hello_sent.set()
                data = sock.recv(65536)  # the 5 s socket timeout bounds the wait for the server's answer
                if not data:
                    outcome.append("closed by the server")
                    return
                incoming.write(data)
    except Exception as exc:  # reported to the test
        outcome.append(f"{type(exc).__name__}: {exc}")
    finally:
        hello_sent.set()


async def _accept_with_the_client_hello_waiting(tmp_path: Path) -> tuple[list[str], dict[str, int]]:
    ca = trustme.CA()
    tls = contexts(node_files(tmp_path / "a", ca, "a"))
    client = contexts(node_files(tmp_path / "b", ca, "b")).client()
    net = ClusterNetwork("a", 1, COOKIE, (A, 0), detect_timeout=1.0, tls_server=tls.server, tls_client=tls.client)
    await net.start()
    try:
        hello_sent, outcome = threading.Event(), list[str]()
        thread = threading.Thread(target=_client_hello_first, args=(net.bound_address(), client, hello_sent, outcome))
        thread.start()
        # the node's loop is busy (blocked here) until the client has connected and sent its ClientHello: when
        # the loop accepts the socket, the ClientHello is already waiting on it
        assert hello_sent.wait(10.0)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, thread.join, 10.0)
        return outcome, dict(net.stats())
    finally:
        await net.stop()


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_a_client_hello_waiting_when_the_node_accepts_is_answered(tmp_path: Path, loop_kind: str) -> None:
    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        outcome, stats = uvloop.run(_accept_with_the_client_hello_waiting(tmp_path))
    else:
        outcome, stats = asyncio.run(_accept_with_the_client_hello_waiting(tmp_path))
    assert outcome == ["done"]
    assert stats["handshakes_refused"] == 0
