"""Every byte before authentication has a small, node-wide budget (issue 33, finding 3; docs/security.md "Threat
model"): strangers who never complete a CONNECT (tcp, WebSocket) or never prove the cookie (cluster port) make a
real node hold little memory, measured as the node process's resident set (/proc/PID/status), while a
well-behaved client keeps connecting and exchanging QoS 1 messages. Bounds are derived from the budgets; no
timing is asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.integration.clients import enc_connect, unique
from tests.integration.conftest import Broker, assert_serving, free_port, wait_until
from tests.integration.preauth import (
    MIB,
    HostileSockets,
    cluster_node,
    connect_head,
    websocket_connect,
    websocket_flood,
)
from tests.integration.process_usage import rss
from vmqpy.cluster.errors import ClusterProtocolError
from vmqpy.cluster.framing import Frame, FrameDecoder, FrameType
from vmqpy.cluster.handshake import Handshake

pytestmark = pytest.mark.vmqpy_only("the pre-CONNECT budgets and the cluster port are vmqpy's")

# What the node may grow by besides the budget: Python's bookkeeping of a few hundred sockets, allocator slack
# and one read of 256 KiB in flight. The unbounded code grew by hundreds of MiB in the same runs.
SLACK = 40 * MIB


class PeakRss:
    """Samples the resident set of process `pid` every 20 ms in a thread until `stop()`: the largest seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            with contextlib.suppress(OSError, AssertionError):
                self.peak = max(self.peak, rss(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=5.0)
        return max(self.peak, rss(self.pid))


def node_pid(broker: Broker) -> int:
    assert broker.proc is not None
    return broker.proc.pid


class RoundTrips:
    """A well-behaved QoS 1 publisher and subscriber (fresh connections each time: connecting works too)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.done = 0

    def once(self) -> None:
        topic = unique("budget/")
        sub, pub = self.broker.raw(), self.broker.raw()
        try:
            sub.connect(unique("budget-sub"))
            sub.subscribe(topic, qos=1)
            pub.connect(unique("budget-pub"))
            pub.publish(topic, b"still served", qos=1)
            [message] = sub.recv_publishes(1, timeout=15.0)
            assert message.payload == b"still served"
            self.done += 1
        finally:
            sub.close()
            pub.close()


@pytest.fixture
def hostile() -> Iterator[Callable[[int, int, bytes, int], HostileSockets]]:
    made: list[HostileSockets] = []

    def make(port: int, count: int, head: bytes, body: int) -> HostileSockets:
        made.append(HostileSockets(port, count, head, body))
        return made[-1]

    yield make
    for sockets in made:
        sockets.close()


def drive(sockets: HostileSockets, probe: RoundTrips, pid: int, passes: int = 400) -> int:
    """Push the hostile bytes as fast as the node takes them while the well-behaved client exchanges messages,
    until a pass sends nothing or every hostile socket is closed (bounded in passes); the node's largest resident
    set seen meanwhile, bytes."""
    peak = PeakRss(pid)
    try:
        for turn in range(passes):
            sent = sockets.push()
            if turn % 20 == 0:
                probe.once()
            if sockets.poll() == 0 or (sent == 0 and turn >= 20):
                break
        probe.once()
    finally:
        largest = peak.stop()
    return largest


def test_partial_connects_of_many_sockets_stay_within_the_node_wide_budget(
        broker_factory: Callable[..., Broker], hostile: Callable[[int, int, bytes, int], HostileSockets]) -> None:
    """300 sockets each send most of a 1 MB CONNECT (allowed per socket: a large will): the node holds at most
    mqtt.connect_budget of them together, closes the ones that do not fit, and serves a real client throughout.
    Before the budget: +300 MiB."""
    budget = 8 * MIB
    broker = broker_factory(**{"mqtt.connect_max_size": "1MB", "mqtt.connect_budget": "8MB",
                               "mqtt.connect_timeout": "60s"})
    probe = RoundTrips(broker)
    probe.once()
    before = rss(node_pid(broker))
    sockets = hostile(broker.port, 300, connect_head(1_000_000), 1_000_000 - 64)
    grown = drive(sockets, probe, node_pid(broker)) - before
    assert grown < budget + SLACK, f"the node grew by {grown / MIB:.0f} MiB for partial CONNECTs"
    assert sockets.closed > 0  # the ones whose bytes did not fit the budget
    assert "pre-CONNECT byte budget is used up" in broker.log.read_text(errors="replace")
    probe.once()
    assert_serving(broker)


def test_a_connect_larger_than_a_connect_needs_is_refused_on_its_header(
        broker: Broker, hostile: Callable[[int, int, bytes, int], HostileSockets]) -> None:
    """By default a CONNECT may have mqtt.connect_max_size (64 KiB) bytes: 300 sockets announcing 1 MB CONNECTs
    are closed on their fixed header. Before: 1 MiB each was accepted (+300 MiB)."""
    probe = RoundTrips(broker)
    probe.once()
    before = rss(node_pid(broker))
    sockets = hostile(broker.port, 300, connect_head(1_000_000), 1_000_000 - 64)
    grown = drive(sockets, probe, node_pid(broker)) - before
    wait_until(lambda: sockets.poll() == 0, 30.0, what="the node closes every oversized CONNECT")
    assert grown < SLACK, f"the node grew by {grown / MIB:.0f} MiB"
    assert sockets.closed == 300
    probe.once()


def test_a_real_connect_with_a_will_under_the_bound_is_served(broker: Broker) -> None:
    client = broker.raw()
    client.connect(unique("will-client"), will={"topic": "wills/x", "payload": b"w" * 40_000, "qos": 0})
    client.close()


def test_websocket_frames_before_connect_have_the_tcp_bound(broker_factory: Callable[..., Broker]) -> None:
    """Three WebSockets each send a 40 MB frame that starts a 200 MB CONNECT: the node reads no more than a
    CONNECT needs of each before it closes them. Before: aiohttp took frames of up to 2 x 256 MB and the decoder
    held the CONNECT (+451 MiB for three, most of it still held after they closed)."""
    ws_port = free_port()
    broker = broker_factory(**{"listener.ws.default": f"127.0.0.1:{ws_port}", "mqtt.connect_timeout": "60s"})
    probe = RoundTrips(broker)
    probe.once()
    before = rss(node_pid(broker))
    frame = connect_head(200_000_000) + bytes(40 * MIB)
    peak = PeakRss(node_pid(broker))
    ends = asyncio.run(websocket_flood(ws_port, 3, frame))
    grown = peak.stop() - before
    assert all(end in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)
               for end in ends), ends
    assert grown < SLACK, f"the node grew by {grown / MIB:.0f} MiB for three WebSockets without a CONNECT"
    assert asyncio.run(websocket_connect(ws_port))[:1] == b"\x20"  # CONNACK
    probe.once()
    assert_serving(broker)


def test_after_connect_a_websocket_frame_may_hold_a_large_packet(broker_factory: Callable[..., Broker]) -> None:
    """The bound is for the bytes before CONNECT only: once connected, a 1 MB PUBLISH in one frame is delivered."""
    ws_port = free_port()
    broker = broker_factory(**{"listener.ws.default": f"127.0.0.1:{ws_port}"})
    topic = unique("big/")
    sub = broker.raw()
    sub.connect(unique("big-sub"))
    sub.subscribe(topic, qos=0)
    payload = b"p" * 1_000_000

    async def publish() -> None:
        async with aiohttp.ClientSession() as session, session.ws_connect(
                f"ws://127.0.0.1:{ws_port}/mqtt", protocols=("mqtt",)) as ws:
            await ws.send_bytes(enc_connect(unique("big-pub")))
            connack = await ws.receive(timeout=15.0)
            assert bytes(connack.data)[:1] == b"\x20"
            name = topic.encode()
            body = struct.pack(">H", len(name)) + name + payload
            remaining, encoded = len(body), b""
            while True:
                byte, remaining = remaining & 0x7F, remaining >> 7
                encoded += bytes((byte | (0x80 if remaining else 0),))
                if not remaining:
                    break
            await ws.send_bytes(b"\x30" + encoded + body)
            await ws.send_bytes(b"\xe0\x00")  # DISCONNECT

    asyncio.run(publish())
    [message] = sub.recv_publishes(1, timeout=15.0)
    assert message.payload == payload
    sub.close()


def test_a_large_frame_before_the_cluster_handshake_closes_the_socket(
        broker_factory: Callable[..., Broker], hostile: Callable[[int, int, bytes, int], HostileSockets]) -> None:
    """Six strangers on the cluster port announce 60 MB frames (under incoming_clustering_buffer_size) and send
    30 MB each: the node closes each on its length prefix (a handshake frame has a few KiB at most) and logs it.
    Before: the node held them all (53 MiB -> 1,134 MiB)."""
    broker, port = cluster_node(broker_factory)
    probe = RoundTrips(broker)
    probe.once()
    before = rss(node_pid(broker))
    sockets = hostile(port, 6, struct.pack(">I", 60 * MIB), 30 * MIB)
    grown = drive(sockets, probe, node_pid(broker)) - before
    wait_until(lambda: sockets.poll() == 0, 30.0, what="the node closes every stranger")
    assert grown < SLACK, f"the node grew by {grown / MIB:.0f} MiB"
    wait_until(lambda: "before the link is authenticated" in broker.log.read_text(errors="replace"), 10.0,
               what="the refusal logged")
    probe.once()


def _link_frames(data: bytes) -> list[tuple[int, object]]:
    """The handshake frames at the start of `data` (what follows the handshake carries tags: not decoded)."""
    decoder = FrameDecoder(1 << 20)
    decoder.receive_data(data)
    frames: list[tuple[int, object]] = []
    while True:
        try:
            frame = decoder.next_frame()
        except ClusterProtocolError:
            return frames
        if not isinstance(frame, Frame):
            return frames
        frames.append((int(frame.type), frame.body))


def test_a_slow_cluster_handshake_has_its_own_deadline(broker_factory: Callable[..., Broker]) -> None:
    """A dialer that answers the node's HELLO later than 2 x cluster.detect_timeout (a busy host) still gets the
    node's CHALLENGE_RESPONSE: the handshake has cluster.handshake_timeout. Before: the node refused it with
    `handshake timeout` after 2 x detect_timeout."""
    broker, port = cluster_node(broker_factory, **{"cluster.detect_timeout": "200ms"})
    dialer = Handshake("slow@127.0.0.1", 1, "budget-test-cookie", secrets.token_bytes(16), "vmqpy@127.0.0.1",
                       intent="join")
    with socket.create_connection(("127.0.0.1", port), timeout=10.0) as sock:
        sock.sendall(dialer.start())
        received = b""
        frames: list[tuple[int, object]] = []
        deadline = time.monotonic() + 10.0
        while not frames and time.monotonic() < deadline:
            received += sock.recv(65536)
            frames = _link_frames(received)
        assert frames and frames[0][0] == FrameType.HELLO, frames
        time.sleep(1.0)  # the busy host: the answer comes 5 x detect_timeout later (a delay, not a synchronisation)
        out, _result = dialer.receive(Frame(FrameType.HELLO, frames[0][1]))
        sock.sendall(out)
        answer = b""
        deadline = time.monotonic() + 10.0
        reply: list[tuple[int, object]] = []
        while len(reply) < 1 and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
            reply = _link_frames(answer)
    assert reply, "the node closed the link without an answer"
    assert reply[0][0] in (FrameType.CHALLENGE_RESPONSE, FrameType.BYE), reply
    # a BYE here may only be the node's admission ("not a member"), never a timeout
    assert reply[0][0] == FrameType.CHALLENGE_RESPONSE or "timeout" not in str(reply[0][1]), reply
    assert "cluster handshake timed out" not in broker.log.read_text(errors="replace")


def test_the_public_default_cookie_is_refused_with_a_cluster_listener(tmp_path: Path) -> None:
    """`vmqpy start` with listener.vmq.clustering and no distributed_cookie exits 2 naming the setting (and the
    setting that allows it); a short cookie is refused with its line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMQPY_")}

    def start(lines: dict[str, str], name: str) -> subprocess.CompletedProcess[str]:
        config = tmp_path / name
        base = {"nodename": "vmqpy@127.0.0.1", "listener.tcp.default": f"127.0.0.1:{free_port()}",
                "listener.vmq.clustering": f"127.0.0.1:{free_port()}",
                "platform_data_dir": str(tmp_path / name.replace(".conf", ""))}
        config.write_text("".join(f"{k} = {v}\n" for k, v in {**base, **lines}.items()))
        return subprocess.run([sys.executable, "-m", "vmqpy", "start", "--config", str(config)],
                              capture_output=True, text=True, timeout=60, env=env)

    refused = start({}, "default.conf")
    assert refused.returncode == 2, refused.stderr
    assert "distributed_cookie" in refused.stderr and "cluster.allow_default_cookie" in refused.stderr
    short = start({"distributed_cookie": "short"}, "short.conf")
    assert short.returncode == 2 and "short.conf:5" in short.stderr and "distributed_cookie" in short.stderr


def test_allowed_default_cookie_starts_with_a_warning(broker_factory: Callable[..., Broker]) -> None:
    port = free_port()
    broker = broker_factory(**{"listener.vmq.clustering": f"127.0.0.1:{port}", "cluster.allow_default_cookie": "on"})
    wait_until(lambda: "distributed_cookie is the public default" in broker.log.read_text(errors="replace"), 10.0,
               what="the warning")
    assert_serving(broker)
