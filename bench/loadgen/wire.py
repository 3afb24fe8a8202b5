"""The load generator's bytes on the wire: the payload it stamps, the PUBLISH frames it builds, and the one frame
splitter every client reads the broker's stream with.

Every PUBLISH carries a PAYLOAD_SIZE-byte payload whose first 20 bytes are `>IQQ`: publisher id, sequence number,
send time (`time.monotonic_ns()`); the other 44 bytes are padding. PUBLISH frames are built here and DISCONNECT is a
constant (CONNECT and SUBSCRIBE are encoded, CONNACK and SUBACK decoded with vmqpy's codec, in `clients`); every
read of every client, handshake included, is split into frames by `split_frames`.
"""

from __future__ import annotations

import struct

PAYLOAD_SIZE = 64
HEADER = struct.Struct(">IQQ")  # publisher id, sequence number, send time in ns (time.monotonic_ns)
PID_HEADER = struct.Struct(">HIQQ")  # packet identifier + HEADER, for QoS 1
PAD = bytes(range(PAYLOAD_SIZE - HEADER.size))
PUBACK = 0x40  # first byte of a PUBACK
DISCONNECT = b"\xe0\x00"


class ClientError(Exception):
    """A load generator client cannot go on: the broker refused or broke the protocol, or the connection is gone."""


def vbi(n: int) -> bytes:
    """MQTT Variable Byte Integer."""
    if not 0 <= n <= 268_435_455:
        raise ValueError(f"remaining length {n} out of range")
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def publish_prefix(topic: str, qos: int) -> bytes:
    """Fixed header + topic of a PUBLISH with a PAYLOAD_SIZE payload (QoS 1: the packet id follows)."""
    t = topic.encode()
    if not t or len(t) > 0xFFFF or "+" in topic or "#" in topic:
        raise ValueError(f"bad topic {topic!r}")
    if qos not in (0, 1):
        raise ValueError("the load generator publishes QoS 0 or 1")
    rl = 2 + len(t) + (2 if qos else 0) + PAYLOAD_SIZE
    return bytes((0x30 | (qos << 1),)) + vbi(rl) + len(t).to_bytes(2, "big") + t


def build_qos0(prefix: bytes, pub_id: int, first_seq: int, count: int, ts: int) -> bytes:
    """`count` QoS 0 PUBLISH frames with sequence numbers first_seq.. and send time ts."""
    pack = HEADER.pack
    return b"".join([prefix + pack(pub_id, seq, ts) + PAD for seq in range(first_seq, first_seq + count)])


def build_stamped(prefix: bytes, pub_id: int, first_seq: int, stamps: list[int]) -> bytes:
    """len(stamps) QoS 0 PUBLISH frames with sequence numbers first_seq.., each with its own time (fixed rate: the
    time the message was due)."""
    pack = HEADER.pack
    return b"".join([prefix + pack(pub_id, first_seq + i, ts) + PAD for i, ts in enumerate(stamps)])


def payload(pub_id: int, seq: int, ts: int) -> bytes:
    return HEADER.pack(pub_id, seq, ts) + PAD


def _long_header(buf: bytes, i: int, n: int) -> tuple[int, int]:
    """(start of the body, remaining length) of the frame at buf[i], or (-1, 0) if its header is incomplete."""
    rl = 0
    shift = 0
    j = i + 1
    for _ in range(4):
        if j >= n:
            return -1, 0
        byte = buf[j]
        j += 1
        rl |= (byte & 0x7F) << shift
        if byte < 0x80:
            return j, rl
        shift += 7
    raise ClientError("malformed remaining length from the broker")


def split_frames(buf: bytes) -> tuple[list[int], int]:
    """The complete frames at the start of `buf`, and how many bytes they take.

    The frames come as one flat list, three ints per frame: its first byte (type and flags), where its body
    starts and where it ends (`buf[start:end]`). Read it with `it = iter(frames); for first, start, end in
    zip(it, it, it)`: one call per read of the socket, no object per frame. ClientError on a remaining length of
    more than four bytes.
    """
    frames: list[int] = []
    append = frames.append
    n = len(buf)
    i = 0
    while n - i >= 2:
        rl = buf[i + 1]
        if rl < 0x80:
            h = i + 2
        else:
            h, rl = _long_header(buf, i, n)
            if h < 0:
                break
        end = h + rl
        if end > n:
            break
        append(buf[i])
        append(h)
        append(end)
        i = end
    return frames, i
