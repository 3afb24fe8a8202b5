"""admin.young_garbage.YoungGarbage: the youngest generation is collected once every `every` refused requests
(a table and a property over any number of refusals), a bad `every` is a usage error, and the admin API's
middleware counts an error answer as a refusal and a success not."""

from __future__ import annotations

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


@pytest.mark.parametrize(("every", "refusals", "collections"), [
    (1, 3, 3),
    (100, 99, 0),
    (100, 100, 1),
    (100, 250, 2),
])
def test_the_youngest_generation_is_collected_every_n_refusals(every: int, refusals: int, collections: int) -> None:
    collector = Collector()
    garbage = YoungGarbage(every, collector)
    for _ in range(refusals):
        garbage.refused()
    assert collector.generations == [0] * collections and garbage.collections == collections


@given(st.integers(1, 50), st.integers(0, 500))
def test_collections_are_refusals_divided_by_every(every: int, refusals: int) -> None:
    collector = Collector()
    garbage = YoungGarbage(every, collector)
    for _ in range(refusals):
        garbage.refused()
    assert len(collector.generations) == refusals // every and garbage.pending == refusals % every


@pytest.mark.parametrize("every", [0, -5])
def test_every_below_one_is_a_usage_error(every: int) -> None:
    with pytest.raises(ValueError, match="every must be at least 1"):
        YoungGarbage(every, Collector())


async def _not_found(request: web.Request) -> web.StreamResponse:
    raise web.HTTPNotFound()


async def _ok(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


async def test_the_api_counts_its_error_answers_as_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    collector = Collector()
    garbage = YoungGarbage(2, collector)
    monkeypatch.setattr(http, "REFUSED", garbage)
    for handler in (_ok, _not_found, _ok, _not_found):
        await http._errors_and_log(make_mocked_request("GET", "/x"), handler)
    assert garbage.collections == 1 and garbage.pending == 0
