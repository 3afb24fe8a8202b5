"""The value parser of advertised addresses (vmqpy.config_values.parse_advertised_address): a table, and a
property that every address it takes is one it prints back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy.config_values import parse_advertised_address


@pytest.mark.parametrize(("text", "parsed"), [
    ("broker-3.example.net:18830", ("broker-3.example.net", 18830)),
    ("mqtt:1883", ("mqtt", 1883)),
    (" 127.0.0.12:1883 ", ("127.0.0.12", 1883)),
    ("[::1]:8883", ("::1", 8883)),
])
def test_taken(text: str, parsed: tuple[str, int]) -> None:
    assert parse_advertised_address(text) == parsed


@pytest.mark.parametrize(("text", "why"), [
    ("broker", "HOST:PORT"), ("a_b:1", "host name"), ("-a.example:1", "host name"), ("a..b:1", "host name"),
    ("x" * 64 + ":1", "host name"), ("h:0", "between 1 and 65535"), ("h:70000", "between 1 and 65535"),
    ("[nothost]:1", "host name"),
])
def test_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_advertised_address(text)


label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)


@given(labels=st.lists(label, min_size=1, max_size=4), port=st.integers(1, 65535))
def test_every_dns_name_and_port_round_trips(labels: list[str], port: int) -> None:
    host = ".".join(labels)
    assert parse_advertised_address(f"{host}:{port}") == (host, port)
