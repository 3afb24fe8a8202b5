"""Helpers of the cluster link tests: a back-to-back pair of sans-I/O links (established or not), the frames of a
stream, polling with a deadline, and the node addresses of the socket tests."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

from vmqpy.cluster.frame_auth import TAG_SIZE
from vmqpy.cluster.framing import NEED_DATA, Frame, FrameDecoder
from vmqpy.cluster.link import Event, Link, LinkState

COOKIE = "test-cookie"
NONCE_A = bytes(range(16))
NONCE_B = bytes(range(100, 116))
MAX_FRAME = 1 << 16
#: The node addresses of the tests over real sockets (free ports on each).
A, B, C = "127.0.0.11", "127.0.0.12", "127.0.0.13"


def make_link(
    name: str,
    expected_peer: str | None,
    *,
    incarnation: int = 1,
    cookie: str = COOKIE,
    nonce: bytes = NONCE_A,
    detect_timeout: float = 1.0,
    now: float = 0.0,
    **kwargs: Any,
) -> Link:
    return Link(name, incarnation, cookie, expected_peer, nonce, detect_timeout, MAX_FRAME, now=now, **kwargs)


class Pair:
    """A dialer `a` and an acceptor `b` wired back to back; `pump` moves bytes until both are quiet."""

    def __init__(self, a: Link | None = None, b: Link | None = None) -> None:
        self.a = a if a is not None else make_link("a", "b", incarnation=1, nonce=NONCE_A, listen=("10.0.0.1", 1))
        self.b = b if b is not None else make_link("b", None, incarnation=2, nonce=NONCE_B, listen=("10.0.0.2", 2))
        self.events_a: list[Event] = []
        self.events_b: list[Event] = []
        self.wire_a_to_b = bytearray()  # everything a ever wrote
        self.wire_b_to_a = bytearray()

    def pump(self, now: float = 0.0, extra_a: bytes = b"", extra_b: bytes = b"") -> None:
        """Deliver pending bytes both ways (extra_*: bytes `send` returned) until nothing moves (bounded)."""
        out_a = extra_a + self.a.data_to_send()
        out_b = extra_b + self.b.data_to_send()
        for _ in range(20):
            if not out_a and not out_b:
                return
            self.wire_a_to_b += out_a
            self.wire_b_to_a += out_b
            if out_a:
                self.events_b += self.b.receive_data(out_a, now)
            if out_b:
                self.events_a += self.a.receive_data(out_b, now)
            out_a = self.a.data_to_send()
            out_b = self.b.data_to_send()
        raise AssertionError("the pair did not settle")


async def wait_until(predicate: Callable[[], bool], timeout: float, what: str = "condition") -> None:
    """Poll `predicate` every 10 ms until it holds; fail after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)


def established_pair(now: float = 0.0) -> Pair:
    """A pair whose links are established at `now`, their events of it cleared."""
    pair = Pair(
        make_link("a", "b", incarnation=1, now=now, listen=("10.0.0.1", 1)),
        make_link("b", None, incarnation=2, nonce=NONCE_B, now=now, listen=("10.0.0.2", 2)),
    )
    pair.pump(now)
    assert pair.a.state is pair.b.state is LinkState.ESTABLISHED
    pair.events_a.clear()
    pair.events_b.clear()
    return pair


def unsealed(data: bytes) -> bytes:
    """The frames of a sealed stream (frame_auth.py) without their tags (not checked: test_link_auth does)."""
    out = bytearray()
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        out += data[pos : pos + 4 + length]
        pos += 4 + length + TAG_SIZE
    assert pos == len(data)
    return bytes(out)


def frames_of(data: bytes, *, sealed: bool = False) -> list[Frame]:
    """The frames of a stream a link wrote (`sealed`: with the tags of frame_auth.py, dropped unchecked)."""
    decoder = FrameDecoder(1 << 20)
    decoder.receive_data(unsealed(data) if sealed else data)
    out: list[Frame] = []
    for _ in range(10_000):
        frame = decoder.next_frame()
        if frame is NEED_DATA:
            return out
        out.append(frame)
    raise AssertionError("too many frames")
