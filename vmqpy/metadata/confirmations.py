"""Waiting until the other members applied some writes of this node (sans-I/O: time is an input).

A write of an acknowledged prefix is pushed to every reachable member, and each answers with a ``PushAck`` once
it applied it (vmqpy.metadata.replica). A :class:`Confirmation` gathers the pushes of one operation (the
subscriptions of one SUBSCRIBE) as (peer, counter) pairs; it is done when every pair was acknowledged, when its
peer became unreachable or left (an unreachable member never holds an operation back), or when its deadline
passed (it is then *late*: counted and logged by the driver). It never fails: the operation goes on in every
case, the wait only decides when. :class:`Confirmations` keeps the open ones of a node.

The interface of a done-able wait (``done``, ``error``, ``add_done_callback``) is the one the connection's
acknowledgement queue takes (vmqpy.broker.driver.ack_order), so a SUBACK waits for a confirmation as a PUBACK of a
forwarded publish waits for the other nodes' acknowledgements.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

__all__ = ["Confirmation", "Confirmations"]


class Confirmation:
    """The pushes of one operation, until each was applied by its peer, its peer is gone, or the deadline."""

    __slots__ = ("_callbacks", "deadline", "late", "pairs", "sealed", "unanswered")

    error: None = None  # a confirmation never fails (vmqpy.broker.driver.ack_order reads it)

    def __init__(self, deadline: float) -> None:
        self.pairs: set[tuple[str, int]] = set()  # (peer, counter) not acknowledged yet
        self.sealed = False  # no more pushes will be added (`Confirmations.seal`)
        self.late = False  # the deadline passed with pairs left: nothing more is waited for
        self.unanswered: frozenset[str] = frozenset()  # once late: the peers that had not answered
        self.deadline = deadline
        self._callbacks: list[Callable[[], None]] = []

    def done(self) -> bool:
        return self.sealed and not self.pairs

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        if self.done():
            callback()
        else:
            self._callbacks.append(callback)

    def _finish(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


class Confirmations:
    """The open confirmations of one node, indexed by the pushes they wait for.

    A confirmation's deadline is set when it is opened (the first write of its operation is about to be made),
    so that one never sealed (its client went away between the slices of a long SUBSCRIBE) is let go at its
    deadline too: nothing it waited for stays indexed."""

    def __init__(self) -> None:
        self._waiting: dict[tuple[str, int], Confirmation] = {}
        self._open: deque[Confirmation] = deque()  # in deadline order (one timeout per node)
        self.late = 0  # confirmations whose deadline passed with pairs left

    def __len__(self) -> int:
        """The pushes waited for."""
        return len(self._waiting)

    def open(self, deadline: float) -> Confirmation:
        """A new confirmation that waits until `deadline` at the latest (not before the last one opened)."""
        confirmation = Confirmation(deadline)
        self._open.append(confirmation)
        return confirmation

    def expect(self, confirmation: Confirmation, peer: str, counter: int) -> None:
        """`confirmation` waits until `peer` acknowledges this node's write `counter` (pushed to it); nothing
        once its deadline passed."""
        if confirmation.sealed:
            raise ValueError("a sealed confirmation takes no more pushes")
        if confirmation.late:
            return
        pair = (peer, counter)
        confirmation.pairs.add(pair)
        self._waiting[pair] = confirmation

    def seal(self, confirmation: Confirmation) -> bool:
        """No more pushes for `confirmation`. Whether it is done already."""
        if not confirmation.sealed:
            confirmation.sealed = True
            if not confirmation.pairs:
                confirmation._finish()
        self._trim()
        return confirmation.done()

    def acked(self, peer: str, counters: Iterable[int]) -> None:
        """`peer` applied this node's writes `counters`."""
        waiting = self._waiting
        for counter in counters:
            confirmation = waiting.pop((peer, counter), None)
            if confirmation is not None:
                self._drop(confirmation, (peer, counter))
        self._trim()

    def keep_peers(self, peers: Iterable[str]) -> None:
        """Only `peers` (the reachable members) are waited for: the pushes to any other are let go."""
        keep = set(peers)
        gone = [pair for pair in self._waiting if pair[0] not in keep]
        for pair in gone:
            self._drop(self._waiting.pop(pair), pair)

    def expire(self, now: float) -> list[Confirmation]:
        """Give up the confirmations not done by their deadline (`now` or earlier): they are late."""
        late: list[Confirmation] = []
        opened = self._open
        while opened and (opened[0].done() or opened[0].deadline <= now):
            confirmation = opened.popleft()
            if confirmation.done():
                continue
            for pair in confirmation.pairs:
                self._waiting.pop(pair, None)
            confirmation.unanswered = frozenset(peer for peer, _counter in confirmation.pairs)
            confirmation.pairs.clear()
            confirmation.late = True  # members were still to answer, or writes still to come (not sealed)
            self.late += 1
            late.append(confirmation)
            if confirmation.sealed:
                confirmation._finish()
        return late

    def next_deadline(self) -> float | None:
        """When `expire` has something to do next (None: nothing is waited for)."""
        self._trim()
        return self._open[0].deadline if self._open else None

    def _trim(self) -> None:
        """Forget the done confirmations at the front (most finish in the order they were opened: the queue stays
        as short as what is really waited for)."""
        opened = self._open
        while opened and opened[0].done():
            opened.popleft()

    def _drop(self, confirmation: Confirmation, pair: tuple[str, int]) -> None:
        confirmation.pairs.discard(pair)
        if confirmation.done():
            confirmation._finish()
