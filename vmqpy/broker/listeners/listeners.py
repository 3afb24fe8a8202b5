"""The node's MQTT listeners as asyncio servers: for each (kind, name) of the configuration, the protocol factory
that turns an accepted socket into a served connection, and the server itself.

tcp: a ConnectPrelude, which waits for the whole CONNECT (mqtt.connect_timeout) before it makes the
MQTTConnection (vmqpy.broker.listeners.preludes); with `proxy_protocol = on`, a ProxyPrelude before it.
ssl: a plain server whose sockets first go through a HandshakePrelude (vmqpy.broker.listeners.handshake_prelude): the
PROXY header with `proxy_protocol = on`, then the TLS handshake (the context in force is picked at each
handshake, vmqpy.broker.listeners.tls; failed handshakes are counted and logged); then a ConnectPrelude and the
MQTTConnection as for tcp.
ws, wss: aiohttp's HTTP server (behind a HandshakePrelude for wss, or for ws with `proxy_protocol = on`)
upgrading GET /mqtt to a WebSocket that carries an MQTTConnection (vmqpy.broker.listeners.websocket); the upgrade
request
has mqtt.connect_timeout too. The client's address from a PROXY header reaches the MQTTConnection through
`proxied_peers` (vmqpy.broker.listeners.websocket.ProxiedPeers), by the socket under aiohttp's request.
Every kind counts its connections against the listener's `max_connections` and the node-wide descriptor budget
(`mqtt_sockets`, vmqpy.descriptors), and against the per-address limits of its client's address (the socket's
peer, or the PROXY header's source: vmqpy.broker.listeners.address_limit; tcp and ws from accept, with the sockets still
before CONNECT counted apart; ssl, wss and a PROXY header's listener from the end of the handshake)
(vmqpy.broker.listeners.listener_limit; TLS handshakes have TLS_HANDSHAKE_TIMEOUT seconds; a WebSocket listener's
sockets
count from before their HTTP upgrade until they are gone, through their PreConnectMeter), and
every MQTTConnection is in `connections` (the node's set: sessions shown by the admin, drain, shutdown) until its
socket is gone. The MQTT machinery is one and the same behind every kind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableSet
from functools import partial
from typing import TYPE_CHECKING, Any

from vmqpy import config as config_module
from vmqpy.broker.access.auth import Authenticator
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.driver.connect_budget import ConnectBudget, connect_max_size
from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.broker.listeners import websocket
from vmqpy.broker.listeners.address_limit import AddressLimits, Admission, address_of
from vmqpy.broker.listeners.handshake_prelude import TLS_HANDSHAKE_FAILED_METRIC, HandshakePrelude, OpenProtocol, Peer
from vmqpy.broker.listeners.listener_limit import (
    DESCRIPTORS_REFUSED_METRIC,
    AddressGate,
    ConnectionLimit,
    RefusedConnection,
)
from vmqpy.broker.listeners.preludes import (
    PROXY_REFUSED_METRIC,
    TLS_HANDSHAKE_TIMEOUT,
    ConnectPrelude,
    ConnectWait,
    FailureLog,
    ProxyPrelude,
)
from vmqpy.broker.listeners.tls import ListenerContexts
from vmqpy.config import Config
from vmqpy.storage import Storage

if TYPE_CHECKING:  # aiohttp runs the WebSocket listeners only (websocket.py imports it when one is served)
    from aiohttp import web

ProtocolFactory = Callable[[], asyncio.Protocol]


def label(kind: str, name: str) -> str:
    """How logs name a listener: `default` for listener.tcp.default, `ssl.default` for listener.ssl.default."""
    return name if kind == "tcp" else f"{kind}.{name}"


class Listeners:
    """Protocol factories and servers of the MQTT listeners of one node."""

    def __init__(
        self, config: Config, broker: Broker, storage: Storage | None, auth: Authenticator,
        connections: MutableSet[MQTTConnection], tls: ListenerContexts, mqtt_sockets: int | None = None,
        addresses: AddressLimits | None = None,
    ) -> None:
        self.config = config
        self.broker = broker
        self.storage = storage
        self.auth = auth
        self.connections = connections
        self.tls = tls
        self.loop = asyncio.get_running_loop()
        self._runners: dict[tuple[str, str], web.AppRunner] = {}  # the WebSocket listeners' aiohttp runners
        self._handshakes: set[asyncio.Task[None]] = set()  # TLS handshakes under way (HandshakePrelude)
        self.proxied_peers = websocket.ProxiedPeers()  # the clients' addresses of WebSocket listeners' PROXY headers
        # what a connection does when its socket is gone, by the max_connections place it releases (None: none):
        # one tuple shared by the connections of a listener, not a closure and a tuple of their own each
        self._on_lost: dict[Callable[[], None] | None, tuple[Callable[[MQTTConnection], None], ...]] = {}
        # every MQTT socket of the node, all listeners together: what its descriptors allow (None: no limit)
        self.node_limit = ConnectionLimit("node", mqtt_sockets, broker.metrics, metric=DESCRIPTORS_REFUSED_METRIC)
        self.addresses = addresses if addresses is not None else AddressLimits(None, None, broker.metrics)
        self.limits = {
            (kind, name): ConnectionLimit(label(kind, name), self.option(kind, name, "max_connections"),
                                          broker.metrics, shared=self.node_limit)
            for kind, name, _host, _port in config_module.mqtt_listeners(config)
        }
        # Before its CONNECT a socket has mqtt.connect_timeout seconds and mqtt.connect_max_size bytes (or
        # max_message_size, when smaller); all of them together hold at most mqtt.connect_budget bytes.
        self.connect_budget = ConnectBudget(config.connect_budget, broker.metrics)
        self.connect_max_size = connect_max_size(config)
        self.connect_waits = {
            (kind, name): ConnectWait(label(kind, name), config.connect_timeout, self.connect_max_size,
                                      broker.metrics, budget=self.connect_budget)
            for kind, name, _host, _port in config_module.mqtt_listeners(config)
        }
        self.ws_meters = websocket.PreConnectMeters()  # the WebSocket sockets' bytes before their CONNECT

    def option(self, kind: str, name: str, option: str) -> Any:
        return config_module.listener_option(self.config, name, option, kind)

    def open_mqtt(self, kind: str, name: str, peer: tuple[str, int] | None = None,
                  release: Callable[[], None] | None = None, admission: Admission | None = None) -> MQTTConnection:
        """A new MQTTConnection of listener (kind, name), in `connections` until its socket is gone, then running
        `release` (if given) first, and releasing its per-address `admission` (if any); `peer` (from a PROXY
        header) replaces the socket's peer address."""
        conn = MQTTConnection(self.broker, self.config, self.storage, self.auth, label(kind, name))
        conn.peer = peer
        conn.identity_as_username = bool(kind in config_module.TLS_KINDS
                                         and self.option(kind, name, "use_identity_as_username"))
        self.connections.add(conn)
        conn.on_lost = self._lost_callbacks(release)
        if admission is not None:  # one of its own: the address's count is the connection's
            conn.on_lost = (_calling(admission.release), *conn.on_lost)
        return conn

    def _lost_callbacks(self, release: Callable[[], None] | None) -> tuple[Callable[[MQTTConnection], None], ...]:
        """The on_lost of a connection: run `release`, then leave `connections` (shared by every connection with
        the same `release`: bound methods of one object are equal)."""
        callbacks = self._on_lost.get(release)
        if callbacks is None:
            leave = (self.connections.discard,)
            callbacks = self._on_lost[release] = leave if release is None else (_calling(release), *leave)
        return callbacks

    def awaiting_connect(self, kind: str, name: str, release: Callable[[], None],
                         peer: tuple[str, int] | None = None, admission: Admission | None = None) -> ConnectPrelude:
        """The protocol of a new socket of listener (kind, name) until its CONNECT is whole, then an MQTTConnection
        that runs `release` when its socket is gone (the prelude runs it if the socket goes before that). Its
        per-address `admission` (if any) stops counting as pending at the CONNECT and is released with it."""
        def open_connection() -> asyncio.Protocol:
            if admission is not None:
                admission.connected()
            conn = self.open_mqtt(kind, name, peer, release, admission)
            conn.connect_waited = True  # the prelude had mqtt.connect_timeout and hands on a whole CONNECT
            return conn

        on_lost = release if admission is None else _both(release, admission.release)
        return ConnectPrelude(open_connection, self.connect_waits[(kind, name)], on_lost)

    def admit_address(self, peer: object, release: Callable[[], None]) -> tuple[bool, Admission | None]:
        """The per-address admission of a socket whose client is `peer` ((host, port), from the socket or a PROXY
        header): (False, None) when its address is at a limit (then `release` ran: the listener's place is
        freed), (True, None) for a peer without an address or no per-address limit."""
        address = address_of(peer)
        if address is None or self.addresses.unlimited:
            return True, None
        admission = self.addresses.admit(address, self.loop.time())
        if admission is None:
            release()
            return False, None
        return True, admission

    def websocket_connection(self, kind: str, name: str, request: web.BaseRequest | None = None) -> asyncio.Protocol:
        """The protocol of a new WebSocket of listener (kind, name) upgraded from `request`: an MQTTConnection
        (whose peer is the one a PROXY header gave the request's socket, if any). Its socket holds its places in
        max_connections and the per-address limits since its accept (its PreConnectMeter); without a meter (no
        request) they are taken here, and a refusal (the WebSocket is closed at once) at a limit."""
        peer = None if request is None else self.proxied_peers.peer_of(request)
        meter = None if request is None else self.ws_meters.of(request)
        if meter is not None:
            conn = self.open_mqtt(kind, name, peer)
            conn.on_connected = meter.connected
            return conn
        limit = self.limits[(kind, name)]
        if not limit.admit(self.loop.time()):
            return RefusedConnection()
        client: object = peer  # behind a PROXY header without an address (a health check): none
        if client is None and request is not None and request.remote and not self.option(kind, name, "proxy_protocol"):
            client = (request.remote, 0)  # the socket's peer (aiohttp noted it at the accept)
        admitted, admission = self.admit_address(client, limit.release)
        if not admitted:
            return RefusedConnection()
        if admission is not None:
            admission.connected()  # a WebSocket counts per address from its upgrade, not as pending
        return self.open_mqtt(kind, name, peer, limit.release, admission)

    def factory(self, kind: str, name: str) -> ProtocolFactory:
        """The protocol factory of listener (kind, name) for `loop.create_server`."""
        limit = self.limits[(kind, name)]
        metrics = self.broker.metrics
        loop = self.loop
        refusals = None
        if self.option(kind, name, "proxy_protocol"):
            refusals = FailureLog(label(kind, name), PROXY_REFUSED_METRIC,
                                  "connection closed: no valid PROXY protocol header", metrics)

        if kind == "tcp" and refusals is not None:
            proxy_failures = refusals  # narrowed, for the closure

            def after_header(peer: tuple[str, int] | None) -> asyncio.Protocol:
                # the client's address is the header's (None: a health check of the balancer, not counted)
                admitted, admission = self.admit_address(peer, limit.release)
                if not admitted:
                    return RefusedConnection()
                return self.awaiting_connect(kind, name, limit.release, peer, admission)

            def make_proxied() -> asyncio.Protocol:
                if not limit.admit(loop.time()):
                    return RefusedConnection()
                return ProxyPrelude(after_header, proxy_failures, limit.release)

            return make_proxied
        if kind in config_module.TLS_KINDS or refusals is not None:  # ssl, wss; ws with the PROXY header
            return self._prelude_factory(kind, name, refusals)
        addresses = self.addresses
        if kind == "ws":  # counted from the accept, released by the socket's PreConnectMeter when it is gone
            http = self._http_server(kind, name)

            def make_http() -> asyncio.Protocol:
                if not limit.admit(loop.time()):
                    return RefusedConnection()
                if addresses.unlimited:
                    return http(limit.release, None)
                return AddressGate(addresses, partial(http, limit.release), limit.release)

            return make_http

        if addresses.unlimited:
            def make() -> asyncio.Protocol:
                if not limit.admit(loop.time()):
                    return RefusedConnection()
                return self.awaiting_connect(kind, name, limit.release)

            return make

        def admitted(admission: Admission | None) -> asyncio.Protocol:
            return self.awaiting_connect(kind, name, limit.release, None, admission)

        def make_gated() -> asyncio.Protocol:
            if not limit.admit(loop.time()):
                return RefusedConnection()
            return AddressGate(addresses, admitted, limit.release)

        return make_gated

    def _prelude_factory(self, kind: str, name: str, refusals: FailureLog | None) -> ProtocolFactory:
        """Sockets of listener (kind, name) go through a HandshakePrelude: the PROXY header when `refusals` is
        given, the TLS handshake on ssl and wss listeners; then the listener's own protocol."""
        limit = self.limits[(kind, name)]
        loop = self.loop
        context = None
        tls_failures = None
        if kind in config_module.TLS_KINDS:
            context = self.tls.server_context(kind, name)  # once: its SNI callback picks the context in force
            tls_failures = FailureLog(label(kind, name), TLS_HANDSHAKE_FAILED_METRIC,
                                      "connection closed: TLS handshake failed", self.broker.metrics)

        def admitted(peer: Peer | None, transport: asyncio.Transport) -> tuple[bool, Admission | None]:
            """The socket's places in the listener's limit and its address's (released again on a refusal)."""
            if not limit.admit(loop.time()):
                return False, None
            # behind a PROXY header without an address (a health check): none
            client = peer if peer is not None or refusals is not None else transport.get_extra_info("peername")
            return self.admit_address(client, limit.release)

        if kind in ("ws", "wss"):  # counted from the end of the handshake (PROXY header, TLS) until it is gone
            http = self._http_server(kind, name)

            def open_http(peer: Peer | None, transport: asyncio.Transport) -> asyncio.Protocol:
                ok, admission = admitted(peer, transport)
                if not ok:
                    return RefusedConnection()
                handler = http(limit.release, admission)
                return handler if peer is None else self.proxied_peers.note(handler, peer)

            open_protocol: OpenProtocol = open_http
        else:
            def open_mqtt(peer: Peer | None, transport: asyncio.Transport) -> asyncio.Protocol:
                ok, admission = admitted(peer, transport)
                if not ok:
                    return RefusedConnection()
                return self.awaiting_connect(kind, name, limit.release, peer, admission)

            open_protocol = open_mqtt

        def make() -> asyncio.Protocol:
            return HandshakePrelude(open_protocol, tls=context, tls_failures=tls_failures, proxy_failures=refusals,
                                    pending=self._handshakes, handshake_timeout=TLS_HANDSHAKE_TIMEOUT)

        return make

    def _http_server(self, kind: str, name: str) -> Callable[[Callable[[], None], Admission | None], asyncio.Protocol]:
        """aiohttp's protocol factory for WebSocket listener (kind, name) (vmqpy.broker.listeners.websocket), given
        what frees
        the socket's place in max_connections (`release`) and its per-address `admission` when it is gone."""
        runner = self._runners.get((kind, name))
        if runner is None:
            raise RuntimeError(f"listener {kind}.{name}: start() was not awaited")
        server = runner.server
        assert server is not None
        wait = self.connect_waits[(kind, name)]
        allowance = websocket.UPGRADE_ALLOWANCE + self.connect_max_size
        budget, meters = self.connect_budget, self.ws_meters

        def make(release: Callable[[], None], admission: Admission | None) -> asyncio.Protocol:
            # each socket's bytes are counted until its CONNECT, its places until it is gone (PreConnectMeter)
            return meters.meter(server(), allowance, budget, wait.too_large, wait.over_budget, release, admission)

        return make

    async def start(self) -> None:
        """Set up what the WebSocket listeners serve (once; `close` undoes it)."""
        for kind, name, _host, _port in config_module.mqtt_listeners(self.config):
            if kind in ("ws", "wss") and (kind, name) not in self._runners:
                largest = self.config.max_message_size or websocket.LARGEST_PACKET
                app = websocket.application(partial(self.websocket_connection, kind, name), largest)
                runner = websocket.runner(app, self.config.connect_timeout)
                await runner.setup()
                self._runners[(kind, name)] = runner

    async def close(self) -> None:
        for task in list(self._handshakes):
            task.cancel()
        for runner in self._runners.values():
            await runner.cleanup()
        self._runners.clear()

    async def open(self, kind: str, name: str, host: str, port: int) -> asyncio.Server:
        """Listen on host:port for listener (kind, name). TLS listeners are plain servers too: their handshake
        runs in the HandshakePrelude, after the PROXY header if there is one."""
        return await self.loop.create_server(self.factory(kind, name), host, port, reuse_address=True, backlog=1024,
                                             reuse_port=self.config.reuse_port or None)


def _both(first: Callable[[], None], then: Callable[[], None]) -> Callable[[], None]:
    def both() -> None:
        first()
        then()
    return both


def _calling(release: Callable[[], None]) -> Callable[[MQTTConnection], None]:
    """`release` as a callback of MQTTConnection.on_lost (which gives it the connection, unused here)."""
    def lost(_conn: MQTTConnection) -> None:
        release()
    return lost
