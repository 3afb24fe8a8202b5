"""The status page (`GET /status`, VerneMQ's path; docs/operations.md, "The status page").

One self-contained HTML file (inline CSS and JavaScript, nothing fetched from elsewhere: it works on an isolated
network), the jinja2 template `admin/templates/status.html` shipped as package data and read through
importlib.resources, so it is found in an installed package as in the checkout. The page carries no data: its
script fetches `/status.json` every `REFRESH_MS` with the API key the operator typed into its login form (kept
in the browser tab's sessionStorage, sent as a bearer token), or without one when `status.public = on`.

`document` builds `/status.json` from the node's own view (`AdminNode.overview`) and its members' rows
(`AdminNode.status`), and `headline` says in one line whether the cluster serves clients, as seen from this node,
and why not: pure functions of plain data, table-tested (tests/unit/admin/test_status_page.py).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import jinja2

__all__ = ["FRESH_WAIT_S", "OPERATIONS", "REFRESH_MS", "Headline", "MemberRows", "document", "headline",
           "render", "serving", "template_text"]

REFRESH_MS: Final = 1000
#: how long a request for the page's data waits for the members' answers before it takes the last ones
FRESH_WAIT_S: Final = 0.5
TEMPLATE: Final = "status.html"


def template_text() -> str:
    """The template's source, from the installed package."""
    return resources.files("admin").joinpath("templates", TEMPLATE).read_text(encoding="utf-8")


@functools.cache
def _template() -> jinja2.Template:
    """Made at the page's first request: jinja2 is imported then, not at the node's start (1.9 MB of an empty
    node's RSS, measured 2026-11-30, that a node nobody opens the page of does not pay)."""
    import jinja2

    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return environment.from_string(template_text())


def render(node: str, public: bool, refresh_ms: int = REFRESH_MS) -> str:
    """The page for `node`; `public`: the JSON endpoint needs no key, so no login form is shown."""
    if refresh_ms < 100:
        raise ValueError(f"refresh_ms must be at least 100, not {refresh_ms}")
    return _template().render(node=node, public=public, refresh_ms=refresh_ms, data_path="/status.json")


Rows = tuple[list[dict[str, Any]], str | None]

#: the client operations a netsplit policy allows or refuses, as the nodes report them in `serves`
OPERATIONS: Final = ("register", "publish", "subscribe", "unsubscribe")
READY: Final = "ready"
#: what each `cluster.readiness` asks of a node before it serves (vmqpy/cluster/policy.py)
READINESS_RULES: Final = {
    "all": "every member must be reachable",
    "majority": "this node must be in a majority of members that reach each other",
}


@dataclass(frozen=True, slots=True)
class Headline:
    """The page's first line: `level` "ok" (serving), "warn" (serving, but not as usual) or "bad" (refuses new
    clients), and the `text`, which starts with the serving state ("serving", "not serving", ...)."""

    level: str
    text: str


def serving(serves: Sequence[str]) -> str:
    """The Serving column: "yes" (every operation), "no" (none) or "partly"."""
    served = set(serves) & set(OPERATIONS)
    return "yes" if len(served) == len(OPERATIONS) else "partly" if served else "no"


def _names(nodes: Sequence[str]) -> str:
    return ", ".join(nodes)


def headline(doc: Mapping[str, Any]) -> Headline:
    """Whether the cluster serves clients, seen from the node that answers `doc` (its `/status.json`): from its
    state and reason (as its /health), the operations it still serves and its netsplit policy, then the states
    its members reported."""
    node, state, reason = str(doc["node"]), str(doc["state"]), str(doc["reason"])
    policy: Mapping[str, Any] = doc.get("policy", {})
    unreachable = [str(n) for n in policy.get("unreachable", [])]
    cause = f"{_names(unreachable)} unreachable" if unreachable else reason
    if state in ("left", "joining"):
        return Headline("bad", f"not serving: {reason}")
    if state in ("draining", "leaving"):  # what the operator asked for: the other members take its clients
        return Headline("warn", f"{node} takes no new clients: {reason}")
    if state != READY:
        readiness = str(policy.get("readiness", "all"))
        rule = f"see cluster.readiness ({readiness}: {READINESS_RULES.get(readiness, readiness)})"
        served = [op for op in OPERATIONS if op in doc.get("serves", ())]
        refused = [op for op in OPERATIONS if op not in served]
        if not served:
            return Headline("bad", f"not serving: {cause}, {rule}")
        if "register" in refused:
            return Headline("bad", f"not serving new clients: {cause}; connected clients may still "
                                   f"{_names(served)} (allow_*_during_netsplit), {rule}")
        if refused:
            return Headline("warn", f"partly serving: {cause}; refuses {_names(refused)}, "
                                    "see allow_*_during_netsplit")
        return Headline("warn", f"serving, consistency traded: {cause}; both sides of the split take writes, "
                                "see trade_consistency")
    if unreachable:
        return Headline("warn", f"serving: {cause}; this node is in the majority that serves, "
                                "see cluster.readiness (majority)")
    others = [f"{row['node']} {row['state']}" for row in doc.get("nodes", [])
              if row.get("node") != node and row.get("state", READY) != READY]
    if others:
        return Headline("warn", f"serving; {_names(others)}")
    members = len(doc.get("members", [])) or 1
    if members == 1:
        return Headline("ok", f"serving: {node} is the only member")
    return Headline("ok", f"serving: all {members} members reachable and ready")


def _with_state(row: Mapping[str, Any]) -> dict[str, Any]:
    """A member's row with its state and the operations it serves; a member running an older vmqpy (a rolling
    upgrade) reports only whether it is ready: then all operations or none."""
    if "state" in row and "serves" in row:
        return dict(row)
    ready = bool(row.get("ready"))
    return {**row, "state": READY if ready else "not ready", "serves": list(OPERATIONS) if ready else []}


def document(overview: Mapping[str, Any], rows: list[dict[str, Any]], note: str | None) -> dict[str, Any]:
    """`/status.json`: this node's `overview`, the members' `rows` (`nodes`, each with its Serving word) less
    those of members this node no longer reaches, each member's State and Version, the `note` and the
    `headline`."""
    node = str(overview["node"])
    members = [dict(m) for m in overview.get("members", [])]
    # A row kept from an earlier answer must not show a member this node no longer reaches as if it were live.
    unreachable = {str(m["Node"]) for m in members if m.get("Reachable") is False}
    if unreachable & {str(r.get("node")) for r in rows}:
        rows = [r for r in rows if str(r.get("node")) not in unreachable]
        gone = "not reachable from this node: " + ", ".join(sorted(unreachable))
        note = f"{note}; {gone}" if note else gone
    own = {"state": overview["state"], "reason": overview["reason"], "serves": overview["serves"],
           "version": overview.get("version"), "core": overview.get("core")}
    # this node's own row may be from the previous refresh: its state is not
    nodes = [{**r, **own} if r.get("node") == node else _with_state(r) for r in rows]
    for row in nodes:
        row["serving"] = serving(row.get("serves", ()))
    by_node = {str(r.get("node")): r for r in nodes}
    for member in members:
        name = str(member["Node"])
        row = own if name == node else by_node.get(name, {})
        member["State"] = "unreachable" if name in unreachable else row.get("state")
        # "0.1.0 (compiled)": the version, and which build of its core the member runs (vmqpy/native.py)
        member["Version"] = f"{row['version']} ({row['core']})" if row.get("core") else row.get("version")
    doc: dict[str, Any] = {**overview, "members": members, "nodes": nodes}
    if note:
        doc["note"] = note
    top = headline(doc)
    doc["headline"] = {"level": top.level, "text": top.text}
    return doc


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
