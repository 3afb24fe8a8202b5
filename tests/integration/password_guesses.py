"""Wrong passwords guessed in parallel, each on its own socket, and the CONNACK each guess gets."""

from __future__ import annotations

import selectors
import socket
import threading
import time

from tests.integration.clients import CONNACK, enc_connect

LIMIT = 10  # auth.failed_login_limit's default


class Guesses(threading.Thread):
    """`count` sockets that each send a CONNECT with a wrong password at once, and the CONNACK code each gets.
    `source`: the loopback address the sockets are bound to (the address the throttle counts), else the kernel's."""

    def __init__(self, port: int, count: int, username: str = "alice", source: str | None = None) -> None:
        super().__init__(daemon=True)
        self.port, self.count, self.username = port, count, username
        self.source = source
        self.codes: list[int | None] = []  # None: closed without a CONNACK

    def run(self) -> None:
        sockets = []
        with selectors.DefaultSelector() as selector:
            for index in range(self.count):
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=10,
                                                source_address=(self.source, 0) if self.source else None)
                sock.sendall(enc_connect(f"guess-{index}", 5, username=self.username,
                                         password=f"wrong-{index}".encode()))
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ, bytearray())
                sockets.append(sock)
            deadline = time.monotonic() + 60
            while selector.get_map() and time.monotonic() < deadline:
                for key, _ in selector.select(timeout=1):
                    sock, buf = key.fileobj, key.data
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(64)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    buf += data
                    if not data or len(buf) >= 4:
                        # CONNACK: type, remaining length, flags, reason code
                        self.codes.append(buf[3] if len(buf) >= 4 and buf[0] >> 4 == CONNACK else None)
                        selector.unregister(sock)
                        sock.close()
        for sock in sockets:
            sock.close()
