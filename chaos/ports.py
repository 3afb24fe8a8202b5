"""Loopback addresses and free ports for node processes. A port is free again as soon as its probing socket
closes, so every port handed out here is remembered for the life of the process and never handed out again
(a node's MQTT, admin and cluster ports would otherwise collide)."""

from __future__ import annotations

import ipaddress
import random
import socket

from chaos.errors import HarnessError

ATTEMPTS = 100  # probes before giving up on finding a port

_handed_out: set[tuple[str, int]] = set()
_slice = (0, 1)  # (index, count): only ports whose remainder modulo count is index are handed out
#: Where a slice's ports are drawn from: below Linux's default ephemeral range (32768-60999), so a port handed out
#: is never one the kernel gives a client socket as its source port in the meantime.
SLICE_PORTS = range(20000, 32768)


def use_slice(index: int, count: int) -> None:
    """Hand out only ports `p` of SLICE_PORTS with `p % count == index`: `count` processes that each take their own
    `index` (parallel test workers) never hand out one port twice, even when they probe at the same moment. (The
    kernel's own choice for a bind to port 0 cannot be sliced: it prefers even ports.)"""
    global _slice
    if not 0 <= index < count:
        raise ValueError(f"slice {index} of {count}")
    _slice = (index, count)


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _candidate(host: str) -> int:
    """A port to try: the kernel's free choice, or with a slice a random port of the slice that can be bound now
    (0 when the drawn one cannot)."""
    index, count = _slice
    if count == 1:
        return _probe(host)
    port = SLICE_PORTS.start + index + count * random.randrange(len(SLICE_PORTS) // count)
    return port if _bindable(host, port) else 0


def loopback(address: str) -> str:
    """`address` itself; ValueError when it is not in 127.0.0.0/8 (nodes and partitions stay on loopback)."""
    if not ipaddress.ip_address(address).is_loopback:
        raise ValueError(f"{address} is not a loopback address: experiments only touch 127.0.0.0/8")
    return address


def host_of(base: str, offset: int) -> str:
    """The loopback address `offset` after `base` (node i of a cluster whose first node is on `base`)."""
    return loopback(str(ipaddress.ip_address(base) + offset))


def _probe(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_port(host: str) -> int:
    """A port free on `host` that this process never handed out before."""
    for _ in range(ATTEMPTS):
        port = _candidate(host)
        if port and (host, port) not in _handed_out:
            _handed_out.add((host, port))
            return port
    raise HarnessError(f"no free port on {host} that was not handed out before")


def consecutive_ports(host: str, count: int) -> int:
    """A port P on `host` handed out as `free_port` does, with P+1 .. P+count-1 free too (`vmqpy start --workers N`
    puts worker i's cluster and admin ports at P + i - 1)."""
    for _ in range(ATTEMPTS):
        port = free_port(host)
        if port + count <= 65536 and all(_bindable(host, port + i) for i in range(1, count)):
            return port
    raise HarnessError(f"no {count} consecutive free ports on {host}")


def port_free_on_all(port: int, hosts: list[str]) -> bool:
    """Whether `port` can be bound on every address of `hosts` right now."""
    return all(_bindable(host, port) for host in hosts)


def common_port(hosts: list[str]) -> int:
    """One port free on every address of `hosts`, handed out on all of them (the fault proxy listens on each
    node's address on every other node's cluster port)."""
    for _ in range(ATTEMPTS):
        port = _candidate(hosts[0])
        if port and all((h, port) not in _handed_out for h in hosts) and port_free_on_all(port, hosts):
            _handed_out.update((h, port) for h in hosts)
            return port
    raise HarnessError("no port free on every node address")


LISTEN = "0A"  # the TCP state column of /proc/net/tcp for a listening socket


def listening_in(table: str, host: str, port: int) -> bool:
    """Whether the text of /proc/net/tcp (`table`) has a socket listening on IPv4 `host`:`port` (or on every
    address, 0.0.0.0)."""
    wanted = {f"{_hex_address(host)}:{port:04X}", f"00000000:{port:04X}"}
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == LISTEN and fields[1] in wanted:
            return True
    return False


def _hex_address(host: str) -> str:
    """An IPv4 address as /proc/net/tcp writes it: the four bytes in the host's (little-endian) order, in hex."""
    return ipaddress.IPv4Address(host).packed[::-1].hex().upper()


def listening(host: str, port: int) -> bool:
    """Whether a socket listens on host:port, found without connecting to it (a connection would be a client the
    node sees come and go); where /proc/net/tcp cannot be read, by connecting (`port_open`)."""
    try:
        with open("/proc/net/tcp") as table:
            return listening_in(table.read(), host, port)
    except OSError:
        return port_open(host, port)


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
