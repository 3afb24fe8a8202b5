"""Acknowledgements of one connection that wait for durability and leave in the order the packets came.

A PUBACK/PUBREC/SUBACK/UNSUBACK may have to wait for the storage barrier (the disk writes it confirms are
committed) and, for a QoS 1/2 publish forwarded to other nodes, for their acknowledgements (`RemoteAck`); a
SUBACK/UNSUBACK, in the `cluster` mode of `subscription.acknowledge`, for the other members to apply its routes (a
`Confirmation` of the store). Both are a `RemoteWait` (vmqpy.broker.core.ports).
`AckQueue` holds each acknowledgement until everything it waits for is done and everything queued before it
has left; an acknowledgement that waits for nothing, with nothing before it, leaves at once. When a wait
fails (storage failed, a node the publish went to left), nothing more is acknowledged: `on_failure` is called
(the connection closes, the client resends).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

from vmqpy.broker.core.empty_deque import EMPTY
from vmqpy.sessions.remote import RemoteWait
from vmqpy.storage import Storage


class AckQueue:
    __slots__ = ("_loop", "_on_failure", "_pending", "_storage", "active")

    def __init__(self, loop: asyncio.AbstractEventLoop, storage: Storage | None,
                 on_failure: Callable[[BaseException], None]) -> None:
        self._loop = loop
        self._storage = storage
        self._on_failure = on_failure
        # what waits, in order; the shared empty deque (vmqpy.broker.core.empty_deque) until something has to wait
        self._pending: deque[tuple[Future[None] | None, RemoteWait | None, Callable[[], None]]] = EMPTY
        self.active = True  # False once the connection closes: what is still queued is not written

    def free(self, durable: bool, remote: RemoteWait | None = None) -> bool:
        """Whether an acknowledgement that waits for `durable` and `remote` may be written at once, without
        `after`: it waits for nothing (no storage barrier, no other node) and nothing is queued before it."""
        return not self._pending and remote is None and (not durable or self._storage is None)

    def after(self, durable: bool, action: Callable[[], None], remote: RemoteWait | None = None) -> None:
        """Run `action` (write an acknowledgement) once the disk writes queued so far are committed (`durable`)
        and, with `remote`, the other nodes the publish went to have it; in order."""
        future: Future[None] | None = None
        if durable and self._storage is not None:
            future = self._storage.barrier()
        if future is None and remote is None:
            if self._pending:
                self._pending.append((None, None, action))
            else:
                action()
            return
        if self._pending is EMPTY:
            self._pending = deque()
        self._pending.append((future, remote, action))
        if future is not None:  # completed on the storage thread
            future.add_done_callback(lambda _f: self._loop.call_soon_threadsafe(self._flush))
        if remote is not None:  # completed on this thread, by a frame from another node
            remote.add_done_callback(self._flush)

    def close(self) -> None:
        """The connection is gone: nothing still queued is written, and the failure callback (a method of the
        connection) is let go, so that the connection is freed as soon as nothing else holds it (no cycle is left
        for the garbage collector, which a busy node runs rarely)."""
        self.active = False
        self._on_failure = _ignore

    def _flush(self) -> None:
        pending = self._pending
        while pending:
            future, remote, action = pending[0]
            if (future is not None and not future.done()) or (remote is not None and not remote.done()):
                return
            pending.popleft()
            error = (future.exception() if future is not None else None) or (remote.error if remote else None)
            if error is not None:
                pending.clear()
                self._on_failure(error)
                return
            if self.active:
                action()


def _ignore(_error: BaseException) -> None:
    """The failure callback of a closed queue."""
