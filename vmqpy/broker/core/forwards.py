"""The broker's side of forwarding between nodes: sending a routed publish to the nodes with subscribers for it,
and delivering the publishes other nodes forward here, one at a time or a whole batch (a FORWARD frame) in one
call.

The publishing node routes each message by its copy of the replicated subscriptions; the receiving node routes
it again by its own (the subscriptions here are the truth: one may have been added, removed or moved since the
publishing node's copy was written), with the router's match cache that makes that second routing a lookup.
What a batch saves is the per-message layers around it: one call, one `RouteResult` and one clock reading per
batch instead of per message, and the compact records (vmqpy.broker.core.forward_wire) read inline. Anything out of
the ordinary takes the one-at-a-time path (`deliver_one`): every forward of a batch while a subscription that
moved away from here lately still has late forwards passed on (per forward number), and any record in the full
form (properties, expiry, shared groups, named clients).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from time import monotonic_ns
from typing import Any

import structlog

from vmqpy.broker.core import forward_wire
from vmqpy.broker.core.holdback import Backpressure, MovedRoutes
from vmqpy.broker.core.ports import Forwarder
from vmqpy.broker.core.remote_ack import RemoteAck
from vmqpy.broker.core.router import Router, RouteResult
from vmqpy.broker.core.stalls import StallBound
from vmqpy.sessions.message import Message

__all__ = ["Forwards"]

log = structlog.get_logger("vmqpy.broker")

_COMPACT = forward_wire.COMPACT_LENGTH
_NO_GROUPS: list[tuple[str, str]] = []  # a forward that serves no shared group here; only read
_MALFORMED_COMPACT = "a compact forward is [topic, payload, qos 0-2, retain, publisher, forward id]"


class Forwards:
    """Forwarded publishes of one node, both ways. `forwarder()`: the node links' side (None: not clustered)."""

    def __init__(self, router: Router, metrics: Counter[str], moved: MovedRoutes, backpressure: Backpressure,
                 forwarder: Callable[[], Forwarder | None], stalls: StallBound | None = None) -> None:
        self._router = router
        self._metrics = metrics
        self._moved = moved
        self._moved_routes = moved.routes  # the same dict, tested for every batch
        self._backpressure = backpressure
        self._forwarder = forwarder
        self._stalls = stalls  # queue.max_stall: a peer is held back for a bounded time too

    def send(self, message: Message, result: RouteResult) -> None:
        """Hand the publish (with its forward id) to the nodes in `result.remote`. For QoS 1/2,
        `result.remote_ack` completes once every one of them acknowledged it (the publisher's acknowledgement
        waits for it); a node that cannot even buffer it sets `result.refused`."""
        forwarder = self._forwarder()
        metrics = self._metrics
        countdown = RemoteAck(len(result.remote)) if message.qos > 0 else None
        plain: tuple[list[Any], int] | None = None  # the forward without shared groups: the same for every node
        for node, groups in result.remote.items():
            if groups:
                record, size = forward_wire.forward_record(message, groups)
            else:
                if plain is None:
                    plain = forward_wire.forward_record(message, groups)
                record, size = plain
            if forwarder is None:
                sent = False
            elif countdown is None:
                sent = forwarder.forward(node, record, size)
            else:
                sent = forwarder.forward(node, record, size, countdown.one_done, countdown.fail)
            if sent:
                metrics["forwarded"] += 1
            else:
                metrics["forward_refused"] += 1
                result.refused = True
        if countdown is not None:
            result.remote_ack = countdown

    def deliver_one(self, record: Any, now: float, peer: str | None = None, seq: int = 0) -> bool:
        """One forwarded publish (see `vmqpy.broker.core.broker.Broker.deliver_forwarded`). True when a persistent
        session took it."""
        try:
            message, groups, clients = forward_wire.parse_forward(record)
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("undecodable forwarded publish", error=str(exc))
            self._metrics["forward_malformed"] += 1
            return False
        self._metrics["forward_delivered"] += 1
        message.arrived_ns = monotonic_ns()  # its publish-to-delivery latency on this node starts here
        result = self._router.route(message, now, only_groups=groups, only_clients=clients)
        if self._moved_routes and peer is not None:
            self._moved.pass_on(message, peer, seq, clients)
        self._metrics["publish_dropped"] += result.dropped
        if result.congested and peer is not None and self._forwarder() is not None:
            self._backpressure.hold_back(peer, result.congested)
            if self._stalls is not None:
                self._stalls.watch(result.congested, now)
        return result.durable

    def deliver_batch(self, batch: list[tuple[int, Any]], now: float, peer: str) -> bool:
        """The forwards of one FORWARD frame from `peer` that are due (duplicates already left out), as (number,
        record) in the order they were sent. Each is delivered as `deliver_one` would, in order; a malformed one
        is logged, counted and skipped (the frame itself was sound). True when a persistent session took any of
        them."""
        if self._moved_routes:  # late forwards to pass on, each under its own number (rare, short-lived)
            durable = False
            for seq, record in batch:
                durable = self.deliver_one(record, now, peer, seq) or durable
            return durable
        result = RouteResult()
        route = self._router.route
        simple = Message.simple
        arrived = monotonic_ns()  # they all arrived in one frame
        durable = False
        received = malformed = 0
        for seq, record in batch:
            if type(record) is list and len(record) == _COMPACT and type(record[0]) is str:
                topic, payload, qos, retain, publisher, forward_id = record
                if (type(payload) is bytes and type(qos) is int and 0 <= qos <= 2 and type(retain) is bool
                        and type(publisher) is str and type(forward_id) is int):
                    route(simple(topic, payload, qos, retain, publisher, forward_id, arrived), now, _NO_GROUPS, None,
                          result)
                    received += 1
                    continue
                malformed += 1
                log.warning("undecodable forwarded publish", error=_MALFORMED_COMPACT, peer=peer)
                continue
            durable = self.deliver_one(record, now, peer, seq) or durable  # the full form: counted there
        metrics = self._metrics
        metrics["forward_delivered"] += received
        if malformed:
            metrics["forward_malformed"] += malformed
        metrics["publish_dropped"] += result.dropped
        if result.congested and self._forwarder() is not None:
            self._backpressure.hold_back(peer, result.congested)
            if self._stalls is not None:
                self._stalls.watch(result.congested, now)
        return result.durable or durable
