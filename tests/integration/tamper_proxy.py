"""A small TCP proxy on loopback that sits between two cluster nodes and, when told, flips one bit of what the
dialing side sends: a man in the middle for the frame-authentication tests (docs/security.md, "Cluster links").

Threads, plain sockets, every loop bounded by a stop flag polled every 0.2 s; `stop()` closes every socket and
joins every thread."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Self

__all__ = ["TamperingProxy"]

POLL_S = 0.2


class TamperingProxy:
    """Listens on (`host`, a free port) and forwards each connection to `target`, connecting from `source` (an
    address of its own, so the nodes' logs show which links it carries). After `tamper()`, the last byte of the
    next chunk it reads from the dialing side is flipped (once)."""

    def __init__(self, host: str, target: tuple[str, int], source: str) -> None:
        self.target = target
        self.source = source
        self._server = socket.create_server((host, 0))
        self._server.settimeout(POLL_S)
        self.address: tuple[str, int] = self._server.getsockname()[:2]
        self._stopping = threading.Event()
        self._flip = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self.connections = 0
        self.flipped = 0
        self.bytes_forwarded = 0

    def __enter__(self) -> Self:
        self._spawn(self._accept_loop)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def tamper(self) -> None:
        """Flip the last bit of the last byte of the next chunk from the dialing side (once)."""
        self._flip.set()

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            sockets = [self._server, *self._sockets]
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()
        for thread in list(self._threads):
            thread.join(5)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                downstream, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5, source_address=(self.source, 0))
            except OSError:
                downstream.close()
                continue
            with self._lock:
                self._sockets += [downstream, upstream]
                self.connections += 1
            self._spawn(self._pump, downstream, upstream, True)
            self._spawn(self._pump, upstream, downstream, False)

    def _pump(self, source: socket.socket, sink: socket.socket, from_dialer: bool) -> None:
        source.settimeout(POLL_S)
        while not self._stopping.is_set():
            try:
                data = source.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            if from_dialer and self._flip.is_set():
                data = data[:-1] + bytes([data[-1] ^ 0x01])
                self._flip.clear()
                with self._lock:
                    self.flipped += 1
            try:
                sink.sendall(data)
            except OSError:
                break
            with self._lock:
                self.bytes_forwarded += len(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
