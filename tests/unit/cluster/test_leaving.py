"""The leave of a node as a table (vmqpy.cluster.leaving): every transition, and an outcome for every path."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy.cluster.leaving import TRANSITIONS, Action, LeaveInput, LeaveState, step

S, In, A = LeaveState, LeaveInput, Action
FINAL = {S.SERVING, S.LEFT}


@pytest.mark.parametrize(("state", "given_input", "action", "after"), [
    (S.SERVING, In.ASKED, A.DRAIN, S.DRAINING),
    (S.DRAINING, In.SETTLED, A.REMOVE, S.REMOVING),
    (S.REMOVING, In.REMOVED, A.NONE, S.LEFT),
    (S.DRAINING, In.DEADLINE, A.SERVE_AGAIN, S.SERVING),  # the -t of the command ran out
    (S.DRAINING, In.ABORTED, A.SERVE_AGAIN, S.SERVING),  # leave_abort, or a join run on the node
    (S.REMOVING, In.REMOVAL_REFUSED, A.SERVE_AGAIN, S.SERVING),  # no other member reachable any more
    (S.SERVING, In.REMOVED, A.NONE, S.LEFT),  # a plain leave, without -k
    (S.DRAINING, In.REMOVED, A.NONE, S.LEFT),  # a commanding node of an earlier version removes it
    (S.LEFT, In.REJOINED, A.NONE, S.SERVING),
    # ignored: the state stays and nothing runs
    (S.DRAINING, In.ASKED, A.NONE, S.DRAINING),  # a second leave_drain
    (S.REMOVING, In.ABORTED, A.NONE, S.REMOVING),  # too late to give up: a join waits for the removal
    (S.REMOVING, In.DEADLINE, A.NONE, S.REMOVING),
    (S.SERVING, In.DEADLINE, A.NONE, S.SERVING),  # the deadline of a leave already given up
    (S.SERVING, In.ABORTED, A.NONE, S.SERVING),
    (S.LEFT, In.ASKED, A.NONE, S.LEFT),
    (S.LEFT, In.ABORTED, A.NONE, S.LEFT),
])
def test_transitions(state: LeaveState, given_input: LeaveInput, action: Action, after: LeaveState) -> None:
    assert step(state, given_input) == (action, after)


def test_every_state_between_serving_and_left_has_a_way_to_each_side() -> None:
    """A leave under way (DRAINING, REMOVING) can always end serving and can always end left: no state in
    which a node neither serves nor has left can be the last."""
    for state in set(LeaveState) - FINAL:
        outcomes = {TRANSITIONS[(state, i)][1] for i in LeaveInput if (state, i) in TRANSITIONS}
        assert S.SERVING in outcomes, state
        assert S.LEFT in outcomes or S.REMOVING in outcomes, state


@given(st.lists(st.sampled_from(list(LeaveInput)), max_size=30))
def test_the_listeners_are_closed_exactly_while_a_leave_is_under_way(inputs: list[LeaveInput]) -> None:
    """Run the actions on a model of the listeners: DRAIN closes them, SERVE_AGAIN opens them, and the
    removal (LEFT) opens them to refuse clients with the reason. Whatever the order of the inputs, the
    listeners are open in SERVING and LEFT and closed in DRAINING and REMOVING."""
    state, listening = S.SERVING, True
    for given_input in inputs:
        action, state = step(state, given_input)
        if action is A.DRAIN:
            listening = False
        elif action is A.SERVE_AGAIN or state is S.LEFT:
            listening = True
        assert listening == (state in FINAL), (inputs, state)
