"""Divergent copies (vmqpy.replicas.lineage): which messages of a session were already taken, from the old
owner's replica copies or its handover, so that neither path brings one a second time."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy.broker.core.lineage import (
    CARRIED_MAX,
    HANDED_OVER,
    LINEAGE_TABLE,
    Lineage,
    entries_of,
    fingerprint,
    names_record,
)
from vmqpy.sessions.message import Message
from vmqpy.sessions.names import Entry, Name, pack_entries, unpack_entries
from vmqpy.storage import Storage


def name(seq: int, payload: bytes = b"") -> Name:
    return seq, fingerprint(Message("t", payload or f"m{seq}".encode(), 2))


A1, A2, A3 = name(1), name(2), name(3)


@pytest.mark.parametrize(("steps", "expected"), [
    # (names, origin) in order -> the verdicts of the last step
    ([([A1, A2], "a")], [True, True]),  # a first recovery takes everything
    ([([A1, A2], "a"), ([A1, A2, A3], None)], [False, False, True]),  # the old owner's handover: only A3
    ([([A1], "a"), ([A1, A2], "a")], [False, True]),  # copies fetched again: only what is new
    ([([A1], None), ([A1], "a")], [True]),  # a handover to a session never recovered is not remembered
    ([([A1], "a"), ([A2], None), ([A2], "a")], [False]),  # handed over after a recovery: remembered
    ([([A1], "a"), ([name(1, b"other")], None)], [True]),  # same seq, other content: another message
    ([([A1, A1], "a")], [True, False]),  # a name twice in one batch: the second is not new
])
def test_admit(steps: list[tuple[list[Name], str | None]], expected: list[bool]) -> None:
    lineage = Lineage()
    verdicts: list[bool] = []
    for names, origin in steps:
        verdicts = lineage.admit("c1", names, origin)
    assert verdicts == expected


@pytest.mark.parametrize(("steps", "expected"), [
    # (names, origin, source) in order -> the verdicts of the last step
    ([([A1, A2], "a", None), ([A1, A2, A3], None, "a")], [False, False, True]),  # the old owner's own handover
    ([([A1, A2], "a", None), ([A1, A2], None, "c")], [True, True]),  # another node's numbers: not A's names
    ([([A1], "a", None), ([A2], None, "c"), ([A2], "c", None)], [False]),  # C's handover, then C's copies
    ([([A1], "a", None), ([A2], None, "c"), ([A2], "a", None)], [True]),  # ... but not A's copies
    ([([A1], "a", None), ([A1], None, None)], [False]),  # the sender not known: any owner's name matches
])
def test_admit_by_owner(steps: list[tuple[list[Name], str | None, str | None]], expected: list[bool]) -> None:
    lineage = Lineage()
    verdicts: list[bool] = []
    for names, origin, source in steps:
        verdicts = lineage.admit("c1", names, origin, source)
    assert verdicts == expected


def test_an_entry_of_an_earlier_version_guards_against_every_owner() -> None:
    lineage = Lineage()
    lineage.admit("c1", [A1], "a")
    lineage.admit("c1", [A2], None)  # remembered without its sender (HANDED_OVER)
    assert lineage.admit("c1", [A2, A1], None, "x") == [False, True]
    assert lineage.guards("c1", "x") and lineage.guards("c1", None)


def test_guards_only_an_owner_it_recovered_from() -> None:
    lineage = Lineage()
    assert not lineage.guards("c1", "a") and not lineage.guards("c1", None)
    lineage.admit("c1", [A1], "a")
    assert lineage.guards("c1", "a") and lineage.guards("c1", None)
    assert not lineage.guards("c1", "d")  # a node this session never took anything from


def test_the_lineage_goes_with_the_session_to_the_next_node() -> None:
    """C recovered A's copies and took one message from D's handover; the session moves on to D: D learns A's
    names (and not its own), so A's later handover to D brings only what C never had."""
    c, d = Lineage(), Lineage()
    c.admit("c1", [A1, A2], "a")
    c.admit("c1", [A3], None, "d")
    carried = c.carried("c1", "d")
    assert sorted(carried) == [("a", 1, A1[1]), ("a", 2, A2[1])]
    assert d.inherit("c1", carried, "c") == 2 and d.inherit("c1", carried, "c") == 0
    assert d.guards("c1", "a") and not d.guards("c1", "c")
    assert d.admit("c1", [A1, A2, A3], None, "a") == [False, False, True]  # A's handover to D
    # the sender's own entries are left out: its handover is the session's current state
    e = Lineage()
    assert e.inherit("c1", [("c", 7, A1[1]), ("a", 1, A1[1])], "c") == 1
    assert e.names("c1") == {A1: {"a"}}


def test_what_is_carried_is_bounded() -> None:
    lineage = Lineage()
    lineage.admit("c1", [(seq, b"d" * 8) for seq in range(CARRIED_MAX + 10)], "a")
    carried = lineage.carried("c1", "d")
    assert len(carried) == CARRIED_MAX and min(seq for _o, seq, _d in carried) == 10  # the latest ones


entries = st.lists(st.tuples(st.sampled_from(["a", "b", "node-c", ""]), st.integers(0, 2**64 - 1),
                             st.binary(min_size=8, max_size=8)), max_size=30)


@given(entries)
def test_entries_pack_and_unpack(items: list[Entry]) -> None:
    assert sorted(unpack_entries(pack_entries(items))) == sorted(items)
    assert sorted(entries_of(names_record(items))) == sorted(items)  # the bytes a `lin` operation carries


@pytest.mark.parametrize("data", [[], {"a": [1]}, {"a": [1, "x"]}, {"a": [-1, b"d"]}, {1: [1, b"d"]},
                                  {"a": [2**64, b"d"]}, {"a": ["1", b"d"]}])
def test_malformed_entries_are_refused(data: object) -> None:
    with pytest.raises(ValueError):
        unpack_entries(data)


def test_sessions_are_apart() -> None:
    lineage = Lineage()
    lineage.admit("c1", [A1], "a")
    assert lineage.admit("c2", [A1], None) == [True]
    assert lineage.holds("c1") and not lineage.holds("c2")


def test_persisted_and_forgotten(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "s.db")
    storage.open()
    try:
        lineage = Lineage(storage)
        lineage.admit("c1", [A1, A2], "node-a")
        lineage.admit("c1", [A3], None)
        lineage.admit("c2", [A1], "node-b")
        storage.barrier().result(5)
        again = Lineage(storage)  # after a restart
        assert again.names("c1") == {A1: {"node-a"}, A2: {"node-a"}, A3: {HANDED_OVER}}
        assert again.admit("c1", [A1, A2, A3], None) == [False, False, False]
        # node-b left the cluster, c1's session left this node
        forgotten = again.prune(lambda cid: cid == "c2", {"node-a"})
        assert forgotten == 4 and len(again) == 0
        storage.barrier().result(5)
        assert storage.load(LINEAGE_TABLE) == []
    finally:
        storage.close()


def test_prune_keeps_what_guards_a_member() -> None:
    lineage = Lineage()
    lineage.admit("c1", [A1], "a")
    lineage.admit("c1", [A2], None)
    assert lineage.prune(lambda cid: True, None) == 0  # members not known: nothing forgotten by owner
    assert lineage.prune(lambda cid: True, {"a", "b"}) == 0
    assert lineage.prune(lambda cid: True, {"b"}) == 2  # a left: its entry, then the handed-over one
    assert not lineage.holds("c1")


def test_an_unreadable_entry_is_skipped_and_counted(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "s.db")
    storage.open()
    try:
        storage.put(LINEAGE_TABLE, b"\x00\x05ab", b"x")
        Lineage(storage).admit("c1", [A1], "a")
        storage.barrier().result(5)
        loaded = Lineage(storage)
        assert loaded.malformed == 1 and loaded.names("c1") == {A1: {"a"}}
    finally:
        storage.close()


# --------------------------------------------------------------------------------------- the property
#
# The old owner A held messages 1..n of one session. Its replicas have copies of some (those that reached
# them); the node C that took the session over adopts copies, maybe in several fetches; A comes back and
# hands over what it still holds (all of them), in batches, at any point after C's first recovery. Every
# message is acknowledged (it is in A's queue, or in a copy). C must end with each message at most once
# (QoS 2) and with every one of them (nothing acknowledged lost).

Event = tuple[str, list[int]]  # ("copies" | "handover", seqs)


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, list[Event]]:
    n = draw(st.integers(1, 12))
    seqs = st.lists(st.integers(1, n), max_size=n)
    first = draw(st.lists(st.integers(1, n), min_size=1, max_size=n))
    later = draw(st.lists(st.tuples(st.sampled_from(["copies", "handover"]), seqs), max_size=6))
    handover_all = list(range(1, n + 1))  # A's whole queue, once, somewhere after the first recovery
    at = draw(st.integers(0, len(later)))
    events: list[Event] = [("copies", first), *later[:at], ("handover", handover_all), *later[at:]]
    return n, events


@settings(max_examples=300, deadline=None)
@given(histories())
def test_any_interleaving_takes_each_message_once_and_loses_none(history: tuple[int, list[Event]]) -> None:
    n, events = history
    lineage = Lineage()
    taken: list[int] = []
    for kind, seqs in events:
        batch = [name(s) for s in dict.fromkeys(seqs)]  # one fetch / batch names each message once
        verdicts = lineage.admit("c1", batch, "a" if kind == "copies" else None)
        taken += [seq for (seq, _digest), new in zip(batch, verdicts, strict=True) if new]
    assert sorted(taken) == list(range(1, n + 1))


@st.composite
def histories_with_a_move(draw: st.DrawFn) -> tuple[int, list[Event], int]:
    """As `histories`, and somewhere after the first recovery the session moves on from C to D (`moved_at`):
    what follows happens at D (A's copies fetched again by D, A's handover to D)."""
    n, events = draw(histories())
    return n, events, draw(st.integers(1, len(events)))


@settings(max_examples=300, deadline=None)
@given(histories_with_a_move())
def test_a_move_to_a_third_node_takes_each_message_once_and_loses_none(
        history: tuple[int, list[Event], int]) -> None:
    n, events, moved_at = history
    c, d = Lineage(), Lineage()
    queue: list[int] = []  # the session's messages (A's numbers), wherever the session is
    for kind, seqs in events[:moved_at]:
        batch = [name(s) for s in dict.fromkeys(seqs)]
        verdicts = c.admit("c1", batch, "a" if kind == "copies" else None, None if kind == "copies" else "a")
        queue += [seq for (seq, _digest), new in zip(batch, verdicts, strict=True) if new]
    # C hands the session over to D: its messages under C's own numbers (taken whole), and its lineage
    d.inherit("c1", c.carried("c1", "d"), "c")
    c_numbers = [(i + 1, name(seq)[1]) for i, seq in enumerate(queue)]
    assert all(d.admit("c1", c_numbers, None, "c"))
    for kind, seqs in events[moved_at:]:
        batch = [name(s) for s in dict.fromkeys(seqs)]
        verdicts = d.admit("c1", batch, "a" if kind == "copies" else None, None if kind == "copies" else "a")
        queue += [seq for (seq, _digest), new in zip(batch, verdicts, strict=True) if new]
    assert sorted(queue) == list(range(1, n + 1))
