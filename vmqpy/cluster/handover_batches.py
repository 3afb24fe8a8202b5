"""The batches a session's messages are handed over in (registration.py): at most BATCH_MESSAGES messages or
about BATCH_BYTES bytes each."""

from __future__ import annotations

from collections.abc import Iterable

from vmqpy.sessions.parts import Outgoing

__all__ = ["BATCH_BYTES", "BATCH_MESSAGES", "handover_batches"]

BATCH_MESSAGES = 200
BATCH_BYTES = 1 << 20


def handover_batches(outs: Iterable[Outgoing]) -> Iterable[list[Outgoing]]:
    batch: list[Outgoing] = []
    size = 0
    for out in outs:
        batch.append(out)
        size += len(out.message.payload) + len(out.message.topic) + 64
        if len(batch) >= BATCH_MESSAGES or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch
