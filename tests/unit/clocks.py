"""`Clock`: a time that only the test moves, for code that takes its clock as an argument."""

from __future__ import annotations


class Clock:
    """Calling it answers `now`; the test sets or advances `now` itself."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
