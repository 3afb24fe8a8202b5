"""The TLS side of the MQTT listeners (`listener.ssl.*`, `listener.wss.*`): what each TLS listener is configured
with, the `ssl.SSLContext` built from it, and the client certificate's identity.

`settings_of(config)` reads the listener keys (a listener's own `listener.ssl.NAME.OPTION`, else its kind's
`listener.ssl.OPTION`) into one `TlsSettings` per TLS listener; `build_context(settings)` makes the server
context; every file that cannot be used (missing, unreadable, not PEM, a key that does not match the certificate)
is a `ConfigError` naming the key, where it was set and the file, so that `vmqpy start` stops with exit code 2.
`ListenerContexts` holds the context in force for each listener: `reload()` (SIGHUP) builds them all again from
the same paths and swaps them only when every one of them builds, so a half-copied certificate never replaces a
working one. Each listener's server switches every new connection to the context in force (`server_context`):
new connections get the new certificate, live ones keep the session they negotiated.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmqpy.config import TLS_KINDS, Config, ConfigError, listener_option, mqtt_listeners

VERSIONS: Mapping[str, ssl.TLSVersion] = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """What one TLS listener is configured with; `where` maps an option to 'KEY (FILE:LINE)' for messages."""

    kind: str  # ssl or wss
    name: str
    certfile: Path
    keyfile: Path
    cafile: Path | None = None
    require_certificate: bool = False
    use_identity_as_username: bool = False
    tls_version: str = "tlsv1.2"
    where: Mapping[str, str] | None = None

    def source(self, option: str) -> str:
        """The key that set `option` for this listener, and where it was set."""
        if self.where is not None and option in self.where:
            return self.where[option]
        return f"listener.{self.kind}.{option}"


def settings_of(config: Config) -> dict[tuple[str, str], TlsSettings]:
    """The TLS settings of every TLS listener of `config`, by (kind, name)."""
    found = {}
    for kind, name, _host, _port in mqtt_listeners(config):
        if kind not in TLS_KINDS:
            continue

        def option(opt: str, kind: str = kind, name: str = name) -> Any:
            return listener_option(config, name, opt, kind)

        where = {opt: _source(config, kind, name, opt) for opt in ("certfile", "keyfile", "cafile",
                                                                    "require_certificate",
                                                                    "use_identity_as_username")}
        found[(kind, name)] = TlsSettings(
            kind, name, option("certfile"), option("keyfile"), option("cafile"), option("require_certificate"),
            option("use_identity_as_username"), option("tls_version"), where,
        )
    return found


def https_context(config: Config) -> ssl.SSLContext | None:
    """The context of the HTTPS admin API (`listener.https.default`), or None when there is none. ConfigError
    names the file that cannot be used."""
    if config.https_listener is None or config.https_certfile is None or config.https_keyfile is None:
        return None
    where = {opt: f"{config.sources[key]}: {key}" for opt in ("certfile", "keyfile")
             if (key := f"listener.https.{opt}") in config.sources}
    return build_context(TlsSettings("https", "default", config.https_certfile, config.https_keyfile, where=where))


def _source(config: Config, kind: str, name: str, option: str) -> str:
    for key in (f"listener.{kind}.{name}.{option}", f"listener.{kind}.{option}"):
        if key in config.sources:
            return f"{config.sources[key]}: {key}"
    return f"listener.{kind}.{option}"


def _load_chain(context: ssl.SSLContext, settings: TlsSettings) -> None:
    """Give `context` the certificate chain and key of `settings`; ConfigError names the file that cannot be used."""
    _readable(settings, "certfile", settings.certfile)
    _readable(settings, "keyfile", settings.keyfile)
    try:
        context.load_cert_chain(settings.certfile, settings.keyfile)
    except ssl.SSLError as exc:
        raise ConfigError(_chain_problem(settings, exc)) from None


def _load_ca(context: ssl.SSLContext, settings: TlsSettings, cafile: Path) -> None:
    """Give `context` the CA certificates of `cafile`; ConfigError names the file when it cannot be used."""
    _readable(settings, "cafile", cafile)
    try:
        context.load_verify_locations(cafile=str(cafile))
    except ssl.SSLError as exc:
        raise ConfigError(f"{settings.source('cafile')}: {cafile} holds no usable CA certificate "
                          f"(PEM): {exc.reason or exc}") from None


def build_context(settings: TlsSettings) -> ssl.SSLContext:
    """The server context of one TLS listener. Raises ConfigError naming the file that cannot be used."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = VERSIONS[settings.tls_version]
    _load_chain(context, settings)
    if settings.cafile is not None:
        _load_ca(context, settings, settings.cafile)
        context.verify_mode = ssl.CERT_OPTIONAL  # a certificate a client presents is verified
    for option in ("require_certificate", "use_identity_as_username"):
        if getattr(settings, option) and settings.cafile is None:
            raise ConfigError(f"{settings.source(option)}: needs listener.{settings.kind}.cafile, the CA that "
                              "client certificates are verified against")
    if settings.require_certificate:
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _readable(settings: TlsSettings, option: str, path: Path) -> None:
    try:
        with open(path, "rb") as file:
            file.read(1)
    except OSError as exc:
        raise ConfigError(f"{settings.source(option)}: cannot read {path}: {exc.strerror}") from None


def _chain_problem(settings: TlsSettings, exc: ssl.SSLError) -> str:
    """Which of certfile and keyfile `load_cert_chain` refused, as far as the files tell."""
    cert_text = settings.certfile.read_bytes()
    key_text = settings.keyfile.read_bytes()
    reason = exc.reason or str(exc)
    if b"-----BEGIN CERTIFICATE-----" not in cert_text:
        return f"{settings.source('certfile')}: {settings.certfile} holds no PEM certificate ({reason})"
    if b"PRIVATE KEY-----" not in key_text:
        return f"{settings.source('keyfile')}: {settings.keyfile} holds no PEM private key ({reason})"
    if "MISMATCH" in reason.upper():
        return (f"{settings.source('keyfile')}: the key in {settings.keyfile} does not match the certificate in "
                f"{settings.certfile}")
    return f"{settings.source('certfile')}: {settings.certfile} with key {settings.keyfile} cannot be used ({reason})"


def handshake_failure_reason(exc: BaseException) -> str:
    """A short reason for a failed server-side TLS handshake, for a log line: OpenSSL's reason in words
    ("TLSV1_ALERT_UNKNOWN_CA" -> "unknown ca", "WRONG_VERSION_NUMBER" -> "wrong version number"; alerts are
    what the client told us; a client certificate that does not verify adds why), else the error's own text."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"client certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError) and exc.reason:
        reason = str(exc.reason)
        for prefix in ("SSLV3_ALERT_", "TLSV13_ALERT_", "TLSV1_ALERT_"):
            if reason.startswith(prefix):
                return f"the client sent the alert: {reason[len(prefix):].replace('_', ' ').lower()}"
        return reason.replace("_", " ").lower()
    if isinstance(exc, ssl.SSLError) and exc.args:  # e.g. SSLEOFError's "EOF occurred in violation of protocol"
        return str(exc.args[-1])
    if isinstance(exc, ConnectionResetError) and not str(exc):  # asyncio: the end of the stream mid-handshake
        return "the client closed the connection during the handshake"
    return str(exc) or type(exc).__name__


class ListenerContexts:
    """The TLS context in force for each TLS listener, by (kind, name)."""

    def __init__(self, settings: Mapping[tuple[str, str], TlsSettings]) -> None:
        self.settings = dict(settings)
        self._contexts = {key: build_context(one) for key, one in self.settings.items()}

    def context(self, kind: str, name: str) -> ssl.SSLContext:
        """The context in force for listener (kind, name)."""
        return self._contexts[(kind, name)]

    def server_context(self, kind: str, name: str) -> ssl.SSLContext:
        """The context to give the listener's server once, at its creation. Its `sni_callback`, which OpenSSL
        calls in every handshake (with or without a server name), switches the connection to the context in
        force at that moment: its certificate, key and CA certificates. The verify mode and the lowest version
        stay the ones of the start, as does the rest of the configuration."""
        base = build_context(self.settings[(kind, name)])

        def pick(connection: ssl.SSLObject, _server_name: str | None, _base: ssl.SSLContext) -> None:
            connection.context = self._contexts[(kind, name)]

        base.sni_callback = pick
        return base

    def reload(self) -> int:
        """Build every context again from its files; swap them all, or (ConfigError) none. Returns how many."""
        fresh = {key: build_context(one) for key, one in self.settings.items()}
        self._contexts = fresh
        return len(fresh)


# ---------------------------------------------------------------------------------------------- cluster links
# (cluster.tls.*: docs/security.md, "Cluster links"; the network itself is vmqpy/cluster/tcp.py)

CLUSTER_KEYS: Mapping[str, str] = {option: f"cluster.tls.{option}" for option in ("cafile", "certfile", "keyfile")}


def cluster_settings(cafile: Path | None, certfile: Path | None, keyfile: Path | None,
                     sources: Mapping[str, str] | None = None) -> TlsSettings | None:
    """The TLS settings of the cluster links from the `cluster.tls.*` keys: None when none is set, ConfigError
    when only some are (both ends verify each other: a CA, a certificate and its key are all needed).
    `sources` maps a key to where it was set (FILE:LINE) for messages."""
    given = {"cafile": cafile, "certfile": certfile, "keyfile": keyfile}
    if all(path is None for path in given.values()):
        return None
    where = {opt: f"{sources[key]}: {key}" if sources and key in sources else key for opt, key in CLUSTER_KEYS.items()}
    missing = [CLUSTER_KEYS[opt] for opt, path in given.items() if path is None]
    if missing:
        raise ConfigError(f"cluster TLS needs cluster.tls.cafile, cluster.tls.certfile and cluster.tls.keyfile; "
                          f"{', '.join(missing)} not set")
    assert cafile is not None and certfile is not None and keyfile is not None
    return TlsSettings("cluster", "clustering", certfile, keyfile, cafile, require_certificate=True, where=where)


def build_client_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context a node dials its peers with: it presents its certificate and requires the peer's to verify
    against the CA. Host names are not checked (the cookie handshake names the node); ConfigError names the
    file that cannot be used."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = VERSIONS[settings.tls_version]
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    _load_chain(context, settings)
    if settings.cafile is None:
        raise ConfigError(f"{settings.source('cafile')}: the CA that peer certificates are verified against is needed")
    _load_ca(context, settings, settings.cafile)
    return context


class ClusterContexts:
    """The TLS contexts in force for the cluster links: `server()` for the listener (a client certificate is
    required), `client()` for our dials. The network asks for them at every new connection, so `reload()`
    (SIGHUP) reaches new links; live links keep the session they negotiated."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self._server = build_context(settings)
        self._client = build_client_context(settings)

    def server(self) -> ssl.SSLContext:
        return self._server

    def client(self) -> ssl.SSLContext:
        return self._client

    def reload(self) -> None:
        """Build both contexts again from their files; swap both, or (ConfigError) neither."""
        server, client = build_context(self.settings), build_client_context(self.settings)
        self._server, self._client = server, client


def cluster_contexts(config: Config) -> ClusterContexts | None:
    """The cluster links' TLS contexts from `cluster.tls.*`, or None for plain links. ConfigError names the key
    and the file that cannot be used (`vmqpy start` stops with exit code 2)."""
    settings = cluster_settings(config.cluster_tls_cafile, config.cluster_tls_certfile, config.cluster_tls_keyfile,
                                config.sources)
    return None if settings is None else ClusterContexts(settings)
