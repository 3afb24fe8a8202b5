"""Addresses and ports of node processes: loopback only, a port never handed out twice."""

from __future__ import annotations

import socket

import pytest

from chaos.ports import (
    common_port,
    free_port,
    host_of,
    listening,
    listening_in,
    loopback,
    port_free_on_all,
    port_open,
)

HOSTS = ["127.0.0.71", "127.0.0.72", "127.0.0.73"]


@pytest.mark.parametrize(("base", "offset", "host"), [("127.0.0.11", 0, "127.0.0.11"), ("127.0.0.11", 2, "127.0.0.13"),
                                                      ("127.0.0.255", 1, "127.0.1.0")])
def test_node_addresses_count_up_from_the_base(base: str, offset: int, host: str) -> None:
    assert host_of(base, offset) == host


def test_addresses_outside_loopback_are_refused() -> None:
    assert loopback("127.1.2.3") == "127.1.2.3"
    with pytest.raises(ValueError):
        loopback("10.0.0.1")
    with pytest.raises(ValueError):
        host_of("127.255.255.255", 1)


def test_no_port_is_handed_out_twice_on_one_address() -> None:
    handed = [free_port(HOSTS[0]) for _ in range(30)]
    assert len(set(handed)) == len(handed)


def test_a_common_port_is_free_everywhere_and_never_handed_out_again() -> None:
    port = common_port(HOSTS)
    assert port_free_on_all(port, HOSTS)
    assert all(port not in {free_port(host) for _ in range(20)} for host in HOSTS)
    assert not port_open(HOSTS[1], port)


def test_a_listening_socket_is_found_in_proc_net_tcp_without_connecting() -> None:
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0B00007F:DCB3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
        "   1: 0B00007F:1F90 0C00007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n"
        "   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1\n"
    )
    assert listening_in(table, "127.0.0.11", 0xDCB3)
    assert not listening_in(table, "127.0.0.12", 0xDCB3), "another address"
    assert not listening_in(table, "127.0.0.11", 0x1F90), "an established connection, not a listener"
    assert listening_in(table, "127.0.0.13", 80), "bound to every address"
    assert not listening_in(table, "127.0.0.11", 81)


def test_listening_sees_a_real_listener_and_not_a_closed_port() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        assert not listening("127.0.0.1", port)
        server.listen()
        assert listening("127.0.0.1", port)
