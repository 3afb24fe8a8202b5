"""Holding publishes back across nodes: congestion between nodes, and late forwards of moved subscriptions.

`Backpressure`: when a forward from node P reaches subscribers here that are congested, P is asked to slow its
publishers down until they drained; when another node asks the same of this one, the publishers here that
route to it wait (`wait_for_node`).

`MovedRoutes`: a subscription that moved from here to another node (its session was handed over) is still
routed here for a while by nodes that have not seen its new route yet. For `MOVED_ROUTE_TTL` seconds such
forwards are passed on to its new node, and the sender's acknowledgement of a QoS 1/2 forward waits until that
node has it.

Both reach the other nodes through the broker's forwarder, read when needed: it comes and goes with the
cluster service.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping

import structlog

from vmqpy.broker.core.ports import Forwarder
from vmqpy.broker.core.session import Session
from vmqpy.mqtt import topics
from vmqpy.sessions import records
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import SubEntry

# How long forwards that other nodes still route here by a subscription that moved away are passed on to its
# new node: longer than a new route takes to reach every node (anti-entropy rounds, a partition's heal).
MOVED_ROUTE_TTL = 60.0

log = structlog.get_logger("vmqpy.broker")


class Backpressure:
    """The nodes that asked this one to slow down, and the nodes this one asked."""

    def __init__(self, forwarder: Callable[[], Forwarder | None], metrics: Counter[str]) -> None:
        self._forwarder = forwarder
        self._metrics = metrics
        # The nodes that asked us to slow down, with the callbacks waiting for them to recover.
        self.congested_nodes: dict[str, list[Callable[[], None]]] = {}
        # Per node, how many congested subscribers here its forwards are waiting on.
        self._congesting: dict[str, int] = {}

    def hold_back(self, peer: str, sessions: list[Session]) -> None:
        """`peer` waits until these congested sessions drained (the forwarder is there)."""
        count = self._congesting.get(peer, 0)
        if count == 0:
            forwarder = self._forwarder()
            assert forwarder is not None
            forwarder.signal_congestion(peer, True)
            self._metrics["congestion_signalled"] += 1
        self._congesting[peer] = count + len(sessions)
        for session in sessions:
            session.wait_for_drain(lambda: self._drained(peer))

    def _drained(self, peer: str) -> None:
        count = self._congesting.get(peer, 0) - 1
        if count > 0:
            self._congesting[peer] = count
            return
        self._congesting.pop(peer, None)
        forwarder = self._forwarder()
        if forwarder is not None:
            forwarder.signal_congestion(peer, False)

    def on_peer_congestion(self, node: str, congested: bool) -> None:
        """`node` asks us to slow down (or lets us go on, or became unreachable: `congested` False)."""
        if congested:
            self.congested_nodes.setdefault(node, [])
            return
        waiters = self.congested_nodes.pop(node, None)
        for callback in waiters or ():
            callback()

    def on_peer_reachability(self, node: str, reachable: bool) -> None:
        """A node that went away holds nobody back any more, and forgets what we asked of it."""
        if not reachable:
            self.on_peer_congestion(node, False)
            self._congesting.pop(node, None)

    def wait_for_node(self, node: str, callback: Callable[[], None]) -> None:
        """Call `callback` once `node` is no longer congested (at once when it is not)."""
        waiters = self.congested_nodes.get(node)
        if waiters is None:
            callback()
        else:
            waiters.append(callback)


class MovedRoutes:
    """Subscriptions that moved from here to another node lately, and the late forwards passed on to them."""

    def __init__(self, sessions: Mapping[str, Session], forwarder: Callable[[], Forwarder | None],
                 metrics: Counter[str]) -> None:
        self._sessions = sessions
        self._forwarder = forwarder
        self._metrics = metrics
        # (client id, filter) -> (its new node, entry, until)
        self.routes: dict[tuple[str, str], tuple[str, SubEntry, float]] = {}

    def moved(self, client_id: str, entry: SubEntry, node: str) -> None:
        """The subscription `entry` of `client_id` routes to `node` now."""
        self.routes[(client_id, entry.topic_filter)] = (node, entry, time.monotonic() + MOVED_ROUTE_TTL)

    def removed(self, client_id: str, topic_filter: str) -> None:
        """The subscription is gone: nothing is passed on for it any more."""
        self.routes.pop((client_id, topic_filter), None)

    def pass_on(self, message: Message, peer: str, seq: int, clients: set[str] | None) -> None:
        """Forward `message` (forward `seq` of `peer`, for `clients` or every subscriber here) to the new node
        of every subscription that moved away from here recently and matches it, naming the subscribers; a
        QoS 1/2 forward from `peer` is acknowledged to it only once every such node has it."""
        forwarder = self._forwarder()
        if forwarder is None:
            return
        due = time.monotonic()
        targets: dict[str, list[str]] = {}
        for route_key, (node, entry, until) in list(self.routes.items()):
            client_id = route_key[0]
            if until < due:
                del self.routes[route_key]
                continue
            here = self._sessions.get(client_id)
            # A session here that is not moving away is routed here again (it came back); one still handing
            # over is not routed here any more, so its late forwards go on too. The sender itself may be the new
            # node: it routed this here before the subscriber moved to it (a forward buffered while this node
            # was down, sent when it came back), so it goes back there too; a copy the sender delivered itself
            # is not delivered twice (the id is set before local deliveries, Session.watch_forwards).
            if ((here is not None and here.moving_to is None)
                    or (clients is not None and client_id not in clients)
                    or entry.group is not None or not topics.matches(entry.match_filter, message.topic)):
                continue
            # Passed on even when the sender's last report held the new route: the sender may have routed this
            # before it learned it (a forward buffered while the link was down arrives after newer reports). A
            # second copy at the new node is not delivered (Session.watch_forwards, by the forward id).
            if client_id not in targets.setdefault(node, []):
                targets[node].append(client_id)
        for node, client_ids in targets.items():
            record, size = records.forward_record(message, [], client_ids)
            self._metrics["forwards_passed_on"] += 1
            if message.qos == 0 or not seq:
                forwarder.forward(node, record, size)
                continue
            release = forwarder.hold(peer, seq)

            def lost(why: str, node: str = node, release: Callable[[], None] = release) -> None:
                log.error("a forward passed on to a subscriber's new node is lost", node=node, error=why,
                          topic=message.topic)
                self._metrics["forwards_passed_on_lost"] += 1
                release()  # acknowledgements are cumulative: holding it for ever would stop every later one

            if not forwarder.forward(node, record, size, release, lost):
                lost("the outgoing buffer to that node is full")


__all__ = ["MOVED_ROUTE_TTL", "Backpressure", "MovedRoutes"]
