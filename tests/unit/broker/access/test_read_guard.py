"""vmqpy.broker.access.read_guard: deliveries judged against the deny lines of the ACL in force, the decisions
remembered per client (for the user name it connected with) and topic, bounded, and forgotten when the ACL
changes."""

from __future__ import annotations

from vmqpy.broker.access.acl import parse_acl
from vmqpy.broker.access.control import AccessControl
from vmqpy.broker.access.read_guard import DECISIONS, TOPICS_PER_CLIENT, WITHHELD, ReadGuard


def guard_with(text: str | None, usernames: dict[str, str | None]) -> tuple[ReadGuard, AccessControl]:
    access = AccessControl(True)
    if text is not None:
        access.acl = parse_acl(text, "g.acl")
        access.generation += 1
    return ReadGuard(access, usernames, access.metrics), access


def test_armed_only_with_deny_lines() -> None:
    assert not guard_with(None, {})[0].armed()
    assert not guard_with("topic #\n", {})[0].armed()
    assert guard_with("topic #\ntopic deny a\n", {})[0].armed()


def test_the_counter_exists_from_the_start_and_counts_withheld_deliveries() -> None:
    guard, access = guard_with("topic #\ntopic deny s/#\n", {})
    assert WITHHELD in access.metrics and access.metrics[WITHHELD] == 0
    assert [guard.withholds("c", t) for t in ("s/1", "p/1", "s/1")] == [True, False, True]
    assert access.metrics[WITHHELD] == 2


def test_decisions_follow_the_user_name_and_the_acl() -> None:
    usernames: dict[str, str | None] = {"c": "alice"}
    guard, access = guard_with("topic #\nuser alice\ntopic deny a\n", usernames)
    assert guard.withholds("c", "a")
    usernames["c"] = "bob"  # the client id connected again under another name
    assert not guard.withholds("c", "a")
    access.acl = parse_acl("topic #\ntopic deny b\n", "2.acl")
    access.generation += 1
    assert not guard.withholds("c", "a") and guard.withholds("c", "b")


def test_the_cache_is_bounded_per_client_and_in_all() -> None:
    guard, _access = guard_with("topic #\ntopic deny s/#\n", {})
    for i in range(TOPICS_PER_CLIENT * 3):
        assert guard.withholds("c", f"s/{i}")
    assert guard._kept <= TOPICS_PER_CLIENT
    clients = DECISIONS // 10 + 10
    for i in range(clients):
        for j in range(10):
            assert not guard.withholds(f"c{i}", f"p/{j}")
    assert guard._kept <= DECISIONS
    assert sum(len(d) for _u, d in guard._clients.values()) == guard._kept
