"""Addresses and ports of node processes: loopback only, a port never handed out twice."""

from __future__ import annotations

import pytest

from chaos.ports import common_port, free_port, host_of, loopback, port_free_on_all, port_open

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
