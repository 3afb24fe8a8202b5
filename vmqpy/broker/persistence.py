"""What the broker keeps on disk: persistent sessions, their subscriptions and queues, retained messages.

Records are msgpack in the node's `Storage` (SQLite, batched off the event loop). Keys put a session's records
next to each other (`client_id NUL ...`; MQTT strings cannot hold NUL), so a session is deleted with one prefix
delete. Clean sessions never touch the disk.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from vmqpy.broker.message import Message, decode_record, encode_record
from vmqpy.broker.session import Outgoing, OutState, Session, SubEntry
from vmqpy.storage import Storage
from vmqpy.mqtt.packets import SubOptions
from vmqpy.mqtt.topics import parse_shared

SESSIONS = "session"
SUBSCRIPTIONS = "sub"
MESSAGES = "msg"
INCOMING = "qos2in"
RETAINED = "retain"


def _session_key(client_id: str) -> bytes:
    return client_id.encode() + b"\0"


@dataclass(slots=True)
class StoredSession:
    """A persistent session as loaded at start, before the broker rebuilds its Session."""

    client_id: str
    protocol_level: int
    expiry_interval: float | None
    disconnected_at: float | None
    subscriptions: list[SubEntry] = field(default_factory=list)
    messages: list[Outgoing] = field(default_factory=list)
    incoming: set[int] = field(default_factory=set)


class SessionStore:
    """The Journal of persistent sessions, and the loader of everything at start."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    # --------------------------------------------------------------------------- sessions and subscriptions

    def save_session(self, session: Session) -> None:
        record = [session.protocol_level, session.expiry_interval, session.disconnected_at]
        self.storage.put(SESSIONS, session.client_id.encode(), encode_record(record))

    def delete_session(self, client_id: str) -> None:
        self.storage.delete(SESSIONS, client_id.encode())
        prefix = _session_key(client_id)
        for table in (SUBSCRIPTIONS, MESSAGES, INCOMING):
            self.storage.delete_prefix(table, prefix)

    def save_subscription(self, session: Session, entry: SubEntry) -> None:
        opts = entry.options
        record = [opts.qos, opts.no_local, opts.retain_as_published, opts.retain_handling, entry.subscription_id]
        key = _session_key(session.client_id) + entry.topic_filter.encode()
        self.storage.put(SUBSCRIPTIONS, key, encode_record(record))

    def delete_subscription(self, session: Session, topic_filter: str) -> None:
        self.storage.delete(SUBSCRIPTIONS, _session_key(session.client_id) + topic_filter.encode())

    # --------------------------------------------------------------------------- the Journal

    def save_message(self, session: Session, out: Outgoing) -> None:
        record = [out.message.pack(), out.qos, out.retain, out.subscription_ids, out.packet_id, int(out.state)]
        self.storage.put(MESSAGES, _message_key(session.client_id, out.seq), encode_record(record))

    def delete_message(self, session: Session, out: Outgoing) -> None:
        self.storage.delete(MESSAGES, _message_key(session.client_id, out.seq))

    def save_incoming(self, session: Session, packet_id: int, present: bool) -> None:
        key = _session_key(session.client_id) + struct.pack(">H", packet_id)
        if present:
            self.storage.put(INCOMING, key, b"")
        else:
            self.storage.delete(INCOMING, key)

    # --------------------------------------------------------------------------- retained messages

    def save_retained(self, message: Message) -> None:
        self.storage.put(RETAINED, message.topic.encode(), encode_record(message.pack()))

    def delete_retained(self, topic: str) -> None:
        self.storage.delete(RETAINED, topic.encode())

    def load_retained(self) -> Iterator[Message]:
        for _key, value in self.storage.load(RETAINED):
            yield Message.unpack(decode_record(value))

    # --------------------------------------------------------------------------- loading at start

    def load_sessions(self) -> dict[str, StoredSession]:
        sessions: dict[str, StoredSession] = {}
        for key, value in self.storage.load(SESSIONS):
            level, expiry, disconnected_at = decode_record(value)
            client_id = key.decode()
            sessions[client_id] = StoredSession(client_id, level, expiry, disconnected_at)
        for key, value in self.storage.load(SUBSCRIPTIONS):
            client_id, topic_filter = _split(key)
            stored = sessions.get(client_id)
            if stored is None:
                continue
            qos, no_local, rap, handling, sub_id = decode_record(value)
            stored.subscriptions.append(_entry(topic_filter.decode(), SubOptions(qos, no_local, rap, handling), sub_id))
        for key, value in self.storage.load(MESSAGES):
            client_id, seq_bytes = _split(key)
            stored = sessions.get(client_id)
            if stored is None:
                continue
            packed, qos, retain, sub_ids, packet_id, state = decode_record(value)
            (seq,) = struct.unpack(">Q", seq_bytes)
            out = Outgoing(seq, Message.unpack(packed), qos, retain, list(sub_ids), packet_id, OutState(state))
            stored.messages.append(out)
        for key, _value in self.storage.load(INCOMING):
            client_id, pid_bytes = _split(key)
            if client_id in sessions:
                sessions[client_id].incoming.add(struct.unpack(">H", pid_bytes)[0])
        return sessions


def _message_key(client_id: str, seq: int) -> bytes:
    return _session_key(client_id) + struct.pack(">Q", seq)


def _split(key: bytes) -> tuple[str, bytes]:
    client_id, _, rest = key.partition(b"\0")
    return client_id.decode(), rest


def _entry(topic_filter: str, options: SubOptions, subscription_id: int | None) -> SubEntry:
    group, match_filter = parse_shared(topic_filter)
    return SubEntry(topic_filter, match_filter, options, subscription_id, group)
