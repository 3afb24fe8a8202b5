"""admin.http's outermost middleware answers the router's 404/405 and a command's error without leaving a
reference cycle: aiohttp's router raises the exception its match info holds, and the exception's traceback held
the request again (request, headers, URL, frames), freed only by a full collection, rare on a node. Checked with
the collector off: the requests must be freed by their reference counts alone."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from admin.errors import CommandError
from admin.http import _errors_and_log

REQUESTS = 20
KEPT = ("traceback", "frame", "MatchInfoError", "CommandError")  # what a cycle through a traceback keeps


async def _health(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


async def _failing_command(request: web.Request) -> web.StreamResponse:
    raise CommandError("no such client", 404)


@pytest.fixture
def collector_off() -> Iterator[list[object]]:
    """Unreachable objects left by the test (gc.DEBUG_SAVEALL), counted with the collector off meanwhile."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    found: list[object] = []
    try:
        yield found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


async def _serve(app: web.Application, method: str, path: str,
                 handler: Callable[[web.Request], Awaitable[web.StreamResponse]] | None) -> int:
    request = make_mocked_request(method, path, app=app)
    match = await app.router.resolve(request)
    match.add_app(app)
    request._match_info = match  # what aiohttp's request handler does before the middlewares
    response = await _errors_and_log(request, handler or match.handler)
    return response.status


@pytest.mark.parametrize(("method", "path", "status", "own_handler"), [
    ("GET", "/no/such/path", 404, False),  # the router's HTTPNotFound
    ("POST", "/health", 405, False),  # the router's HTTPMethodNotAllowed
    ("GET", "/health", 404, True),  # a command's CommandError
])
async def test_an_error_answer_leaves_no_cycle_through_its_traceback(
        collector_off: list[object], method: str, path: str, status: int, own_handler: bool) -> None:
    app = web.Application()
    app.router.add_get("/health", _health)
    app.freeze()
    statuses = {await _serve(app, method, path, _failing_command if own_handler else None)
                for _ in range(REQUESTS)}
    gc.collect()
    kept = Counter(type(o).__name__ for o in gc.garbage)
    assert statuses == {status}
    assert {kind: kept[kind] for kind in KEPT if kept[kind]} == {}
