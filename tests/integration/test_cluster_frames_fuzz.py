"""Mutated cluster frames against a live node's cluster port, before and after the handshake (issue 15, fuzzing,
cluster part): the node refuses each bad connection and keeps serving, no exception escapes its link code.

Before the handshake: valid handshake and data frames, then bit flips, truncations, lied length prefixes, random
msgpack and random bytes. After the handshake (a fake node that knows the cookie and comes to join, so it is
admitted): frames sealed with the right session key but with mutated contents (they reach the frame decoder and
the node's handlers), and sealed frames altered on the wire (they must fail authentication). The seed is printed;
`TEST_SEED=N` replays a run."""

from __future__ import annotations

import os
import random
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from tests.integration.cluster import ClusterNode
from tests.integration.conftest import chosen_seed, wait_until
from vmqpy.cluster.framing import FrameType, encode_frame
from vmqpy.cluster.handshake import JOIN
from vmqpy.cluster.link import Established, Link, LinkState

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy clustering")]

COOKIE = "test-cookie"  # tests/integration/cluster.py gives every node this cookie
FUZZ_SOURCE = "127.0.0.19"
BEFORE_CASES = 400
AFTER_CASES = 200
READ_DEADLINE_S = 5.0  # a node answers a bad connection by closing it, at the latest at its handshake timeout


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ClusterNode]:
    started = ClusterNode(1, tmp_path).start()
    try:
        yield started
    finally:
        started.stop()


def valid_frames(rng: random.Random) -> list[bytes]:
    """One well-formed frame of every type, as a node could send it."""
    nonce = rng.randbytes(16)
    return [
        encode_frame(FrameType.HELLO, {"name": "fuzz@127.0.0.19", "incarnation": rng.randrange(1 << 40),
                                       "nonce": nonce, "listen": ["127.0.0.19", 1]}),
        encode_frame(FrameType.CHALLENGE_RESPONSE, rng.randbytes(32)),
        encode_frame(FrameType.HEARTBEAT, None),
        encode_frame(FrameType.METADATA, rng.randbytes(rng.randrange(0, 200))),
        encode_frame(FrameType.FORWARD, rng.randbytes(rng.randrange(0, 200))),
        encode_frame(FrameType.CONTROL, {"op": rng.choice(["join", "leave", "members", "ask", "x"]),
                                         "n": rng.randrange(10)}),
        encode_frame(FrameType.REACHABILITY, ["n1@127.0.0.11", "fuzz@127.0.0.19"]),
        encode_frame(FrameType.BYE, "fuzz"),
    ]


def random_object(rng: random.Random, depth: int = 0) -> object:
    kinds = ["int", "str", "bytes", "nil", "bool", "float"] + (["list", "map"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.choice([0, -1, 1 << 63, -(1 << 63), rng.randrange(-1000, 1000)])
    if kind == "str":
        return "".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randrange(0, 20)))
    if kind == "bytes":
        return rng.randbytes(rng.randrange(0, 40))
    if kind == "nil":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "float":
        return rng.random() * 1e9
    if kind == "list":
        return [random_object(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    return {str(random_object(rng, depth + 1)): random_object(rng, depth + 1) for _ in range(rng.randrange(0, 5))}


def mutated(rng: random.Random, frame: bytes) -> bytes:
    """One mutation of a frame's wire bytes."""
    data = bytearray(frame)
    how = rng.randrange(8)
    if how == 0:  # bit flips
        for _ in range(rng.randrange(1, 4)):
            position = rng.randrange(len(data))
            data[position] ^= 1 << rng.randrange(8)
    elif how == 1:  # truncated
        del data[rng.randrange(1, len(data)) :]
    elif how == 2:  # the length prefix lies (shorter, longer, huge)
        data[:4] = struct.pack(">I", rng.choice([0, 1, len(data) - 5, len(data) + 100, 0x7FFFFFFF, 0xFFFFFFFF]))
    elif how == 3:  # random msgpack in a well-framed frame
        payload = msgpack.packb(random_object(rng), use_bin_type=True)
        data = bytearray(struct.pack(">I", len(payload)) + payload)
    elif how == 4:  # [version, type, body] with odd values
        payload = msgpack.packb([rng.choice([0, 1, 2, 255, "1"]), rng.choice([0, 1, 4, 6, 9, 200, -1, "x"]),
                                 random_object(rng)], use_bin_type=True)
        data = bytearray(struct.pack(">I", len(payload)) + payload)
    elif how == 5:  # random bytes
        data = bytearray(rng.randbytes(rng.randrange(1, 300)))
    elif how == 6:  # a msgpack extension type (refused by the decoder)
        payload = b"\x93\x01\x04" + b"\xd4\x05\x00"
        data = bytearray(struct.pack(">I", len(payload)) + payload)
    else:  # bytes inserted in the middle
        position = rng.randrange(len(data) + 1)
        data[position:position] = rng.randbytes(rng.randrange(1, 20))
    return bytes(data)


def send_and_drain(address: tuple[str, int], data: bytes) -> None:
    """Send `data`, half-close, and read until the node closes (bounded)."""
    with socket.create_connection(address, timeout=READ_DEADLINE_S, source_address=(FUZZ_SOURCE, 0)) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + READ_DEADLINE_S
            while time.monotonic() < deadline and sock.recv(1 << 16):
                pass
        except OSError:  # reset by the node: fine
            pass


def fake_node(address: tuple[str, int]) -> tuple[socket.socket, Link]:
    """A node that knows the cookie and comes to join: an established link on a blocking socket."""
    sock = socket.create_connection(address, timeout=READ_DEADLINE_S, source_address=(FUZZ_SOURCE, 0))
    link = Link("fuzz@127.0.0.19", random.randrange(1, 1 << 40), COOKIE, "n1@127.0.0.11", os.urandom(16), 60.0,
                1 << 20, now=time.monotonic(), intent=JOIN)
    sock.sendall(link.data_to_send())
    deadline = time.monotonic() + READ_DEADLINE_S
    while link.state is LinkState.HANDSHAKE and time.monotonic() < deadline:
        data = sock.recv(1 << 16)
        assert data, "the node closed the fake node's link during the handshake"
        events = link.receive_data(data, time.monotonic())
        sock.sendall(link.data_to_send())
        if any(isinstance(e, Established) for e in events):
            break
    assert link.state is LinkState.ESTABLISHED, link.closed
    return sock, link


def after_handshake_case(address: tuple[str, int], rng: random.Random) -> None:
    sock, link = fake_node(address)
    with sock:
        frames = [link.seal(mutated(rng, rng.choice(valid_frames(rng)[2:]))) for _ in range(rng.randrange(1, 4))]
        if rng.random() < 0.3:  # altered on the wire after sealing: must fail authentication
            frames[-1] = mutated(rng, frames[-1])
        try:
            sock.sendall(b"".join(frames))
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + READ_DEADLINE_S
            while time.monotonic() < deadline and sock.recv(1 << 16):
                pass
        except OSError:
            pass


def assert_serving(node: ClusterNode) -> None:
    assert node.proc is not None and node.proc.poll() is None, "the node died"
    topic = f"fuzz/{uuid.uuid4().hex[:8]}"
    subscriber = node.client(5, f"sub-{uuid.uuid4().hex[:8]}")
    subscriber.subscribe(topic, qos=1)
    node.client(5, f"pub-{uuid.uuid4().hex[:8]}").publish(topic, b"still serving", qos=1)
    (message,) = subscriber.collect(1, 10)
    assert message.payload == b"still serving"
    assert node.admin("cluster", "show").returncode == 0


def test_mutated_cluster_frames_before_and_after_the_handshake_leave_the_node_serving(node: ClusterNode) -> None:
    seed = chosen_seed()
    print(f"TEST_SEED={seed}")
    rng = random.Random(seed)
    address = (node.host, node.cluster_port)
    for _ in range(BEFORE_CASES):
        frames = valid_frames(rng)
        chosen = [rng.choice(frames) for _ in range(rng.randrange(1, 3))]
        chosen[rng.randrange(len(chosen))] = mutated(rng, rng.choice(frames))
        send_and_drain(address, b"".join(chosen))
    for _ in range(AFTER_CASES):
        after_handshake_case(address, rng)
    # a node that knows the cookie still links, and the node still serves MQTT and the admin API
    sock, _link = fake_node(address)
    sock.close()
    assert_serving(node)
    log = node.log.read_text(errors="replace")
    assert "cluster link failed" not in log and "cluster link timer failed" not in log  # nothing escaped a link
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 : log.index("Traceback") + 3000]
    wait_until(lambda: "frame authentication failed" in node.log.read_text(errors="replace"), 5,
               what="the altered sealed frames logged")
    assert log.count("cluster link up") == AFTER_CASES + 1  # every fake node got past the handshake
