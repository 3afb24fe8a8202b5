"""ClusterNetwork over real sockets on 127.0.0.11/.12/.13 (free ports), all in one event loop."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import structlog
import uvloop

from vmqpy.cluster import handshake as hs
from vmqpy.cluster.frame_auth import FrameOpener, derive_keys
from vmqpy.cluster.framing import NEED_DATA, Frame, FrameDecoder, FrameType, encode_frame
from vmqpy.cluster.link import DataFrame, Established, Link
from vmqpy.cluster.tcp import ClusterNetwork

from .helpers import COOKIE, A, B, C, wait_until

DETECT = 1.0
SETTLE = 5.0  # generous deadline for anything that should happen "at once"

MakeNet = Callable[..., ClusterNetwork]


class Recorder:
    """Everything a network reports, in order."""

    def __init__(self, net: ClusterNetwork) -> None:
        self.metadata: list[tuple[str, bytes]] = []
        self.messages: list[tuple[str, FrameType, Any]] = []
        self.reach: list[tuple[str, bool]] = []
        self.connects: list[tuple[str, str, int]] = []
        net.set_receiver(lambda peer, data: self.metadata.append((peer, data)))
        net.on_message(lambda peer, t, body: self.messages.append((peer, t, body)))
        net.on_reachability(lambda peer, up: self.reach.append((peer, up)))
        net.on_connect(lambda peer, host, port: self.connects.append((peer, host, port)))

    def metadata_from(self, peer: str) -> list[bytes]:
        return [data for p, data in self.metadata if p == peer]


@pytest.fixture
async def make_net() -> AsyncIterator[MakeNet]:
    created: list[ClusterNetwork] = []

    def make(
        name: str, host: str, *, incarnation: int = 1, cookie: str = COOKIE, port: int = 0, **kw: Any
    ) -> ClusterNetwork:
        kw.setdefault("detect_timeout", DETECT)
        kw.setdefault("reconnect_min", 0.02)
        kw.setdefault("reconnect_max", 0.2)
        net = ClusterNetwork(name, incarnation, cookie, (host, port), **kw)
        created.append(net)
        return net

    yield make
    for net in created:
        await net.stop()


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def decode(data: bytes) -> list[Frame]:
    decoder = FrameDecoder(1 << 24)
    decoder.receive_data(data)
    frames: list[Frame] = []
    for _ in range(100_000):
        frame = decoder.next_frame()
        if frame is NEED_DATA:
            return frames
        frames.append(frame)
    raise AssertionError("too many frames")


async def link_all(*nets: ClusterNetwork) -> None:
    for net in nets:
        for other in nets:
            if other is not net:
                net.add_peer(other.own_name, *other.bound_address())
    await wait_until(
        lambda: all(net.reachable() == {o.own_name for o in nets if o is not net} for net in nets), SETTLE, "links"
    )


class FakePeer:
    """A node made of a sans-I/O Link over a raw socket: it shakes hands, then does only what the test says.

    Beside its link it reads what the network sends with a decoder of its own, which derives the session keys
    itself (frame_auth.derive_keys) from the acceptor's HELLO, so tests see every frame, heartbeats included."""

    def __init__(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: Link,
                 nonce: bytes) -> None:
        self.name = name
        self.reader = reader
        self.writer = writer
        self.link = link
        self.nonce = nonce
        self.decoder = FrameDecoder(1 << 24)
        self.frames: list[Frame] = []  # every frame the network sent after the handshake
        self.hello: dict[str, Any] = {}  # the acceptor's HELLO

    def take(self, data: bytes) -> None:
        """Read `data` with the fake's own decoder: the handshake frames, then the sealed ones."""
        self.decoder.receive_data(data)
        for _ in range(100_000):
            frame = self.decoder.next_frame()
            if frame is NEED_DATA:
                return
            if frame.type is FrameType.HELLO:
                self.hello = frame.body
            elif frame.type is FrameType.CHALLENGE_RESPONSE:
                keys = derive_keys(
                    COOKIE, dialer=True, dialer_name=self.name, dialer_incarnation=9, dialer_nonce=self.nonce,
                    acceptor_name=self.hello["name"], acceptor_incarnation=self.hello["incarnation"],
                    acceptor_nonce=self.hello["nonce"],
                )
                self.decoder.authenticate(FrameOpener(keys.receive))
            else:
                self.frames.append(frame)
        raise AssertionError("too many frames")

    def send(self, frame: bytes) -> None:
        """Write one frame, sealed as the link seals its frames."""
        self.writer.write(self.link.seal(frame))

    @classmethod
    async def connect(cls, net: ClusterNetwork, name: str = "fake", host: str = C) -> FakePeer:
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection(*net.bound_address(), local_addr=(host, 0))
        nonce = os.urandom(16)
        link = Link(name, 9, COOKIE, net.own_name, nonce, 60.0, 1 << 24, now=loop.time(), listen=(host, 1))
        peer = cls(name, reader, writer, link, nonce)
        writer.write(link.data_to_send())
        for _ in range(100):
            data = await asyncio.wait_for(reader.read(65536), SETTLE)
            assert data, "closed during the handshake"
            events = link.receive_data(data, loop.time())
            writer.write(link.data_to_send())
            peer.take(data)  # may hold frames after the MAC
            if any(isinstance(e, Established) for e in events):
                return peer
        raise AssertionError("no handshake")

    async def read_until_eof(self) -> list[Frame]:
        for _ in range(100_000):
            data = await asyncio.wait_for(self.reader.read(1 << 16), SETTLE)
            if not data:
                break
            self.take(data)
        return self.frames

    def messages(self) -> list[DataFrame]:
        return [DataFrame(f.type, f.body) for f in self.frames if f.type is FrameType.METADATA]


# ------------------------------------------------------------------------------------------------ links


async def test_three_nodes_link_and_exchange_frames(make_net: MakeNet) -> None:
    nets = [make_net("a", A), make_net("b", B), make_net("c", C)]
    recs = {net.own_name: Recorder(net) for net in nets}
    for net in nets:
        await net.start()
    await link_all(*nets)
    for net in nets:
        for other in nets:
            if other is not net:
                for i in range(20):
                    assert net.send_frame(other.own_name, FrameType.METADATA, f"{net.own_name}{i}".encode())
                net.send(other.own_name, b"via transport")
                assert net.send_frame(other.own_name, FrameType.FORWARD, b"publish")
                assert net.send_frame(other.own_name, FrameType.CONTROL, {"op": "hello", "from": net.own_name})

    def complete() -> bool:
        return all(len(r.metadata) == 42 and len(r.messages) == 4 for r in recs.values())

    await wait_until(complete, SETTLE, "all frames")
    for net in nets:
        rec = recs[net.own_name]
        for other in nets:
            if other is not net:
                name = other.own_name
                assert rec.metadata_from(name) == [f"{name}{i}".encode() for i in range(20)] + [b"via transport"]
                assert (name, FrameType.FORWARD, b"publish") in rec.messages
                assert (name, FrameType.CONTROL, {"op": "hello", "from": name}) in rec.messages
        # one link per pair, and it never flapped
        assert sorted(rec.reach) == sorted((o.own_name, True) for o in nets if o is not net)
        assert sorted(rec.connects) == sorted((o.own_name, *o.bound_address()) for o in nets if o is not net)
    await wait_until(lambda: all(net.stats()["connections"] == 2 for net in nets), SETTLE, "duplicates closed")
    for net in nets:
        stats = net.stats()
        assert stats["links_up"] == 2 and stats["links_down"] == 0
        assert stats["frames_out"] == 2 * 23 and stats["frames_in"] == 2 * 23
        assert stats["handshakes_refused"] == stats["malformed_frames"] == 0


async def test_wrong_cookie_is_refused_and_logged_on_both_sides(make_net: MakeNet) -> None:
    a, b = make_net("a", A, cookie="one"), make_net("b", B, cookie="two")
    rec_a, rec_b = Recorder(a), Recorder(b)
    with structlog.testing.capture_logs() as logs:
        await a.start()
        await b.start()
        a.add_peer("b", *b.bound_address())
        await wait_until(
            lambda: a.stats()["handshakes_refused"] >= 1 and b.stats()["handshakes_refused"] >= 1, SETTLE, "refusals"
        )
    refusals = {(e["node"], e["reason"]) for e in logs if e["event"] == "cluster link refused"}
    assert ("a", hs.WRONG_COOKIE) in refusals and ("b", hs.WRONG_COOKIE) in refusals
    assert all(e["log_level"] == "warning" for e in logs if e["event"] == "cluster link refused")
    assert a.reachable() == b.reachable() == set()
    assert rec_a.reach == rec_b.reach == []
    assert a.stats()["links_up"] == b.stats()["links_up"] == 0


async def simultaneous_dial_round(make_net: MakeNet, round_: int) -> int:
    """Two nodes dial each other at once with frames queued; returns how many connections were not kept."""
    a, b = make_net(f"a{round_}", A), make_net(f"b{round_}", B)
    rec_a, rec_b = Recorder(a), Recorder(b)
    await a.start()
    await b.start()
    # both dial at once, with frames queued before any link exists
    a.add_peer(b.own_name, *b.bound_address())
    b.add_peer(a.own_name, *a.bound_address())
    for i in range(100):
        assert a.send_frame(b.own_name, FrameType.METADATA, b"a%d" % i)
        assert b.send_frame(a.own_name, FrameType.METADATA, b"b%d" % i)
    await wait_until(lambda: len(rec_a.metadata) == 100 and len(rec_b.metadata) == 100, SETTLE, "frames")
    assert rec_b.metadata_from(a.own_name) == [b"a%d" % i for i in range(100)]
    assert rec_a.metadata_from(b.own_name) == [b"b%d" % i for i in range(100)]
    await wait_until(lambda: a.stats()["connections"] == b.stats()["connections"] == 1, SETTLE, "one socket")
    assert rec_a.reach == [(b.own_name, True)] and rec_b.reach == [(a.own_name, True)]
    assert a.stats()["links_up"] == b.stats()["links_up"] == 1
    assert a.stats()["dial_attempts"] >= 1 and b.stats()["dial_attempts"] >= 1
    # the link kept is the one dialed by the smaller name
    assert a._peers[b.own_name].active.outgoing  # type: ignore[union-attr]
    assert not b._peers[a.own_name].active.outgoing  # type: ignore[union-attr]
    duplicates = a.stats()["duplicate_links"] + b.stats()["duplicate_links"]
    await a.stop()
    await b.stop()
    return duplicates


async def test_simultaneous_dial_keeps_one_link_and_loses_no_queued_frame(make_net: MakeNet) -> None:
    duplicates = [await simultaneous_dial_round(make_net, i) for i in range(3)]
    assert sum(duplicates) >= 1  # the race did happen at least once


async def test_frames_sent_while_a_peer_restarts_are_delivered_in_order(make_net: MakeNet) -> None:
    a, b = make_net("a", A), make_net("b", B)
    rec_a = Recorder(a)
    await a.start()
    await b.start()
    b_address = b.bound_address()
    a.add_peer("b", *b_address)
    await wait_until(lambda: a.reachable() == {"b"}, SETTLE, "link")
    assert a.incarnation_of("b") == 1
    await b.stop()
    await wait_until(lambda: a.reachable() == set(), SETTLE, "b down")
    for i in range(50):
        assert a.send_frame("b", FrameType.METADATA, b"%d" % i)
    assert a.stats()["buffered_frames"] == 50
    b2 = make_net("b", B, port=b_address[1], incarnation=2)
    rec_b2 = Recorder(b2)
    await b2.start()
    await wait_until(lambda: len(rec_b2.metadata) == 50, SETTLE, "buffered frames")
    assert rec_b2.metadata_from("a") == [b"%d" % i for i in range(50)]
    assert a.incarnation_of("b") == 2
    assert rec_a.reach == [("b", True), ("b", False), ("b", True)]
    assert a.stats()["buffered_frames"] == 0 and a.stats()["reconnects"] >= 1


async def test_outgoing_buffer_overflow_returns_false_and_is_counted(make_net: MakeNet) -> None:
    port = free_port(B)
    a = make_net("a", A, outgoing_buffer=1000)
    await a.start()
    a.add_peer("b", B, port)  # nothing listens there yet
    frame_size = len(encode_frame(FrameType.METADATA, bytes(100)))
    fits = 1000 // frame_size
    with structlog.testing.capture_logs() as logs:
        accepted = [a.send_frame("b", FrameType.METADATA, bytes([i]) * 100) for i in range(fits + 5)]
    assert accepted == [True] * fits + [False] * 5
    assert a.stats()["overflows"] == 5
    assert a.stats()["bytes_dropped"] == 5 * frame_size
    assert a.stats()["buffered_bytes"] == fits * frame_size
    full = [e for e in logs if e["event"] == "cluster outgoing buffer full, refusing frames"]
    assert len(full) == 1  # one line per peer per 10 s, not one per refused frame
    assert (full[0]["peer"], full[0]["log_level"], full[0]["refused_frames"]) == ("b", "warning", 1)
    # the peer comes up: what was accepted arrives in order, and frames are accepted again
    b = make_net("b", B, port=port)
    rec_b = Recorder(b)
    await b.start()
    await wait_until(lambda: len(rec_b.metadata) == fits, SETTLE, "buffered frames")
    assert rec_b.metadata_from("a") == [bytes([i]) * 100 for i in range(fits)]
    assert a.send_frame("b", FrameType.METADATA, b"again")
    await wait_until(lambda: rec_b.metadata_from("a")[-1:] == [b"again"], SETTLE, "frame after recovery")
    assert a.stats()["overflows"] == 5


async def test_oversized_and_unknown_peer_frames_are_refused(make_net: MakeNet) -> None:
    a = make_net("a", A, incoming_buffer=1000)
    await a.start()
    a.add_peer("b", B, free_port(B))
    assert not a.send_frame("b", FrameType.FORWARD, bytes(1000))
    assert a.send_frame("b", FrameType.FORWARD, bytes(990))
    assert not a.send_frame("nobody", FrameType.FORWARD, b"x")
    assert (a.stats()["oversized"], a.stats()["unknown_peer"]) == (1, 1)
    oversized = len(encode_frame(FrameType.FORWARD, bytes(1000)))
    assert a.stats()["bytes_dropped"] == oversized, "the refused frame (an unknown peer's is not encoded)"
    a.remove_peer("b")  # the 990-byte frame buffered for b is dropped with it
    assert a.stats()["bytes_dropped"] == oversized + len(encode_frame(FrameType.FORWARD, bytes(990)))


async def test_a_paused_socket_buffers_then_refuses_and_delivers_in_order(make_net: MakeNet) -> None:
    """A peer that stops reading: the socket pauses, frames go to the bounded buffer, then False."""
    a = make_net("a", A, outgoing_buffer=1 << 16)
    await a.start()
    fake = await FakePeer.connect(a)
    await wait_until(lambda: a.reachable() == {"fake"}, SETTLE, "fake link")
    body = bytes(16_000)
    accepted: list[int] = []
    refused = 0
    for i in range(5000):  # at most 80 MB offered; the kernel and the buffer hold far less
        if a.send_frame("fake", FrameType.METADATA, struct.pack(">I", i) + body):
            accepted.append(i)
        else:
            refused += 1
            if refused >= 3:
                break
        if i % 16 == 0:
            await asyncio.sleep(0)  # let the loop write (and the transport pause us)
    assert refused == 3 and a.stats()["overflows"] == 3
    assert a.stats()["buffered_bytes"] > 0
    # the peer reads again: every accepted frame arrives, in order, none of the refused ones
    fake.send(encode_frame(FrameType.HEARTBEAT, None))
    got: list[int] = []
    for _ in range(100_000):
        data = await asyncio.wait_for(fake.reader.read(1 << 20), SETTLE)
        assert data
        fake.take(data)
        decoder_frames = [f for f in fake.frames if f.type is FrameType.METADATA]
        got = [struct.unpack(">I", f.body[:4])[0] for f in decoder_frames]
        if len(got) >= len(accepted):
            break
    assert got == accepted


async def test_closing_a_busy_link_delivers_everything_up_to_the_bye(make_net: MakeNet) -> None:
    """The BYE and the frames before it survive a close while the peer is still sending to us (a plain close
    of a socket with unread input would reset the connection and drop our unsent bytes)."""
    a = make_net("a", A, outgoing_buffer=8 << 20)
    await a.start()
    fake = await FakePeer.connect(a)
    await wait_until(lambda: a.reachable() == {"fake"}, SETTLE, "fake link")
    count = 300
    for i in range(count):  # about 5 MB: more than the socket buffers hold while the fake does not read
        assert a.send_frame("fake", FrameType.METADATA, struct.pack(">I", i) + bytes(16_000))
    await asyncio.sleep(0.05)
    written = a.stats()["frames_out"]  # handed to the socket; the rest is still in a's buffer
    assert 0 < written
    a.remove_peer("fake")  # drops a's buffer; what was written must arrive, then the BYE
    for _ in range(20):  # the fake keeps talking after a closed its side
        fake.send(encode_frame(FrameType.HEARTBEAT, None))
        await asyncio.sleep(0.005)
    frames = await fake.read_until_eof()
    numbers = [struct.unpack(">I", f.body[:4])[0] for f in frames if f.type is FrameType.METADATA]
    assert numbers == list(range(written))
    assert frames[-1] == Frame(FrameType.BYE, "peer removed")
    fake.writer.close()
    await wait_until(lambda: a.stats()["connections"] == 0, SETTLE, "socket closed")


# ------------------------------------------------------------------------------------------------ bad input


async def raw_exchange(net: ClusterNetwork, payload: bytes, *, half_close: bool = False) -> list[Frame]:
    """Connect, send `payload` (then EOF if half_close), read until the node closes; the node's frames."""
    reader, writer = await asyncio.open_connection(*net.bound_address(), local_addr=(C, 0))
    writer.write(payload)
    if half_close:
        writer.write_eof()
    await writer.drain()
    received = b""
    for _ in range(1000):
        data = await asyncio.wait_for(reader.read(65536), SETTLE)
        if not data:
            break
        received += data
    writer.close()
    return decode(received)


async def test_garbage_is_disconnected_with_a_logged_reason_and_the_network_keeps_working(make_net: MakeNet) -> None:
    a, b = make_net("a", A), make_net("b", B)
    rec_b = Recorder(b)
    await a.start()
    await b.start()
    a.add_peer("b", *b.bound_address())
    await wait_until(lambda: a.reachable() == {"b"}, SETTLE, "link")
    cases: list[tuple[bytes, bool, str]] = [
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", False, "exceeds the maximum frame size"),  # invalid initial frame
        (struct.pack(">I", a.incoming_buffer + 1), False, "exceeds the maximum frame size"),  # oversized length
        (struct.pack(">I", 3) + b"\x93\x01\xc1", False, "invalid msgpack"),  # invalid inner frame
        (struct.pack(">I", 100) + b"\x93\x01", True, "truncated frame"),  # truncated, then EOF
    ]
    with structlog.testing.capture_logs() as logs:
        for payload, half_close, _ in cases:
            frames = await raw_exchange(a, payload, half_close=half_close)
            assert frames[0].type is FrameType.HELLO and frames[0].body["name"] == "a"
            if not half_close:
                assert frames[-1].type is FrameType.BYE  # the node says why
        await wait_until(lambda: a.stats()["malformed_frames"] == len(cases), SETTLE, "malformed counted")
    malformed = [e for e in logs if e["event"] == "malformed cluster frame, link closed"]
    assert len(malformed) == len(cases)
    for entry, (_, _, reason) in zip(malformed, cases, strict=True):
        assert reason in entry["reason"] and entry["node"] == "a" and entry["log_level"] == "warning"
    # the real link never noticed
    assert a.send_frame("b", FrameType.METADATA, b"still fine")
    await wait_until(lambda: rec_b.metadata == [("a", b"still fine")], SETTLE, "frame")
    assert a.stats()["links_down"] == 0


async def test_data_before_the_handshake_is_refused(make_net: MakeNet) -> None:
    a = make_net("a", A)
    await a.start()
    with structlog.testing.capture_logs() as logs:
        frames = await raw_exchange(a, encode_frame(FrameType.METADATA, b"sneaky"))
        await wait_until(lambda: a.stats()["handshakes_refused"] == 1, SETTLE, "refusal")
    assert frames[-1] == Frame(FrameType.BYE, hs.UNEXPECTED_FRAME)
    assert [e["reason"] for e in logs if e["event"] == "cluster link refused"] == [hs.UNEXPECTED_FRAME]


async def test_a_connection_that_never_shakes_hands_is_closed(make_net: MakeNet) -> None:
    a = make_net("a", A, handshake_timeout=0.3)
    await a.start()
    with structlog.testing.capture_logs() as logs:
        reader, writer = await asyncio.open_connection(*a.bound_address())
        received = b""
        for _ in range(100):  # read until the node closes: its HELLO, then BYE("handshake timeout")
            data = await asyncio.wait_for(reader.read(65536), SETTLE)
            if not data:
                break
            received += data
        writer.close()
    assert decode(received)[-1] == Frame(FrameType.BYE, hs.HANDSHAKE_TIMEOUT)
    assert [e["event"] for e in logs if e.get("reason") == hs.HANDSHAKE_TIMEOUT] == ["cluster handshake timed out"]
    await wait_until(lambda: a.stats()["connections"] == 0, SETTLE, "socket closed")


async def test_a_reflected_hello_is_refused(make_net: MakeNet) -> None:
    a = make_net("a", A)
    await a.start()
    reader, writer = await asyncio.open_connection(*a.bound_address())
    hello = b""
    for _ in range(100):
        hello += await asyncio.wait_for(reader.read(65536), SETTLE)
        if decode(hello):
            break
    writer.write(hello)  # a's own HELLO, sent back
    rest = await asyncio.wait_for(reader.read(65536), SETTLE)
    writer.close()
    assert decode(rest) == [Frame(FrameType.BYE, hs.SELF_CONNECTION)]
    assert a.reachable() == set()


async def test_dialing_oneself_is_refused_on_both_ends(make_net: MakeNet) -> None:
    a = make_net("a", A)
    await a.start()
    with structlog.testing.capture_logs() as logs:
        a.add_peer("ghost", *a.bound_address())
        await wait_until(lambda: a.stats()["handshakes_refused"] >= 2, SETTLE, "refusals")
    reasons = [(e["direction"], e["reason"]) for e in logs if e["event"] == "cluster link refused"]
    assert ("outgoing", hs.SELF_CONNECTION) in reasons and ("incoming", hs.SELF_CONNECTION) in reasons
    assert a.reachable() == set()


async def test_name_mismatch_is_refused_on_both_ends(make_net: MakeNet) -> None:
    a, c = make_net("a", A), make_net("c", C)
    await a.start()
    await c.start()
    with structlog.testing.capture_logs() as logs:
        a.add_peer("b", *c.bound_address())  # a wants b, reaches c
        await wait_until(
            lambda: a.stats()["handshakes_refused"] >= 1 and c.stats()["handshakes_refused"] >= 1, SETTLE, "refusals"
        )
    refusals = {(e["node"], e["reason"]) for e in logs if e["event"] == "cluster link refused"}
    assert ("a", hs.NAME_MISMATCH) in refusals and ("c", hs.NAME_MISMATCH) in refusals
    assert a.reachable() == c.reachable() == set()


# ------------------------------------------------------------------------------------------------ reachability


async def test_reachability_callbacks_fire_when_a_node_stops(make_net: MakeNet) -> None:
    nets = [make_net("a", A), make_net("b", B), make_net("c", C)]
    recs = [Recorder(net) for net in nets]
    for net in nets:
        await net.start()
    await link_all(*nets)
    await nets[2].stop()
    await wait_until(lambda: all(("c", False) in rec.reach for rec in recs[:2]), DETECT + SETTLE, "c down")
    for rec in recs[:2]:
        events_c = [up for peer, up in rec.reach if peer == "c"]
        assert events_c == [True, False]
    # the stopped node told its own callbacks too, after the links had come up
    assert sorted(recs[2].reach) == [("a", False), ("a", True), ("b", False), ("b", True)]
    assert recs[2].reach.index(("a", True)) < recs[2].reach.index(("a", False))
    assert nets[0].reachable() == {"b"} and nets[1].reachable() == {"a"}


async def test_a_silent_peer_becomes_unreachable(make_net: MakeNet) -> None:
    a = make_net("a", A, detect_timeout=0.4)
    rec = Recorder(a)
    await a.start()
    with structlog.testing.capture_logs() as logs:
        fake = await FakePeer.connect(a)  # never sends a heartbeat after the handshake
        await wait_until(lambda: ("fake", False) in rec.reach, 0.4 + SETTLE, "silence detected")
        frames = await fake.read_until_eof()
    assert rec.reach == [("fake", True), ("fake", False)]
    assert rec.connects == [("fake", C, 1)]
    assert a.stats()["silent_peers"] == 1
    assert frames[-1] == Frame(FrameType.BYE, "peer silent")
    assert any(f.type is FrameType.HEARTBEAT for f in frames)  # a did send heartbeats meanwhile
    silent = [e for e in logs if e["event"] == "cluster peer silent"]
    assert len(silent) == 1 and silent[0]["peer"] == "fake" and silent[0]["silent_for"] >= 0.4


async def test_remove_peer_closes_the_link_and_stops_dialing(make_net: MakeNet) -> None:
    a, b = make_net("a", A), make_net("b", B)
    rec_a, rec_b = Recorder(a), Recorder(b)
    await a.start()
    await b.start()
    a.add_peer("b", *b.bound_address())
    # both ends: under load b may see the link up before a's side of the handshake completed
    await wait_until(lambda: b.reachable() == {"a"} and a.reachable() == {"b"}, SETTLE, "link")
    assert b.peers() == {"a": None}  # learned from the incoming link, not dialed
    a.remove_peer("b")
    await wait_until(lambda: ("a", False) in rec_b.reach, SETTLE, "b sees a go")
    assert rec_a.reach == [("b", True), ("b", False)]
    assert not a.send_frame("b", FrameType.METADATA, b"x")
    attempts = a.stats()["dial_attempts"]
    await asyncio.sleep(0.5)  # more than two reconnect_max: a dialer would have tried again
    assert a.stats()["dial_attempts"] == attempts
    assert a.reachable() == b.reachable() == set()


async def test_failing_callbacks_are_logged_and_do_not_break_the_link(make_net: MakeNet) -> None:
    a, b = make_net("a", A), make_net("b", B)
    got: list[bytes] = []

    def bad_receiver(peer: str, data: bytes) -> None:
        got.append(data)
        raise RuntimeError("boom")

    b.set_receiver(bad_receiver)

    def bad_callback(peer: str, up: bool) -> None:
        raise RuntimeError("boom")

    b.on_reachability(bad_callback)
    await a.start()
    await b.start()
    with structlog.testing.capture_logs() as logs:
        a.add_peer("b", *b.bound_address())
        await wait_until(lambda: a.reachable() == {"b"}, SETTLE, "link")
        a.send("b", b"1")
        a.send("b", b"2")
        await wait_until(lambda: got == [b"1", b"2"], SETTLE, "frames")
    assert {e["event"] for e in logs} >= {"metadata receiver failed", "cluster reachability callback failed"}
    assert b.reachable() == {"a"}


async def test_stop_is_idempotent_and_refuses_frames_afterwards(make_net: MakeNet) -> None:
    a = make_net("a", A)
    await a.start()
    a.add_peer("b", B, free_port(B))
    await a.stop()
    await a.stop()
    assert not a.send_frame("b", FrameType.METADATA, b"x")
    assert a.stats()["connections"] == 0


def test_three_nodes_under_uvloop() -> None:
    """The node runs on uvloop: the same exchange there (its transports are not asyncio.Transport)."""

    async def scenario() -> None:
        nets = [ClusterNetwork(n, 1, COOKIE, (h, 0), reconnect_min=0.02) for n, h in (("a", A), ("b", B), ("c", C))]
        recs = [Recorder(net) for net in nets]
        try:
            for net in nets:
                await net.start()
            await link_all(*nets)
            for net in nets:
                for other in nets:
                    if other is not net:
                        assert net.send_frame(other.own_name, FrameType.METADATA, net.own_name.encode())
            await wait_until(lambda: all(len(r.metadata) == 2 for r in recs), SETTLE, "frames")
        finally:
            for net in nets:
                await net.stop()
        assert all(sorted(d for _, d in r.metadata) == sorted(n.own_name.encode() for n in nets if n is not net)
                   for r, net in zip(recs, nets, strict=True))

    uvloop.run(scenario())
