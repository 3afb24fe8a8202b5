"""The status page (`GET /status`, VerneMQ's path; docs/operations.md, "The status page").

One self-contained HTML file (inline CSS and JavaScript, nothing fetched from elsewhere: it works on an isolated
network), the jinja2 template `admin/templates/status.html` shipped as package data and read through
importlib.resources, so it is found in an installed package as in the checkout. The page carries no data: its
script fetches `/status.json` every `REFRESH_MS` with the API key the operator typed into its login form (kept
in the browser tab's sessionStorage, sent as a bearer token), or without one when `status.public = on`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, Final

import jinja2

__all__ = ["FRESH_WAIT_S", "REFRESH_MS", "MemberRows", "render", "template_text"]

REFRESH_MS: Final = 1000
#: how long a request for the page's data waits for the members' answers before it takes the last ones
FRESH_WAIT_S: Final = 0.5
TEMPLATE: Final = "status.html"


def template_text() -> str:
    """The template's source, from the installed package."""
    return resources.files("admin").joinpath("templates", TEMPLATE).read_text(encoding="utf-8")


@functools.cache
def _template() -> jinja2.Template:
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return environment.from_string(template_text())


def render(node: str, public: bool, refresh_ms: int = REFRESH_MS) -> str:
    """The page for `node`; `public`: the JSON endpoint needs no key, so no login form is shown."""
    if refresh_ms < 100:
        raise ValueError(f"refresh_ms must be at least 100, not {refresh_ms}")
    return _template().render(node=node, public=public, refresh_ms=refresh_ms, data_path="/status.json")


Rows = tuple[list[dict[str, Any]], str | None]


class MemberRows:
    """The members' status rows for the page without making it wait on a member that does not answer.

    Asking every member (`AdminNode.status`) waits up to its deadline for one that went silent, and for the
    first second of a netsplit a cut-off member still looks reachable. The page asks every second and must show
    the split at once, so `get()` starts one question (never two at a time), waits at most `fresh_wait` for it,
    and otherwise answers with the last complete rows, noting that they are older; the question goes on and
    serves a later call. The node's own view (members, groups, banner) never waits on this.
    """

    def __init__(self, ask: Callable[[], Awaitable[Rows]], fresh_wait: float = FRESH_WAIT_S) -> None:
        self._ask = ask
        self._fresh_wait = fresh_wait
        self._task: asyncio.Task[Rows] | None = None
        self._last: Rows | None = None

    async def get(self) -> Rows:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._ask_once())
        task = self._task
        if self._last is None:  # nothing to show yet: wait for the first answers (bounded by the ask's deadline)
            await asyncio.wait({task})
        else:
            await asyncio.wait({task}, timeout=self._fresh_wait)
        if task.done():
            return task.result()
        rows, note = self._last or ([], None)
        late = "some members have not answered yet; their rows are from the previous refresh"
        return rows, f"{note}; {late}" if note else late

    async def _ask_once(self) -> Rows:
        try:
            self._last = await self._ask()
            return self._last
        finally:
            self._task = None
