"""The leave of this node (`vmq-admin cluster leave node=N -k`, seen from N), as a table of transitions.

Every path of a leave ends in one of two documented states (docs/cluster.md, "A leave that cannot finish"):
a full member that serves its listeners (SERVING), or a node that left and refuses every client with the
reason (LEFT). In between, the node drains (DRAINING: its listeners are closed and it hands its persistent
sessions over) and then removes itself (REMOVING: its departure spreads to the other members)::

              asked                       settled                      removed
    SERVING ---------> DRAINING ---------------------> REMOVING ---------------> LEFT
       ^                  |   (nothing left here)         |                       |
       |   deadline,      |                               |  removal refused      |
       +---- aborted -----+                               |  (no other member     |
       +--------------------------------------------------+   reachable)          |
       +------------------------------------------ rejoined ----------------------+

`aborted` is the commanding node giving up (`leave_abort`) or a `cluster join` run on N while it drains: a join
ends with a node that serves. A join while N removes itself waits for the removal, then joins as a new
incarnation. `removed` also comes without a drain: a plain `cluster leave` (no -k) removes a serving node.
Anything not in the table is ignored (a late deadline of a drain already over, a second `asked`): the state
stays, and no action runs. The driver (vmqpy.cluster.departure) runs the actions.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["TRANSITIONS", "Action", "LeaveInput", "LeaveState", "step"]


class LeaveState(enum.Enum):
    SERVING = "serving"
    DRAINING = "draining"
    REMOVING = "removing"
    LEFT = "left"


class LeaveInput(enum.Enum):
    ASKED = "asked"  # leave_drain from the commanding node, or the command run on this node
    SETTLED = "settled"  # every persistent session was handed over: nothing is left here
    DEADLINE = "deadline"  # the command's -t ran out before the drain settled
    ABORTED = "aborted"  # leave_abort, or a join run here
    REMOVAL_REFUSED = "removal refused"  # no other member is reachable to keep the removal
    REMOVED = "removed"  # the membership no longer holds this node
    REJOINED = "rejoined"  # a join made a new incarnation of this node


class Action(enum.Enum):
    NONE = "none"
    DRAIN = "drain"  # close the listeners, move the clients away, hand the persistent sessions over
    REMOVE = "remove"  # delete this node's membership record, wait until another member holds it
    SERVE_AGAIN = "serve again"  # open the listeners again: a full member that serves


S, In, A = LeaveState, LeaveInput, Action

TRANSITIONS: Final[dict[tuple[LeaveState, LeaveInput], tuple[Action, LeaveState]]] = {
    (S.SERVING, In.ASKED): (A.DRAIN, S.DRAINING),
    (S.SERVING, In.REMOVED): (A.NONE, S.LEFT),
    (S.DRAINING, In.SETTLED): (A.REMOVE, S.REMOVING),
    (S.DRAINING, In.DEADLINE): (A.SERVE_AGAIN, S.SERVING),
    (S.DRAINING, In.ABORTED): (A.SERVE_AGAIN, S.SERVING),
    (S.DRAINING, In.REMOVED): (A.NONE, S.LEFT),  # a commanding node of an earlier version removes a drained node
    (S.REMOVING, In.REMOVAL_REFUSED): (A.SERVE_AGAIN, S.SERVING),
    (S.REMOVING, In.REMOVED): (A.NONE, S.LEFT),
    (S.LEFT, In.REJOINED): (A.NONE, S.SERVING),
}


def step(state: LeaveState, given: LeaveInput) -> tuple[Action, LeaveState]:
    """What `given` does in `state`: the action to run and the next state (no action, same state: ignored)."""
    return TRANSITIONS.get((state, given), (Action.NONE, state))
