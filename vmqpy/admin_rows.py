"""The node's data as the admin layer shows it (vmqpy.facade): payloads as text, a session as the full row of
`vmq-admin session show` (admin.session_table) and the metadata replica's dump as rows, JSON-friendly (bytes as
base64, tuples as lists). Pure.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from vmqpy.broker.core.session import Session

Row = dict[str, Any]

__all__ = ["dump_rows", "payload_text", "session_row"]


class Connected(Protocol):
    """What a session's row reads of its live connection."""

    @property
    def peer(self) -> tuple[str, int] | None: ...

    @property
    def username(self) -> str | None: ...


def _millis(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


def session_row(session: Session, conn: Connected | None, node: str, with_messages: bool) -> Row:
    """The full row of one session with VerneMQ's column names (admin.session_table): the columns of the session,
    `subscriptions` as [topic, qos, rap, no_local] and, `with_messages`, `messages` as [msg_ref, msg_qos,
    routing_key, dup, payload] (those waiting for their acknowledgement first, then the queue)."""
    online = session.online
    peer = conn.peer if conn is not None else None
    held = len(session.queue) + len(session.inflight)
    moving = session.moving_to is not None
    row: Row = {
        "client_id": session.client_id, "is_online": online, "node": node,
        "peer_host": peer[0] if peer else None, "peer_port": peer[1] if peer else None,
        "user": conn.username if conn is not None else None, "protocol": session.protocol_level,
        "mountpoint": "", "clean_session": not session.persistent, "waiting_acks": len(session.inflight),
        "queued": len(session.queue), "dropped": session.dropped,
        "queue_size": held, "offline_messages": 0 if online else held, "online_messages": held if online else 0,
        "is_offline": not online, "statename": "drain" if moving else "online" if online else "offline",
        "deliver_mode": "fanout", "num_sessions": 1 if online else 0, "is_plugin": False,
        "queue_started_at": _millis(session.created_at),
        "session_started_at": _millis(session.attached_at) if online else None,
        "session_expiry_interval": None if session.expiry_interval is None else int(session.expiry_interval),
        "subscriptions": [[f, e.options.qos, e.options.retain_as_published, e.options.no_local]
                          for f, e in sorted(session.subscriptions.items())],
    }  # fmt: skip
    if with_messages:
        outs = [*session.inflight.values(), *session.queue]
        row["messages"] = [[out.seq, out.qos, out.message.topic, out.packet_id is not None,
                            payload_text(out.message.payload)] for out in outs]
    return row


def payload_text(payload: bytes) -> str:
    """A payload as text: UTF-8 when it is, else `base64:` and its base64."""
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(payload).decode("ascii")


def dump_rows(dump: dict[str, Any]) -> list[Row]:
    """The replica's data as rows: Prefix, Key, Values ([node, counter, value], sorted), Context (filled)."""
    rows: list[Row] = []
    for prefix, keys in dump["data"].items():
        for key, entry in keys.items():
            rows.append({
                "Prefix": prefix,
                "Key": _plain(list(key)),
                "Values": _plain(sorted(entry["values"], key=lambda v: (v[0], v[1]))),
                "Context": dict(sorted(entry["filled"].items())),
            })
    return rows


def _plain(value: Any) -> Any:
    """JSON-friendly: bytes as base64 text, tuples as lists."""
    if isinstance(value, bytes | bytearray):
        return "base64:" + base64.b64encode(value).decode("ascii")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
