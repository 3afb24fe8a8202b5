"""The exhaustive small-scope model check (tests/sim/modelcheck.py) inside `make test`: two scopes explored
completely with today's rules, where nothing is found, and with the rules before issue 19's fixes
(tests/sim/legacy.py), where each finds its history: the short crash scope the lost gap dots (history 2), the
uneven-join scope a deleted key alive on the joiner for ever (history 1).

`MODELCHECK_FULL=1` adds the whole crash scope (the short one plus an exchange the environment may start) and the
wider scopes (several minutes); `.venv/bin/python -m tests.sim.modelcheck [--legacy]` runs every scope from the
command line (docs/replication.md, section 10)."""

from __future__ import annotations

import os

import pytest

from tests.sim.modelcheck import (
    DELETED_VALUE_BACK,
    GAPS_THEN_CRASH,
    GAPS_THEN_CRASH_SHORT,
    GAPS_THEN_CRASH_WIDE,
    SLICED_CATCH_UP,
    UNEVEN_JOIN,
    UNEVEN_JOIN_WIDE,
    Scope,
    check,
    report,
    with_old_rules,
)

# Each scope's work is fixed (its states are counted, never timed), its time is the machine's load: on a loaded
# machine the sliced catch-up scope ran past pytest-timeout's 300 s. The timeout here only guards against a hang.
pytestmark = pytest.mark.timeout(1200)

FULL = pytest.mark.skipif(not os.environ.get("MODELCHECK_FULL"), reason="the long run: MODELCHECK_FULL=1")


def _holds(scope: Scope, max_states: int) -> None:
    result = check(scope, max_states=max_states)
    print(report(result))
    assert result.violation is None, report(result)
    assert not result.capped and result.quiescent > 0, report(result)


def _keeps_a_deleted_key_on_the_joiner(scope: Scope, max_states: int) -> list[str]:
    """History 1 found with the old rules: the joiner x keeps the deleted k for ever; the path to it."""
    result = check(with_old_rules(scope), max_states=max_states)
    print(report(result))
    assert result.violation is not None, report(result)
    assert result.violation.startswith(f"{DELETED_VALUE_BACK}: x ('k',)"), report(result)
    assert not result.capped, report(result)
    return result.path


def _loses_announced_gap_dots(scope: Scope) -> None:
    """History 2 found with the old rules: x crashes after the SyncReply that brought a's gap dots."""
    result = check(with_old_rules(scope), max_states=400_000)
    print(report(result))
    assert result.violation is not None and "without dots it had announced" in result.violation
    assert result.path[-1] == "crash x" and any("SyncReply a->x" in step for step in result.path)


def test_the_short_crash_scope_is_explored_completely_and_holds() -> None:
    _holds(GAPS_THEN_CRASH_SHORT, 400_000)


def test_with_the_old_rules_the_short_crash_scope_loses_announced_gap_dots() -> None:
    _loses_announced_gap_dots(GAPS_THEN_CRASH_SHORT)


@FULL
def test_the_crash_scope_is_explored_completely_and_holds() -> None:
    _holds(GAPS_THEN_CRASH, 400_000)


@FULL
def test_with_the_old_rules_the_crash_scope_loses_announced_gap_dots() -> None:
    _loses_announced_gap_dots(GAPS_THEN_CRASH)


def test_the_sliced_catch_up_scope_is_explored_completely_and_holds() -> None:
    """A reply applied an object per call, with a drop, a crash, a flush and a timeout between the objects."""
    _holds(SLICED_CATCH_UP, 100_000)


def test_the_uneven_join_scope_is_explored_completely_and_holds() -> None:
    _holds(UNEVEN_JOIN, 100_000)


def test_with_the_old_rules_the_uneven_join_keeps_a_deleted_key_alive_on_the_joiner() -> None:
    path = _keeps_a_deleted_key_on_the_joiner(UNEVEN_JOIN, 100_000)
    # x pulls from b once b knows it, and b's reply (the delete's dot as a gap) reaches it
    assert path.index("membership ['a', 'b', 'x'] reaches ['b']") < path.index("deliver SyncReply b->x")


@FULL
@pytest.mark.parametrize("scope", [GAPS_THEN_CRASH_WIDE, UNEVEN_JOIN_WIDE], ids=lambda s: s.name)
def test_the_wide_scopes_are_explored_completely_and_hold(scope: Scope) -> None:
    _holds(scope, 5_000_000)


@FULL
def test_with_the_old_rules_the_wide_uneven_join_keeps_a_deleted_key_alive_on_the_joiner() -> None:
    _keeps_a_deleted_key_on_the_joiner(UNEVEN_JOIN_WIDE, 5_000_000)
