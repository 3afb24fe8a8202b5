"""The cluster view from reachability reports: groups, readiness, majority."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vmqpy.cluster.view import compute

A, B, C, D, E = "a@h", "b@h", "c@h", "d@h", "e@h"


def full(*nodes: str) -> dict[str, set[str]]:
    return {n: set(nodes) - {n} for n in nodes}


def test_everyone_reaches_everyone() -> None:
    view = compute(A, [A, B, C], full(A, B, C))
    assert view.ready and view.in_majority and not view.partitioned
    assert view.groups == ((A, B, C),)


def test_one_node_cut_off() -> None:
    reports = {A: {B}, B: {A}, C: set()}
    a, c = compute(A, [A, B, C], reports), compute(C, [A, B, C], reports)
    assert a.groups == ((A, B), (C,))
    assert not a.ready and a.in_majority
    assert not c.ready and not c.in_majority and c.own_group == (C,)


def test_two_two_split_has_no_majority() -> None:
    reports = {A: {B}, B: {A}, C: {D}, D: {C}}
    view = compute(A, [A, B, C, D], reports)
    assert view.groups == ((A, B), (C, D))
    assert not view.in_majority


def test_bridge_node_joins_both_halves_into_one_group_but_only_one_half_is_the_majority() -> None:
    reports = {A: {B, E}, B: {A, E}, C: {D, E}, D: {C, E}, E: {A, B, C, D}}
    views = {n: compute(n, [A, B, C, D, E], reports) for n in (A, B, C, D, E)}
    assert views[A].groups == ((A, B, C, D, E),)
    assert not views[A].ready  # a cannot reach c and d itself
    # {a, b, e} and {c, d, e} are both cliques of a strict majority: every node picks the same one
    assert {n: v.majority for n, v in views.items()} == dict.fromkeys(views, (A, B, E))
    assert [n for n, v in views.items() if v.in_majority] == [A, B, E]


def test_three_node_bridge_lets_one_side_serve() -> None:
    """docs/chaos.md finding 7: a and b cut apart, c reaching both. Reports of a and b about each other are stale
    (from before the cut) on the nodes that no longer hear them directly; the outcome must not depend on that."""
    stale = {A: {B, C}, B: {A, C}}
    now = {A: {C}, B: {C}, C: {A, B}}
    a = compute(A, [A, B, C], {**stale, A: now[A], C: now[C]})
    b = compute(B, [A, B, C], {**stale, B: now[B], C: now[C]})
    c = compute(C, [A, B, C], now)
    assert a.majority == b.majority == c.majority == (A, C)
    assert a.in_majority and c.in_majority and not b.in_majority


def test_a_connected_majority_that_is_no_clique_does_not_serve() -> None:
    """A chain a-b-c of a 5-member cluster (d, e cut off): connected, but no three of them reach each other."""
    reports = {A: {B}, B: {A, C}, C: {B}, D: {E}, E: {D}}
    view = compute(B, [A, B, C, D, E], reports)
    assert view.groups[0] == (A, B, C)
    assert view.majority == () and not view.in_majority


def test_one_sided_link_is_not_trusted_between_others() -> None:
    reports = {A: set(), B: {C}, C: set()}
    view = compute(A, [A, B, C], reports)
    assert view.groups == ((A,), (B,), (C,))


def test_own_link_counts_before_peer_report_arrives() -> None:
    view = compute(A, [A, B], {A: {B}, B: set()})
    assert view.ready and view.groups == ((A, B),)


def test_reports_about_non_members_are_ignored() -> None:
    view = compute(A, [A, B], {A: {B, "x@h"}, B: {A}})
    assert view.members == (A, B) and view.reachable == frozenset({A, B})


def test_a_node_alone_is_one_group_and_its_own_majority_whatever_it_reports() -> None:
    cases: list[dict[str, set[str]]] = [{}, {A: set()}, {A: {A, B}}, {A: {B}, B: {A}}]
    for reports in cases:
        view = compute(A, [A], reports)
        assert (view.groups, view.majority, view.ready, view.in_majority) == (((A,),), (A,), True, True), reports
        assert view.members == (A,) and not view.partitioned


def test_a_node_alone_computes_its_view_without_importing_networkx() -> None:
    """The single-member view is built without a graph (vmqpy.cluster.view's docstring): a node's start does not
    pay for networkx's import until a second member appears."""
    probe = ("import sys; from vmqpy.cluster.view import compute; compute('a@h', ['a@h'], {}); "
             "print('networkx' in sys.modules); compute('a@h', ['a@h', 'b@h'], {'a@h': {'b@h'}, 'b@h': {'a@h'}}); "
             "print('networkx' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[3])
    assert done.stdout.split() == ["False", "True"], done.stderr
