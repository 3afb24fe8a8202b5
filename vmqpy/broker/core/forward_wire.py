"""The record of a publish forwarded to another node, in its two forms: compact for the common case, full for
the rest.

Most forwards are of a plain message (no MQTT 5 property, no expiry) that no shared group and no client list
narrows: such a forward travels as the compact record ``[topic, payload, qos, retain, publisher, forward id]``,
six msgpack values with nothing nested, built straight from the message and read straight into one. Every
other forward keeps the full record of `vmqpy.sessions.records.forward_record` (``[1, Message.pack(), groups(,
clients)]``), which carries properties, expiry, shared-subscription groups and the clients of a forward passed
on to a moved subscriber's new node. The two cannot be taken for one another: a full record starts with its
version (an integer), a compact one with its topic (a string).

Pure: messages in, msgpack-ready records out, and back.
"""

from __future__ import annotations

from typing import Any

from vmqpy.sessions import records
from vmqpy.sessions.message import Message

__all__ = ["COMPACT_LENGTH", "forward_record", "parse_forward"]

COMPACT_LENGTH = 6
# msgpack bytes of a compact record besides its strings and payload, at most: the array header (1), the headers
# of topic, payload and publisher (5 each), qos and retain (1 each), the forward id (9)
_COMPACT_OVERHEAD = 1 + 3 * 5 + 1 + 1 + 9


def forward_record(message: Message, groups: list[tuple[str, str]]) -> tuple[list[Any], int]:
    """The record forwarding `message` to a node that serves `groups` (shared groups) for it, and its encoded
    size at most. Compact for a plain message with a forward id and no group; full otherwise."""
    forward_id = message.forward_id
    if groups or forward_id is None or not message.plain:
        return records.forward_record(message, groups)
    # A str of n characters is at most 4n bytes in UTF-8.
    size = len(message.payload) + 4 * (len(message.topic) + len(message.publisher)) + _COMPACT_OVERHEAD
    return [message.topic, message.payload, message.qos, message.retain, message.publisher, forward_id], size


def parse_forward(record: Any) -> tuple[Message, list[tuple[str, str]], set[str] | None]:
    """The publish, groups and clients (None: every local subscriber) of a forward record in either form (as
    msgpack decoded it). ValueError, TypeError or KeyError for anything else."""
    if type(record) is list and len(record) == COMPACT_LENGTH and type(record[0]) is str:
        topic, payload, qos, retain, publisher, forward_id = record
        if (type(payload) is not bytes or type(qos) is not int or not 0 <= qos <= 2 or type(retain) is not bool
                or type(publisher) is not str or type(forward_id) is not int):
            raise ValueError("a compact forward is [topic, payload, qos 0-2, retain, publisher, forward id]")
        message = Message(topic, payload, qos, retain, publisher)
        message.forward_id = forward_id
        return message, [], None
    return records.parse_forward(record)
