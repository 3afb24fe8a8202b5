"""Confirmations (vmqpy.metadata.confirmations): table tests and a hypothesis property.

The rule: a sealed confirmation is done exactly when each of its pushes was acknowledged, or its peer was let
go (no longer reachable), or its deadline passed; its callbacks run once, when that happens; it never fails;
nothing stays indexed once it is done.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy.metadata.confirmations import Confirmation, Confirmations


def opened(confirms: Confirmations, pushes: list[tuple[str, int]], deadline: float = 10.0) -> tuple[Confirmation,
                                                                                                      list[str]]:
    confirm = confirms.open(deadline)
    for peer, counter in pushes:
        confirms.expect(confirm, peer, counter)
    calls: list[str] = []
    confirm.add_done_callback(lambda: calls.append("done"))
    return confirm, calls


def test_a_confirmation_without_pushes_is_done_when_sealed() -> None:
    confirms = Confirmations()
    confirm, calls = opened(confirms, [])
    assert not confirm.done() and calls == []  # writes may still come until it is sealed
    assert confirms.seal(confirm)
    assert confirm.done() and calls == ["done"] and confirm.error is None


def test_done_once_every_peer_acknowledged_its_pushes() -> None:
    confirms = Confirmations()
    confirm, calls = opened(confirms, [("b", 7), ("c", 7), ("b", 8)])
    assert not confirms.seal(confirm)
    confirms.acked("b", [7, 8])
    assert not confirm.done() and calls == []
    confirms.acked("c", [6])  # not one of its pushes
    assert not confirm.done()
    confirms.acked("c", [7])
    assert confirm.done() and calls == ["done"] and not confirm.late
    assert len(confirms) == 0
    confirms.acked("c", [7])  # again: nothing happens
    assert calls == ["done"]


def test_acknowledgements_before_the_seal_count() -> None:
    confirms = Confirmations()
    confirm, calls = opened(confirms, [("b", 1)])
    confirms.acked("b", [1])
    assert not confirm.done()  # more writes may come
    assert confirms.seal(confirm) and calls == ["done"]


def test_an_unreachable_peer_holds_nothing_back() -> None:
    confirms = Confirmations()
    confirm, calls = opened(confirms, [("b", 1), ("c", 1)])
    confirms.seal(confirm)
    confirms.acked("b", [1])
    confirms.keep_peers(["b"])  # c is no longer reachable
    assert confirm.done() and calls == ["done"] and not confirm.late
    assert len(confirms) == 0


def test_the_deadline_gives_up_and_counts_it_late() -> None:
    confirms = Confirmations()
    first, first_calls = opened(confirms, [("b", 1)], deadline=5.0)
    second, second_calls = opened(confirms, [("b", 2)], deadline=6.0)
    confirms.seal(first)
    confirms.seal(second)
    assert confirms.next_deadline() == 5.0
    assert confirms.expire(4.9) == []
    assert confirms.expire(5.0) == [first]
    assert first.done() and first.late and first_calls == ["done"] and first.unanswered == {"b"}
    assert not second.done() and confirms.next_deadline() == 6.0
    confirms.acked("b", [2])
    assert second.done() and not second.late and second_calls == ["done"]
    assert confirms.next_deadline() is None and confirms.late == 1 and len(confirms) == 0


def test_one_never_sealed_is_let_go_at_its_deadline() -> None:
    """Its client went away between the slices of a long SUBSCRIBE: nothing stays indexed, later pushes are not
    waited for, and a seal after all finds it done."""
    confirms = Confirmations()
    confirm, calls = opened(confirms, [("b", 1)], deadline=5.0)
    assert confirms.expire(5.0) == [confirm]
    assert len(confirms) == 0 and calls == []
    confirms.expect(confirm, "b", 2)
    assert len(confirms) == 0
    assert confirms.seal(confirm) and calls == ["done"] and confirm.late


def test_a_sealed_confirmation_takes_no_more_pushes() -> None:
    confirms = Confirmations()
    confirm, _ = opened(confirms, [])
    confirms.seal(confirm)
    try:
        confirms.expect(confirm, "b", 1)
    except ValueError:
        return
    raise AssertionError("a push was added to a sealed confirmation")


EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("ack"), st.sampled_from("bcd"), st.integers(1, 6)),
        st.tuples(st.just("keep"), st.sets(st.sampled_from("bcd")), st.just(0)),
        st.tuples(st.just("time"), st.just(""), st.integers(0, 12)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(pushes=st.lists(st.tuples(st.sampled_from("bcd"), st.integers(1, 6)), unique=True, max_size=8),
       events=EVENTS, deadline=st.integers(1, 10))
def test_done_exactly_when_every_push_is_answered_let_go_or_out_of_time(
    pushes: list[tuple[str, int]], events: list[tuple[str, object, int]], deadline: int
) -> None:
    confirms = Confirmations()
    confirm, calls = opened(confirms, pushes, float(deadline))
    confirms.seal(confirm)
    left = set(pushes)
    reachable = set("bcd")
    now = 0
    for kind, arg, value in events:
        if kind == "ack":
            assert isinstance(arg, str)
            confirms.acked(arg, [value])
            left.discard((arg, value))
        elif kind == "keep":
            assert isinstance(arg, set)
            reachable &= arg
            confirms.keep_peers(reachable)
            left = {(peer, counter) for peer, counter in left if peer in reachable}
        else:
            now = max(now, value)
            confirms.expire(float(now))
        expected = not left or now >= deadline
        assert confirm.done() == expected, (left, now, deadline)
        assert calls == (["done"] if expected else [])
        assert confirm.error is None
        if expected:
            assert len(confirms) == 0
