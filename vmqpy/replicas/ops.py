"""The operations an owner sends to the replicas of a persistent session's queue, as msgpack-friendly records.

Each record names the client id; the replica keys what it keeps by (owner node, client id, ...), the owner
being the node that sent it. The message and session values are the owner's own storage records (bytes,
vmqpy.broker.core.persistence), kept as they are.

==========  =====================================  ================================================
op          record                                 meaning
==========  =====================================  ================================================
put         ["put", client_id, seq, message]       message `seq` of the queue (or in flight), new or changed
del         ["del", client_id, seq]                message `seq` is gone (delivered and acknowledged, dropped)
in          ["in", client_id, packet_id, present]  incoming QoS 2 packet id awaiting PUBREL (or not any more)
session     ["session", client_id, record]         the session record (protocol level, expiry, disconnected at)
drop        ["drop", client_id]                    the session ended or moved away: forget every copy of it
sync        ["sync", client_id, record, [ids]]     the owner's whole state of the session from here on: the
                                                   copy is replaced by this session record and these
                                                   incoming QoS 2 ids, no message; the messages follow as
                                                   `put` operations sent right after it (rebalance.py)
lin         ["lin", client_id, names]              names of messages the owner took from an older owner
                                                   (vmqpy.replicas.lineage: msgpack of `pack_entries`),
                                                   added to what the copy holds
==========  =====================================  ================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Op", "decode_op", "encode_op"]

KINDS = ("put", "del", "in", "session", "drop", "sync", "lin")


@dataclass(frozen=True, slots=True)
class Op:
    """One replica operation. `seq`: put/del; `packet_id`/`present`: in; `value`: put (message), session,
    sync (the session record), lin (the names); `incoming`: sync (the incoming QoS 2 packet ids)."""

    kind: str
    client_id: str
    seq: int = 0
    packet_id: int = 0
    present: bool = False
    value: bytes = b""
    incoming: tuple[int, ...] = ()


def encode_op(op: Op) -> list[Any]:
    if op.kind == "put":
        return ["put", op.client_id, op.seq, op.value]
    if op.kind == "del":
        return ["del", op.client_id, op.seq]
    if op.kind == "in":
        return ["in", op.client_id, op.packet_id, op.present]
    if op.kind == "session":
        return ["session", op.client_id, op.value]
    if op.kind == "drop":
        return ["drop", op.client_id]
    if op.kind == "sync":
        return ["sync", op.client_id, op.value, list(op.incoming)]
    if op.kind == "lin":
        return ["lin", op.client_id, op.value]
    raise ValueError(f"unknown replica operation {op.kind!r}")


def _int(value: Any, what: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"a replica operation's {what} is an integer from {low} to {high}")
    return value


def _bytes(value: Any, what: str) -> bytes:
    if type(value) is not bytes:
        raise ValueError(f"a replica operation's {what} is bytes")
    return value


def decode_op(record: Any) -> Op:
    """The operation of `record`; ValueError (saying what is wrong) when it is not one."""
    if type(record) is not list or len(record) < 2 or record[0] not in KINDS:
        raise ValueError(f"not a replica operation: [{'|'.join(KINDS)}, client_id, ...]")
    kind, client_id = record[0], record[1]
    if type(client_id) is not str:
        raise ValueError("a replica operation's client id is a string")
    shape = {"put": 4, "del": 3, "in": 4, "session": 3, "drop": 2, "sync": 4, "lin": 3}[kind]
    if len(record) != shape:
        raise ValueError(f"a replica {kind} operation has {shape} elements, not {len(record)}")
    if kind == "put":
        return Op(kind, client_id, seq=_int(record[2], "seq", 0, 2**64 - 1), value=_bytes(record[3], "message"))
    if kind == "del":
        return Op(kind, client_id, seq=_int(record[2], "seq", 0, 2**64 - 1))
    if kind == "in":
        if type(record[3]) is not bool:
            raise ValueError("a replica in operation's presence is a boolean")
        return Op(kind, client_id, packet_id=_int(record[2], "packet id", 1, 65535), present=record[3])
    if kind == "session":
        return Op(kind, client_id, value=_bytes(record[2], "session record"))
    if kind == "lin":
        return Op(kind, client_id, value=_bytes(record[2], "names"))
    if kind == "sync":
        if type(record[3]) is not list or len(record[3]) > 65535:
            raise ValueError("a replica sync operation's incoming packet ids are a list")
        incoming = tuple(_int(p, "packet id", 1, 65535) for p in record[3])
        return Op(kind, client_id, value=_bytes(record[2], "session record"), incoming=incoming)
    return Op(kind, client_id)
