"""The vocabulary of the will tests on one real Broker (test_wills, test_stored_will): client c1 with a will on
WILL_TOPIC, connected at CONNECTED_AT and gone at CLOSED_AT, and a watcher of that topic that records every will
published."""

from __future__ import annotations

from dataclasses import dataclass

from tests.unit.broker.fakes import RecordingSink
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.session import Session
from vmqpy.broker.machine.negotiation import Accepted
from vmqpy.mqtt.packets import SubOptions, Subscription

WILL_TOPIC = "will/c1"
CONNECTED_AT = 100.0
CLOSED_AT = 110.0


@dataclass(slots=True)
class Client:
    """A connection as the broker sees it: its session, what it was sent, the terms of its CONNECT."""

    session: Session
    sink: RecordingSink
    terms: Accepted


def will_watcher(broker: Broker) -> RecordingSink:
    """A second, online session subscribed to WILL_TOPIC: its sink gets every will published."""
    sink = RecordingSink()
    session, _present = broker.open_session("watcher", 5, True, 0.0, sink, CONNECTED_AT)
    broker.attach(session, sink, 65535, 0, CONNECTED_AT)
    broker.subscribe(session, [Subscription(WILL_TOPIC, SubOptions(1))], None)
    return sink


def wills(watcher: RecordingSink) -> list[bytes]:
    """The payloads of the wills the watcher got, in order."""
    return [p.payload for p in watcher.publishes() if p.topic == WILL_TOPIC]
