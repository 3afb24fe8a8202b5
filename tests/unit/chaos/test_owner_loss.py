"""The owner-loss experiment's pure parts: which node is lost, and its schedule (chaos/owner_loss.py,
chaos/schedule.py, chaos/experiments.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.experiments import by_name
from chaos.owner_loss import choose_victim, persistent_per_node
from chaos.schedule import plan

N1, N2, N3 = "n1@127.0.0.41", "n2@127.0.0.42", "n3@127.0.0.43"
MEMBERS = [N1, N2, N3]


def row(node: str, clean: bool | str = False, queued: Any = 0, client: str = "c") -> dict[str, Any]:
    return {"client_id": client, "node": node, "clean_session": clean, "queued": queued}


@pytest.mark.parametrize(("rows", "victim"), [
    ([], N1),  # nothing persistent anywhere: the first member
    ([row(N2)], N2),
    ([row(N1), row(N2), row(N2)], N2),  # the most persistent sessions
    ([row(N3, clean=True), row(N3, clean=True), row(N2)], N2),  # clean sessions do not count
    ([row(N1, queued=3), row(N3, queued=9)], N3),  # a tie: the most queued messages
    ([row(N3, queued=4), row(N2, queued=4)], N2),  # then the first name
    ([row("n9@elsewhere"), row("n9@elsewhere"), row(N3)], N3),  # only members can be chosen
    ([row(N2, clean="true"), row(N3, queued="many")], N3),  # text cells as the CLI may print them
    ([{"client_id": "x", "clean_session": False}, row(N2)], N2),  # a row without a node is skipped
])
def test_the_victim_holds_the_most_persistent_sessions(rows: list[dict[str, Any]], victim: str) -> None:
    assert choose_victim(rows, MEMBERS) == victim


def test_counts_per_node() -> None:
    rows = [row(N1, queued=2), row(N1, queued=5), row(N2, clean=True, queued=7), row(N3, queued=None)]
    assert persistent_per_node(rows) == {N1: (2, 7), N3: (1, 0)}


def test_no_member_is_an_error() -> None:
    with pytest.raises(ValueError, match="no member"):
        choose_victim([row(N1)], [])


@given(st.lists(st.tuples(st.sampled_from(MEMBERS), st.booleans(), st.integers(0, 50)), max_size=40))
def test_no_member_holds_more_persistent_sessions_than_the_victim(cells: list[tuple[str, bool, int]]) -> None:
    rows = [row(node, clean, queued) for node, clean, queued in cells]
    victim = choose_victim(rows, MEMBERS)
    counts = persistent_per_node(rows)
    best = counts.get(victim, (0, 0))
    assert victim in MEMBERS
    assert all(counts.get(m, (0, 0)) <= best for m in MEMBERS)


@pytest.mark.parametrize("name", ["owner-loss", "owner-loss-r1"])
@pytest.mark.parametrize("duration", [None, 20.0, 30.0])
def test_one_loss_then_its_replacement_inside_the_run(name: str, duration: float | None) -> None:
    experiment = by_name(name)
    total = experiment.duration if duration is None else duration
    steps = plan(experiment, 3, 1, duration)
    assert [s.action for s in steps] == ["lose", "replace"]
    lose, replace = steps
    assert lose.node is None and replace.node is None  # the victim is chosen when the step runs
    assert 0 < lose.at < replace.at <= total - 1.0
    assert replace.at - lose.at == experiment.fault_s
    assert "most persistent sessions" in lose.describe(MEMBERS)
    assert "leave -k" in replace.describe(MEMBERS) and "after the workload" in replace.describe(MEMBERS)


def test_the_loss_comes_after_messages_were_queued_and_r1_only_differs_in_replicas() -> None:
    r2, r1 = by_name("owner-loss"), by_name("owner-loss-r1")
    assert plan(r2, 3, 1)[0].at == 12.0
    assert dict(r2.settings) == {"queue.failover_timeout": "5s"}
    assert dict(r1.settings) == {"queue.failover_timeout": "5s", "queue.replicas": "1"}
    assert r1.workloads == r2.workloads == ("queues-roaming",)
