"""A client that breaks the node's Receive Maximum while it is still writing (issue 33, finding 10), and the
packets it reads back before the stream ends."""

from __future__ import annotations

import ssl
import time

from tests.integration.clients import PUBREL, RawClient, enc_ack, enc_publish, unique

RECEIVE_MAXIMUM = 10  # the node's max_inflight_messages in the tests that overrun it


def overrun_while_writing(client: RawClient) -> tuple[list[tuple[int, int | None]], str]:
    """Connect, send one QoS 2 PUBLISH more than the Receive Maximum, and go on writing PUBRELs (about
    256 KiB, bounded) before reading anything; then read until the node closes. The packets read, as
    (type, reason code), and how the stream ended: "eof" or "reset"."""
    client.connect(unique("overrun-"))
    sock = client.sock
    burst = b"".join(enc_publish("linger/t", b"x", qos=2, packet_id=i, version=5)
                     for i in range(1, RECEIVE_MAXIMUM + 2))
    pubrels = b"".join(enc_ack(PUBREL, i, version=5) for i in range(1, RECEIVE_MAXIMUM + 1)) * 64
    sock.settimeout(5.0)
    try:
        sock.sendall(burst)
        deadline = time.monotonic() + 5.0
        for _ in range(100):  # bounded: about 256 KiB at most, or until the node stops taking them
            if time.monotonic() > deadline:
                break
            sock.sendall(pubrels)
    except OSError:
        pass  # the node closed: what matters is what can still be read
    received = bytearray()
    ending = "timeout"
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            ending = "reset"
            break
        except TimeoutError:
            continue
        if not data:
            ending = "eof"
            break
        received += data
    client.close()
    return packets(bytes(received)), ending


def packets(data: bytes) -> list[tuple[int, int | None]]:
    """(type, first body byte: a DISCONNECT's reason code) of each whole packet in `data`."""
    found: list[tuple[int, int | None]] = []
    pos = 0
    while pos < len(data):
        length, shift, at = 0, 0, pos + 1
        while at < len(data):
            byte = data[at]
            length |= (byte & 0x7F) << shift
            shift += 7
            at += 1
            if not byte & 0x80:
                break
        if at + length > len(data):
            break
        found.append((data[pos] >> 4, data[at] if length else None))
        pos = at + length
    return found
