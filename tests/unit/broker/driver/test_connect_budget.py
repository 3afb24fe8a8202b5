"""The node-wide byte budget of connections before their CONNECT (vmqpy.broker.driver.connect_budget)."""

from __future__ import annotations

import asyncio
from collections import Counter

from vmqpy.broker.driver.connect_budget import BUDGET_EXCEEDED_METRIC, ConnectBudget
from vmqpy.broker.listeners.preludes import ConnectPrelude, ConnectWait


def test_bytes_fit_until_the_limit_and_come_back() -> None:
    metrics: Counter[str] = Counter()
    budget = ConnectBudget(100, metrics)
    assert BUDGET_EXCEEDED_METRIC in metrics and metrics[BUDGET_EXCEEDED_METRIC] == 0  # exists from the start
    assert budget.take(60) and budget.take(40)
    assert not budget.take(1)
    budget.give(40)
    assert budget.in_use == 60 and budget.take(40)


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("192.0.2.1", 1) if name == "peername" else default


def test_partial_connects_share_the_budget_and_the_one_that_does_not_fit_is_closed() -> None:
    async def run() -> None:
        metrics: Counter[str] = Counter()
        budget = ConnectBudget(2500, metrics)
        wait = ConnectWait("default", 10.0, 65536, metrics, budget=budget)
        head = b"\x10\xff\x7f" + bytes(997)  # a CONNECT of 16,386 bytes: its first 1,000
        preludes = [ConnectPrelude(lambda: asyncio.Protocol(), wait, lambda: None) for _ in range(3)]
        transports = [_Transport() for _ in preludes]
        for prelude, transport in zip(preludes, transports, strict=True):
            prelude.connection_made(transport)
            prelude.data_received(head)
        assert [t.aborted for t in transports] == [False, False, True]
        assert budget.in_use == 2000 and metrics[BUDGET_EXCEEDED_METRIC] == 1
        preludes[0].connection_lost(None)  # its bytes come back
        assert budget.in_use == 1000
        for prelude in preludes[1:]:
            prelude.connection_lost(None)
        assert budget.in_use == 0

    asyncio.run(run())
