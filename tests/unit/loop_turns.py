"""`settle`: let the running event loop run a few turns, so that what the code under test scheduled with
`call_soon` (a flush, a forward batch, a deferred write) has run."""

from __future__ import annotations

import asyncio


async def settle(turns: int = 3) -> None:
    """Run `turns` turns of the running event loop."""
    for _ in range(turns):
        await asyncio.sleep(0)
