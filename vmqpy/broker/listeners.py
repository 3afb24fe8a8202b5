"""The node's MQTT listeners as asyncio servers: for each (kind, name) of the configuration, the protocol factory
that turns an accepted socket into a served connection, and the server itself.

tcp: a ConnectPrelude, which waits for the whole CONNECT (mqtt.connect_timeout) before it makes the
MQTTConnection (vmqpy.broker.preludes); with `proxy_protocol = on`, a ProxyPrelude before it.
ssl: a TLS server (the context in force is picked at each handshake, vmqpy.broker.tls), then, once the handshake
succeeded (AfterHandshake), a ConnectPrelude and the MQTTConnection as for tcp.
ws, wss: aiohttp's HTTP server (over TLS for wss, as for ssl) upgrading GET /mqtt to a WebSocket that carries an
MQTTConnection (vmqpy.broker.websocket); the upgrade request has mqtt.connect_timeout too.
Every kind counts its connections against the listener's `max_connections` (vmqpy.broker.listener_limit; TLS
connections from the end of their handshake, which has TLS_HANDSHAKE_TIMEOUT seconds; WebSocket listeners their
WebSockets), and
every MQTTConnection is in `connections` (the node's set: sessions shown by the admin, drain, shutdown) until its
socket is gone. The MQTT machinery is one and the same behind every kind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from aiohttp import web

from vmqpy import config as config_module
from vmqpy.broker import websocket
from vmqpy.broker.auth import Authenticator
from vmqpy.broker.broker import Broker
from vmqpy.broker.connection import MQTTConnection
from vmqpy.broker.listener_limit import ConnectionLimit, RefusedConnection
from vmqpy.broker.preludes import (
    CONNECT_MAX_SIZE,
    PROXY_REFUSED_METRIC,
    TLS_HANDSHAKE_TIMEOUT,
    AfterHandshake,
    ConnectPrelude,
    ConnectWait,
    FailureLog,
    ProxyPrelude,
)
from vmqpy.broker.tls import ListenerContexts
from vmqpy.config import Config
from vmqpy.storage import Storage

ProtocolFactory = Callable[[], asyncio.Protocol]


def label(kind: str, name: str) -> str:
    """How logs name a listener: `default` for listener.tcp.default, `ssl.default` for listener.ssl.default."""
    return name if kind == "tcp" else f"{kind}.{name}"


class Listeners:
    """Protocol factories and servers of the MQTT listeners of one node."""

    def __init__(
        self, config: Config, broker: Broker, storage: Storage | None, auth: Authenticator,
        connections: set[MQTTConnection], tls: ListenerContexts,
    ) -> None:
        self.config = config
        self.broker = broker
        self.storage = storage
        self.auth = auth
        self.connections = connections
        self.tls = tls
        self.loop = asyncio.get_running_loop()
        self._runners: dict[tuple[str, str], web.AppRunner] = {}  # the WebSocket listeners' aiohttp runners
        self.limits = {
            (kind, name): ConnectionLimit(label(kind, name), self.option(kind, name, "max_connections"),
                                          broker.metrics)
            for kind, name, _host, _port in config_module.mqtt_listeners(config)
        }
        # Before its CONNECT a socket has mqtt.connect_timeout seconds and max_message_size bytes (1 MiB unset).
        self.connect_waits = {
            (kind, name): ConnectWait(label(kind, name), config.connect_timeout,
                                      config.max_message_size or CONNECT_MAX_SIZE, broker.metrics)
            for kind, name, _host, _port in config_module.mqtt_listeners(config)
        }

    def option(self, kind: str, name: str, option: str) -> Any:
        return config_module.listener_option(self.config, name, option, kind)

    def open_mqtt(self, kind: str, name: str, peer: tuple[str, int] | None = None) -> MQTTConnection:
        """A new MQTTConnection of listener (kind, name), in `connections` until its socket is gone; `peer`
        (from a PROXY header) replaces the socket's peer address."""
        conn = MQTTConnection(self.broker, self.config, self.storage, self.auth, label(kind, name))
        conn.peer = peer
        conn.identity_as_username = bool(kind in config_module.TLS_KINDS
                                         and self.option(kind, name, "use_identity_as_username"))
        self.connections.add(conn)
        conn.on_lost += (self.connections.discard,)
        return conn

    def awaiting_connect(self, kind: str, name: str, release: Callable[[], None],
                         peer: tuple[str, int] | None = None) -> ConnectPrelude:
        """The protocol of a new socket of listener (kind, name) until its CONNECT is whole, then an MQTTConnection
        that runs `release` when its socket is gone (the prelude runs it if the socket goes before that)."""
        def open_connection() -> asyncio.Protocol:
            conn = self.open_mqtt(kind, name, peer)
            conn.on_lost = (_calling(release), *conn.on_lost)
            return conn

        return ConnectPrelude(open_connection, self.connect_waits[(kind, name)], release)

    def websocket_connection(self, kind: str, name: str) -> asyncio.Protocol:
        """The protocol of a new WebSocket of listener (kind, name): an MQTTConnection, or a refusal (the
        WebSocket is closed at once) when the listener is at max_connections."""
        limit = self.limits[(kind, name)]
        if not limit.admit(self.loop.time()):
            return RefusedConnection()
        conn = self.open_mqtt(kind, name)
        conn.on_lost = (_calling(limit.release), *conn.on_lost)
        return conn

    def factory(self, kind: str, name: str) -> ProtocolFactory:
        """The protocol factory of listener (kind, name) for `loop.create_server`."""
        limit = self.limits[(kind, name)]
        metrics = self.broker.metrics
        loop = self.loop

        if kind == "tcp" and self.option(kind, name, "proxy_protocol"):
            refusals = FailureLog(label(kind, name), PROXY_REFUSED_METRIC,
                                  "connection closed: no valid PROXY protocol header", metrics)

            def make_proxied() -> asyncio.Protocol:
                if not limit.admit(loop.time()):
                    return RefusedConnection()
                return ProxyPrelude(lambda peer: self.awaiting_connect(kind, name, limit.release, peer), refusals,
                                    limit.release)

            return make_proxied
        if kind in ("ws", "wss"):  # max_connections counts the WebSockets (websocket_connection)
            http = self._http_server(kind, name)
            return http if kind == "ws" else lambda: AfterHandshake(http)
        if kind in config_module.TLS_KINDS:
            def open_tls() -> asyncio.Protocol:
                if not limit.admit(loop.time()):
                    return RefusedConnection()
                return self.awaiting_connect(kind, name, limit.release)

            return lambda: AfterHandshake(open_tls)

        def make() -> asyncio.Protocol:
            if not limit.admit(loop.time()):
                return RefusedConnection()
            return self.awaiting_connect(kind, name, limit.release)

        return make

    def _http_server(self, kind: str, name: str) -> ProtocolFactory:
        """aiohttp's protocol factory for WebSocket listener (kind, name) (vmqpy.broker.websocket)."""
        runner = self._runners.get((kind, name))
        if runner is None:
            raise RuntimeError(f"listener {kind}.{name}: start() was not awaited")
        server = runner.server
        assert server is not None
        return server

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
        for runner in self._runners.values():
            await runner.cleanup()
        self._runners.clear()

    async def open(self, kind: str, name: str, host: str, port: int) -> asyncio.Server:
        """Listen on host:port for listener (kind, name)."""
        tls = None
        if kind in config_module.TLS_KINDS:
            tls = self.tls.server_context(kind, name)
        return await self.loop.create_server(self.factory(kind, name), host, port, reuse_address=True, backlog=1024,
                                             ssl=tls, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT if tls else None)


def _calling(release: Callable[[], None]) -> Callable[[MQTTConnection], None]:
    """`release` as a callback of MQTTConnection.on_lost (which gives it the connection, unused here)."""
    def lost(_conn: MQTTConnection) -> None:
        release()
    return lost
