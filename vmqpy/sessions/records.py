"""What the broker keeps in the replicated metadata store (reached through `vmqpy.broker.core.ports.MetadataPort`),
and the records of publishes it forwards to other nodes. The cluster reads the owner records and the nodes'
listeners too (registration, placement, its events): they live here, where both may import them.

| prefix | key | value |
|---|---|---|
| `session` | (mountpoint, client_id) | [stamp, owner node, clean start, expiry interval or None(, origin or |
|   |   | None(, [user]))]: `[user]` the user that owns the session (vmqpy.sessions.owners), when it is known |
| `subscription` | (mountpoint, client_id, filter) | [stamp, node, qos, no local, retain as published, |
|   |   | retain handling, subscription id or None] |
| `retain` | (mountpoint, topic) | [stamp, packed message] |

Every value starts with the hybrid-logical-clock stamp of its write, so siblings resolve to the later write
(`vmqpy.metadata.resolve.latest_stamp`) on every node alike. One key per subscription filter: concurrent
changes to different filters of one client are all kept.
"""

from __future__ import annotations

from typing import Any

from vmqpy.mqtt.packets import SubOptions
from vmqpy.mqtt.topics import parse_shared
from vmqpy.sessions.message import Message, encode_record
from vmqpy.sessions.owners import UNKNOWN_USER, pack_user, unpack_user
from vmqpy.sessions.parts import SubEntry

SESSION = "session"
SUBSCRIPTION = "subscription"
RETAIN = "retain"
NODE_LISTENERS = "node_listeners"  # a node's advertised MQTT addresses by listener kind (vmqpy.cluster.placement)
MOUNTPOINT = ""

Key = tuple[Any, ...]


def stamp_list(stamp: Any) -> Any:
    return stamp.to_list() if hasattr(stamp, "to_list") else stamp


def subscription_key(client_id: str, topic_filter: str) -> Key:
    return (MOUNTPOINT, client_id, topic_filter)


def subscription_value(stamp: Any, node: str, entry: SubEntry) -> list[Any]:
    opts = entry.options
    return [
        stamp_list(stamp), node, opts.qos, opts.no_local, opts.retain_as_published, opts.retain_handling,
        entry.subscription_id,
    ]


def subscription_entry(key: Key, value: Any) -> tuple[str, str, SubEntry]:
    """(client id, node, entry) of a stored subscription record; ValueError if it is not one."""
    _mountpoint, client_id, topic_filter = key
    _stamp, node, qos, no_local, rap, handling, sub_id = value
    group, match_filter = parse_shared(topic_filter)
    entry = SubEntry(topic_filter, match_filter, SubOptions(qos, no_local, rap, handling), sub_id, group)
    return str(client_id), str(node), entry


def retain_key(topic: str) -> Key:
    return (MOUNTPOINT, topic)


def retain_value(stamp: Any, message: Message) -> list[Any]:
    return [stamp_list(stamp), message.pack()]


def retained_message(value: Any) -> Message:
    return Message.unpack(value[1])


def session_key(client_id: str) -> Key:
    return (MOUNTPOINT, client_id)


def session_owner(value: Any) -> str:
    return str(value[1])


def session_value(
    stamp: Any, node: str, clean_start: bool, expiry: float | None, origin: str | None = None,
    user: str | None = UNKNOWN_USER,
) -> list[Any]:
    """`origin`: set when an operator moved the session of a dead node `origin` to `node`, which then
    recreates it from the store. `user`: the session's owner (vmqpy.sessions.owners), kept when known."""
    value = [stamp_list(stamp), node, clean_start, expiry]
    packed = pack_user(user)
    if origin is not None or packed is not None:
        value.append(origin)
    if packed is not None:
        value.append(packed)
    return value


def same_owner(value: Any, node: str, clean_start: bool, expiry: float | None, user: str | None = UNKNOWN_USER
               ) -> bool:
    """Whether owner record `value` (None: there is none) names `node` with these terms and owner, and no origin:
    what `session_value` would write again, but for the stamp."""
    if value is None or len(value) == 5 or len(value) > 6 or (len(value) == 6 and value[4] is not None):
        return False
    return value[1] == node and value[2] == clean_start and value[3] == expiry and session_user(value) == user


def session_user(value: Any) -> str | None:
    """The user that owns the session an owner record names; UNKNOWN_USER for a record written without one."""
    return unpack_user(value[5]) if len(value) > 5 else UNKNOWN_USER


def session_persistent(value: Any) -> bool:
    """Whether the session an owner record names outlives its connection (session expiry never or > 0)."""
    return value[3] is None or value[3] > 0


def node_listeners_key(node: str) -> Key:
    return (MOUNTPOINT, node)


def node_listeners_value(stamp: Any, addresses: dict[str, str]) -> list[Any]:
    """`addresses`: listener kind (tcp, ssl, ws, wss) -> the HOST:PORT clients reach it at."""
    return [stamp_list(stamp), addresses]


def node_listeners(value: Any) -> dict[str, str]:
    return {str(kind): str(address) for kind, address in dict(value[1]).items()}


def session_origin(value: Any) -> str | None:
    return str(value[4]) if len(value) > 4 and value[4] is not None else None


def forward_record(message: Message, groups: list[tuple[str, str]],
                   clients: list[str] | None = None) -> tuple[list[Any], int]:
    """A publish forwarded to another node, with the shared-subscription groups that node serves for it (and,
    when given, the only clients it is for: a forward passed on to a moved subscriber's new node): the record
    (it travels inside a msgpack batch of forwards) and its encoded size, at most."""
    record = [1, message.pack(), [list(g) for g in groups] if groups else []]
    if clients:
        record.append(list(clients))
        return record, len(encode_record(record))
    if message.plain and not groups:  # the common case: bounded without encoding it
        size = len(message.payload) + 4 * (len(message.topic) + len(message.publisher)) + 57  # 9: the forward id
    else:
        size = len(encode_record(record))
    return record, size


def parse_forward(record: Any) -> tuple[Message, list[tuple[str, str]], set[str] | None]:
    """The publish, groups and clients (None: every local subscriber) of a forward record (as msgpack decoded
    it). ValueError, TypeError or KeyError for anything else."""
    if len(record) == 4:
        version, packed, groups, clients = record
        only: set[str] | None = {str(c) for c in clients}
    else:
        version, packed, groups = record
        only = None
    if version != 1:
        raise ValueError(f"unknown forward version {version!r}")
    return Message.unpack(packed), [(str(g), str(f)) for g, f in groups] if groups else [], only
