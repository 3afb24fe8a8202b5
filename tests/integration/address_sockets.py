"""Raw client sockets bound to a chosen loopback address (one client host among many), and what the node did
with one, read without waiting and without taking its bytes."""

from __future__ import annotations

import socket


def connect_from(address: str, port: int, host: str = "127.0.0.1") -> socket.socket:
    """A non-blocking socket from `address` connected to `host`:`port`."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((address, 0))
    sock.settimeout(5)
    sock.connect((host, port))
    sock.setblocking(False)  # closed_by_peer looks without waiting
    return sock


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end closed `sock` (EOF or reset), without waiting."""
    try:
        return sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def answered_busy(sock: socket.socket) -> bool:
    """Whether the admin API answered `sock` with 503 (read without taking it)."""
    try:
        return sock.recv(12, socket.MSG_DONTWAIT | socket.MSG_PEEK).startswith(b"HTTP/1.1 503")
    except OSError:
        return False
