"""One shared, immutable empty deque: the default of the per-client queues that most clients never fill.

An empty `collections.deque` costs about 760 bytes (its first block is allocated with it); a node with many idle
clients held three of them per client. A queue starts as `EMPTY` and its owner swaps in a deque of its own at
the first append (`is EMPTY` tells). Reading it (len, truth, iteration, clear) works as for any empty deque;
adding to it raises TypeError, so a forgotten swap is a loud bug rather than messages shared between clients.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NoReturn

__all__ = ["EMPTY"]


class _EmptyDeque(deque[Any]):
    """A deque that stays empty (see the module docstring)."""

    __slots__ = ()

    def _refuse(self, *_args: object) -> NoReturn:
        raise TypeError("the shared empty deque cannot be added to: its owner swaps in a deque of its own first")

    append = appendleft = extend = extendleft = insert = __iadd__ = __setitem__ = _refuse


EMPTY: deque[Any] = _EmptyDeque()
