"""The exhaustive small-scope model check (tests/sim/modelcheck.py) inside `make test`: the crash scope is
explored completely with today's rules and finds nothing; with the rules before issue 19's fixes it finds the
lost gap dots. The long run (both scopes, larger caps) is `.venv/bin/python -m tests.sim.modelcheck`
(docs/replication.md, "Model check")."""

from __future__ import annotations

import dataclasses

from tests.sim.legacy import LegacyReplica
from tests.sim.modelcheck import GAPS_THEN_CRASH, check, report


def test_the_crash_scope_is_explored_completely_and_holds() -> None:
    result = check(GAPS_THEN_CRASH, max_states=400_000)
    print(report(result))
    assert result.violation is None, report(result)
    assert not result.capped and result.quiescent > 0


def test_with_the_old_rules_the_crash_scope_loses_announced_gap_dots() -> None:
    old = dataclasses.replace(GAPS_THEN_CRASH, replica=LegacyReplica, name="gaps-then-crash (old rules)")
    result = check(old, max_states=400_000)
    print(report(result))
    assert result.violation is not None and "without dots it had announced" in result.violation
    assert result.path[-1] == "crash x" and any("SyncReply a->x" in step for step in result.path)
