"""A peer's outgoing buffer (outbox.py) without sockets: what is written at once, what waits, what is refused,
in which order waiting frames leave, and how often refusals are reported."""

from __future__ import annotations

import sys

import pytest

from vmqpy.cluster.outbox import Offer, PeerOutbox

UP, DOWN = True, False  # the peer's link is up and writable / it is not


def frame(size: int, tag: int = 0) -> bytes:
    return bytes([tag]) * size


@pytest.mark.parametrize(
    ("writable", "waiting", "size", "limit", "expected"),
    [
        (UP, 0, 10, 100, Offer.WRITE),  # nothing waits: straight to the socket
        (UP, 0, 500, 100, Offer.WRITE),  # the limit is for waiting frames only
        (UP, 1, 10, 100, Offer.QUEUED),  # a frame waits: the new one goes behind it, never before
        (DOWN, 0, 10, 100, Offer.QUEUED),
        (DOWN, 0, 100, 100, Offer.QUEUED),  # exactly the limit fits
        (DOWN, 0, 101, 100, Offer.REFUSED),
        (DOWN, 1, 91, 100, Offer.REFUSED),  # 10 waiting + 91 > 100
        (UP, 1, 91, 100, Offer.REFUSED),
        (DOWN, 0, 1, 0, Offer.REFUSED),  # a zero buffer takes nothing while the link is down
    ],
)
def test_offer(writable: bool, waiting: int, size: int, limit: int, expected: Offer) -> None:
    box = PeerOutbox(limit)
    for i in range(waiting):
        assert box.offer(frame(10, i), DOWN) is Offer.QUEUED
    before = (len(box), box.size)
    assert box.offer(frame(size, 9), writable) is expected
    if expected is Offer.QUEUED:
        assert (len(box), box.size) == (before[0] + 1, before[1] + size)
    else:
        assert (len(box), box.size) == before  # written or refused: nothing is kept


@pytest.mark.parametrize(
    ("writable", "waiting", "limit", "room"),
    [
        (UP, 0, 100, sys.maxsize),
        (UP, 3, 100, 70),
        (DOWN, 0, 100, 100),
        (DOWN, 3, 100, 70),
        (DOWN, 3, 30, 0),
    ],
)
def test_room(writable: bool, waiting: int, limit: int, room: int) -> None:
    box = PeerOutbox(limit)
    for i in range(waiting):
        box.offer(frame(10, i), DOWN)
    assert box.room(writable) == room


def test_waiting_frames_leave_in_order_in_chunks_of_at_least_one_frame() -> None:
    box = PeerOutbox(1000)
    frames = [frame(size, tag) for tag, size in enumerate([10, 20, 30, 200, 5])]
    for f in frames:
        box.offer(f, DOWN)
    assert box.take(25) == frames[:2]  # 10 < 25, then 30 >= 25: stop
    assert (len(box), box.size) == (3, 235)
    assert box.take(1) == frames[2:3]
    assert box.take(100) == frames[3:4]  # one frame larger than the chunk still leaves
    assert box.take(100) == frames[4:]
    assert box.take(100) == [] and (len(box), box.size) == (0, 0)


def test_clear_drops_every_waiting_frame() -> None:
    box = PeerOutbox(100)
    box.offer(frame(60), DOWN)
    box.clear()
    assert (len(box), box.size) == (0, 0)
    assert box.offer(frame(100), DOWN) is Offer.QUEUED  # the whole limit is free again


@pytest.mark.parametrize(
    ("times", "reports"),
    [
        ([0.0], [1]),  # the first refusal is reported at once
        ([0.0, 1.0, 9.9], [1, None, None]),
        ([0.0, 1.0, 9.9, 10.0], [1, None, None, 3]),  # the report counts every refusal since the previous one
        ([5.0, 15.0, 15.5, 40.0], [1, 1, None, 2]),
    ],
)
def test_refusals_are_reported_at_most_once_per_interval(times: list[float], reports: list[int | None]) -> None:
    box = PeerOutbox(0, report_interval=10.0)
    assert [box.refusal(now) for now in times] == reports
