"""A fake event loop for the unit tests of work done a slice a loop turn (the sweeper, the bulk lane): what is
scheduled with `call_soon` runs at the next `turn()`."""

from __future__ import annotations

from collections.abc import Callable


class Loop:
    def __init__(self) -> None:
        self.ready: list[Callable[[], None]] = []

    def call_soon(self, callback: Callable[[], None]) -> None:
        self.ready.append(callback)

    def turn(self) -> bool:
        """Run what was scheduled before this turn; whether anything ran."""
        ready, self.ready = self.ready, []
        for callback in ready:
            callback()
        return bool(ready)
