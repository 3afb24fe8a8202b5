"""What the broker keeps on its own disk: persistent sessions, their queues and QoS 2 state.

(Subscriptions, retained messages and session owners live in the replicated metadata store.)

Records are msgpack in the node's `Storage` (SQLite, batched off the event loop). Keys put a session's records
next to each other (`client_id NUL ...`; MQTT strings cannot hold NUL), so a session is deleted with one prefix
delete. Clean sessions never touch the disk.

With queue replicas (vmqpy.replicas), each write is also handed to `replicas` (a `ReplicaJournal`), which
sends it to the session's replica nodes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Protocol

from vmqpy.broker.core.session import Session
from vmqpy.broker.core.stored_will import StoredWill
from vmqpy.bulk_load import bulk_load
from vmqpy.sessions.handover import outgoing_from_record, outgoing_record
from vmqpy.sessions.message import decode_record, encode_record
from vmqpy.sessions.owners import UNKNOWN_USER, pack_user, unpack_user
from vmqpy.sessions.parts import Outgoing
from vmqpy.storage import Storage

SESSIONS = "session"
MESSAGES = "msg"
INCOMING = "qos2in"


def _session_key(client_id: str) -> bytes:
    return client_id.encode() + b"\0"


@dataclass(slots=True)
class StoredSession:
    """A persistent session as loaded at start, before the broker rebuilds its Session."""

    client_id: str
    protocol_level: int
    expiry_interval: float | None
    disconnected_at: float | None
    messages: list[Outgoing] = field(default_factory=list)
    incoming: set[int] = field(default_factory=set)
    will: StoredWill | None = None
    user: str | None = UNKNOWN_USER  # the session's owner (vmqpy.sessions.owners)

    def __init__(
            self, client_id: str, protocol_level: int, expiry_interval: float | None, disconnected_at: float | None,
            messages: list[Outgoing] | None = None, incoming: set[int] | None = None, will: StoredWill | None = None,
            user: str | None = UNKNOWN_USER
    ) -> None:
        self.client_id = client_id
        self.protocol_level = protocol_level
        self.expiry_interval = expiry_interval
        self.disconnected_at = disconnected_at
        self.messages = [] if messages is None else messages
        self.incoming = set() if incoming is None else incoming
        self.will = will
        self.user = user


class ReplicaJournal(Protocol):
    """Where the writes of persistent sessions are copied to (vmqpy.replicas.owner.QueueReplicator)."""

    def message(self, client_id: str, seq: int, record: bytes) -> None: ...

    def message_gone(self, client_id: str, seq: int) -> None: ...

    def incoming(self, client_id: str, packet_id: int, present: bool) -> None: ...

    def session(self, client_id: str, record: bytes) -> None: ...

    def lineage(self, client_id: str, names: bytes) -> None: ...

    def drop(self, client_id: str) -> None: ...


class SessionStore:
    """The Journal of persistent sessions, and the loader of everything at start."""

    def __init__(self, storage: Storage, replicas: ReplicaJournal | None = None) -> None:
        self.storage = storage
        self.replicas = replicas
        self._wills: dict[str, StoredWill] = {}  # the will in each stored session record that has one


    # --------------------------------------------------------------------------- sessions and subscriptions

    def save_session(self, session: Session, will: StoredWill | None = None) -> None:
        """The session record: level, expiry, when it went offline, and `will` (vmqpy.broker.core.stored_will)."""
        if will is None:
            self._wills.pop(session.client_id, None)
        else:
            self._wills[session.client_id] = will
        record = self.record_of(session)
        self.storage.put(SESSIONS, session.client_id.encode(), record)
        if self.replicas is not None:
            self.replicas.session(session.client_id, record)

    def record_of(self, session: Session) -> bytes:
        """`session`'s record as last stored (with its will): what a replica's copy of it must hold
        (the rebalancer's sync, vmqpy.replicas.rebalancer)."""
        return encode_record(session_record(session, self._wills.get(session.client_id)))

    def delete_session(self, client_id: str) -> None:
        self._wills.pop(client_id, None)
        self.storage.delete(SESSIONS, client_id.encode())
        prefix = _session_key(client_id)
        for table in (MESSAGES, INCOMING):
            self.storage.delete_prefix(table, prefix)
        if self.replicas is not None:
            self.replicas.drop(client_id)

    # --------------------------------------------------------------------------- the Journal

    def save_message(self, session: Session, out: Outgoing) -> None:
        record = encode_record(outgoing_record(out))
        self.storage.put(MESSAGES, _message_key(session.client_id, out.seq), record)
        if self.replicas is not None:
            self.replicas.message(session.client_id, out.seq, record)

    def delete_message(self, session: Session, out: Outgoing) -> None:
        self.storage.delete(MESSAGES, _message_key(session.client_id, out.seq))
        if self.replicas is not None:
            self.replicas.message_gone(session.client_id, out.seq)

    def save_incoming(self, session: Session, packet_id: int, present: bool) -> None:
        key = _session_key(session.client_id) + struct.pack(">H", packet_id)
        if present:
            self.storage.put(INCOMING, key, b"")
        else:
            self.storage.delete(INCOMING, key)
        if self.replicas is not None:
            self.replicas.incoming(session.client_id, packet_id, present)

    # --------------------------------------------------------------------------- loading at start

    def load_sessions(self) -> dict[str, StoredSession]:
        with bulk_load() as load:
            sessions = self._load_sessions()
            load.records = len(sessions)
        return sessions

    def _load_sessions(self) -> dict[str, StoredSession]:
        sessions: dict[str, StoredSession] = {}
        for key, value in self.storage.load(SESSIONS):
            client_id = key.decode()
            record = sessions[client_id] = stored_session(client_id, decode_record(value))
            if record.will is not None:
                self._wills[client_id] = record.will
        for key, value in self.storage.load(MESSAGES):
            client_id, seq_bytes = _split(key)
            stored = sessions.get(client_id)
            if stored is None:
                continue
            (seq,) = struct.unpack(">Q", seq_bytes)
            stored.messages.append(outgoing_from_record(seq, decode_record(value)))
        for key, _value in self.storage.load(INCOMING):
            client_id, pid_bytes = _split(key)
            if client_id in sessions:
                sessions[client_id].incoming.add(struct.unpack(">H", pid_bytes)[0])
        return sessions


def session_record(session: Session, will: StoredWill | None) -> list[object]:
    """[level, expiry, disconnected at(, will or None(, owner))]: the owner (`owners.pack_user`) when it is known."""
    fields: list[object] = [session.protocol_level, session.expiry_interval, session.disconnected_at]
    user = pack_user(session.user)
    if will is not None or user is not None:
        fields.append(None if will is None else will.pack())
    if user is not None:
        fields.append(user)
    return fields


def stored_session(client_id: str, fields: Any) -> StoredSession:
    """A decoded session record; one written before wills were kept has three fields, one written before owners
    were kept at most four (its owner is unknown)."""
    level, expiry, disconnected_at = fields[:3]
    will = StoredWill.unpack(fields[3]) if len(fields) > 3 and fields[3] is not None else None
    user = unpack_user(fields[4]) if len(fields) > 4 else UNKNOWN_USER
    return StoredSession(client_id, level, expiry, disconnected_at, will=will, user=user)


def _message_key(client_id: str, seq: int) -> bytes:
    return _session_key(client_id) + struct.pack(">Q", seq)


def _split(key: bytes) -> tuple[str, bytes]:
    client_id, _, rest = key.partition(b"\0")
    return client_id.decode(), rest
