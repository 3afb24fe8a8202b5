"""The exchange scheduler: who is pulled from when, at most `max_running` at a time and one per peer."""

from __future__ import annotations

import random

from vmqpy.metadata.scheduler import ExchangeScheduler


def scheduler(max_running: int = 2, seed: int = 1) -> ExchangeScheduler:
    return ExchangeScheduler(interval=1.0, timeout=5.0, max_running=max_running, rng=random.Random(seed))


def test_queued_exchanges_start_up_to_the_limit_one_per_peer_and_only_with_pullable_peers() -> None:
    s = scheduler(max_running=2)
    s.queue = ["b", "gone", "c", "d"]
    started = s.start_queued(10.0, lambda peer: peer != "gone")
    assert [(ex.peer, ex.xid, ex.started, ex.timeout) for ex in started] == [("b", 1, 10.0, 5.0), ("c", 2, 10.0, 5.0)]
    assert s.queue == ["d"], "'gone' left the queue; 'd' waits for a free slot"
    s.urge("b")  # already pulling from b: it waits for that exchange to end, d may not pass it
    assert s.start_queued(11.0, lambda peer: True) == [] and s.queue == ["b", "d"]
    assert s.end(started[0]) and not s.end(started[0]), "an exchange ends once"
    assert [ex.peer for ex in s.start_queued(12.0, lambda peer: True)] == ["b"]
    assert s.queue == ["d"] and s.busy()


def test_the_periodic_tick_arms_then_queues_one_idle_member_or_everyone_to_catch_up_with() -> None:
    s = scheduler()
    s.tick(0.0, ["b", "c"], catch_up=set())
    assert s.next_sync is not None and 0.75 <= s.next_sync <= 1.25 and s.queue == []
    s.round = {"b"}
    s.tick(s.next_sync, ["b", "c"], catch_up=set())
    assert len(s.queue) == 1 and s.queue[0] in ("b", "c") and s.round == set(), "a new round"
    s.queue = []
    s.tick(s.next_sync, ["b", "c", "d"], catch_up={"d", "b"})
    assert s.queue == ["b", "d"], "a restarted node asks every member it still has to, in member order"
    s.tick(100.0, [], catch_up=set())
    assert s.next_sync is None, "nobody reachable: no periodic exchange"


def test_an_exchange_that_found_something_queues_the_members_not_pulled_from_in_this_round() -> None:
    s = scheduler(max_running=1)
    s.round = {"c"}
    s.queue = ["d"]
    (running,) = s.start_queued(0.0, lambda peer: True)
    s.pulled("b", ["b", "c", "d", "e"], found_something=True)
    assert running.peer == "d" and s.queue == ["e"] and s.round == {"b", "c"}
    s.pulled("e", ["b", "c", "d", "e"], found_something=False)
    assert s.queue == ["e"] and "e" in s.round


def test_stuck_exchanges_and_deadlines() -> None:
    s = scheduler(max_running=2)
    s.queue = ["b", "c"]
    b, c = s.start_queued(0.0, lambda peer: True)
    b.sent(100, 0.0)
    c.sent(100, 3.0)
    s.next_sync = 7.0
    assert sorted(s.deadlines(1.0, can_sync=True)) == [5.0, 7.0, 8.0]
    s.abort_unreachable({"b"})
    assert c.abort == "peer_unreachable" and b.abort is None
    assert s.deadlines(1.0, can_sync=False) == [5.0, 1.0]
    assert [(ex.peer, why) for ex, why in s.stuck(6.0)] == [("b", "timeout"), ("c", "peer_unreachable")]
    s.keep_members({"a", "c"})
    s.enqueue_new(["b"], ["b", "c", "d"])
    assert s.queue == ["c", "d"]
