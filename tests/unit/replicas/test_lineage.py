"""Divergent copies (vmqpy.replicas.lineage): which messages of a session were already taken, from the old
owner's replica copies or its handover, so that neither path brings one a second time."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy.broker.message import Message
from vmqpy.replicas.lineage import HANDED_OVER, LINEAGE_TABLE, Lineage, Name, fingerprint
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
        assert again.names("c1") == {A1: "node-a", A2: "node-a", A3: HANDED_OVER}
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
        assert loaded.malformed == 1 and loaded.names("c1") == {A1: "a"}
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
