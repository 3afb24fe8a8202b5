"""The per-client memory cuts of issue 21: the shared empty deque, and sessions that hold no queue of their own
until they need one (vmqpy.broker.core.empty_deque, vmqpy.broker.core.session)."""

from __future__ import annotations

import pytest

from vmqpy.broker.core.empty_deque import EMPTY
from vmqpy.broker.core.session import Session
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import Delivery


def new_session() -> Session:
    return Session("c", protocol_level=4, expiry_interval=None, max_inflight=10, max_online=10, max_offline=10)


@pytest.mark.parametrize("add", [
    lambda d: d.append(1), lambda d: d.appendleft(1), lambda d: d.extend([1]), lambda d: d.extendleft([1]),
    lambda d: d.insert(0, 1),
])
def test_the_shared_empty_deque_refuses_to_grow(add: object) -> None:
    with pytest.raises(TypeError):
        add(EMPTY)  # type: ignore[operator]
    assert len(EMPTY) == 0 and not EMPTY


def test_a_session_queues_in_a_deque_of_its_own_and_gives_it_back_offline_when_empty() -> None:
    a, b = new_session(), new_session()
    assert a.queue is EMPTY and b.queue is EMPTY
    assert a.deliver(Message("t", b"1", 1), 1, False, [], 0.0) is Delivery.QUEUED
    assert a.queue is not EMPTY and len(a.queue) == 1
    assert b.queue is EMPTY and len(EMPTY) == 0, "the other session's queue is untouched"
    a.forget_upto(a.queue[0].seq)
    assert a.queue is EMPTY


def test_no_slot_dictionary() -> None:
    assert not hasattr(new_session(), "__dict__")
