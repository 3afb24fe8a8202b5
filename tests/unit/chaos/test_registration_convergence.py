from __future__ import annotations

from chaos.checkers.convergence import check_convergence
from chaos.checkers.registration import check_registration
from tests.unit.chaos.histories import MS, H


def _session(h: H, process: str, client: str, node: str, start: int, end: int, how: str = "disconnect") -> H:
    h.op(process, "connect", {"client": client}, node, start, start + 1)
    if how == "disconnect":
        h.op(process, "disconnect", {"client": client}, node, end, end + 1)
    else:
        h.op(process, how, {"client": client}, node, end, None)
    return h


def test_sessions_one_after_the_other_have_no_duplicate_moment() -> None:
    h = _session(H(), "a", "c", "n1", 0, 100)
    _session(h, "b", "c", "n2", 200, 300)
    check = check_registration(h.ops())
    assert check.figures["duplicate_moments"] == 0 and check.safe is True


def test_overlapping_sessions_of_one_client_id_are_counted() -> None:
    h = _session(H(), "a", "c", "n1", 0, 150, "server-disconnect")
    _session(h, "b", "c", "n2", 100, 300)
    _session(h, "x", "other", "n2", 120, 130)
    check = check_registration(h.ops())
    assert check.figures["duplicate_moments"] == 1
    assert check.figures["overlap_ms"]["max"] == 49.0


def test_duplicate_resolved_after_heal_and_unresolved_one() -> None:
    h = _session(H(), "a", "c", "n1", 0, 5_000, "server-disconnect")
    _session(h, "b", "c", "n2", 1_000, 6_000)
    check = check_registration(h.ops(), heals=[3_000 * MS])
    assert check.figures["resolved_after_heal_s"]["max"] == 2.0
    assert check.safe is True
    check = check_registration(h.ops(), heals=[3_000 * MS], bound_s=1.0)
    assert (check.safe, check.figures["unresolved"]) == (False, 1)


def test_identical_dumps_converged() -> None:
    rows = [{"Prefix": "retain", "Key": ["", "t"], "Values": [1], "Context": {"a": 1}}]
    check = check_convergence({"n1": rows, "n2": list(rows)}, ["n1", "n2"])
    assert check.safe is True and check.figures["keys"] == 1


def test_a_differing_or_missing_key_or_node_fails() -> None:
    a = {"Prefix": "retain", "Key": ["", "t"], "Values": [1], "Context": {"a": 1}}
    b = {**a, "Values": [2]}
    assert check_convergence({"n1": [a], "n2": [b]}, ["n1", "n2"]).figures["divergent_keys"] == 1
    assert check_convergence({"n1": [a], "n2": []}, ["n1", "n2"]).safe is False
    assert check_convergence({"n1": [a]}, ["n1", "n2"]).safe is False
