"""Start-up loads of many objects without the cyclic garbage collector walking them over and over.

A node that restarts on a million retained messages or subscriptions builds millions of small objects (keys,
dots, versions, messages, tree nodes) that all stay alive. While they are built, CPython's cyclic collector
runs every few hundred allocations and, as the heap grows, walks the older generations again and again: about
half of the CPU of a restart at 100,000 retained messages (docs/performance.md, "Restart"). :func:`bulk_load`
switches the collector off for the load and, once it is done, moves everything alive into the permanent
generation (:func:`gc.freeze`), so that later full collections do not walk the loaded data either.

Safe because a load makes no garbage cycles worth collecting: what it builds stays referenced, and what it
drops (rows, decoded msgpack lists) is freed by reference counting as usual. An object frozen at start that
later becomes part of a garbage cycle is not collected; the loaded records (tuples, lists, messages, tree
nodes) form no cycles, so that costs nothing in practice.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["FREEZE_AT", "Load", "bulk_load"]

#: Loads of fewer records than this only pause the collector: freezing is for the large heap of a big restart
#: (a test process that starts many small nodes would otherwise freeze every test's garbage cycles).
FREEZE_AT = 10_000


class Load:
    """What the block of :func:`bulk_load` says about its load: `records`, how many it read."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records = 0


@contextlib.contextmanager
def bulk_load() -> Iterator[Load]:
    """Run the block with the cyclic collector paused; then, if the block counted at least `FREEZE_AT` records
    in the :class:`Load` it gets, freeze what is alive (see the module docstring). Nested uses are fine: the
    collector is switched back on (and the heap frozen) only by the use that switched it off."""
    load = Load()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield load
    finally:
        if was_enabled:
            if load.records >= FREEZE_AT:
                gc.freeze()
            gc.enable()
