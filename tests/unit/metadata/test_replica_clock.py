"""A replica's node clock: own counters, their reservation, and the holes a restart leaves."""

from __future__ import annotations

from dvv.dots import Counters
from dvv.node_clock import NodeClock
from vmqpy.metadata.replica_clock import RESERVE_BLOCK, ReplicaClock, add_runs, clock_of_base


def test_own_counters_are_reserved_a_block_ahead_and_folded_into_the_clock_when_read() -> None:
    clock = ReplicaClock("a")
    assert [clock.issue() for _ in range(3)] == [(1, 1 + RESERVE_BLOCK), (2, None), (3, None)]
    assert clock.base == {"a": 3} and clock.base_vv().to_dict() == {"a": 3}
    assert clock.current() == NodeClock({"a": (3, 0)})
    clock.reserved = 4
    assert clock.issue() == (4, 4 + RESERVE_BLOCK), "the counter reached the reservation: a new one first"


def test_a_restart_skips_the_reservation_and_declares_the_holes_unused_once_every_member_was_asked() -> None:
    clock = ReplicaClock("a")
    # rows hold own counters 1, 2 and 5; counters below 10 may have been handed out before the crash
    clock.restore(NodeClock().add_all([("a", 1), ("a", 2), ("a", 5), ("b", 1)]), 10, ["b", "c"])
    assert clock.holes == Counters([3, 4, 6, 7, 8, 9]) and clock.asking == {"b", "c"}
    assert clock.current().entry("a") == (2, 0b1000_0100), "5 and the reservation 10 itself are seen"
    assert clock.asked("b") is None
    assert clock.keep_asking(["b", "d"]) == NodeClock({"a": (10, 0), "b": (1, 0)}), "c left: nobody else to ask"
    assert clock.holes is None and clock.issue() == (11, 11 + RESERVE_BLOCK)
    assert clock.asked("b") is None, "no holes any more"


def test_a_restart_with_no_member_to_ask_fills_the_holes_at_once() -> None:
    clock = ReplicaClock("a")
    clock.restore(NodeClock().add_all([("a", 1), ("a", 3)]), 0, [])
    assert clock.holes is None and clock.current().entry("a") == (3, 0)


def test_implausible_runs_are_refused_and_catch_up_in_order_is_not() -> None:
    clock = ReplicaClock("a")
    assert clock.plausible([("b", 1, 1_000_000)], max_ahead=10), "contiguous from the base: extends it"
    assert not clock.plausible([("b", 11, 11)], max_ahead=10), "11 counters beyond what we know of b"
    assert clock.plausible([("b", 10, 10)], max_ahead=10)
    assert not clock.plausible([("b", 5, 5), ("c", 5, 5), ("d", 5, 5)], max_ahead=10), "5 + 5 + 5 bits > 10"


def test_add_runs_and_clock_of_base() -> None:
    clock = NodeClock({"a": (2, 0)})
    assert add_runs(clock, {"a": Counters([4, 5, 3, 9]), "b": Counters([2])}) == clock.add_all(
        [("a", 3), ("a", 4), ("a", 5), ("a", 9), ("b", 2)]
    )
    assert clock_of_base({"a": 3, "b": 1}) == NodeClock({"a": (3, 0), "b": (1, 0)})
