"""The keep-alive checks of a node on one timer (vmqpy.broker.driver.keepalive): a check never runs before its time and
at most GRAIN seconds after it; a connection in no bucket once its socket is gone; a silent client closed at 1.5
times its keep alive and not before, a client that spoke checked again instead."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.broker.connections import received
from tests.unit.broker.fakes import MemoryMetadata
from tests.unit.transports import FakeTransport
from vmqpy.broker.access.auth import Authenticator
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.broker.driver import keepalive
from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.broker.driver.keepalive import GRAIN, STALE_SLACK, Buckets, KeepAlives, bucket_of
from vmqpy.config import Config
from vmqpy.mqtt.codec import encode
from vmqpy.mqtt.packets import Connack, Connect, Disconnect, Pingreq
from vmqpy.storage import Storage


class Item:
    """A watched thing that records when it was checked."""

    __slots__ = ("checked", "keepalive_bucket", "name")

    def __init__(self, name: int) -> None:
        self.name = name
        self.keepalive_bucket: keepalive.Bucket | None = None
        self.checked: list[float] = []

    def keepalive_check(self, now: float) -> None:
        self.checked.append(now)


def check_item(item: Item, now: float) -> None:
    item.keepalive_check(now)


@pytest.mark.parametrize(("at", "number"), [(0.0, 0), (0.05, 1), (0.1, 1), (0.10001, 2), (0.3, 3), (12.34, 124)])
def test_a_time_falls_in_the_first_bucket_that_starts_at_or_after_it(at: float, number: int) -> None:
    assert bucket_of(at) == number


@given(st.floats(0, 1e7, allow_nan=False))
def test_a_bucket_never_starts_before_its_times_nor_a_grain_after(at: float) -> None:
    assert (bucket_of(at) - 1) * GRAIN < at <= bucket_of(at) * GRAIN


def test_items_come_out_when_due_earliest_first_and_once() -> None:
    buckets = Buckets()
    a, b, c = Item(1), Item(2), Item(3)
    buckets.add(a, 10.02)
    buckets.add(b, 10.25)
    buckets.add(c, 10.0)
    assert buckets.next_due() == pytest.approx(10.0)
    assert buckets.pop_due(9.99) == []
    assert buckets.pop_due(10.0) == [c]
    assert buckets.pop_due(10.11) == [a] and a.keepalive_bucket is None
    assert buckets.pop_due(10.11) == []
    assert buckets.pop_due(11.0) == [b]
    assert buckets.next_due() is None and len(buckets) == 0


def test_an_item_added_again_is_due_only_at_its_new_time_and_a_discarded_one_never() -> None:
    buckets = Buckets()
    a, b = Item(1), Item(2)
    buckets.add(a, 1.0)
    buckets.add(b, 1.0)
    buckets.add(a, 5.0)
    buckets.discard(b)
    assert b.keepalive_bucket is None and len(buckets) == 1
    assert buckets.next_due() == pytest.approx(5.0), "the emptied bucket of 1.0 is gone"
    assert buckets.pop_due(4.9) == []
    assert buckets.pop_due(5.0) == [a]


@given(st.lists(st.tuples(st.sampled_from(["add", "discard", "pop"]), st.integers(0, 5),
                          st.floats(0, 100, allow_nan=False)), max_size=60))
def test_never_early_never_more_than_a_grain_late(ops: list[tuple[str, int, float]]) -> None:
    """Against a model (item -> the time it is due): what pop_due(now) returns was due at or before `now`, exactly
    the model's items due a grain before `now` or earlier are out, and nothing comes out twice."""
    buckets = Buckets()
    items = [Item(i) for i in range(6)]
    due: dict[int, float] = {}
    now = 0.0
    for op, index, value in ops:
        item = items[index]
        if op == "add":
            at = now + value
            buckets.add(item, at)
            due[index] = at
        elif op == "discard":
            buckets.discard(item)
            due.pop(index, None)
        else:
            now += value
            out = buckets.pop_due(now)
            names = [i.name for i in out]  # type: ignore[attr-defined]
            assert len(names) == len(set(names))
            for name in names:
                assert due.pop(name) <= now, "early"
            assert all(at > now - GRAIN for at in due.values()), "later than a grain"
        assert len(buckets) == len(due)
        assert all((items[i].keepalive_bucket is not None) == (i in due) for i in range(6))
        assert len(buckets._by_number) <= len(due), "a bucket that holds nobody is dropped"
        assert len(buckets._numbers) <= 2 * len(buckets._by_number) + STALE_SLACK


def test_clients_that_came_and_went_leave_no_bucket_behind() -> None:
    """100,000 connections with the longest keep alive (65,535 s, checked 1.5 times that later), one every 0.1 s
    of the loop's clock, each gone before its check: the wheel ends as empty as it began, and its heap never holds
    more than twice the live buckets (plus a slack), where before every emptied set stayed until its time came."""
    buckets = Buckets()
    longest = 65_535 * 1.5
    live: list[Item] = []
    for i in range(100_000):
        item = Item(i)
        buckets.add(item, i * GRAIN + longest)
        live.append(item)
        if len(live) > 10:
            buckets.discard(live.pop(0))
        assert len(buckets._numbers) <= 2 * len(buckets._by_number) + STALE_SLACK
    for item in live:
        buckets.discard(item)
    assert buckets._by_number == {} and buckets.next_due() is None and len(buckets) == 0


async def test_the_loop_timer_checks_each_item_not_before_its_time() -> None:
    loop = asyncio.get_running_loop()
    wheel = KeepAlives(check_item)
    start = loop.time()
    items = [Item(i) for i in range(4)]
    for delay, item in zip((0.02, 0.25, 0.0, 0.13), items, strict=True):
        wheel.schedule(item, loop, start + delay)
    wheel.schedule(items[1], loop, start + 0.06)  # moved earlier: the timer is armed again
    deadline = loop.time() + 5.0
    while not all(item.checked for item in items) and loop.time() < deadline:
        await asyncio.sleep(0.01)
    for delay, item in zip((0.02, 0.06, 0.0, 0.13), items, strict=True):
        assert len(item.checked) == 1 and item.checked[0] >= start + delay
    assert len(wheel.buckets) == 0, "only the bucket items[1] left, empty, until its time"


async def test_a_failing_check_does_not_keep_the_others_of_its_bucket_from_theirs() -> None:
    class Failing(Item):
        __slots__ = ()

        def keepalive_check(self, now: float) -> None:
            raise RuntimeError("boom")

    loop = asyncio.get_running_loop()
    wheel = KeepAlives(check_item)
    at = loop.time()
    items = [Failing(0), Item(1), Failing(2), Item(3)]
    for item in items:
        wheel.schedule(item, loop, at)
    deadline = loop.time() + 5.0
    while not (items[1].checked and items[3].checked) and loop.time() < deadline:
        await asyncio.sleep(0.01)
    assert items[1].checked and items[3].checked


# ---------------------------------------------------------------------------------------------- the connection


def accepted(storage: Storage, level: int, keep_alive: int) -> tuple[MQTTConnection, FakeTransport]:
    broker = Broker(Config(nodename="b"), SessionStore(storage), MemoryMetadata())
    conn = MQTTConnection(broker, broker.config, None, Authenticator(True, {}), "default")
    transport = FakeTransport()
    conn.connection_made(transport)
    conn.data_received(encode(Connect("ka", protocol_level=level, keep_alive=keep_alive), level))
    return conn, transport


@pytest.mark.parametrize("level", [4, 5])
@pytest.mark.parametrize("heard_at", [None, 1014.93])  # None: the loop's clock at CONNECT; 1014.93 + 15 - 1014.93 < 15
async def test_a_silent_client_is_closed_at_one_and_a_half_keep_alives_not_before(storage: Storage, level: int,
                                                                                  heard_at: float | None) -> None:
    conn, transport = accepted(storage, level, keep_alive=10)
    bucket = conn.keepalive_bucket
    assert bucket is not None and conn in bucket and conn._timer is None, "waits in the wheel, with no timer"
    if heard_at is not None:
        conn.last_received = heard_at
    last = conn.last_received
    assert bucket_of(last + 15.0) * GRAIN >= last + 15.0
    keepalive.check(conn, last + 14.99)
    assert not conn.closing and not transport.closed
    assert conn.keepalive_bucket is not None, "checked again when 1.5 x 10 s would have passed"
    keepalive.check(conn, last + 15.0)
    assert conn.closing and transport.closed
    packets = await received(transport, level)
    assert isinstance(packets[0], Connack)
    if level == 5:
        assert packets[1:] == [Disconnect(0x8D)]
    else:
        assert packets[1:] == []
    conn.connection_lost(None)
    assert conn.keepalive_bucket is None and conn not in bucket


async def test_a_client_that_spoke_is_checked_again_from_its_last_packet(storage: Storage) -> None:
    conn, _transport = accepted(storage, 4, keep_alive=10)
    conn.data_received(encode(Pingreq(), 4))
    spoke = conn.last_received
    keepalive.check(conn, spoke + 5.0)
    assert not conn.closing
    wheel = keepalive.of_loop(asyncio.get_running_loop())
    assert conn.keepalive_bucket is wheel.buckets._by_number[bucket_of(spoke + 15.0)]
    conn.connection_lost(None)
    assert conn.keepalive_bucket is None


async def test_keep_alive_zero_is_never_checked(storage: Storage) -> None:
    conn, _transport = accepted(storage, 4, keep_alive=0)
    assert conn.keepalive_bucket is None and conn._timer is None
    conn.connection_lost(None)


async def test_a_connection_whose_socket_went_is_in_no_bucket(storage: Storage) -> None:
    conns = [accepted(storage, 4, keep_alive=30)[0] for _ in range(3)]
    buckets = {id(conn.keepalive_bucket) for conn in conns}
    for conn in conns:
        conn.connection_lost(None)
    wheel = keepalive.of_loop(asyncio.get_running_loop())
    assert all(conn not in items for items in wheel.buckets._by_number.values() for conn in conns)
    assert buckets, "they were in buckets before"
