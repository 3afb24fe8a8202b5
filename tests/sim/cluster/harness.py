"""Real nodes in one process on simulated time: `SimNode` (a `vmqpy.node.Node` on the memory links and a storage
without thread), `SimCluster` (the nodes of one simulation: start, crash with or without disk, restart, join,
leave) and `SimClient` (a scripted MQTT 3.1.1 client on the broker's real `MQTTConnection`, through an in-memory
transport).

What stops two Nodes sharing one process, and how the harness lives with it:
* `Node.running()` installs a SIGHUP handler on the loop (process-wide; the last node's wins, each removes it on
  stop): harmless here, nothing sends SIGHUP;
* `raise_open_files_limit()` (rlimit, process-wide) is raised once per start: idempotent;
* `logconfig.set_connection_lines` and the structlog configuration are process-wide: the simulation quiets
  structlog to errors for its duration (`quiet_logs`);
* the MQTT listeners open real sockets: `Listeners.open` is patched to a server that listens nowhere, and the
  clients' connections are made with the listener's own `open_mqtt`;
* the storage's writer thread would race the virtual clock: `SimStorage` commits on the loop;
* sdnotify writes to $NOTIFY_SOCKET only when it is set (never in tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import tempfile
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import structlog

from vmqpy import config as config_module
from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.broker.listeners.listeners import Listeners
from vmqpy.cluster.memory_links import MemoryCluster, MemoryLinks
from vmqpy.config import Config
from vmqpy.mqtt.decoder import Decoder
from vmqpy.mqtt.encoder import encode
from vmqpy.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    SubOptions,
    Subscribe,
    Subscription,
)
from vmqpy.node import Node

from .virtual import SimStorage, VirtualClock, VirtualLoop, clock_patches

COOKIE = "sim-cookie"
CLIENT_LATENCY = (0.0002, 0.002)  # seconds a client's bytes take each way
KEEP_ALIVE = 600  # longer than a history: the scripted clients send no PINGREQ, and a socket a client abandoned
#                   stays open until the broker closes it (a takeover), not until its keep-alive runs out


class _NowhereServer:
    """What `Listeners.open` hands back in the simulation: a server that listens on no socket."""

    def __init__(self) -> None:
        self.sockets: list[Any] = []
        self._serving = True

    def is_serving(self) -> bool:
        return self._serving

    def close(self) -> None:
        self._serving = False

    async def wait_closed(self) -> None:
        return None


async def _open_nowhere(self: Listeners, kind: str, name: str, host: str, port: int) -> Any:
    return _NowhereServer()


@contextlib.contextmanager
def process_patches() -> Iterator[None]:
    """The process-wide work-arounds of the module docstring (listeners, logs) while the block runs."""
    from unittest import mock

    with mock.patch.object(Listeners, "open", _open_nowhere), quiet_logs():
        yield


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """structlog and logging at ERROR while the block runs (the nodes log every join, leave and takeover)."""
    before = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    try:
        yield
    finally:
        structlog.configure(**before)


class SimNode(Node):
    """A real node whose cluster links are `MemoryLinks` on `memory` and whose storage is a `SimStorage`."""

    def __init__(self, config: Config, memory: MemoryCluster) -> None:
        super().__init__(config)
        self.memory = memory
        self.links: MemoryLinks | None = None
        self.sim_storage: SimStorage | None = None

    @contextlib.asynccontextmanager
    async def _network(self, incarnation: int) -> AsyncIterator[Any]:
        address = self.config.cluster_listener
        assert address is not None
        links = self.links = MemoryLinks(
            self.memory, self.config.nodename, incarnation, self.config.distributed_cookie, address,
            detect_timeout=self.config.detect_timeout, incoming_buffer=self.config.incoming_clustering_buffer_size,
            outgoing_buffer=self.config.outgoing_clustering_buffer_size)
        await links.start()
        try:
            yield links
        finally:
            await links.stop()

    @contextlib.asynccontextmanager
    async def _storage(self) -> AsyncIterator[Any]:
        self.config.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        storage = self.storage = self.sim_storage = SimStorage(self.config.data_dir / "broker.db")
        storage.open()
        try:
            yield storage
        finally:
            storage.close()


def node_config(name: str, index: int, data_dir: Path, extra: dict[str, str] | None = None) -> Config:
    settings = {
        "nodename": f"{name}@10.0.0.{index}",
        "platform_data_dir": str(data_dir),
        "listener.tcp.default": f"10.0.0.{index}:1883",
        "listener.vmq.clustering": f"10.0.0.{index}:44053",
        "distributed_cookie": COOKIE,
        "cluster.detect_timeout": "1s",
        "metadata.sync_interval": "1s",
        "allow_anonymous": "on",
        "systree_enabled": "off",
        **(extra or {}),
    }
    return config_module.load(None, environ={}, flags=[f"{k}={v}" for k, v in settings.items()])


class Slot:
    """One node of the simulation across its lives: its name, data dir and the node of its current life."""

    def __init__(self, label: str, index: int, root: Path, memory: MemoryCluster,
                 extra: dict[str, str] | None = None) -> None:
        self.label = label  # n1, n2, ...
        self.index = index
        self.data_dir = root / label
        self.memory = memory
        self.config = node_config(label, index, self.data_dir, extra)
        self.name = self.config.nodename  # n1@10.0.0.1
        self.node: SimNode | None = None
        self.lives = 0
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self.clients: dict[ServerPipe, None] = {}  # in the order they connected (a set's order is the heap's)

    @property
    def up(self) -> bool:
        return self.node is not None and self.node.broker is not None and self._task is not None \
            and not self._task.done()

    async def start(self) -> None:
        node = self.node = SimNode(self.config, self.memory)
        self.lives += 1
        started = asyncio.get_running_loop().create_future()
        stop = self._stop = asyncio.Event()

        async def life() -> None:
            try:
                async with node.running():
                    started.set_result(None)
                    await stop.wait()
            except BaseException as exc:
                if not started.done():
                    started.set_exception(exc)
                raise

        self._task = asyncio.get_running_loop().create_task(life())
        await started

    async def stop(self) -> None:
        """A clean stop (SIGTERM)."""
        if self._stop is not None and self._task is not None:
            self._stop.set()
            await self._task
        self.node = None

    async def crash(self, keep_disk: bool) -> None:
        """kill -9: nothing of the node is heard again; its data dir stays (`keep_disk`) or is gone."""
        node, task = self.node, self._task
        if node is None or task is None:
            return
        self.memory.crash(self.name)
        if node.sim_storage is not None:
            node.sim_storage.crash()
        for pipe in list(self.clients):
            pipe.reset()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        self.node = None
        if not keep_disk:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def connect(self, client: SimClient) -> ServerPipe:
        """A new MQTT connection of `client` into this node's default TCP listener; refused (the client hears a
        reset) while the listeners are closed (a `leave -k` drains the node)."""
        node = self.node
        assert node is not None and node.listeners.listener_set is not None
        if not node.listeners.servers:
            pipe = ServerPipe(self, None, client)
            pipe.reset()
            return pipe
        conn = node.listeners.listener_set.open_mqtt("tcp", "default")
        conn.connect_waited = False
        pipe = ServerPipe(self, conn, client)
        self.clients[pipe] = None
        conn.connection_made(pipe)
        return pipe


class ServerPipe(asyncio.Transport):
    """The in-memory socket between one `SimClient` and one node's `MQTTConnection`: bytes keep their order each
    way, each chunk takes a seeded latency; `pause_reading` holds the client's bytes at the server."""

    def __init__(self, slot: Slot, conn: MQTTConnection | None, client: SimClient) -> None:
        """`conn` None: a refused connection (reset at once, nothing reaches a server side)."""
        super().__init__()
        self.slot = slot
        self.conn = conn
        self.client = client
        self.loop = asyncio.get_running_loop()
        self.closing = False
        self.gone = False  # the client side is closed (a reset, or the server closed)
        self.paused = False
        self._held: list[bytes] = []
        self._to_server: deque[tuple[float, bytes]] = deque()
        self._to_client: deque[tuple[float, bytes | None]] = deque()
        self._last = {"server": 0.0, "client": 0.0}

    def _arrival(self, way: str) -> float:
        low, high = CLIENT_LATENCY
        # strictly later than the chunk before: timers due at the same time may run in any order
        at: float = max(self.loop.time() + self.client.rng.uniform(low, high), self._last[way] + 1e-6)
        self._last[way] = at
        return at

    # the server's side (asyncio.Transport)
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing or self.gone:
            return
        self.loop.call_at(self._arrival("client"), self._to_client_side, bytes(data))

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def _to_client_side(self, data: bytes | None) -> None:
        if self.gone:
            return
        if data is None:
            self.gone = True
            self.client.lost(self)
        else:
            self.client.received(self, data)

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        self.loop.call_at(self._arrival("client"), self._to_client_side, None)
        self.loop.call_soon(self._server_lost)

    def abort(self) -> None:
        self.close()

    def _server_lost(self) -> None:
        self.slot.clients.pop(self, None)
        if self.conn is not None:
            self.conn.connection_lost(None)

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return (f"192.168.0.{self.client.index % 250 + 1}", 40000 + self.client.index)
        if name == "sockname":
            return (f"10.0.0.{self.slot.index}", 1883)
        return default

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        if not self.paused:
            return
        self.paused = False
        held, self._held = self._held, []
        for data in held:
            if not self.closing and self.conn is not None:
                self.conn.data_received(data)

    def is_reading(self) -> bool:
        return not self.paused

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return False

    # the client's side
    def send(self, data: bytes) -> None:
        if self.gone:
            return
        self.loop.call_at(self._arrival("server"), self._to_server_side, data)

    def _to_server_side(self, data: bytes) -> None:
        if self.closing:
            return
        if self.paused:
            self._held.append(data)
        elif self.conn is not None:
            self.conn.data_received(data)

    def hang_up(self) -> None:
        """The client closes its socket without DISCONNECT."""
        if self.gone:
            return
        self.gone = True
        self.loop.call_at(self._arrival("server"), self._hung_up)

    def _hung_up(self) -> None:
        if not self.closing:
            self.closing = True
            self._server_lost()

    def reset(self) -> None:
        """The node died: the client hears a reset, the server side hears nothing."""
        self.closing = True
        self.slot.clients.pop(self, None)
        self.loop.call_at(self._arrival("client"), self._to_client_side, None)


class SimClient:
    """A scripted MQTT 3.1.1 client: connect to a node, subscribe, publish QoS 0-2; it keeps what it received
    (QoS 2 by packet id, as a receiver that delivers on PUBLISH and forgets the id at PUBREL) and what the broker
    acknowledged."""

    def __init__(self, client_id: str, index: int, rng: random.Random, *, clean: bool = False) -> None:
        self.client_id = client_id
        self.index = index
        self.rng: random.Random = rng
        self.clean = clean
        self.pipe: ServerPipe | None = None
        self.connected = False
        self.node: str | None = None
        self._decoder: Decoder | None = None
        self._next_id = 0
        self.deliveries: list[tuple[str, bytes, int]] = []  # (topic, payload, qos) delivered to the application
        self.qos2_ids: set[int] = set()  # QoS 2 packet ids received and not yet released (the session's state)
        self.acked: dict[int, Publish] = {}  # our publishes acknowledged (PUBACK, or PUBREC for QoS 2)
        self.pending: dict[int, Publish] = {}  # our publishes not yet acknowledged
        self.subacks: dict[int, list[int]] = {}
        self.on_ack: Callable[[Publish], None] | None = None
        self.on_suback: Callable[[int, list[int]], None] | None = None
        self.on_connack: Callable[[Connack], None] | None = None
        self.on_lost: Callable[[], None] | None = None  # the connection was closed by the node (or the node died)
        self.connacks: list[Connack] = []
        self.disconnects = 0
        self.trace: list[str] = []  # what happened to this client, one line each (for a failing seed's report)

    def note(self, what: str) -> None:
        loop = asyncio.get_running_loop()
        self.trace.append(f"{loop.time():10.3f} {self.client_id} {what}")

    def packet_id(self) -> int:
        self._next_id = self._next_id % 65535 + 1
        return self._next_id

    def connect(self, slot: Slot, *, clean: bool | None = None, abandon: bool = False) -> None:
        """CONNECT through `slot`; the connection before is closed, or with `abandon` left open as a client that
        moved to another network leaves its old socket (the broker must take the session over from it)."""
        if self.pipe is not None and not abandon:
            self.pipe.hang_up()
        self.connected = False
        self.node = slot.name
        self._decoder = Decoder(server=False, protocol_level=4)
        pipe = self.pipe = slot.connect(self)
        self.note(f"connect to {slot.label}")
        connect = Connect(self.client_id, 4, clean_start=self.clean if clean is None else clean,
                          keep_alive=KEEP_ALIVE)
        pipe.send(encode(connect, 4))

    def _send(self, packet: Any) -> None:
        if self.pipe is not None and not self.pipe.gone:
            self.pipe.send(encode(packet, 4))

    def subscribe(self, topic: str, qos: int) -> int:
        pid = self.packet_id()
        self._send(Subscribe(pid, [Subscription(topic, SubOptions(qos))]))
        return pid

    def publish(self, topic: str, payload: bytes, qos: int) -> int | None:
        pid = self.packet_id() if qos else None
        packet = Publish(topic, payload, qos, packet_id=pid)
        if pid is not None:
            self.pending[pid] = packet
        self._send(packet)
        return pid

    def disconnect(self) -> None:
        self._send(Disconnect())
        if self.pipe is not None:
            self.pipe.hang_up()
        self.pipe = None
        self.connected = False

    def hang_up(self) -> None:
        self.note("hang up")
        if self.pipe is not None:
            self.pipe.hang_up()
        self.pipe = None
        self.connected = False

    def lost(self, pipe: ServerPipe) -> None:
        if pipe is self.pipe:
            self.note("connection lost")
            self.pipe = None
            self.connected = False
            self.disconnects += 1
            if self.on_lost is not None:
                self.on_lost()

    def received(self, pipe: ServerPipe, data: bytes) -> None:
        if pipe is not self.pipe or self._decoder is None:
            return
        decoder = self._decoder
        decoder.receive_data(data)
        while True:
            packet = decoder.next_packet()
            if not hasattr(packet, "type"):
                return
            self._handle(packet)

    def _handle(self, packet: Any) -> None:
        if isinstance(packet, Connack):
            self.connacks.append(packet)
            self.note(f"connack {packet.reason_code} session_present={packet.session_present}")
            self.connected = packet.reason_code == 0
            if self.on_connack is not None:
                self.on_connack(packet)
        elif isinstance(packet, Suback):
            self.subacks[packet.packet_id] = list(packet.reason_codes)
            if self.on_suback is not None:
                self.on_suback(packet.packet_id, list(packet.reason_codes))
        elif isinstance(packet, (Puback, Pubrec)):
            published = self.pending.pop(packet.packet_id, None)
            if isinstance(packet, Pubrec):
                self._send(Pubrel(packet.packet_id))
            if published is not None and packet.reason_code < 0x80:
                self.acked[packet.packet_id] = published
                if self.on_ack is not None:
                    self.on_ack(published)
        elif isinstance(packet, Pubcomp):
            pass
        elif isinstance(packet, Publish):
            self.note(f"publish {packet.payload.decode()} qos={packet.qos} id={packet.packet_id} dup={packet.dup}")
            if packet.qos == 2:
                assert packet.packet_id is not None
                if packet.packet_id not in self.qos2_ids:
                    self.qos2_ids.add(packet.packet_id)
                    self.deliveries.append((packet.topic, packet.payload, 2))
                self._send(Pubrec(packet.packet_id))
            else:
                self.deliveries.append((packet.topic, packet.payload, packet.qos))
                if packet.qos == 1:
                    assert packet.packet_id is not None
                    self._send(Puback(packet.packet_id))
        elif isinstance(packet, Pubrel):
            self.note(f"pubrel id={packet.packet_id}")
            self.qos2_ids.discard(packet.packet_id)
            self._send(Pubcomp(packet.packet_id))


class SimCluster:
    """The nodes of one simulation on one `MemoryCluster`."""

    def __init__(self, root: Path, seed: int, size: int, extra: dict[str, str] | None = None) -> None:
        self.memory = MemoryCluster(seed)
        self.slots = [Slot(f"n{i}", i, root, self.memory, extra) for i in range(1, size + 1)]

    def __getitem__(self, name: str) -> Slot:
        return next(slot for slot in self.slots if name in (slot.name, slot.label))

    def discovery(self, slot: Slot) -> str:
        _host, port = slot.config.cluster_listener or ("", 0)
        return f"{slot.name}:{port}"

    async def join(self, slot: Slot, to: Slot) -> str:
        assert slot.node is not None and slot.node.cluster is not None
        return await slot.node.cluster.join(self.discovery(to))


T = TypeVar("T")


def simulated_cluster(main: Callable[[SimCluster], Awaitable[T]], seed: int, size: int = 3) -> T:
    """Run `main` on `size` fresh nodes (not started) under simulated time; what it returns. For a scenario a
    test writes out step by step (the seeded histories are histories.py's `simulate`)."""
    clock = VirtualClock()
    loop = VirtualLoop(clock)
    with (tempfile.TemporaryDirectory(prefix="vmqpy-sim-") as scratch, clock_patches(clock, seed),
          process_patches()):
        cluster = SimCluster(Path(scratch), seed, size)

        async def life() -> T:
            try:
                return await main(cluster)
            finally:
                for slot in cluster.slots:
                    await slot.stop()

        try:
            return loop.run_until_complete(life())
        finally:
            close_loop(loop)


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is still pending on `loop`, then close it."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
