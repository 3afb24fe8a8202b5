"""Sessions, messages and subscription entries built for the broker's unit tests."""

from __future__ import annotations

from vmqpy.broker.core.session import Session
from vmqpy.mqtt.packets import SubOptions
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import SubEntry

from .fakes import RecordingSink


def session(max_inflight: int = 2, max_online: int = 3, max_offline: int = 2, expiry: float | None = None) -> Session:
    """The session of client c1 (5.0) with these bounds."""
    return Session(
        "c1", protocol_level=5, expiry_interval=expiry, max_inflight=max_inflight, max_online=max_online,
        max_offline=max_offline,
    )


def msg(n: int, qos: int = 1, expires_at: float | None = None) -> Message:
    """Message `n`: payload str(n) on topic t/n."""
    return Message(f"t/{n}", str(n).encode(), qos, expires_at=expires_at)


def entry(topic_filter: str, qos: int = 1, sub_id: int | None = None, no_local: bool = False) -> SubEntry:
    """The router's entry of a subscription to `topic_filter` (`$share/g/...`: of shared group g)."""
    group = None
    match_filter = topic_filter
    if topic_filter.startswith("$share/"):
        _, group, match_filter = topic_filter.split("/", 2)
    return SubEntry(topic_filter, match_filter, SubOptions(qos, no_local), sub_id, group)


def online(sessions: dict[str, Session], client_id: str) -> RecordingSink:
    """An online session of `client_id`, added to `sessions`; the sink its connection records into."""
    session = Session(client_id, protocol_level=5, expiry_interval=0, max_inflight=100, max_online=100,
                      max_offline=10)
    sink = RecordingSink()
    session.attach(sink, 65535, 0, 0.0)
    sessions[client_id] = session
    return sink
