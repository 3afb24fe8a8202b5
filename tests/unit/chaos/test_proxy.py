"""The fault proxy on real loopback sockets (no root): forwards, a cut is silence, a heal closes and redials work."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from chaos.ports import port_free_on_all
from chaos.proxy import ProxyNetwork

HOSTS = ["127.0.0.61", "127.0.0.62"]


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        for _ in range(1000):
            data = self.request.recv(4096)
            if not data:
                return
            self.request.sendall(data)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _common_free_port() -> int:
    for _ in range(100):
        with socket.socket() as s:
            s.bind((HOSTS[0], 0))
            port = int(s.getsockname()[1])
        if port_free_on_all(port, HOSTS):
            return port
    raise RuntimeError("no common free port")


@pytest.fixture()
def proxied() -> Iterator[tuple[ProxyNetwork, int]]:
    """Node 1's 'cluster listener' is an echo server; the proxy's link 0->1 listens on node 0's address."""
    port = _common_free_port()
    server = _Server((HOSTS[1], port), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    spare = _common_free_port()
    proxy = ProxyNetwork(HOSTS, [spare, port])
    proxy.setup()
    try:
        yield proxy, port
    finally:
        proxy.teardown()
        server.shutdown()
        server.server_close()


def _dial(port: int) -> socket.socket:
    sock = socket.create_connection((HOSTS[0], port), timeout=5)
    sock.settimeout(5)
    return sock


def test_forwards_both_ways(proxied: tuple[ProxyNetwork, int]) -> None:
    _proxy, port = proxied
    with _dial(port) as sock:
        sock.sendall(b"hello")
        assert sock.recv(100) == b"hello"


def test_cut_is_silence_and_heal_closes_the_link(proxied: tuple[ProxyNetwork, int]) -> None:
    proxy, port = proxied
    with _dial(port) as sock:
        sock.sendall(b"before")
        assert sock.recv(100) == b"before"
        proxy.cut([(1, 0)])
        sock.sendall(b"during")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(100)  # nothing comes back, and the connection is not closed either
        with _dial(port) as fresh:  # a new connection during the cut is accepted but never forwarded
            fresh.sendall(b"new")
            fresh.settimeout(0.5)
            with pytest.raises(TimeoutError):
                fresh.recv(100)
            proxy.heal()
            fresh.settimeout(5)
            assert fresh.recv(100) == b""
        sock.settimeout(5)
        try:
            assert sock.recv(100) == b""  # closed at the heal: the bytes lost in the cut cannot be resumed
        except ConnectionResetError:
            pass
    with _dial(port) as again:
        again.sendall(b"after")
        assert again.recv(100) == b"after"


def test_a_cut_of_another_pair_does_not_touch_this_link(proxied: tuple[ProxyNetwork, int]) -> None:
    proxy, port = proxied
    proxy.cut([(0, 5)])
    with _dial(port) as sock:
        sock.sendall(b"x")
        assert sock.recv(100) == b"x"
