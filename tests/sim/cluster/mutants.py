"""Bugs put back on purpose, to show that the whole-cluster simulation catches them (test_mutants.py).

Each `Mutant` names the bug, the checker that must catch it (a problem kind of `histories.check`), the profile
of histories and the seeds it runs on, and the patch that puts it in. Played with
`python -m tests.sim.cluster.run --mutant NAME SEED...`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock


def _subscriptions_kept() -> contextlib.AbstractContextManager[Any]:
    """An ended clean session's subscriptions are never removed (the sweeper forgets them): their records stay
    in the store, and the nodes route to a client that is gone."""
    return mock.patch("vmqpy.broker.core.sweeper.SubscriptionSweeper.add", lambda self, client_id, filters: None)


def _handover_without_messages() -> contextlib.AbstractContextManager[Any]:
    """A takeover moves the session to its new node without the messages queued for it at the old one."""
    return mock.patch("vmqpy.cluster.transfer.pack_messages", lambda batch: [])


def _old_connection_kept() -> contextlib.AbstractContextManager[Any]:
    """A takeover from another node moves the session but leaves its old connection open: the client id is live
    on two nodes."""
    from vmqpy.broker.core.broker import Broker

    def disconnect_for_move(self: Broker, session: Any, now: float, clean: bool, reason: str,
                            takeover: bool = True) -> None:
        return None

    return mock.patch.object(Broker, "disconnect_for_move", disconnect_for_move)


def _joining_node_serves() -> contextlib.AbstractContextManager[Any]:
    """The churn issue's fix reverted (tests/integration/test_membership_churn.py): a node that joins serves
    clients before the cluster's records are here (policy.joining never set): it takes a persistent session it
    does not know yet as a new one (the session and its messages are gone) and acknowledges publishes for
    subscribers it does not know."""
    from vmqpy.cluster.policy import Policy

    return mock.patch.object(Policy, "joining", property(lambda self: False, lambda self, value: None))


def _left_node_writes() -> contextlib.AbstractContextManager[Any]:
    """The fix of 333f026 reverted (chaos membership-churn, docs/chaos.md finding 5): the metadata store of a
    node that left is not frozen: it goes on writing (session and subscription records, write-backs, GC) until its
    rejoin empties it, and its replication log records writes that reach no member."""
    from vmqpy.metadata.service import MetadataService

    return mock.patch.object(MetadataService, "freeze", lambda self: None)


@dataclass(frozen=True)
class Mutant:
    name: str
    catches: str  # the kind of problem (histories.check) the simulation must report with the bug in
    profile: str  # histories.PROFILES
    seeds: tuple[int, ...]
    bug: Callable[[], contextlib.AbstractContextManager[Any]]

    @contextlib.contextmanager
    def patch(self) -> Iterator[None]:
        with self.bug():
            yield

    @property
    def doc(self) -> str:
        return " ".join((self.bug.__doc__ or "").split())


MUTANTS: dict[str, Mutant] = {
    mutant.name: mutant
    for mutant in (
        Mutant("subscriptions-kept", "resurrected", "calm", (0, 3, 4), _subscriptions_kept),
        Mutant("handover-without-messages", "lost", "calm", (0, 3, 4), _handover_without_messages),
        Mutant("old-connection-kept", "sessions", "calm", (0, 3, 4), _old_connection_kept),
        Mutant("joining-node-serves", "forgotten", "churn", (1, 6), _joining_node_serves),
        Mutant("left-node-writes", "vanished", "churn", (9,), _left_node_writes),
    )
}
