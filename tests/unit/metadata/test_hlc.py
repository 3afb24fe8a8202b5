"""Hybrid logical clocks: tables of (operation, wall clock, received stamp) -> expected stamp."""

from __future__ import annotations

import random

import pytest

from vmqpy.metadata.hlc import HybridClock, Stamp
from vmqpy.metadata.replica import Replica, SendTo
from vmqpy.metadata.resolve import latest_stamp

# (operation, wall seconds, received stamp or None, expected stamp as (wall_ms, logical))
TABLE = [
    ("now", 10.000, None, (10_000, 0)),
    ("now", 10.000, None, (10_000, 1)),  # same millisecond: the logical part counts
    ("now", 10.001, None, (10_001, 0)),  # wall clock moved on: logical resets
    ("now", 9.000, None, (10_001, 1)),  # wall clock went back: the clock does not
    ("observe", 9.500, Stamp(12_000, 7, "b"), (12_000, 8)),  # a stamp from a node whose clock is ahead
    ("now", 9.600, None, (12_000, 9)),  # our wall clock is behind: we keep following the stamp
    ("observe", 9.700, Stamp(11_000, 50, "b"), (12_000, 10)),  # an older stamp changes nothing but logical
    ("observe", 9.800, Stamp(12_000, 20, "c"), (12_000, 21)),  # same wall_ms: max logical + 1
    ("now", 13.000, None, (13_000, 0)),  # wall clock catches up
    ("observe", 14.000, Stamp(13_500, 3, "b"), (14_000, 0)),  # our wall clock is the latest
]


def test_hlc_table() -> None:
    clock = HybridClock("a")
    for i, (op, wall, received, expected) in enumerate(TABLE):
        stamp = clock.now(wall) if op == "now" else clock.observe(received, wall)  # type: ignore[arg-type]
        assert (stamp.wall_ms, stamp.logical) == expected, f"row {i}: {op} at {wall} -> {stamp}"
        assert stamp.node == "a"


def test_stamps_never_go_backwards_and_exceed_what_was_observed() -> None:
    rng = random.Random(7)
    clock = HybridClock("a")
    last = clock.now(100.0)
    for _ in range(2000):
        wall = 100.0 + rng.uniform(-5, 5)
        if rng.random() < 0.5:
            stamp = clock.now(wall)
        else:
            received = Stamp(int((100 + rng.uniform(-5, 20)) * 1000), rng.randrange(10), "b")
            stamp = clock.observe(received, wall)
            assert stamp > received
        assert stamp > last
        last = stamp


@pytest.mark.parametrize(
    ("a", "b", "winner"),
    [
        (Stamp(1, 0, "a"), Stamp(2, 0, "a"), 1),  # wall time first
        (Stamp(2, 1, "a"), Stamp(2, 0, "b"), 0),  # then logical
        (Stamp(2, 1, "a"), Stamp(2, 1, "b"), 1),  # then the node id breaks the tie
    ],
)
def test_stamp_order(a: Stamp, b: Stamp, winner: int) -> None:
    assert (a < b) == (winner == 1)
    assert latest_stamp([{"hlc": a.to_list()}, {"hlc": b.to_list()}]) == {"hlc": (a, b)[winner].to_list()}
    assert Stamp.from_list(a.to_list()) == a


def test_a_causally_later_write_wins_although_its_wall_clock_is_behind() -> None:
    """Node b's wall clock is 30 s behind a's.  b receives a's write, then writes: b's stamp is greater,
    so latest_stamp picks b's value even among concurrent siblings (resolution is by stamp only)."""
    a = Replica("a", rng=random.Random(1))
    b = Replica("b", rng=random.Random(2))
    for r, other in ((a, "b"), (b, "a")):
        r.set_peers([other])
        r.set_reachable([other])
    wall_a, wall_b = 1_000.0, 970.0
    out = a.put("p", ("k",), {"hlc": a.hlc_now(wall_a), "v": "from a"}, wall_a)
    for send in [o for o in out if isinstance(o, SendTo)]:
        b.receive("a", send.message, wall_b)
    stamp_b = b.hlc_now(wall_b)
    written = a.get("p", ("k",))
    assert written is not None
    stamp_a = Stamp.from_list(written["hlc"])
    assert stamp_b > stamp_a
    later = {"hlc": stamp_b.to_list(), "v": "from b"}
    assert latest_stamp([a.get("p", ("k",)), later]) == later
    # Without the HLC (plain wall-clock stamps) the causally earlier write would win:
    naive_b = {"hlc": [int(wall_b * 1000), 0, "b"], "v": "from b"}
    assert latest_stamp([a.get("p", ("k",)), naive_b])["v"] == "from a"


def test_bad_stamps_are_rejected() -> None:
    for bad in ([1, 2], [1, -1, "a"], ["1", 0, "a"], [1, 0, 3], None, "x", [True, 0, "a"]):
        assert Stamp.parse(bad) is None
        with pytest.raises(ValueError):
            Stamp.from_list(bad)
