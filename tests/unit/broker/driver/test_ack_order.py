"""Acknowledgements leave in order, each once what it waits for is done (vmqpy/broker/driver/ack_order.py)."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

from tests.unit.loop_turns import settle
from vmqpy.broker.core.remote_ack import RemoteAck
from vmqpy.broker.driver.ack_order import AckQueue


class Barriers:
    """Storage whose barriers the test completes."""

    def __init__(self) -> None:
        self.futures: list[Future[None]] = []

    def barrier(self) -> Future[None]:
        self.futures.append(Future())
        return self.futures[-1]


async def test_in_order_each_after_what_it_waits_for() -> None:
    storage = Barriers()
    failures: list[BaseException] = []
    queue = AckQueue(asyncio.get_running_loop(), storage, failures.append)  # type: ignore[arg-type]
    written: list[str] = []
    queue.after(False, lambda: written.append("a"))  # nothing to wait for: at once
    remote = RemoteAck(1)
    queue.after(True, lambda: written.append("b"), remote)  # disk and one other node
    queue.after(False, lambda: written.append("c"))  # waits for b, which comes before it
    queue.after(True, lambda: written.append("d"))
    assert written == ["a"]
    storage.futures[1].set_result(None)  # d's disk write is done first: it still waits for b
    await settle()
    assert written == ["a"]
    storage.futures[0].set_result(None)
    await settle()
    assert written == ["a"]  # b still waits for the other node
    remote.one_done()
    await settle()
    assert written == ["a", "b", "c", "d"] and failures == []


async def test_a_failed_wait_acknowledges_nothing_more() -> None:
    storage = Barriers()
    failures: list[Any] = []
    queue = AckQueue(asyncio.get_running_loop(), storage, failures.append)  # type: ignore[arg-type]
    written: list[str] = []
    remote = RemoteAck(2)
    queue.after(False, lambda: written.append("a"), remote)
    queue.after(False, lambda: written.append("b"))
    remote.fail("node left")
    await settle()
    assert written == [] and len(failures) == 1 and "node left" in str(failures[0])
    queue.after(False, lambda: written.append("c"))  # the queue is empty again: a later one leaves
    assert written == ["c"]


async def test_nothing_is_written_once_the_connection_closed() -> None:
    storage = Barriers()
    queue = AckQueue(asyncio.get_running_loop(), storage, lambda _e: None)  # type: ignore[arg-type]
    written: list[str] = []
    queue.after(True, lambda: written.append("a"))
    queue.active = False
    storage.futures[0].set_result(None)
    await settle()
    assert written == []


async def test_free_only_when_an_acknowledgement_may_leave_at_once() -> None:
    """`free` is the driver's shortcut past `after` (vmqpy.broker.driver.connection): true exactly when `after` would
    run the action at once, so that taking it never reorders or hastens an acknowledgement."""
    storage = Barriers()
    queue = AckQueue(asyncio.get_running_loop(), storage, lambda _e: None)  # type: ignore[arg-type]
    assert queue.free(False)
    assert not queue.free(True)  # the storage barrier first
    assert not queue.free(False, RemoteAck(1))  # the other node first
    written: list[str] = []
    queue.after(True, lambda: written.append("a"))
    assert not queue.free(False)  # something is queued before it: it must wait its turn
    storage.futures[0].set_result(None)
    await settle()
    assert written == ["a"] and queue.free(False)
    without_storage = AckQueue(asyncio.get_running_loop(), None, lambda _e: None)
    assert without_storage.free(True)  # nothing to make durable on a node without storage
    assert not without_storage.free(True, RemoteAck(1))
