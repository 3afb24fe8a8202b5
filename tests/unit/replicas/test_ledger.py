"""When replica writes are settled for the acknowledgement barrier (vmqpy.replicas.ledger)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy.replicas.ledger import WriteLedger

UP = {"b", "c"}


def up(node: str) -> bool:
    return node in UP


def down_c(node: str) -> bool:
    return node == "b"


@pytest.mark.parametrize(("acks", "reachable", "strict", "quorum", "passed"), [
    ([], up, True, 3, 0),  # nobody answered
    (["b"], up, True, 3, 0),  # c is reachable and has not answered
    (["b", "c"], up, True, 3, 1),  # every copy
    (["b"], down_c, True, 3, 0),  # strict: c unreachable holds it (quorum 3)
    (["b"], down_c, True, 2, 1),  # strict, quorum 2: this node and b
    ([], down_c, True, 2, 0),  # b reachable, not answered
    (["b"], down_c, False, 3, 1),  # availability: c unreachable does not hold it
    ([], lambda n: False, False, 3, 1),  # availability, nobody reachable: under-replicated
    ([], lambda n: False, True, 1, 1),  # quorum 1: this node's copy is enough
])
def test_one_write_to_two_replicas(acks: list[str], reachable: object, strict: bool, quorum: int,
                                   passed: int) -> None:
    ledger = WriteLedger()
    write = ledger.issue(["b", "c"], quorum)
    for node in acks:
        ledger.acked(write, node)
    assert ledger.advance(reachable, strict) == passed  # type: ignore[arg-type]
    complete = set(acks) == {"b", "c"}
    assert ledger.under_replicated == (1 if passed and not complete else 0)
    assert ledger.pending() == (0 if complete else 1)


def test_writes_pass_in_order_and_a_passed_one_is_never_held_again() -> None:
    ledger = WriteLedger()
    w1 = ledger.issue(["b"], 2)
    w2 = ledger.issue(["b"], 2)
    ledger.acked(w2, "b")
    assert ledger.advance(up, True) == 0  # w1 holds w2
    ledger.acked(w1, "b")
    assert ledger.advance(up, True) == 2
    w3 = ledger.issue(["c"], 2)
    assert ledger.advance(lambda n: False, False) == w3  # under-replicated
    assert ledger.under_replicated == 1
    assert ledger.advance(lambda n: False, True) == w3  # stays passed when the mode turns strict
    ledger.acked(w3, "c")  # the copy arrived after the heal
    assert ledger.under_replicated == 0 and ledger.pending() == 0


def test_a_target_that_leaves_no_longer_holds_the_write() -> None:
    ledger = WriteLedger()
    write = ledger.issue(["b", "c"], 3)
    ledger.acked(write, "b")
    assert ledger.advance(down_c, True) == 0
    ledger.failed(write, "c")  # c left the cluster: the quorum is what remains (2)
    assert ledger.advance(down_c, True) == 1
    assert ledger.pending() == 0 and ledger.under_replicated == 0


def test_acks_of_unknown_writes_and_nodes_are_ignored() -> None:
    ledger = WriteLedger()
    write = ledger.issue(["b"], 2)
    ledger.acked(99, "b")
    ledger.acked(write, "z")
    ledger.failed(99, "b")
    assert ledger.pending() == 1


EVENT = st.one_of(
    st.tuples(st.just("issue"), st.sets(st.sampled_from("bcd"), min_size=1), st.integers(1, 4)),
    st.tuples(st.just("ack"), st.integers(1, 30), st.sampled_from("bcd")),
    st.tuples(st.just("fail"), st.integers(1, 30), st.sampled_from("bcd")),
    st.tuples(st.just("advance"), st.sets(st.sampled_from("bcd")), st.booleans()),
)


@given(st.lists(EVENT, max_size=60))
def test_properties(events: list[tuple[object, ...]]) -> None:
    """A strict advance never passes a write whose reachable targets have not all answered; `passed` never goes
    back; a write acknowledged by all its targets is forgotten; the under-replicated count is the passed writes
    still missing a copy; `on_edge` is called exactly where that count leaves zero or comes back to it, and
    `take_peak` answers the highest count since the last call."""
    ledger = WriteLedger()
    edges: list[int] = []
    ledger.on_edge = lambda: edges.append(ledger.under_replicated)
    counts = [0]  # the under-replicated count after each event
    highest = 0  # since the last take_peak
    model: dict[int, tuple[set[str], set[str], int]] = {}  # write -> targets, acked, quorum
    for event in events:
        if event[0] == "issue":
            targets, quorum = event[1], event[2]
            assert isinstance(targets, set) and isinstance(quorum, int)
            model[ledger.issue(sorted(targets), quorum)] = (set(targets), set(), quorum)
        elif event[0] in ("ack", "fail"):
            write, node = event[1], event[2]
            assert isinstance(write, int) and isinstance(node, str)
            if write in model and node in model[write][0]:
                if event[0] == "ack":
                    ledger.acked(write, node)
                    model[write][1].add(node)
                else:
                    ledger.failed(write, node)
                    model[write][0].discard(node)
                    model[write][1].discard(node)
        else:
            reachable, strict = event[1], event[2]
            assert isinstance(reachable, set) and isinstance(strict, bool)
            before = ledger.passed
            passed = ledger.advance(reachable.__contains__, strict)
            assert passed >= before
            for write in range(before + 1, passed + 1):
                targets, acked, quorum = model[write]
                if acked < targets:
                    assert not (targets - acked) & reachable
                    if strict:
                        assert 1 + len(acked) >= min(quorum, 1 + len(targets))
        incomplete = {w for w, (t, a, _q) in model.items() if not a >= t}
        assert ledger.pending() == len(incomplete)
        assert ledger.under_replicated == len({w for w in incomplete if w <= ledger.passed})
        counts.append(ledger.under_replicated)
        highest = max(highest, ledger.under_replicated)
        if len(counts) % 7 == 0:
            assert ledger.take_peak() == highest
            highest = ledger.under_replicated
    crossings = [now for before, now in itertools.pairwise(counts) if (before == 0) != (now == 0)]
    assert edges == crossings
