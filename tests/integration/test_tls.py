"""MQTT over TLS (`listener.ssl.*`, docs/security.md "TLS listeners") with certificates made by trustme: paho-mqtt
on 3.1.1 and 5.0 and mosquitto_sub exchange messages with plain TCP clients; mutual TLS refuses a client without
a certificate; use_identity_as_username makes the certificate's CN the user; a certificate file that cannot be
used stops the start with exit code 2; SIGHUP serves a new certificate to new connections while live ones go on;
the admin API over HTTPS with `vmq-admin --cacert`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trustme

from chaos import zygote
from tests.integration.admin_api import VMQ_ADMIN, admin, metrics
from tests.integration.clients import CONNACK, CliSub, PahoClient, RawClient, cli_pub, enc_connect, unique
from tests.integration.conftest import Broker, free_port, port_open, wait_until
from tests.integration.node_processes import base_lines, run_start
from tests.integration.pki import Pki, organization, pki, tls_raw

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's TLS listeners")]

__all__ = ["pki"]  # the fixture this module's tests take


@pytest.fixture
def tls_node(broker_factory: Callable[..., Broker], pki: Pki) -> Iterator[tuple[Broker, int, int, str]]:
    """A node with a plain listener, a TLS listener (`ssl.default`) and a mutual TLS listener with
    use_identity_as_username (`ssl.mutual`), and the admin API."""
    tls_port, mutual_port, http_port = free_port(), free_port(), free_port()
    broker = broker_factory(**{
        "listener.http.default": f"127.0.0.1:{http_port}",
        "listener.ssl.default": f"127.0.0.1:{tls_port}",
        "listener.ssl.mutual": f"127.0.0.1:{mutual_port}",
        "listener.ssl.certfile": str(pki.cert_file),
        "listener.ssl.keyfile": str(pki.key_file),
        "listener.ssl.cafile": str(pki.ca_file),
        "listener.ssl.mutual.require_certificate": "on",
        "listener.ssl.mutual.use_identity_as_username": "on",
    })
    url = f"http://127.0.0.1:{http_port}"
    wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200, 15, what="admin API")
    yield broker, tls_port, mutual_port, url


def tls_paho(port: int, version: int, ca_file: Path) -> PahoClient:
    client = PahoClient(port, version, unique(f"tls{version}"))
    client.client.tls_set(ca_certs=str(ca_file))
    return client


@pytest.mark.parametrize("version", [4, 5])
def test_paho_over_tls_exchanges_messages_with_a_tcp_client(tls_node: tuple[Broker, int, int, str], pki: Pki,
                                                            version: int) -> None:
    broker, tls_port, _mutual, _url = tls_node
    secure = tls_paho(tls_port, version, pki.ca_file)
    plain = RawClient(broker.port, broker.host, version)
    try:
        secure.connect()
        plain.connect(unique("plain"))
        to_tls, to_tcp = unique("tls/in/"), unique("tls/out/")
        secure.subscribe(to_tls, qos=1)
        plain.subscribe(to_tcp, qos=1)
        plain.publish(to_tls, b"over tcp", qos=1)
        message = secure.get()
        assert (message.topic, message.payload) == (to_tls, b"over tcp")
        secure.publish(to_tcp, b"over tls", qos=1)
        [back] = plain.recv_publishes(1)
        assert (back.topic, back.payload) == (to_tcp, b"over tls")
    finally:
        secure.disconnect()
        secure.stop()
        plain.close()


@pytest.mark.parametrize("version", [4, 5])
def test_mosquitto_sub_with_cafile_receives_over_tls(tls_node: tuple[Broker, int, int, str], pki: Pki,
                                                     version: int) -> None:
    broker, tls_port, _mutual, _url = tls_node
    topic = unique("tls/cli/")
    sub = CliSub(tls_port, topic, version, extra=["--cafile", str(pki.ca_file)])
    try:
        sub.wait_subscribed()
        cli_pub(broker.port, topic, "hello over tls", version)
        code, lines = sub.finish()
        assert code == 0, lines
        assert "hello over tls" in lines
    finally:
        sub.kill()


def test_a_client_that_does_not_trust_the_ca_is_not_served(tls_node: tuple[Broker, int, int, str]) -> None:
    _broker, tls_port, _mutual, _url = tls_node
    stranger = ssl.create_default_context(cadata=trustme.CA().cert_pem.bytes().decode())
    with socket.create_connection(("127.0.0.1", tls_port), timeout=5) as sock, pytest.raises(ssl.SSLError):
        stranger.wrap_socket(sock, server_hostname="127.0.0.1")


def test_mutual_tls_refuses_a_client_without_a_certificate(tls_node: tuple[Broker, int, int, str],
                                                           pki: Pki) -> None:
    broker, _tls, mutual_port, url = tls_node
    with socket.create_connection(("127.0.0.1", mutual_port), timeout=5) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            tls = pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1")
            # TLS 1.3: the client's handshake ends before the node checks the certificate; the refusal comes
            # as an alert on the first read, instead of a CONNACK.
            tls.sendall(enc_connect(unique("no-cert")))
            tls.settimeout(5)
            data = tls.recv(100)
            assert data == b"", f"the node answered a client without a certificate: {data!r}"
            raise ConnectionError("closed without an answer")
    assert metrics(url, broker.data_dir)["broker.connections"] == 0  # nothing was made for the refused socket
    client = tls_raw(mutual_port, pki.client_context(with_certificate=True))
    try:
        client.connect(unique("with-cert"))  # the listener goes on serving
    finally:
        client.close()


def test_mutual_tls_accepts_a_certificate_and_its_cn_is_the_user(tls_node: tuple[Broker, int, int, str],
                                                                 pki: Pki) -> None:
    broker, _tls, mutual_port, url = tls_node
    client_id = unique("cert")
    client = tls_raw(mutual_port, pki.client_context(with_certificate=True))
    try:
        # The CONNECT's user name and password are not used: the certificate names and authenticates the user.
        client.send(enc_connect(client_id, username="mallory", password=b"wrong"))
        assert client.expect(CONNACK).reason_code == 0
        out = admin(url, broker.data_dir, "session", "show", "--client_id", "--user", "--json")
        assert out.returncode == 0, out.stderr
        rows = {row["client_id"]: row for row in json.loads(out.stdout)}
        assert rows[client_id]["user"] == "device-42"
    finally:
        client.close()


def test_the_certificate_authenticates_when_anonymous_clients_are_refused(
        broker_factory: Callable[..., Broker], pki: Pki) -> None:
    mutual_port = free_port()
    broker = broker_factory(**{
        "allow_anonymous": "off",
        "listener.ssl.mutual": f"127.0.0.1:{mutual_port}",
        "listener.ssl.certfile": str(pki.cert_file),
        "listener.ssl.keyfile": str(pki.key_file),
        "listener.ssl.cafile": str(pki.ca_file),
        "listener.ssl.require_certificate": "on",
        "listener.ssl.use_identity_as_username": "on",
    })
    anonymous = RawClient(broker.port, broker.host, 4)
    certified = tls_raw(mutual_port, pki.client_context(with_certificate=True))
    try:
        anonymous.connect(unique("anon"), expect_rc=5)  # 3.1.1: not authorized
        certified.connect(unique("cert"))
    finally:
        anonymous.close()
        certified.close()


def test_a_certificate_file_that_cannot_be_used_stops_the_start(tmp_path: Path, pki: Pki) -> None:
    garbage = tmp_path / "not-a-cert.pem"
    garbage.write_text("nothing here\n")
    for certfile, expected in ((garbage, f"{garbage} holds no PEM certificate"),
                               (tmp_path / "missing.pem", f"cannot read {tmp_path / 'missing.pem'}")):
        conf = tmp_path / "vmqpy.conf"
        lines = [*base_lines(tmp_path / "data", free_port()), f"listener.ssl.default = 127.0.0.1:{free_port()}",
                 f"listener.ssl.certfile = {certfile}", f"listener.ssl.keyfile = {pki.key_file}"]
        conf.write_text("\n".join(lines) + "\n")
        result = run_start(conf)
        assert result.returncode == 2, result.stderr
        assert f"vmqpy: config error: {conf}:{len(lines)-1}: listener.ssl.certfile: {expected}" in result.stderr


def served_certificate(port: int, pki: Pki) -> dict[str, object]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock, \
            pki.client_context().wrap_socket(sock, server_hostname="127.0.0.1") as tls:
        cert = tls.getpeercert()
        assert cert is not None
        return dict(cert)


def test_sighup_serves_a_new_certificate_to_new_connections(tls_node: tuple[Broker, int, int, str],
                                                            pki: Pki) -> None:
    broker, tls_port, _mutual, _url = tls_node
    first = served_certificate(tls_port, pki)
    assert organization(first) == "vmqpy-first"
    live = tls_raw(tls_port, pki.client_context(), 5)
    try:
        live.connect(unique("live"))
        topic = unique("tls/reload/")
        live.subscribe(topic, qos=1)
        pki.issue_server("vmqpy-second")
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGHUP)
        second = wait_until(lambda: (c := served_certificate(tls_port, pki))["serialNumber"] != first["serialNumber"]
                            and c, 10, what="the new certificate served")
        assert organization(second) == "vmqpy-second"
        assert "TLS certificates reloaded" in broker.log_tail(100)
        live.publish(topic, b"still here", qos=1)  # the connection made before the reload goes on
        [message] = live.recv_publishes(1)
        assert message.payload == b"still here"
        # A reload with a key that does not match the certificate keeps the certificate in force.
        pki.key_file.write_bytes(pki.client_key.read_bytes())
        broker.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "TLS certificates not reloaded" in broker.log_tail(100), 10, what="the refused reload")
        assert served_certificate(tls_port, pki)["serialNumber"] == second["serialNumber"]
        assert broker.alive()
    finally:
        live.close()


def test_the_admin_api_over_https_with_vmq_admin_cacert(broker_factory: Callable[..., Broker], pki: Pki) -> None:
    https_port = free_port()
    broker = broker_factory(**{
        "listener.https.default": f"127.0.0.1:{https_port}",
        "listener.https.certfile": str(pki.cert_file),
        "listener.https.keyfile": str(pki.key_file),
    })
    wait_until(lambda: port_open(https_port), 15, what="the HTTPS admin API")
    url = f"https://127.0.0.1:{https_port}"

    def vmq_admin(*args: str, cacert_env: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VMQ")}
        env.update({"VMQ_ADMIN_URL": url, "VMQ_DATA_DIR": str(broker.data_dir)})
        if cacert_env is not None:
            env["VMQ_ADMIN_CACERT"] = cacert_env
        return zygote.run([*VMQ_ADMIN, *args], capture_output=True, text=True, timeout=30, env=env)

    for done in (vmq_admin("--cacert", str(pki.ca_file), "cluster", "show", "--json"),
                 vmq_admin("cluster", "show", "--json", cacert_env=str(pki.ca_file))):
        assert done.returncode == 0, done.stderr
        (row,) = json.loads(done.stdout)
        assert row["Running"] is True
    untrusted = vmq_admin("cluster", "show")  # the system's CAs do not know the test CA
    assert untrusted.returncode == 3 and "certificate verify failed" in untrusted.stderr.lower(), untrusted.stderr
    missing = vmq_admin("--cacert", str(pki.dir / "missing.pem"), "cluster", "show")
    assert missing.returncode == 2 and "missing.pem" in missing.stderr
