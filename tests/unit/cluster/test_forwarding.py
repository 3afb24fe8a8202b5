"""Acknowledged forwarding: numbering, cumulative acknowledgements, resending, duplicates recognised."""

from __future__ import annotations

import random
from functools import partial

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy.cluster.forwarding import ForwardReceiver, ForwardSender, pack_batch, unpack_batch


def test_numbers_per_peer_and_cumulative_acks_call_back_in_order() -> None:
    s = ForwardSender()
    calls: list[str] = []
    assert s.add("n2", b"a", lambda: calls.append("a"), lambda _w: None) == (1, 1)
    assert s.add("n2", b"b", lambda: calls.append("b"), lambda _w: None) == (2, 1)
    assert s.add("n3", b"c", lambda: calls.append("c"), lambda _w: None) == (1, 1)
    for cb in s.acked("n2", 1):
        cb()
    assert calls == ["a"]
    assert s.add("n2", b"d", lambda: calls.append("d"), lambda _w: None) == (3, 2)
    assert s.unacknowledged("n2") == [(2, b"b", 0), (3, b"d", 0)] and s.low("n2") == 2
    for cb in s.acked("n2", 3):
        cb()
    assert calls == ["a", "b", "d"] and s.pending_count() == 1


def test_a_peer_that_leaves_fails_its_pending_forwards() -> None:
    s = ForwardSender()
    why: list[str] = []
    s.add("n2", b"a", lambda: None, why.append)
    s.add("n2", b"b", lambda: None, why.append)
    for fail in s.drop_peer("n2", "n2 left"):
        fail()
    assert why == ["n2 left", "n2 left"] and s.pending_count() == 0


def test_a_peer_that_leaves_and_joins_again_gets_new_numbers_not_copies() -> None:
    """n2 received 1..2 from this run of ours, left and joined again (its receiver remembers this run): a
    forward numbered 1 again would be taken for a copy, acknowledged and never delivered (lost)."""
    s, r = ForwardSender(), ForwardReceiver()
    for payload in (b"a", b"b"):
        seq, low = s.add("n2", payload, lambda: None, lambda _why: None)
        assert r.accept("n1", seq, low, 7)
    s.acked("n2", 2)
    s.drop_peer("n2", "n2 left")
    seq, low = s.add("n2", b"c", lambda: None, lambda _why: None)
    assert seq == 3 and r.accept("n1", seq, low, 7)


def test_receiver_delivers_once_and_acks_only_a_contiguous_prefix() -> None:
    r = ForwardReceiver()
    assert r.accept("n1#1", 1, 1)
    assert r.accept("n1#1", 3, 1)
    assert r.acknowledgeable("n1#1") == (0, 1)  # 2 is missing
    assert not r.accept("n1#1", 3, 1)
    assert r.accept("n1#1", 2, 1)
    assert r.acknowledgeable("n1#1") == (0, 3)
    assert not r.accept("n1#1", 1, 1)


def test_a_restarted_sender_numbers_from_1_again_in_a_new_epoch() -> None:
    r = ForwardReceiver()
    for seq in (1, 2, 3):
        assert r.accept("n1", seq, 1, epoch=7)
    assert r.acknowledgeable("n1") == (7, 3)
    assert r.accept("n1", 1, 1, epoch=8)  # not a copy: the sender restarted
    assert r.acknowledgeable("n1") == (8, 1)


def test_a_restarted_receiver_learns_what_is_settled_from_the_lowest_pending() -> None:
    r = ForwardReceiver()  # knows nothing: forwards 1..49 were acknowledged before it restarted
    assert r.accept("n1#1", 55, 50)  # a buffered frame arrives before the resent ones
    assert r.acknowledgeable("n1#1") == (0, 49)
    for seq in range(50, 55):
        assert r.accept("n1#1", seq, 50)
    assert not r.accept("n1#1", 55, 50)
    assert r.acknowledgeable("n1#1") == (0, 55)


@given(st.integers(1, 40), st.integers(0, 2**32), st.integers(0, 3))
def test_any_mix_of_loss_resend_and_duplication_delivers_each_forward_exactly_once(
        n: int, seed: int, link_breaks: int) -> None:
    """Frames are sent, some are lost or duplicated on the way, the link breaks and everything unacknowledged
    is sent again: every forward is delivered exactly once and finally acknowledged."""
    rng = random.Random(seed)
    sender, receiver = ForwardSender(), ForwardReceiver()
    acked: list[int] = []
    delivered: list[bytes] = []
    wire: list[tuple[int, int, bytes]] = []
    for i in range(n):
        seq, low = sender.add("n2", str(i).encode(), partial(acked.append, i), lambda _w: None)
        wire.append((seq, low, str(i).encode()))
    for _round in range(link_breaks + 2):
        if _round > 0:  # the link came back: send again
            wire = [(seq, sender.low("n2"), payload) for seq, payload, _size in sender.unacknowledged("n2")]
        arrived = [f for f in wire if rng.random() > 0.3 or _round == link_breaks + 1]
        arrived += [f for f in arrived if rng.random() < 0.2]  # duplicated by a resend of the link buffer
        for seq, low, payload in arrived:
            if receiver.accept("n1#1", seq, low):
                delivered.append(payload)
        for cb in sender.acked("n2", receiver.acknowledgeable("n1#1")[1]):
            cb()
    assert sorted(delivered, key=int) == [str(i).encode() for i in range(n)]
    assert sorted(acked) == list(range(n))


def test_low_is_the_next_number_when_nothing_is_pending_and_forget_returns_the_failure() -> None:
    s = ForwardSender()
    assert s.low("n2") == 1
    why: list[str] = []
    s.add("n2", b"a", lambda: None, why.append)
    s.add("n2", b"b", lambda: None, why.append)
    for cb in s.acked("n2", 1):
        cb()
    assert s.low("n2") == 2
    fail = s.forget("n2", 2)
    assert fail is not None and s.forget("n2", 2) is None
    fail("full")
    assert why == ["full"] and s.low("n2") == 3 and s.pending_count() == 0


def test_acked_stops_at_the_first_number_not_covered() -> None:
    s = ForwardSender()
    calls: list[int] = []
    for i in range(1, 6):
        s.add("n2", b"x", partial(calls.append, i), lambda _w: None)
    for cb in s.acked("n2", 3):
        cb()
    assert calls == [1, 2, 3] and [seq for seq, _, _ in s.unacknowledged("n2")] == [4, 5]
    assert s.acked("n2", 3) == [] and s.acked("n9", 10) == []


def test_a_batch_keeps_its_entries_in_order_with_qos0_unnumbered() -> None:
    record = [1, ["t/x", b"\x00" * 300, 1, False, "pub", None, [None] * 4, []], [["g", "t/#"]]]
    body = pack_batch(7, 3, [3, b"a", 0, b"", 4, record])
    assert body[:1] == b"B"
    assert unpack_batch(body) == (7, 3, [(3, b"a"), (0, b""), (4, record)])
    assert unpack_batch(pack_batch(2**63 - 1, 1, [])) == (2**63 - 1, 1, [])


@pytest.mark.parametrize("body", [
    b"",
    b"R" + pack_batch(1, 1, [1, b"a"])[1:],  # not a batch
    pack_batch(1, 1, [1, b"a"])[:-1],  # truncated
    b"B\xc1",  # invalid msgpack
    b"B" + bytes([0x93, 0x01, 0x01, 0x91, 0x01]),  # an odd number of items
    pack_batch(1, 1, [-1, b"a"]),  # a negative number
    pack_batch(1, 1, ["1", b"a"]),  # a number that is not an integer
    b"B" + bytes([0x92, 0x01, 0x01]),  # two elements, not three
])
def test_a_malformed_batch_is_refused_with_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        unpack_batch(body)


@given(st.integers(0, 2**63 - 1), st.integers(0, 2**40),
       st.lists(st.tuples(st.integers(0, 2**40), st.binary(max_size=64)), max_size=30))
def test_batches_round_trip(epoch: int, low: int, entries: list[tuple[int, bytes]]) -> None:
    flat: list[int | bytes] = [x for entry in entries for x in entry]
    assert unpack_batch(pack_batch(epoch, low, flat)) == (epoch, low, entries)


def test_a_held_forward_holds_back_the_cumulative_acknowledgement_until_released() -> None:
    """A forward passed on to a moved subscriber's new node is acknowledged only once that node has it; the
    acknowledgement being cumulative, nothing after it is acknowledged before either."""
    r = ForwardReceiver()
    for seq in (1, 2, 3):
        assert r.accept("n1", seq, 1, 9)
    r.hold("n1", 2)
    assert r.acknowledgeable("n1") == (9, 1)
    assert r.accept("n1", 4, 1, 9)
    assert r.acknowledgeable("n1") == (9, 1)
    r.release("n1", 2, 9)
    assert r.acknowledgeable("n1") == (9, 4)
    r.hold("n1", 4)
    r.release("n1", 4, 8)  # a release for another run of the sender changes nothing
    assert r.acknowledgeable("n1") == (9, 3)


@given(st.lists(st.tuples(st.sampled_from(["deliver", "hold", "release"]), st.integers(1, 12)), max_size=60))
def test_held_forwards_are_never_acknowledged_and_nothing_after_them(steps: list[tuple[str, int]]) -> None:
    """Whatever order forwards arrive, are held and released in: the cumulative acknowledgement never covers a
    held forward, never covers one not delivered, and is the contiguous delivered prefix when none is held."""
    r = ForwardReceiver()
    delivered: set[int] = set()
    held: set[int] = set()
    for op, seq in steps:
        if op == "deliver":
            if r.accept("p", seq, 1, 5):
                delivered.add(seq)
        elif op == "hold" and seq in delivered:
            r.hold("p", seq)
            held.add(seq)
        elif op == "release":
            r.release("p", seq, 5)
            held.discard(seq)
        _epoch, upto = r.acknowledgeable("p")
        prefix = 0
        while prefix + 1 in delivered:
            prefix += 1
        assert upto == (min(prefix, min(held) - 1) if held else prefix)
