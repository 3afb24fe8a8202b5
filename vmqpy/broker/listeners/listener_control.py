"""The life of a node's MQTT listeners as the operator sees it: opened at start (and again after a `leave -k`
closed them), listed, stopped and started one at a time (`vmq-admin listener show|stop|start|restart`), and
closed for good by a drain (`vmq-admin node drain`), which then disconnects the clients at a bounded rate
(the pace is vmqpy.drain's).

`ListenerControl` holds the servers of vmqpy.broker.listeners.listeners' `Listeners` and the node's set of live
connections; vmqpy.node wires it and answers the admin commands with it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, MutableSet
from typing import Any

import structlog

from vmqpy import config as config_module
from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.broker.listeners.listeners import Listeners, label
from vmqpy.config import Config
from vmqpy.drain import Drain, Outcome
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.packets import Disconnect

log = structlog.get_logger("vmqpy.node")

__all__ = ["LISTENER_TYPES", "ListenerControl"]

#: VerneMQ's names of the listener kinds in `listener show`
LISTENER_TYPES = {"tcp": "mqtt", "ssl": "mqtts", "ws": "mqttws", "wss": "mqttwss"}


class ListenerControl:
    """The servers of the MQTT listeners of `config`; `connections` is the node's set of live connections.
    `left()` tells whether the node left the cluster (its listeners then stay as they are until it joins)."""

    def __init__(self, config: Config, connections: MutableSet[MQTTConnection], left: Callable[[], bool]) -> None:
        self.config = config
        self.connections = connections
        self._left = left
        self.listener_set: Listeners | None = None  # set once the node serves
        self.socket_budget: int | None = None  # the MQTT sockets the node's descriptors allow (vmqpy.descriptors)
        self.servers: list[asyncio.Server] = []
        self._server_of: dict[tuple[str, str], asyncio.Server] = {}  # (kind, name) -> its server while it listens
        self.stopped: set[tuple[str, str]] = set()  # `vmq-admin listener stop`, until `listener start`
        self.drain: Drain | None = None  # set by `vmq-admin node drain`; the node stays drained until it stops
        self._draining: asyncio.Lock | None = None

    async def open_all(self) -> None:
        """Open the MQTT listeners, or open them again when a `leave -k` closed them (a node that left answers
        every CONNECT with server unavailable, and serves again once it joins). A drained node's stay closed."""
        listener_set = self.listener_set
        serving = bool(self.servers) and all(s.is_serving() for s in self.servers)
        if listener_set is None or self.drain is not None or serving:
            return
        self.close_servers()
        self._server_of = {}
        for kind, name, host, port in config_module.mqtt_listeners(self.config):
            if (kind, name) in self.stopped:
                continue
            server = await listener_set.open(kind, name, host, port)
            self.servers.append(server)
            self._server_of[(kind, name)] = server

    def close_servers(self) -> None:
        """Accept no new connection (the live ones stay)."""
        for server in self.servers:
            server.close()
        self.servers = []

    def advertised(self) -> dict[str, str]:
        """Where clients reach this node, by listener kind: the first listening listener of each kind (by
        name), at its `advertise` address, else the address it is bound to."""
        addresses: dict[str, str] = {}
        for kind, name, _host, _port in config_module.mqtt_listeners(self.config):
            server = self._server_of.get((kind, name))
            if kind in addresses or server is None or not server.sockets:
                continue
            advertise = config_module.listener_option(self.config, name, "advertise", kind)
            host, port = advertise if advertise is not None else server.sockets[0].getsockname()[:2]
            addresses[kind] = f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
        return addresses

    def bound_ports(self) -> list[tuple[str, int]]:
        """The (host, port) every listening socket is bound to (port 0 in the configuration: the one given)."""
        return [(str(sock.getsockname()[0]), int(sock.getsockname()[1])) for server in self.servers
                for sock in server.sockets]

    # ------------------------------------------------------------------------- admin.cli.listener

    def rows(self) -> list[dict[str, Any]]:
        """`vmq-admin listener show`: every MQTT listener of the configuration, running or stopped, with VerneMQ's
        columns (type, status, ip, port, mountpoint, max_conns) and ours (name, active_conns). max_conns is the
        listener's max_connections, at most the MQTT sockets the node's descriptors allow (vmqpy.descriptors)."""
        active = Counter(conn.listener for conn in self.connections)
        budget = self.socket_budget
        rows = []
        for kind, name, host, port in config_module.mqtt_listeners(self.config):
            server = self._server_of.get((kind, name))
            running = server is not None and server.is_serving()
            if running:
                assert server is not None
                port = int(server.sockets[0].getsockname()[1]) if server.sockets else port
            limit = config_module.listener_option(self.config, name, "max_connections", kind)
            if budget is not None:
                limit = budget if limit is None else min(limit, budget)
            rows.append({
                "type": LISTENER_TYPES[kind], "status": "running" if running else "stopped", "ip": host,
                "port": port, "mountpoint": "", "max_conns": "infinity" if limit is None else limit,
                "name": label(kind, name), "active_conns": active.get(label(kind, name), 0),
            })
        return rows

    def _listener_at(self, address: str, port: int) -> tuple[str, str]:
        """The (kind, name) of the listener at address:port (its configured or its bound port); LookupError."""
        for row, (kind, name, _host, configured) in zip(
                self.rows(), config_module.mqtt_listeners(self.config), strict=True):
            if row["ip"] == address and port in (row["port"], configured):
                return kind, name
        raise LookupError(f"no MQTT listener at {address}:{port} (vmq-admin listener show lists them)")

    def stop(self, address: str, port: int, kill_sessions: bool) -> str:
        """`vmq-admin listener stop`: the listener at address:port refuses new connections until `listener start`
        (its live connections stay, unless `kill_sessions`: then they are disconnected, 5.0 with DISCONNECT
        0x98 Administrative action). LookupError: no such listener."""
        kind, name = self._listener_at(address, port)
        self.stopped.add((kind, name))
        server = self._server_of.pop((kind, name), None)
        if server is not None:
            server.close()
            self.servers = [s for s in self.servers if s is not server]
        killed = 0
        if kill_sessions:
            for conn in [c for c in self.connections if c.listener == label(kind, name) and not c.closing]:
                _disconnect_by_operator(conn)
                killed += 1
        log.info("listener stopped", listener=label(kind, name), address=f"{address}:{port}", disconnected=killed)
        return f"listener {label(kind, name)} at {address}:{port} stopped" + (
            f"; {killed} connections closed" if kill_sessions else "")

    async def start(self, address: str, port: int) -> str:
        """`vmq-admin listener start|restart`: listen again on a listener that `listener stop` stopped.
        LookupError: no such listener; RuntimeError: the node drains or left (its listeners stay closed);
        OSError: the address cannot be bound."""
        kind, name = self._listener_at(address, port)
        if self.drain is not None:
            raise RuntimeError("the node drains: its listeners stay closed until it stops")
        if (kind, name) in self._server_of and self._server_of[(kind, name)].is_serving():
            return f"listener {label(kind, name)} at {address}:{port} is running already"
        listener_set = self.listener_set
        if listener_set is None or self._left():
            raise RuntimeError("the node serves no client now (it left the cluster, or has not started)")
        self.stopped.discard((kind, name))
        configured = next(p for k, n, _h, p in config_module.mqtt_listeners(self.config) if (k, n) == (kind, name))
        server = await listener_set.open(kind, name, address, configured or port)
        self.servers.append(server)
        self._server_of[(kind, name)] = server
        log.info("listener started", listener=label(kind, name), address=f"{address}:{port}")
        return f"listener {label(kind, name)} at {address}:{port} started"

    # ------------------------------------------------------------------------- admin.cli.node drain

    def drain_reason(self) -> str | None:
        """What `/health` says while the node drains (it answers 503 from the first moment on); None when not."""
        drain = self.drain
        if drain is None:
            return None
        return f"draining ({drain.outcome.value}, {len(self.connections)} connections left)"

    async def drain_clients(self, rate: float, timeout: float) -> tuple[Outcome, int, int]:
        """`vmq-admin node drain`: stop accepting MQTT connections, fail the health check, then disconnect the
        clients at most `rate` per second (vmqpy.drain) until none is left or `timeout` seconds pass. 5.0 clients
        get DISCONNECT 0x8B (Server shutting down), 3.1.1 clients see the socket close; no will is published
        (as when the node stops). Persistent sessions stay here, offline, and keep queueing until their
        client connects to another node, which takes them over. The node stays drained (listeners closed, not
        ready) until it stops; a timed-out drain leaves the remaining clients connected.
        Returns (outcome, clients disconnected by this drain, connections left). ValueError: bad rate/timeout."""
        loop = asyncio.get_running_loop()
        drain = Drain(rate=rate, timeout=timeout, started=loop.time())
        if self._draining is None:
            self._draining = asyncio.Lock()
        async with self._draining:  # a second drain waits for the first, then drains what is left
            drain.started = loop.time()
            self.drain = drain
            log.info("draining", rate=rate, timeout=timeout, connections=len(self.connections))
            for server in self.servers:
                server.close()  # new TCP connections are refused from now on
            told: set[MQTTConnection] = set()
            while True:
                waiting = sorted((c for c in self.connections if not c.closing and c not in told),
                                 key=lambda c: (c.client_id, id(c)))
                leaving = sum(1 for c in self.connections if c.closing or c in told)
                step = drain.step(loop.time(), waiting, leaving)
                for conn in step.disconnect:
                    told.add(conn)
                    _tell_to_go(conn)
                if step.wake_at is None:
                    break
                await asyncio.sleep(max(0.0, step.wake_at - loop.time()))
            log.info("drained", outcome=drain.outcome.value, disconnected=drain.disconnected,
                     left=len(self.connections))
            return drain.outcome, drain.disconnected, len(self.connections)


def _disconnect_by_operator(conn: MQTTConnection) -> None:
    """`listener stop -k`: 5.0 clients get DISCONNECT 0x98 (Administrative action), 3.1.1 ones see the socket
    close; a will is published as for any disconnect without DISCONNECT."""
    conn.log.info("disconnecting: its listener was stopped with --kill_sessions")
    if conn.level == 5 and conn.session is not None:
        conn.write_packet(Disconnect(rc.ADMINISTRATIVE_ACTION))
    conn.close()


def _tell_to_go(conn: MQTTConnection) -> None:
    """A drain disconnects a client: 5.0 with DISCONNECT 0x8B (Server shutting down), 3.1.1 by closing."""
    conn.log.info("disconnecting: the node drains")
    if conn.level == 5 and conn.session is not None:
        conn.write_packet(Disconnect(rc.SERVER_SHUTTING_DOWN))
    conn.normal_close = True  # no will: the client is expected to reconnect to another node
    conn.close()
