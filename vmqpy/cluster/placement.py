"""Where a persistent session belongs when the deployment has no sticky balancer: its assigned server
(`persistent_session_placement = assigned`, docs/deployment.md "Assigned server").

Each client id has an assigned node: the first member, in the client id's registration ranking (the same
rendezvous ranking that picks its registration leader, vmqpy.cluster.leader), that this node reaches. A
CONNECT that asks for a persistent session (3.1.1 clean session 0, 5.0 a non-zero session expiry) at another
node is sent there: 5.0 clients get CONNACK 0x9C Use another server with a Server Reference naming the assigned
node's advertised address; 3.1.1 clients cannot be redirected and are served where they land (the session
moves by takeover, as with `anywhere`). A clean CONNECT of a client id whose persistent session lives on another
reachable node is sent to that node once: the clean connect ends the session there, and the owner record it
leaves is a clean one, so the next clean CONNECT is served wherever it lands.

`place` is pure: the members, who is reachable, the owner record and the advertised addresses are arguments;
`AssignedServers` reads them from the metadata store and the cluster for a running node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from vmqpy.cluster.leader import ranking
from vmqpy.sessions import records
from vmqpy.sessions.remote import Redirect

__all__ = ["PLACEMENTS", "AssignedServers", "ListenerStore", "Owner", "assigned_node", "place", "reference_for"]

#: the values of `persistent_session_placement`
PLACEMENTS = ("anywhere", "assigned")


@dataclass(frozen=True, slots=True)
class Owner:
    """What the owner record of a client id says: the node holding its session, and whether it is persistent."""

    node: str
    persistent: bool


def assigned_node(client_id: str, members: Iterable[str], here: str, reachable: Callable[[str], bool]) -> str:
    """The first member of `client_id`'s ranking that `here` reaches (`here` itself always counts); `here`
    when no member is known."""
    for member in ranking(client_id, set(members) | {here}):
        if member == here or reachable(member):
            return member
    return here


def reference_for(addresses: Mapping[str, str], kind: str) -> str | None:
    """The advertised address a client of a listener of `kind` is sent to: the node's listener of that kind,
    else its plain TCP listener; None when the node advertises neither."""
    return addresses.get(kind) or addresses.get("tcp")


def place(
    client_id: str, persistent: bool, kind: str, here: str, members: Iterable[str],
    reachable: Callable[[str], bool], owner: Owner | None, addresses: Mapping[str, Mapping[str, str]],
) -> Redirect | None:
    """Where a CONNECT of `client_id` at `here` on a listener of `kind` belongs: a Redirect, or None to serve it
    here. Never redirects to `here`, to an unreachable node, or to a node whose address is unknown."""
    if persistent:
        target = assigned_node(client_id, members, here, reachable)
        why = f"the assigned server of this client id is {target}"
    elif owner is not None and owner.persistent and owner.node != here and reachable(owner.node):
        target = owner.node
        why = f"the persistent session of this client id is on {target}"
    else:
        return None
    if target == here:
        return None
    reference = reference_for(addresses.get(target, {}), kind)
    if reference is None:
        return None
    return Redirect(target, reference, why)


class ListenerStore(Protocol):
    """What `AssignedServers` needs of the metadata store (the broker's MetadataPort is one)."""

    def get(self, prefix: str, key: records.Key) -> Any | None: ...

    def put(self, prefix: str, key: records.Key, value: Any, confirm: Any = None) -> None: ...

    def fold(self, prefix: str) -> Iterator[tuple[records.Key, Any]]: ...

    def hlc_now(self) -> Any: ...


class AssignedServers:
    """The `Placement` of a node with `persistent_session_placement = assigned` (vmqpy.broker.core.ports): reads the
    owner records and the advertised addresses of the members (records.NODE_LISTENERS, which every node writes
    for itself: `advertise`) from the metadata store, and the members and their reachability from the cluster."""

    def __init__(
        self, here: str, metadata: ListenerStore, members: Callable[[], Iterable[str]],
        reachable: Callable[[str], bool],
    ) -> None:
        self.here = here
        self.metadata = metadata
        self.members = members
        self.reachable = reachable

    def advertise(self, addresses: dict[str, str]) -> None:
        """Tell every node where clients reach this node's listeners (written when it changed)."""
        key = records.node_listeners_key(self.here)
        current = self.metadata.get(records.NODE_LISTENERS, key)
        if current is None or records.node_listeners(current) != addresses:
            self.metadata.put(records.NODE_LISTENERS, key,
                              records.node_listeners_value(self.metadata.hlc_now(), addresses))

    def __call__(self, client_id: str, persistent: bool, kind: str) -> Redirect | None:
        value = self.metadata.get(records.SESSION, records.session_key(client_id))
        owner = None if value is None else Owner(records.session_owner(value), records.session_persistent(value))
        addresses = {str(key[1]): records.node_listeners(value)
                     for key, value in self.metadata.fold(records.NODE_LISTENERS)}
        return place(client_id, persistent, kind, self.here, self.members(), self.reachable, owner, addresses)
