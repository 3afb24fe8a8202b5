"""systemd's service notification protocol (sd_notify(3)), so that a `Type=notify` unit (deploy/systemd/vmqpy.service)
counts the node as started only once it serves, and knows when it stops.

systemd passes the address of a datagram socket in `$NOTIFY_SOCKET`: a path (`/run/systemd/notify`) or, when it
starts with `@`, a name in Linux's abstract socket namespace. A notification is one datagram of newline-separated
`NAME=value` assignments: `READY=1` (start-up finished), `STOPPING=1` (shutting down), `STATUS=text` (shown by
`systemctl status`). Without `$NOTIFY_SOCKET` (not run by systemd, or another unit type) nothing is sent.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import structlog

log = structlog.get_logger("vmqpy.sdnotify")

ENV = "NOTIFY_SOCKET"


def address_of(value: str) -> str | None:
    """The socket address `$NOTIFY_SOCKET` names: a path as it is, `@name` as an abstract name (leading NUL byte);
    None for an empty value or a kind this module does not speak (systemd's `vsock:` addresses)."""
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def datagram(assignments: Mapping[str, str]) -> bytes:
    """One notification: `NAME=value` lines; ValueError for a name with `=` or a newline in a name or value (it
    would be read as another assignment)."""
    lines = []
    for name, value in assignments.items():
        if not name or "=" in name or "\n" in name or "\n" in value:
            raise ValueError(f"not a notification assignment: {name!r}={value!r}")
        lines.append(f"{name}={value}")
    return "\n".join(lines).encode("utf-8")


def notify(assignments: Mapping[str, str], environ: Mapping[str, str] = os.environ) -> bool:
    """Send `assignments` (`{"READY": "1", "STATUS": "..."}`) to the service manager; True when sent. Without
    `$NOTIFY_SOCKET` nothing is sent (False). A socket that cannot be reached is logged as a warning, not raised:
    the node keeps serving, and systemd, which then never hears READY=1, applies the unit's TimeoutStartSec."""
    value = environ.get(ENV, "")
    if not value:
        return False
    address = address_of(value)
    payload = datagram(assignments)
    if address is None:
        log.warning("NOTIFY_SOCKET names an address kind this node cannot use: no notification sent",
                    notify_socket=value)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(payload, address)
    except OSError as exc:
        log.warning("could not notify the service manager", notify_socket=value, error=str(exc))
        return False
    return True
