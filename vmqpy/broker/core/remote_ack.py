"""The acknowledgement of a QoS 1/2 publish by the other nodes it was forwarded to.

A publish forwarded to N nodes is confirmed to its publisher once each of them acknowledged it, and never if
one of them leaves the cluster first. Acknowledgements arrive on the event loop's thread (they are frames of
the node links), so this is a plain countdown with callbacks: no lock, no thread-safe wake-up per message.
"""

from __future__ import annotations

from collections.abc import Callable


class RemoteAck:
    """Done when `count` acknowledgements arrived (`one_done`), failed at the first failure (`fail`).
    Callbacks run once, when it completes, or at once when added to one that has."""

    __slots__ = ("_callbacks", "error", "left")

    def __init__(self, count: int) -> None:
        self.left = count
        self.error: ConnectionError | None = None
        self._callbacks: list[Callable[[], None]] = []

    def done(self) -> bool:
        return self.left <= 0 or self.error is not None

    def one_done(self) -> None:
        if self.done():
            return
        self.left -= 1
        if self.left == 0:
            self._run_callbacks()

    def fail(self, why: str) -> None:
        if self.done():
            return
        self.error = ConnectionError(why)
        self._run_callbacks()

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        if self.done():
            callback()
        else:
            self._callbacks.append(callback)

    def _run_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


__all__ = ["RemoteAck"]
