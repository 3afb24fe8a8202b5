"""The budgets of logins (vmqpy.broker.access.login_throttle, vmqpy.broker.access.login_pool): the per-address
failed-login throttle
as tables of (failures, times) -> blocked, a model-based property for the table's bound and decisions, the
admission of password checks, and the real thread pool refusing a check beyond its places."""

from __future__ import annotations

import asyncio
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy.broker.access.login_pool import LoginPool
from vmqpy.broker.access.login_throttle import Admission, LoginThrottle

A, B = "198.51.100.1", "198.51.100.2"


@pytest.mark.parametrize(("failures_at", "asked_at", "blocked"), [
    ([], 0.0, False),  # never failed
    ([0, 1, 2], 3.0, True),  # the limit (3) within the window: blocked
    ([0, 1], 3.0, False),  # under the limit
    ([0, 1, 2], 11.9, True),  # the block lasts 10 s from the limit-th failure (at 2)
    ([0, 1, 2], 12.0, False),  # ... and no longer
    ([0, 1, 100], 101.0, False),  # the first two fell out of the 60 s window: the count started again
    ([0, 30, 59.9], 60.0, True),  # all three within 60 s of the first
    ([0, 1, 2, 20, 21], 22.0, True),  # after the block, the window (60 s) still holds 5 failures: blocked at once
])
def test_an_address_is_blocked_after_the_limit_within_the_window(failures_at: list[float], asked_at: float,
                                                                 blocked: bool) -> None:
    throttle = LoginThrottle(limit=3, window=60.0, block=10.0)
    for at in failures_at:
        throttle.failed(A, at)
    assert throttle.blocked(A, asked_at) is blocked
    assert not throttle.blocked(B, asked_at)  # another address is not touched


def test_limit_zero_never_blocks_but_counts() -> None:
    throttle = LoginThrottle(limit=0)
    assert [throttle.failed(A, 0.0) for _ in range(50)][-1] == 50
    assert not throttle.blocked(A, 0.0)


def test_the_table_forgets_the_least_recently_touched_address_first() -> None:
    throttle = LoginThrottle(limit=2, block=100.0, capacity=2)
    throttle.failed(A, 0.0)
    throttle.failed(A, 0.0)  # A blocked
    throttle.failed(B, 1.0)
    assert throttle.blocked(A, 2.0)  # touched again: B is now the oldest
    throttle.failed("198.51.100.3", 3.0)
    assert (len(throttle), throttle.count(B), throttle.count(A)) == (2, 0, 2)
    assert throttle.blocked(A, 4.0)


@pytest.mark.parametrize("bad", [dict(limit=-1), dict(window=0.0), dict(block=-1.0), dict(capacity=0)])
def test_bad_throttle_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LoginThrottle(**bad)  # type: ignore[arg-type]


events = st.lists(st.tuples(st.sampled_from(["fail", "ask"]), st.integers(0, 7), st.floats(0.0, 30.0)),
                  max_size=80)


@settings(max_examples=200, deadline=None)
@given(events, st.integers(1, 5), st.integers(1, 4))
def test_the_throttle_agrees_with_a_plain_model(steps: list[tuple[str, int, float]], limit: int,
                                                capacity: int) -> None:
    """Against a model that keeps every address's failure times (no bound): while the table holds an address, its
    decision is the model's; it never holds more than `capacity` addresses."""
    window, block = 20.0, 15.0
    throttle = LoginThrottle(limit=limit, window=window, block=block, capacity=capacity)
    model: dict[str, tuple[int, float, float]] = {}  # address -> (count, since, blocked until)
    forgotten: set[str] = set()
    now = 0.0
    for kind, index, gap in steps:
        now += gap
        address = f"10.0.0.{index}"
        if kind == "fail":
            count, since, until = model.get(address, (0, now, 0.0))
            if now - since >= window:
                count, since = 0, now
            count += 1
            if count >= limit:
                until = max(until, now + block)
            model[address] = (count, since, until)
            forgotten.discard(address)
            assert throttle.failed(address, now) == count
        else:
            expected = address in model and address not in forgotten and model[address][2] > now
            assert throttle.blocked(address, now) is expected
        assert len(throttle) <= capacity
        forgotten |= {a for a in model if throttle.count(a) == 0}
        for gone in forgotten:
            model.pop(gone, None)


@given(st.lists(st.booleans(), max_size=60), st.integers(1, 6))
def test_admission_never_takes_more_than_its_capacity(ops: list[bool], capacity: int) -> None:
    admission = Admission(capacity)
    pending = 0
    for enter in ops:
        if enter:
            taken = admission.enter()
            assert taken is (pending < capacity)
            pending += taken
        elif pending:
            admission.leave()
            pending -= 1
        assert admission.pending == pending <= capacity


def test_leave_without_enter_is_a_usage_error() -> None:
    with pytest.raises(RuntimeError):
        Admission(1).leave()


class Held:
    """A check that waits until the test lets it go (the place it holds in the pool is what is tested)."""

    def __init__(self, verdict: bool) -> None:
        self.go = threading.Event()
        self.verdict = verdict

    def run(self) -> bool:
        assert self.go.wait(10)
        return self.verdict


def test_the_pool_refuses_a_check_beyond_its_workers_and_queue() -> None:
    async def scenario() -> list[bool]:
        loop = asyncio.get_running_loop()
        pool = LoginPool(workers=1, queue=1)
        answers: list[bool] = []
        done = asyncio.Event()

        def answer(accepted: bool) -> None:
            answers.append(accepted)
            if len(answers) >= 2:
                done.set()

        held = [Held(True), Held(False)]
        try:
            assert [pool.submit(check, loop, answer) for check in held] == [True, True]
            assert not pool.submit(Held(True), loop, answer)  # full: refused, never answered
            assert pool.pending == 2
            for check in held:
                check.go.set()
            await asyncio.wait_for(done.wait(), 10)
            assert pool.pending == 0
            again = Held(True)
            again.go.set()
            done.clear()
            assert pool.submit(again, loop, answer) is True  # places are free again
            await asyncio.wait_for(done.wait(), 10)
        finally:
            for check in held:
                check.go.set()
            pool.close()
        assert not pool.submit(Held(True), loop, answer)  # closed
        return answers

    assert sorted(asyncio.run(scenario())) == [False, True, True]
