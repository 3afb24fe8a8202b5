"""The broker as the cluster layer sees it: what registration (vmqpy.cluster.registration) and a node's
departure (vmqpy.cluster.departure) need of it (`BrokerPort`); node.py hands over the broker's object that
implements it. The cluster imports nothing of the broker: a session here is a `LocalSession` (what departure
reads of the broker's sessions), and the values both layers read live in vmqpy.sessions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Sized
from typing import Any, Protocol

from vmqpy.sessions.handover import SessionImage
from vmqpy.sessions.parts import Outgoing
from vmqpy.sessions.remote import RemoteWait


class LocalSession(Protocol):
    """A session kept on this node, as the cluster reads it (vmqpy.broker.core.session.Session)."""

    @property
    def client_id(self) -> str: ...

    @property
    def online(self) -> bool:
        """A client is connected to it."""

    @property
    def persistent(self) -> bool:
        """It outlives its connection."""

    @property
    def moving_to(self) -> str | None:
        """The node it is handed over to, if it moves."""

    @property
    def queue(self) -> Sized: ...

    @property
    def inflight(self) -> Sized: ...


class BrokerPort(Protocol):
    """What registration, departure and the queue replicas' failover need of the node's broker: the object that
    moves its sessions (vmqpy.broker.core.migration.SessionMigration implements it; node.py hands it over)."""

    def local_sessions(self) -> Sequence[LocalSession]:
        """The sessions kept on this node now (online, offline or moving away)."""
        ...

    def owner_of(self, client_id: str) -> str | None:
        """The node that the owner record of `client_id` names (None: there is none)."""
        ...

    def owner_stamp(self, client_id: str) -> Any:
        """The stamp of the owner record of `client_id` (None: there is none)."""
        ...

    def witness(self, stamp: Any) -> None:
        """Every owner record this node writes from now on is stamped after `stamp` (one learnt from another
        node)."""
        ...

    def image_from_store(self, client_id: str) -> SessionImage | None:
        """The session of `client_id` as the replicated store knows it (its subscriptions), for when its owner
        is out of reach; None when it has no persistent session."""
        ...

    def hand_over(self, client_id: str, clean_start: bool, new_owner: str, now: float,
                  user: str | None = ...) -> SessionImage:
        """A newer CONNECT of `client_id` by `user` registers on `new_owner`: give the session up (a persistent
        one that the connect resumes stays here, moving, until its messages are handed over). Another user's
        session is not handed over (the image says `foreign`, or the session ends)."""
        ...

    def move_session(self, client_id: str, target: str) -> bool:
        """Start handing the session of `client_id` over to `target`; False when it cannot move."""
        ...

    def moving_image(self, client_id: str) -> SessionImage | None:
        """The image of the session of `client_id` while it is handed over from here (None: it is not)."""
        ...

    def pending_for_handover(self, client_id: str, after_seq: int) -> list[Outgoing] | None:
        """Messages of a moving session after `after_seq`, in order; None when it no longer moves from here."""
        ...

    def handed_over(self, client_id: str, upto_seq: int) -> None:
        """The new owner holds every message up to `upto_seq` on its disk."""
        ...

    def finish_handover(self, client_id: str, force: bool = False) -> bool:
        """True when the moving session is gone from here (nothing routes to it, it holds no message)."""
        ...

    def abandon_handover(self, client_id: str) -> None:
        """The new owner cannot be reached for too long: the session stays here."""
        ...

    def adopt_offline(self, image: SessionImage, now: float, confirm: Any = None) -> LocalSession:
        """A session handed over without a connect: kept here offline, and this node becomes its owner. With
        `confirm` (`route_confirmation`), its route writes join what that waits for."""
        ...

    def route_confirmation(self) -> Any:
        """What route writes wait for before they are claimed (subscription.acknowledge = cluster); None: nothing."""
        ...

    def routes_applied(self, confirm: Any) -> RemoteWait | None:
        """The wait for the members to apply the routes written with `confirm` (bounded); None: nothing left."""
        ...

    def adopt_messages(self, client_id: str, outs: list[Outgoing], now: float, origin: str | None = None,
                       source: str | None = None) -> bool:
        """Messages handed over by the previous owner `source`; False when no session here takes them."""
        ...

    def reassign_sessions(self, node: str, new_owner: Callable[[str], str]) -> int:
        """The persistent sessions of `node` (dead, leaving) are recreated on `new_owner(client_id)`; how many."""
        ...


__all__ = ["BrokerPort", "LocalSession"]
