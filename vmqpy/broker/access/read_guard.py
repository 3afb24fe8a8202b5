"""Deliveries judged one by one against the ACL's deny lines, as Mosquitto does.

A subscription that a read line covers and that only overlaps a deny line is granted (vmqpy.broker.access.acl): `#`
with `topic #` and `topic deny secret/#`. Its deliveries of denied topics are withheld here, as the router
delivers them (live, queued for an offline session, forwarded by another node, the node's own `$SYS`) and,
for retained messages, as the broker delivers them on SUBSCRIBE (which also checks read access,
`AccessControl.may_read`).

`ReadGuard.armed()` is False while no deny line is in force: then nothing is judged (the router asks once per
routed message, not per delivery). Otherwise each (client, topic) decision is remembered, per client id for
the user name the client connected with, until the ACL changes (`AccessControl.generation`); a client keeps at
most `TOPICS_PER_CLIENT` decisions and the guard at most `DECISIONS` in all (every one forgotten when full, as
the connection's cache of PUBLISH decisions does).

The user name is the one the client id last connected with (`AclEnforcer.usernames`); for a session restored
from disk whose client has not connected since it is unknown, and judged as anonymous: a deny pattern with
`%u` then denies its whole level (vmqpy.broker.access.acl), so an unknown name never lets more through.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Final

from vmqpy.broker.access.control import AccessControl

__all__ = ["DECISIONS", "TOPICS_PER_CLIENT", "WITHHELD", "ReadGuard"]

TOPICS_PER_CLIENT: Final = 256  # topics whose decision a client's cache keeps (all forgotten when full)
DECISIONS: Final = 65_536  # decisions kept for all clients together (all forgotten when reached)
WITHHELD: Final = "publish_withheld_not_authorized"  # the counter of deliveries withheld by a deny line


class ReadGuard:
    """The deny lines' word on each delivery, remembered per client and topic for one ACL generation."""

    __slots__ = ("_clients", "_generation", "_kept", "_metrics", "_usernames", "access")

    def __init__(self, access: AccessControl, usernames: Mapping[str, str | None], metrics: Counter[str]) -> None:
        self.access = access
        self._usernames = usernames
        self._metrics = metrics
        metrics[WITHHELD] += 0  # exported from the start
        # client id -> (the user name judged, topic -> withheld)
        self._clients: dict[str, tuple[str | None, dict[str, bool]]] = {}
        self._generation = -1
        self._kept = 0

    def armed(self) -> bool:
        """Whether an ACL with deny lines is in force (else no delivery is withheld). The router reads
        `access.acl` itself, the same way: no call per routed message."""
        acl = self.access.acl
        return acl is not None and acl.denies

    def withholds(self, client_id: str, topic: str) -> bool:
        """Whether the message of `topic` must not reach `client_id` (counted when so)."""
        access = self.access
        if self._generation != access.generation:
            self._forget()
            self._generation = access.generation
        username = self._usernames.get(client_id)
        known = self._clients.get(client_id)
        if known is None or known[0] != username:
            if known is not None:
                self._kept -= len(known[1])
            known = self._clients[client_id] = (username, {})
        decisions = known[1]
        withheld = decisions.get(topic)
        if withheld is None:
            if self._kept >= DECISIONS:
                self._forget()
                decisions = {}
                self._clients[client_id] = (username, decisions)
            elif len(decisions) >= TOPICS_PER_CLIENT:
                self._kept -= len(decisions)
                decisions.clear()
            withheld = decisions[topic] = access.withholds(client_id, username, topic)
            self._kept += 1
        if withheld:
            self._metrics[WITHHELD] += 1
        return withheld

    def _forget(self) -> None:
        self._clients.clear()
        self._kept = 0
