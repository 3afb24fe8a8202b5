"""vmqpy.broker.listeners.tls: the TLS listener settings read from the configuration, the server contexts built from
them, every unusable file refused with a ConfigError naming it, reload, and the certificate's identity."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme

from vmqpy import config
from vmqpy.broker.access.auth import certificate_identity
from vmqpy.broker.listeners.tls import (
    ListenerContexts,
    TlsSettings,
    build_context,
    https_context,
    settings_of,
)
from vmqpy.config import ConfigError


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def files(tmp_path: Path, ca: trustme.CA) -> dict[str, Path]:
    server = ca.issue_cert("localhost", "127.0.0.1")
    other = trustme.CA().issue_cert("localhost")
    paths = {
        "cert": tmp_path / "server.pem", "key": tmp_path / "server.key", "ca": tmp_path / "ca.pem",
        "other_key": tmp_path / "other.key", "garbage": tmp_path / "garbage.pem",
    }
    server.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    server.private_key_pem.write_to_path(str(paths["key"]))
    ca.cert_pem.write_to_path(str(paths["ca"]))
    other.private_key_pem.write_to_path(str(paths["other_key"]))
    paths["garbage"].write_text("not a certificate\n")
    return paths


def settings(files: dict[str, Path], **changes: Any) -> TlsSettings:
    base: dict[str, Any] = {"kind": "ssl", "name": "default", "certfile": files["cert"], "keyfile": files["key"]}
    base.update(changes)
    return TlsSettings(**base)


def test_a_context_serves_the_certificate_and_verifies_clients_against_the_ca(files: dict[str, Path]) -> None:
    context = build_context(settings(files))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE
    optional = build_context(settings(files, cafile=files["ca"]))
    assert optional.verify_mode == ssl.CERT_OPTIONAL
    required = build_context(settings(files, cafile=files["ca"], require_certificate=True, tls_version="tlsv1.3"))
    assert required.verify_mode == ssl.CERT_REQUIRED
    assert required.minimum_version == ssl.TLSVersion.TLSv1_3


@pytest.mark.parametrize(("changes", "message"), [
    ({"certfile": "missing"}, "listener.ssl.certfile: cannot read {missing}: No such file or directory"),
    ({"keyfile": "missing"}, "listener.ssl.keyfile: cannot read {missing}: No such file or directory"),
    ({"certfile": "garbage"}, "listener.ssl.certfile: {garbage} holds no PEM certificate"),
    ({"keyfile": "garbage"}, "listener.ssl.keyfile: {garbage} holds no PEM private key"),
    ({"keyfile": "other_key"}, "listener.ssl.keyfile: the key in {other_key} does not match the certificate in {cert}"),
    ({"cafile": "garbage"}, "listener.ssl.cafile: {garbage} holds no usable CA certificate"),
    ({"cafile": "missing"}, "listener.ssl.cafile: cannot read {missing}"),
    ({"require_certificate": True}, "listener.ssl.require_certificate: needs listener.ssl.cafile"),
    ({"use_identity_as_username": True}, "listener.ssl.use_identity_as_username: needs listener.ssl.cafile"),
])
def test_unusable_files_are_config_errors_naming_them(files: dict[str, Path], changes: dict[str, Any],
                                                      message: str) -> None:
    paths = {**files, "missing": files["cert"].parent / "missing.pem"}
    resolved = {k: paths[v] if isinstance(v, str) else v for k, v in changes.items()}
    with pytest.raises(ConfigError) as err:
        build_context(settings(files, **resolved))
    assert message.format(**{k: str(v) for k, v in paths.items()}) in str(err.value)


def write_conf(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "vmqpy.conf"
    path.write_text(text)
    return path


def test_settings_come_from_the_listener_then_its_kind(tmp_path: Path, files: dict[str, Path]) -> None:
    path = write_conf(tmp_path, (
        "listener.ssl.a = 127.0.0.1:8883\nlistener.ssl.b = 127.0.0.1:8884\nlistener.wss.w = 127.0.0.1:8443\n"
        f"listener.ssl.certfile = {files['cert']}\nlistener.ssl.keyfile = {files['key']}\n"
        f"listener.ssl.cafile = {files['ca']}\nlistener.ssl.b.require_certificate = on\n"
        "listener.ssl.use_identity_as_username = on\nlistener.ssl.a.use_identity_as_username = off\n"
        f"listener.wss.w.certfile = {files['cert']}\nlistener.wss.keyfile = {files['key']}\n"
        "listener.wss.tls_version = tlsv1.3\n"
    ))
    cfg = config.load(path, environ={})
    assert cfg.ssl_listeners == (("a", "127.0.0.1", 8883), ("b", "127.0.0.1", 8884))
    assert cfg.wss_listeners == (("w", "127.0.0.1", 8443),)
    assert cfg.tcp_listeners == ()  # only TLS listeners configured: no plain one is added
    found = settings_of(cfg)
    assert set(found) == {("ssl", "a"), ("ssl", "b"), ("wss", "w")}
    a, b, w = found[("ssl", "a")], found[("ssl", "b")], found[("wss", "w")]
    assert (a.certfile, a.cafile, a.require_certificate, a.use_identity_as_username) == (
        files["cert"], files["ca"], False, False)
    assert (b.require_certificate, b.use_identity_as_username, b.tls_version) == (True, True, "tlsv1.2")
    assert (w.certfile, w.keyfile, w.cafile, w.tls_version) == (files["cert"], files["key"], None, "tlsv1.3")
    assert b.source("require_certificate") == f"{path}:7: listener.ssl.b.require_certificate"
    assert w.source("keyfile") == f"{path}:11: listener.wss.keyfile"
    assert len(ListenerContexts(found).settings) == 3


@pytest.mark.parametrize(("text", "message"), [
    ("listener.ssl.default = 127.0.0.1:8883\n", "listener.ssl.default needs listener.ssl.certfile"),
    ("listener.wss.default = 127.0.0.1:8883\nlistener.wss.certfile = /x\n",
     "listener.wss.default needs listener.wss.keyfile"),
    ("listener.ssl.default = 127.0.0.1:8883\nlistener.ssl.certfile = /x\nlistener.ssl.keyfile = /y\n"
     "listener.ssl.tls_version = tlsv1.1\n", "bad value for listener.ssl.tls_version: expected one of tlsv1.2"),
    ("listener.ws.default = 127.0.0.1:8080\nlistener.ws.certfile = /x\n", "unknown key 'listener.ws.certfile'"),
    ("listener.tcp.default.certfile = /x\n", "unknown key 'listener.tcp.default.certfile'"),
    ("listener.ssl.other.certfile = /x\n", "listener.ssl.other.certfile is set, but there is no listener.ssl.other"),
])
def test_tls_listener_keys_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(write_conf(tmp_path, text), environ={})
    assert message in str(err.value)


def test_reload_swaps_every_context_or_none(tmp_path: Path, files: dict[str, Path], ca: trustme.CA) -> None:
    live = tmp_path / "live.pem"
    live.write_bytes(files["cert"].read_bytes())
    contexts = ListenerContexts({("ssl", "a"): settings(files, certfile=live)})
    first = contexts.context("ssl", "a")
    renewed = ca.issue_cert("localhost")
    renewed.cert_chain_pems[0].write_to_path(str(live))  # a new certificate, but the old key: refused
    with pytest.raises(ConfigError, match="does not match"):
        contexts.reload()
    assert contexts.context("ssl", "a") is first
    live.write_bytes(files["cert"].read_bytes())
    assert contexts.reload() == 1
    assert contexts.context("ssl", "a") is not first


@pytest.mark.parametrize(("peercert", "identity"), [
    (None, None),
    ({}, None),
    ({"subject": ((("organizationName", "vmqpy"),),)}, None),
    ({"subject": ((("commonName", "sensor-7"),),)}, "sensor-7"),
    ({"subject": ((("countryName", "FR"),), (("commonName", "outer"),), (("commonName", "inner"),))}, "inner"),
])
def test_the_identity_is_the_common_name(peercert: dict[str, Any] | None, identity: str | None) -> None:
    assert certificate_identity(peercert) == identity


def test_the_https_admin_api_needs_its_certificate_and_key(tmp_path: Path, files: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match=r"listener\.https\.default needs listener\.https\.certfile"):
        config.load(write_conf(tmp_path, "listener.https.default = 127.0.0.1:8443\n"), environ={})
    cfg = config.load(write_conf(tmp_path, (
        f"listener.https.default = 127.0.0.1:8443\nlistener.https.certfile = {files['cert']}\n"
        f"listener.https.keyfile = {files['other_key']}\n")), environ={})
    with pytest.raises(ConfigError, match=r":3: listener.https.keyfile: the key in .* does not match"):
        https_context(cfg)
    assert https_context(config.load(write_conf(tmp_path, ""), environ={})) is None
