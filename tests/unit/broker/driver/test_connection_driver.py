"""The asyncio driver (vmqpy/broker/driver/connection.py) over a fake transport, for what only it does with VerneMQ's
options: it stops reading a client over `max_message_rate` and reads again when the rate allows, it answers a
SUBSCRIBE with the machine's refusals in place, and it arms the resend timer of a 3.1.1 client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from tests.unit.broker.connections import connection, received
from tests.unit.broker.fakes import MemoryMetadata
from tests.unit.transports import FakeTransport
from vmqpy.broker.access.auth import Authenticator
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.broker.driver import connection as connection_module
from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Pingresp,
    Puback,
    Publish,
    Suback,
    SubOptions,
    Subscribe,
    Subscription,
    Unsubscribe,
)
from vmqpy.sessions import records
from vmqpy.sessions.message import Message
from vmqpy.storage import Storage


async def test_a_client_over_max_message_rate_is_not_read_until_the_rate_allows(
        storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    # The rate is what is tested, not the turn budget: on a loaded machine 25 packets can outlast one turn's budget
    # and the read would yield before the rate stops it (10 read instead of 21). The turn's clock stands still.
    monkeypatch.setattr(connection_module, "perf_counter", lambda: 0.0)
    conn, transport, broker = connection(storage, Config(nodename="b", max_message_rate=20))
    burst = b"".join(encode(Publish("t", b"%d" % i), 5) for i in range(25))
    conn.data_received(burst)
    assert broker.metrics["publish_received"] == 21  # a second's worth, and the one that found the bucket empty
    assert transport.paused
    await asyncio.sleep(0.6)  # 1/20 s per publish from now on: the other 4 within 0.2 s, and their debt paid
    assert broker.metrics["publish_received"] == 25
    assert not transport.paused
    conn.connection_lost(None)


async def turns_until(done: Callable[[], bool], turns: int = 10_000) -> None:
    """Let the event loop run turns (bounded) until `done()`."""
    for _ in range(turns):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not done after {turns} loop turns")


async def test_the_answers_of_a_read_leave_at_its_end_in_one_write_and_later_writes_are_flushed(
        storage: Storage) -> None:
    """The PUBACKs a read answers are written when the read is dispatched, in one write and without a flush callback
    (the driver holds the writer's `scheduled` meanwhile, MQTTConnection.process); after it the writer schedules
    its own flush again for a write outside a read (a delivery)."""
    conn, transport, _broker = connection(storage, Config(nodename="b"))
    await received(transport, 5)  # the CONNACK
    transport.writes.clear()
    conn.data_received(b"".join(encode(Publish("t", b"x", 1, packet_id=i), 5) for i in (1, 2, 3)))
    assert transport.writes == [b"".join(encode(Puback(i), 5) for i in (1, 2, 3))]  # before the loop turns
    assert not conn.writer.scheduled and not conn.writer.out
    conn.writer.packet(Pingresp())
    assert conn.writer.scheduled
    await asyncio.sleep(0)
    assert transport.writes[-1] == encode(Pingresp(), 5) and not conn.writer.scheduled
    conn.connection_lost(None)


async def test_no_rate_no_pause(storage: Storage) -> None:
    conn, transport, broker = connection(storage, Config(nodename="b"))
    conn.data_received(b"".join(encode(Publish("t", b"x"), 5) for _ in range(500)))
    await turns_until(lambda: broker.metrics["publish_received"] == 500)  # a turn's budget at a time
    assert not transport.paused
    conn.connection_lost(None)


async def test_a_client_whose_packets_take_the_turns_budget_waits_for_the_next_turn(
        storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    """vmqpy.broker.core.turn_budget: once a connection's packets have taken TURN_BUDGET, the rest of what it sent
    waits for a later turn, so that another client's packet goes first (a budget of 0 here: one packet a turn);
    its socket is read on until it holds YIELDED_READ_LIMIT bytes not dispatched."""
    monkeypatch.setattr(connection_module, "TURN_BUDGET", 0.0)
    monkeypatch.setattr(connection_module, "YIELDED_READ_LIMIT", 1024)
    flood, flood_transport, broker = connection(storage, Config(nodename="b"))
    other = MQTTConnection(broker, flood.config, None, Authenticator(True, {}), "default")
    other_transport = FakeTransport()
    other.connection_made(other_transport)
    await turns_until(lambda: flood.session is not None and not flood._yielded)
    other.data_received(encode(Connect("c2", protocol_level=5), 5))
    await turns_until(lambda: other.session is not None and not other._yielded)
    before = broker.metrics["publish_received"]
    flood.data_received(b"".join(encode(Publish("t", b"%d" % i), 5) for i in range(50)))  # about 300 bytes
    assert broker.metrics["publish_received"] == before + 1 and not flood_transport.paused
    flood.data_received(b"".join(encode(Publish("t", b"x" * 100), 5) for i in range(10)))  # over the limit now
    assert broker.metrics["publish_received"] == before + 1 and flood_transport.paused
    other.data_received(encode(Publish("t", b"other"), 5))
    assert broker.metrics["publish_received"] == before + 2  # the other client is read and dispatched at once
    await turns_until(lambda: broker.metrics["publish_received"] == before + 61)
    await turns_until(lambda: not flood_transport.paused)  # all dispatched: read again
    assert broker.metrics["connection_turn_yielded"] >= 59
    flood.connection_lost(None)
    other.connection_lost(None)


async def test_a_client_gets_one_turns_budget_a_loop_turn_in_the_lane_or_when_read(
        storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lane step that dispatches the last of what a yielded client sent keeps it in the lane one more turn: what
    it sends later in the same loop turn waits for the lane's next turn instead of being dispatched when read (a
    budget in the lane, then another when read: twice the budget a turn, seen as 2 ms + 2 ms turns in the
    hostile-client module). A lane turn that finds nothing new lets it be dispatched when read again."""
    monkeypatch.setattr(connection_module, "TURN_BUDGET", 0.0)  # one packet, then the turn's budget is gone
    conn, _transport, broker = connection(storage, Config(nodename="b"))
    await turns_until(lambda: conn.session is not None and not conn._yielded)
    armed: list[object] = []
    broker.lane.schedule = armed.append  # the test runs the lane's turns
    received = broker.metrics["publish_received"]
    conn.data_received(encode(Publish("t", b"0"), 5) + encode(Publish("t", b"1"), 5))
    assert broker.metrics["publish_received"] == received + 1 and conn._yielded
    broker.lane.run()  # a loop turn: the lane dispatches the rest
    assert broker.metrics["publish_received"] == received + 2
    conn.data_received(encode(Publish("t", b"2"), 5))  # read later in that same turn
    assert broker.metrics["publish_received"] == received + 2  # on the code before: dispatched at once
    broker.lane.run()
    assert broker.metrics["publish_received"] == received + 3
    broker.lane.run()  # nothing new: back to being dispatched when read
    assert not conn._yielded and not len(broker.lane)
    conn.data_received(encode(Publish("t", b"3"), 5))
    assert broker.metrics["publish_received"] == received + 4
    conn.connection_lost(None)


async def test_a_long_subscribe_is_decoded_a_slice_a_turn_before_any_filter_takes_effect(storage: Storage) -> None:
    """A SUBSCRIBE of more than LONG_SUBSCRIBE bytes of filters (here 20,000 filters, 140 KB) is decoded a slice a
    turn of the bulk lane, nothing of it applied meanwhile; then it is handled in slices as any SUBSCRIBE, with
    one SUBACK of every code in order. On the code before, the read that brought it decoded all of it and added
    the first slice of subscriptions at once (a 1 MiB SUBSCRIBE of one-character filters: 0.5-0.75 s of decoding
    in that one callback)."""
    conn, transport, broker = connection(storage, Config(nodename="b"))
    await turns_until(lambda: conn.session is not None)
    armed: list[object] = []
    broker.lane.schedule = armed.append  # the test runs the lane's turns
    count = 20_000
    conn.data_received(encode(Subscribe(1, [Subscription(f"long/{i}") for i in range(count)]), 5))
    assert conn.session is not None and not conn.session.subscriptions and transport.paused
    turns = 0
    while len(broker.lane) and turns < 100_000:
        broker.lane.run()
        turns += 1
        if not conn.session.subscriptions:
            decoding = turns
    assert decoding >= 2  # the decode alone took several turns
    packets = await received(transport, 5)
    assert packets[-1] == Suback(1, [0] * count)
    assert len(conn.session.subscriptions) == count and not transport.paused
    conn.connection_lost(None)


@pytest.mark.parametrize("level", [4, 5])
async def test_a_malformed_filter_at_the_end_of_a_long_subscribe_ends_the_connection_with_nothing_applied(
        storage: Storage, level: int) -> None:
    conn, transport, broker = connection(storage, Config(nodename="b"), level)
    await turns_until(lambda: conn.session is not None)
    data = bytearray(encode(Subscribe(1, [Subscription(f"long/{i}") for i in range(2_000)]), level))
    data[-1] = 0xC0  # the last filter's options byte: reserved bits (3.1.1: a QoS byte above 2)
    conn.data_received(bytes(data))
    await turns_until(lambda: transport.closed)
    assert conn.session is None or not conn.session.subscriptions
    assert not list(broker.metadata.fold(records.SUBSCRIPTION))
    if level == 5:
        assert (await received(transport, 5))[-1] == Disconnect(0x81)


async def test_a_clients_answers_leave_when_its_packets_are_dispatched(storage: Storage) -> None:
    """The PUBACK of a client's PUBLISH is written in the callback that read it, not in a later callback of the
    loop turn, where it would wait behind the bulk lane's share (vmqpy.broker.core.turn_budget)."""
    conn, transport, _broker = connection(storage, Config(nodename="b"))
    await turns_until(lambda: conn.session is not None)
    before = len(await received(transport, 5))  # the CONNACK
    conn.data_received(encode(Publish("t", b"x", qos=1, packet_id=7), 5))
    decoder = Decoder(server=False, protocol_level=5)
    decoder.receive_data(bytes(transport.written))  # no loop turn since: what the callback wrote
    packets = []
    while (packet := decoder.next_packet()) is not NEED_DATA:
        packets.append(packet)
    assert packets[before:] == [Puback(7)]
    conn.connection_lost(None)


@pytest.mark.parametrize(("level", "refusal"), [(5, 0x97), (4, 0x80)])
async def test_a_subscribe_over_the_limit_gets_its_refusals_in_place(
    storage: Storage, level: int, refusal: int
) -> None:
    conn, transport, _broker = connection(storage, Config(nodename="b", max_subscriptions_per_client=2), level)
    subscriptions = [Subscription(f, SubOptions(1)) for f in ("a", "b", "a", "c")]
    conn.data_received(encode(Subscribe(1, subscriptions), level))
    conn.data_received(encode(Subscribe(2, [Subscription("b", SubOptions(0)), Subscription("d")]), level))
    packets = await received(transport, level)
    assert isinstance(packets[0], Connack)
    assert packets[1:] == [Suback(1, [1, 1, 1, refusal]), Suback(2, [0, refusal])]
    assert conn.session is not None and sorted(conn.session.subscriptions) == ["a", "b"]
    conn.connection_lost(None)


@pytest.mark.parametrize(("level", "armed"), [(4, True), (5, False)])
async def test_a_qos1_delivery_arms_the_resend_timer_of_a_311_client(
    storage: Storage, level: int, armed: bool
) -> None:
    conn, _transport, broker = connection(storage, Config(nodename="b", retry_interval=20.0), level)
    conn.data_received(encode(Subscribe(1, [Subscription("t", SubOptions(1))]), level))
    await asyncio.sleep(0)
    assert conn._timer is None
    broker.publish(Message("t", b"x", 1), time.time())
    assert (conn._timer is not None) == armed  # the connection's one timer, for the machine's next deadline
    conn.connection_lost(None)
    assert conn._timer is None


class HalfClosingTransport(FakeTransport):
    """A TCP-like transport: it can half-close (`write_eof`), as the node's TCP sockets can."""

    def __init__(self) -> None:
        super().__init__()
        self.eof_written = False
        self.reading = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof_written = True

    def is_reading(self) -> bool:
        return self.reading


def tcp_connection(storage: Storage, level: int = 4) -> tuple[MQTTConnection, HalfClosingTransport]:
    broker = Broker(Config(), SessionStore(storage), MemoryMetadata())
    conn = MQTTConnection(broker, Config(), None, Authenticator(True, {}), "default")
    transport = HalfClosingTransport()
    conn.connection_made(transport)
    conn.data_received(encode(Connect("c1", protocol_level=level), level))
    return conn, transport


@pytest.mark.parametrize(("level", "disconnect", "normal"), [(4, b"\xe0\x00", True), (5, b"\xe0\x01\x04", False)])
async def test_a_clients_disconnect_closes_its_socket_without_lingering(storage: Storage, level: int,
                                                                       disconnect: bytes, normal: bool) -> None:
    """The client ended the connection itself (DISCONNECT, with or without its will): nothing of the node's is
    left to reach a client still writing, so the socket is closed at once, not half-closed and drained."""
    conn, transport = tcp_connection(storage, level)
    assert [type(p) for p in await received(transport, level)] == [Connack]
    conn.data_received(disconnect)  # 3.1.1: DISCONNECT; 5.0: DISCONNECT 0x04, with its will
    assert transport.closed and not transport.eof_written and transport.protocol is None
    assert conn.closing and conn.normal_close is normal


async def test_a_close_of_the_nodes_own_lingers(storage: Storage) -> None:
    """The node ends the connection (here: a shutdown or an error): its TCP socket is half-closed and drained
    (vmqpy.broker.driver.linger), so that its last bytes reach a client still writing."""
    conn, transport = tcp_connection(storage)
    conn.close()
    assert transport.eof_written and not transport.closed and transport.protocol is not None


@pytest.mark.parametrize(("level", "disconnect"), [
    (5, Disconnect(rc.SESSION_TAKEN_OVER)),
    (4, None),  # 3.1.1 has no DISCONNECT from the server: the socket closes
])
async def test_a_takeover_writes_the_machines_disconnect(storage: Storage, level: int,
                                                         disconnect: Disconnect | None) -> None:
    conn, transport, _broker = connection(storage, Config(nodename="b"), level)
    conn.take_over()
    packets = await received(transport, level)
    assert packets[1:] == ([] if disconnect is None else [disconnect]) and conn.closing


@pytest.mark.parametrize("level", [4, 5])
async def test_moving_away_names_the_other_server_to_a_5_client(storage: Storage, level: int) -> None:
    conn, transport, _broker = connection(storage, Config(nodename="b"), level)
    conn.move_away("b.example:1883")
    packets = await received(transport, level)
    if level == 5:
        [disconnect] = packets[1:]
        assert isinstance(disconnect, Disconnect) and disconnect.reason_code == rc.USE_ANOTHER_SERVER
        assert disconnect.properties.server_reference == "b.example:1883"
    else:
        assert packets[1:] == []
    assert conn.closing and conn.normal_close, "no will: the client is expected to reconnect elsewhere"


async def test_every_packet_is_counted_once_as_it_is_dispatched(storage: Storage) -> None:
    """The driver's dispatch counts what a client sends (the PUBACK and SUBSCRIBE as well as the rest), once."""
    conn, transport, broker = connection(storage, Config(nodename="b"), 5)
    conn.data_received(b"".join(encode(packet, 5) for packet in (
        Subscribe(1, [Subscription("t", SubOptions(1))]), Pingreq(), Puback(9), Unsubscribe(2, ["t"]))))
    await received(transport, 5)
    counted = {key: broker.metrics[key] for key in (
        "mqtt_connect_received", "mqtt_subscribe_received", "mqtt_pingreq_received", "mqtt_puback_received",
        "mqtt_unsubscribe_received")}
    assert counted == dict.fromkeys(counted, 1)
    conn.connection_lost(None)
