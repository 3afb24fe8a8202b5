"""A clean start that replaces a session holding many subscriptions (vmqpy.broker.core.sweeper,
vmqpy.broker.core.router):
the new session is made at once, the old subscriptions go a slice a turn, and while they wait the router delivers
nothing through them to the new session; a filter the new session subscribes to again is delivered (once) and
kept. Without sockets: one Broker over an in-memory metadata store, its loop a list of callbacks run by hand."""

from __future__ import annotations

from tests.unit.broker.fakes import MemoryMetadata, RecordingSink, TakenOverSink
from tests.unit.broker.turns import Loop
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.sweeper import AT_ONCE, SLICE
from vmqpy.mqtt.packets import Publish, SubOptions, Subscription
from vmqpy.sessions import records
from vmqpy.sessions.message import Message

NOW = 1_000.0
OLD = 3 * SLICE  # subscriptions of the replaced session: many slices' worth


def received(sink: RecordingSink) -> list[str]:
    return [p.topic for p in sink.packets if isinstance(p, Publish)]


def test_a_clean_start_does_not_remove_the_old_subscriptions_in_its_turn_and_gets_none_of_them(
        node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, metadata = node_b
    loop = Loop()
    broker.sweeper.schedule = loop.call_soon  # a slice a turn, as in a node (vmqpy.node)
    old_sink = TakenOverSink()
    old, _present = broker.open_session("c", 5, False, None, old_sink, NOW)
    broker.attach(old, old_sink, 100, 0, NOW)
    broker.subscribe(old, [Subscription(f"f/{i}", SubOptions(1)) for i in range(OLD)], None)
    broker.subscribe(old, [Subscription("$share/g/s/#", SubOptions(1)), Subscription("m/#", SubOptions(1))], None)
    assert OLD > AT_ONCE

    new_sink = RecordingSink()
    new, present = broker.open_session("c", 5, True, None, new_sink, NOW + 1)
    assert not present and new is not old and old_sink.taken_over
    broker.attach(new, new_sink, 100, 0, NOW + 1)
    assert broker.sweeper.pending("c")  # not removed in the CONNECT's turn
    left = sum(1 for key, _value in metadata.fold(records.SUBSCRIPTION) if key[1] == "c")
    assert left == OLD + 2

    broker.subscribe(new, [Subscription("f/1", SubOptions(0)), Subscription("m/1", SubOptions(0))], None)
    broker.publish(Message("f/0", b"old", 1), NOW + 2)  # only the old session subscribed to these
    broker.publish(Message("s/1", b"old", 1), NOW + 2)  # a shared group of the old session's
    broker.publish(Message("f/1", b"again", 1), NOW + 2)  # an old filter the new session subscribed to again
    broker.publish(Message("m/1", b"both", 1), NOW + 2)  # the old m/# and the new m/1 match: once, by m/1
    assert received(new_sink) == ["f/1", "m/1"]
    assert [p.qos for p in new_sink.packets if isinstance(p, Publish)] == [0, 0]

    turns = 0
    while loop.turn():
        turns += 1
    assert not broker.sweeper.pending("c") and turns >= OLD // SLICE
    kept = sorted(key[2] for key, _value in metadata.fold(records.SUBSCRIPTION) if key[1] == "c")
    assert kept == ["f/1", "m/1"]
    broker.publish(Message("f/1", b"still", 1), NOW + 3)
    broker.publish(Message("f/2", b"gone", 1), NOW + 3)
    assert received(new_sink) == ["f/1", "m/1", "f/1"]
