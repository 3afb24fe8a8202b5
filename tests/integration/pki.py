"""A test PKI made by trustme (a CA, the node's certificate, a client certificate), and what reads it back: a
raw MQTT client over TLS, the organization a served certificate names."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme

from tests.integration.clients import RawClient


class Pki:
    """A CA, the node's certificate (for localhost and 127.0.0.1) and a client certificate with CN device-42."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca = trustme.CA()
        self.ca_file = directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.cert_file, self.key_file = directory / "server.pem", directory / "server.key"
        self.server = self.issue_server("vmqpy-first")
        client = self.ca.issue_cert("device-42@example.com", common_name="device-42")
        self.client_cert = directory / "client.pem"
        self.client_key = directory / "client.key"
        client.cert_chain_pems[0].write_to_path(str(self.client_cert))
        client.private_key_pem.write_to_path(str(self.client_key))

    def issue_server(self, organization: str) -> trustme.LeafCert:
        """A new server certificate written over the node's certificate and key files."""
        server = self.ca.issue_cert("localhost", "127.0.0.1", organization_name=organization)
        server.cert_chain_pems[0].write_to_path(str(self.cert_file))
        server.private_key_pem.write_to_path(str(self.key_file))
        return server

    def client_context(self, with_certificate: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if with_certificate:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """A PKI of its own for each test, in its tmp_path."""
    return Pki(tmp_path)


def tls_raw(port: int, context: ssl.SSLContext, version: int = 4) -> RawClient:
    """A RawClient whose socket is a TLS connection (handshake done) to 127.0.0.1:port."""
    client = RawClient(port, "127.0.0.1", version)
    client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
    return client


def organization(cert: dict[str, object]) -> str:
    """The organizationName of a certificate as `SSLSocket.getpeercert()` gives it."""
    subject = cert["subject"]
    assert isinstance(subject, tuple)
    return next(value for rdn in subject for key, value in rdn if key == "organizationName")
