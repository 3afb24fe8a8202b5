"""admin.young_garbage.YoungGarbage: the two younger generations are collected once every `every` refused requests
(a table and a property over any number of refusals), a refusal schedules one full collection `full_after`
seconds later unless one is pending (and a real event loop runs it), bad arguments are usage errors, and the
admin API's middleware counts an error answer as a refusal and a success not."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from hypothesis import given
from hypothesis import strategies as st

from admin import http
from admin.young_garbage import YoungGarbage


class Collector:
    def __init__(self) -> None:
        self.generations: list[int] = []

    def __call__(self, generation: int) -> int:
        self.generations.append(generation)
        return 0


class Scheduler:
    """Keeps what `YoungGarbage` schedules; `run()` runs it as the event loop would."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, Callable[[], None]]] = []

    def __call__(self, delay: float, callback: Callable[[], None]) -> object:
        self.calls.append((delay, callback))
        return None

    def run(self) -> None:
        calls, self.calls = self.calls, []
        for _, callback in calls:
            callback()


@pytest.mark.parametrize(("every", "refusals", "collections"), [
    (1, 3, 3),
    (100, 99, 0),
    (100, 100, 1),
    (100, 250, 2),
])
def test_the_younger_generations_are_collected_every_n_refusals(every: int, refusals: int, collections: int) -> None:
    collector = Collector()
    garbage = YoungGarbage(every, collector, schedule=Scheduler())
    for _ in range(refusals):
        garbage.refused()
    assert collector.generations == [1] * collections and garbage.collections == collections


@given(st.integers(1, 50), st.integers(0, 500))
def test_collections_are_refusals_divided_by_every(every: int, refusals: int) -> None:
    collector = Collector()
    garbage = YoungGarbage(every, collector, schedule=Scheduler())
    for _ in range(refusals):
        garbage.refused()
    assert len(collector.generations) == refusals // every and garbage.pending == refusals % every


@pytest.mark.parametrize("every", [0, -5])
def test_every_below_one_is_a_usage_error(every: int) -> None:
    with pytest.raises(ValueError, match="every must be at least 1"):
        YoungGarbage(every, Collector())


@pytest.mark.parametrize("full_after", [0.0, -1.0])
def test_full_after_not_positive_is_a_usage_error(full_after: float) -> None:
    with pytest.raises(ValueError, match="full_after must be positive"):
        YoungGarbage(100, Collector(), full_after)


@given(st.lists(st.integers(0, 300), min_size=1, max_size=8))
def test_one_full_collection_is_pending_at_most_whatever_the_refusals(bursts: list[int]) -> None:
    """Bursts of refusals, the scheduled callbacks run between them: each burst with a refusal schedules exactly
    one full collection, with the configured delay, and running it collects every generation once."""
    collector, scheduler = Collector(), Scheduler()
    garbage = YoungGarbage(1000, collector, 2.5, scheduler)
    for refusals in bursts:
        for _ in range(refusals):
            garbage.refused()
        assert [delay for delay, _ in scheduler.calls] == ([2.5] if refusals else [])
        scheduler.run()
    full = [g for g in collector.generations if g == 2]
    assert full == [2] * sum(1 for r in bursts if r) == [2] * garbage.full_collections
    assert collector.generations.count(1) == sum(bursts) // 1000
    assert not garbage.full_pending


async def test_the_event_loop_runs_the_full_collection_after_its_delay_then_trims_the_heap() -> None:
    collector, trims = Collector(), list[list[int]]()

    def trim() -> bool:
        trims.append(collector.generations[:])
        return True

    garbage = YoungGarbage(100, collector, 0.05, trim=trim)
    garbage.refused()
    garbage.refused()
    assert collector.generations == [] and garbage.full_pending and trims == []
    await asyncio.sleep(0.2)
    assert collector.generations == [2] and not garbage.full_pending
    assert trims == [[2]]  # after the collection: what it freed goes back to the system


async def _not_found(request: web.Request) -> web.StreamResponse:
    raise web.HTTPNotFound()


async def _ok(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


async def test_the_api_counts_its_error_answers_as_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    collector = Collector()
    garbage = YoungGarbage(2, collector, schedule=Scheduler())
    monkeypatch.setattr(http, "REFUSED", garbage)
    for handler in (_ok, _not_found, _ok, _not_found):
        await http._errors_and_log(make_mocked_request("GET", "/x"), handler)
    assert garbage.collections == 1 and garbage.pending == 0
