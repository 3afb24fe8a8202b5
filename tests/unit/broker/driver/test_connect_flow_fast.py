"""The cheap connect (issue 21, "Connect"): what a connect no longer does, and that it still does all it must.

- a 3.1/3.1.1 CONNACK that accepts is written from constant bytes: they are the codec's;
- a connection handed on by the CONNECT prelude arms no CONNECT timer of its own (the prelude had one), and one
  that is not (a WebSocket) still does;
- closing a TCP connection with nothing left to write arms no abort timer; with bytes still queued it does,
  and a TLS or WebSocket one always does (their close waits for the client's closing handshake);
- the connection's logger is bound only when a line is logged, and then names the peer, listener and client id;
- on a node without cluster links, a clean session that found no owner record writes none and looks none up when
  it ends; a resumed persistent session whose record already names this node with the same terms does not write
  it again; with cluster links every connect writes its record (registration and takeover depend on it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.broker.connections import CONFIG, node
from tests.unit.transports import FakeTransport
from vmqpy import logconfig
from vmqpy.broker.driver.connect_flow import CONNACK_ACCEPTED_311
from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.broker.listeners.listeners import Listeners
from vmqpy.config import Config
from vmqpy.mqtt.codec import Decoder, encode
from vmqpy.mqtt.packets import Connack, Connect, Disconnect
from vmqpy.sessions import records
from vmqpy.storage import Storage

CLUSTERED = Config(tcp_listeners=(("default", "127.0.0.1", 1883),), allow_anonymous=True,
                   cluster_listener=("127.0.0.1", 44053))


def at_level(name: str) -> Iterator[None]:
    """The node's log level set to `name` for the test, the previous one back after it."""
    before = logconfig.level()
    logconfig.set_level(name)
    try:
        yield
    finally:
        logconfig.set_level(before)


@pytest.fixture
def info_level() -> Iterator[None]:
    yield from at_level("info")


@pytest.fixture
def error_level() -> Iterator[None]:
    yield from at_level("error")


def connect_through_prelude(listeners: Listeners, client_id: str, clean: bool = True,
                            level: int = 4) -> tuple[MQTTConnection, FakeTransport]:
    """A socket of listener tcp.default sending a whole CONNECT: the connection the prelude hands it to."""
    prelude = listeners.factory("tcp", "default")()
    transport = FakeTransport()
    transport.protocol = prelude
    prelude.connection_made(transport)
    prelude.data_received(encode(Connect(client_id, protocol_level=level, clean_start=clean), level))
    conn = transport.protocol
    assert isinstance(conn, MQTTConnection)
    return conn, transport


def leave(conn: MQTTConnection, transport: FakeTransport) -> None:
    conn.data_received(encode(Disconnect(0), conn.level))
    conn.connection_lost(None)


@pytest.mark.parametrize(("level", "present"), [(3, False), (3, True), (4, False), (4, True)])
def test_the_constant_connack_bytes_are_the_codecs(level: int, present: bool) -> None:
    assert CONNACK_ACCEPTED_311[present and level > 3] == encode(Connack(present, 0), level)


@pytest.mark.parametrize("level", [3, 4, 5])
async def test_the_accepting_connack_of_each_level(storage: Storage, level: int) -> None:
    _broker, listeners, _metadata = node(storage)
    conn, transport = connect_through_prelude(listeners, "c1", level=level)
    await asyncio.sleep(0)
    if level < 5:
        assert bytes(transport.written) == b"\x20\x02\x00\x00"
    else:  # written by the codec, with the properties of the node's terms
        decoder = Decoder(server=False, protocol_level=5)
        decoder.receive_data(bytes(transport.written))
        connack = decoder.next_packet()
        assert isinstance(connack, Connack) and connack.reason_code == 0 and not connack.session_present
        assert connack.properties.receive_maximum == CONFIG.max_inflight_messages
    leave(conn, transport)


async def test_a_resumed_session_is_told_so_by_the_constant_connack(storage: Storage) -> None:
    _broker, listeners, _metadata = node(storage)
    conn, transport = connect_through_prelude(listeners, "p1", clean=False)
    leave(conn, transport)
    conn, transport = connect_through_prelude(listeners, "p1", clean=False)
    await asyncio.sleep(0)
    assert bytes(transport.written) == b"\x20\x02\x01\x00"
    leave(conn, transport)


async def test_a_connection_from_the_prelude_arms_no_connect_timer_a_websocket_one_does(storage: Storage) -> None:
    broker, listeners, _metadata = node(storage)
    prelude = listeners.factory("tcp", "default")()
    transport = FakeTransport()
    transport.protocol = prelude
    prelude.connection_made(transport)
    prelude.data_received(b"\x10")  # not whole yet: still the prelude's
    assert transport.protocol is prelude
    prelude.data_received(encode(Connect("c1"), 4)[1:])
    conn = transport.protocol
    assert isinstance(conn, MQTTConnection) and conn.connect_waited and conn.session is not None
    assert conn._timer is None and conn.keepalive_bucket is not None, "the keep alive check of the accepted connect"
    plain = listeners.open_mqtt("ws", "default")  # a WebSocket's connection: nobody waited for its CONNECT
    plain.connection_made(FakeTransport())
    assert not plain.connect_waited and plain._timer is not None
    plain.connection_lost(None)
    leave(conn, transport)
    assert broker.sessions == {}


@pytest.mark.parametrize(("buffered", "abort_armed"), [(0, False), (1, True), (4096, True)])
async def test_closing_arms_the_abort_only_while_bytes_wait(storage: Storage, buffered: int,
                                                            abort_armed: bool) -> None:
    _broker, listeners, _metadata = node(storage)
    conn, transport = connect_through_prelude(listeners, "c1")
    transport.buffered = buffered
    conn.close()
    assert transport.closed
    abort = conn._timer  # once closed, the connection's one timer is the abort's
    assert (abort is not None) == abort_armed
    conn.connection_lost(None)
    assert abort is None or abort.cancelled()


async def test_a_websocket_connection_closing_arms_the_abort_even_with_nothing_to_write(storage: Storage) -> None:
    _broker, listeners, _metadata = node(storage)
    conn = listeners.open_mqtt("ws", "default")
    transport = FakeTransport()
    conn.connection_made(transport)
    conn.close()
    abort = conn._timer  # once closed, the connection's one timer is the abort's
    assert transport.closed and abort is not None
    conn.connection_lost(None)
    assert abort.cancelled()


async def test_at_level_error_a_connect_binds_no_logger(storage: Storage, error_level: None) -> None:
    _broker, listeners, _metadata = node(storage)
    conn, transport = connect_through_prelude(listeners, "quiet")
    assert conn._log is None
    leave(conn, transport)
    assert conn._log is None


async def test_at_level_info_the_connect_lines_name_the_client(storage: Storage, info_level: None) -> None:
    _broker, listeners, _metadata = node(storage)
    with structlog.testing.capture_logs() as lines:
        conn, transport = connect_through_prelude(listeners, "loud")
        leave(conn, transport)
    events = {line["event"]: line for line in lines}
    assert events["client connected"]["client_id"] == "loud"
    assert events["client connected"]["peer"] == "127.0.0.1:5555"
    assert events["client connected"]["listener"] == "default"
    assert events["client disconnected"]["client_id"] == "loud"


def test_the_log_level_check() -> None:
    before = logconfig.level()
    try:
        logconfig.set_level("warning")
        assert not logconfig.enabled(logging.INFO) and logconfig.enabled(logging.WARNING)
        assert logconfig.enabled(logging.ERROR)
        logconfig.set_level("debug")
        assert logconfig.enabled(logging.DEBUG)
    finally:
        logconfig.set_level(before)


async def test_a_clean_session_alone_writes_and_reads_no_owner_record_at_its_end(storage: Storage) -> None:
    broker, listeners, metadata = node(storage)
    conn, transport = connect_through_prelude(listeners, "c1")
    assert metadata.puts == 0 and metadata.gets == 1  # one look for a record to replace
    leave(conn, transport)
    assert metadata.gets == 1 and metadata.data == {} and broker.sessions == {}


async def test_a_clean_session_alone_replaces_and_removes_a_record_it_found(storage: Storage) -> None:
    broker, listeners, metadata = node(storage)
    key = records.session_key("c1")
    metadata.data[(records.SESSION, key)] = records.session_value([1, 0, "x"], broker.node, False, None)
    conn, transport = connect_through_prelude(listeners, "c1")
    assert records.session_value is not None and metadata.data[(records.SESSION, key)][2] is True
    leave(conn, transport)
    assert (records.SESSION, key) not in metadata.data


async def test_a_resumed_persistent_session_alone_keeps_its_record_without_writing_it(storage: Storage) -> None:
    broker, listeners, metadata = node(storage)
    conn, transport = connect_through_prelude(listeners, "p1", clean=False)
    leave(conn, transport)
    assert metadata.puts == 1
    record = metadata.data[(records.SESSION, records.session_key("p1"))]
    assert records.session_owner(record) == broker.node
    for _ in range(3):
        conn, transport = connect_through_prelude(listeners, "p1", clean=False)
        leave(conn, transport)
    assert metadata.puts == 1
    assert metadata.data[(records.SESSION, records.session_key("p1"))] == record
    # A clean start ends the persistent session (its record goes with it): the clean one that follows writes none.
    conn, transport = connect_through_prelude(listeners, "p1", clean=True)
    assert metadata.puts == 1 and (records.SESSION, records.session_key("p1")) not in metadata.data
    leave(conn, transport)


async def test_with_cluster_links_every_connect_writes_its_owner_record(storage: Storage) -> None:
    broker, listeners, metadata = node(storage, CLUSTERED)
    conn, transport = connect_through_prelude(listeners, "c1")
    leave(conn, transport)
    for _ in range(2):
        conn, transport = connect_through_prelude(listeners, "p1", clean=False)
        leave(conn, transport)
    assert metadata.puts == 3
    assert (records.SESSION, records.session_key("c1")) not in metadata.data
    assert records.session_owner(metadata.data[(records.SESSION, records.session_key("p1"))]) == broker.node


@pytest.mark.parametrize(("value", "same"), [
    (None, False),
    (records.session_value([1, 0, "n"], "n", False, None), True),
    (records.session_value([1, 0, "n"], "n", False, 60.0), False),
    (records.session_value([1, 0, "n"], "n", True, None), False),
    (records.session_value([1, 0, "n"], "m", False, None), False),
    (records.session_value([1, 0, "n"], "n", False, None, origin="dead"), False),
])
def test_same_owner_table(value: Any, same: bool) -> None:
    assert records.same_owner(value, "n", False, None) is same


@given(st.text(max_size=5), st.text(max_size=5), st.booleans(), st.booleans(),
       st.none() | st.floats(0, 1e6), st.none() | st.floats(0, 1e6))
def test_same_owner_is_what_session_value_would_write_but_for_the_stamp(
        node_a: str, node_b: str, clean_a: bool, clean_b: bool, expiry_a: float | None,
        expiry_b: float | None) -> None:
    value = records.session_value([5, 1, "x"], node_a, clean_a, expiry_a)
    expected = (node_a, clean_a, expiry_a) == (node_b, clean_b, expiry_b)
    assert records.same_owner(value, node_b, clean_b, expiry_b) is expected


def test_a_new_connection_state_makes_no_set_or_dict_of_its_own() -> None:
    from vmqpy.broker.machine.protocol import ConnectionState

    first, second = ConnectionState(), ConnectionState()
    assert first.unreleased_qos2 is second.unreleased_qos2 and isinstance(first.unreleased_qos2, frozenset)
    assert first.aliases_in is None


@pytest.mark.parametrize("level", [4, 5])
async def test_qos2_ids_of_one_connection_never_reach_another(storage: Storage, level: int) -> None:
    from vmqpy.mqtt.packets import Publish, Pubrel

    _broker, listeners, _metadata = node(storage)
    conn, transport = connect_through_prelude(listeners, "q1", level=level)
    other, other_transport = connect_through_prelude(listeners, "q2", level=level)
    conn.data_received(encode(Publish("t", b"x", qos=2, packet_id=7), level))
    await asyncio.sleep(0)
    assert conn.machine.state.unreleased_qos2 == {7}
    assert other.machine.state.unreleased_qos2 == frozenset()
    conn.data_received(encode(Pubrel(7), level))
    await asyncio.sleep(0)
    assert conn.machine.state.unreleased_qos2 == set()
    assert (conn.machine.state.aliases_in is not None) == (level == 5)
    leave(conn, transport)
    leave(other, other_transport)
