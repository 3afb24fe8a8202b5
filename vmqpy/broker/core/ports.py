"""The interfaces the broker is given by the node (vmqpy.node), implemented by the store and the cluster.

`MetadataPort` reaches the replicated metadata store (with `RemoteWait`, a wait until the other nodes applied some
writes or acknowledged a forward), `Forwarder` the other nodes, `Registrar` registers a
CONNECT through the client id's leader, and `ServePolicy` says whether the node serves an operation now
(`AlwaysServe` when nothing limits it). `Placement` says where a CONNECT belongs when persistent sessions have
an assigned server (vmqpy.cluster.placement), answering a `Redirect` or None (serve it here). `RemoteWait` and
`Redirect` are values the cluster makes too: they live in vmqpy.sessions.remote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from vmqpy.sessions.handover import Ticket
from vmqpy.sessions.records import Key
from vmqpy.sessions.remote import Redirect, RemoteWait


class MetadataPort(Protocol):
    """The part of the metadata store the broker uses."""

    def get(self, prefix: str, key: Key) -> Any | None: ...

    def put(self, prefix: str, key: Key, value: Any, confirm: Any = None) -> None:
        """With `confirm` (from `confirmation`), the write joins what that confirmation waits for."""

    def delete(self, prefix: str, key: Key, confirm: Any = None) -> None: ...

    def confirmation(self) -> Any:
        """A new wait for the other members to apply the writes made with it (an object of the store's)."""

    def seal(self, confirm: Any) -> RemoteWait | None:
        """No more writes join `confirm`; None when nothing is left to wait for, else the wait (bounded)."""

    def fold(self, prefix: str) -> Iterator[tuple[Key, Any]]: ...

    def on_change(self, prefix: str, handler: Callable[[Key, Any, Any], None]) -> None: ...

    def hlc_now(self) -> Any: ...

    def witness(self, stamp: Any) -> None:
        """Every later `hlc_now` is greater than `stamp` (learnt outside the store)."""


class ServePolicy(Protocol):
    """Whether this node serves an operation now (the netsplit policy of the cluster)."""

    def may(self, operation: str) -> bool:
        """`operation` is register, publish, subscribe or unsubscribe; False is a refusal (counted)."""
        ...

    def reason(self) -> str:
        """Why operations are refused now (told to a refused client)."""
        ...


class AlwaysServe:
    def may(self, operation: str) -> bool:
        return True

    def reason(self) -> str:
        return "ready"


class Forwarder(Protocol):
    """How the broker hands a publish to another node (the cluster's links)."""

    def forward(self, node: str, record: Any, size: int, on_ack: Callable[[], None] | None = None,
                on_fail: Callable[[str], None] | None = None) -> bool:
        """Queue `record` (msgpack-encodable, at most `size` bytes encoded) for `node`; False when it cannot even
        be buffered (the publisher gets no ack). With `on_ack`, `node` acknowledges it once it has it
        (`on_fail`: it never will)."""
        ...

    def signal_congestion(self, node: str, congested: bool) -> None:
        """Tell `node` that subscribers here that it feeds are congested (it should slow its publishers
        down), or no longer are."""
        ...

    def hold(self, peer: str, seq: int) -> Callable[[], None]:
        """Keep forward `seq` of `peer` (being delivered now) unacknowledged until the returned function runs."""
        ...


class Registrar(Protocol):
    """How a CONNECT is registered in the cluster (vmqpy.cluster.registration): through the client id's
    leader, with the session handed over by its previous owner node."""

    async def register(self, client_id: str, clean_start: bool, user: str | None = ...) -> Ticket:
        """Hold the client id's registration lock for a CONNECT of `user`; raises RegistrationRefused. The
        ticket says `foreign` when the previous owner node refused: the session is another user's."""
        ...

    def connected(self, ticket: Ticket, owner: str | None) -> None:
        """The CONNECT completed here (or failed, `owner` None): take the early messages, release the lock."""
        ...


#: (client id, whether it asks for a persistent session, the kind of listener it came through) -> where it goes
Placement = Callable[[str, bool, str], Redirect | None]

__all__ = ["AlwaysServe", "Forwarder", "MetadataPort", "Placement", "Registrar", "ServePolicy"]
