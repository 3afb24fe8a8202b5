"""The status page's parts without a browser: the template (package data, self-contained), the cluster event
ring (vmqpy.cluster.events), `MemberRows` (the page never waits on a silent member) and the HTTP routes with a
fake node (auth, `metrics.public`, `status.public`)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from admin import status_page
from admin.http import build_app
from admin.keys import KeyStore, ensure_node_key
from admin.status_page import MemberRows, render, template_text
from tests.unit.admin.fakes import FakeNode
from vmqpy.cluster.events import CAPACITY, KINDS, ClusterEvents
from vmqpy.cluster.view import View
from vmqpy.sessions import records

# -- the template -------------------------------------------------------------------------------------------------


def test_the_template_is_package_data_and_self_contained() -> None:
    text = template_text()
    assert "<!DOCTYPE html>" in text
    # Nothing fetched from elsewhere: no URL with a scheme or protocol-relative, no external script or sheet.
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:)?//""", text)
    assert "<script src" not in text and 'rel="stylesheet"' not in text
    # The key kept in sessionStorage is safe only while no value from the node can become markup (a script that
    # could read the key): every value is written as text (docs/security.md, "The admin API in a browser").
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function", text)


def test_render_escapes_the_node_name_and_sets_the_refresh() -> None:
    page = render("n1@<b>x</b>", public=False, refresh_ms=1000)
    assert "n1@&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert "const REFRESH_MS = 1000;" in page
    assert "const PUBLIC = false;" in page
    assert 'id="login" hidden' not in page


def test_render_public_hides_the_login() -> None:
    page = render("n1@h", public=True)
    assert "const PUBLIC = true;" in page and 'id="login" hidden' in page


def test_render_refuses_a_refresh_faster_than_100ms() -> None:
    with pytest.raises(ValueError, match="at least 100"):
        render("n1@h", public=False, refresh_ms=10)


# -- the cluster events --------------------------------------------------------------------------------------------

def view(node: str, members: tuple[str, ...], reachable: set[str], groups: tuple[tuple[str, ...], ...]) -> View:
    return View(node, members, frozenset(reachable), groups)


ABC = ("a", "b", "c")
WHOLE = view("a", ABC, {"a", "b", "c"}, (ABC,))
SPLIT = view("a", ABC, {"a", "b"}, (("a", "b"), ("c",)))


@pytest.mark.parametrize(("old", "new", "kinds", "detail"), [
    (None, WHOLE, [], None),
    (WHOLE, WHOLE, [], None),
    (WHOLE, SPLIT, ["netsplit_detected"], "a does not reach c"),
    (None, SPLIT, ["netsplit_detected"], "a does not reach c"),
    (SPLIT, SPLIT, [], None),
    (SPLIT, WHOLE, ["netsplit_resolved"], "a reaches all 3 members again"),
])
def test_view_events(old: View | None, new: View, kinds: list[str], detail: str | None) -> None:
    events = ClusterEvents(clock=lambda: 5.0)
    events.on_view(old, new)
    assert [e["kind"] for e in events.recent()] == kinds
    if detail is not None:
        assert events.recent()[0] == {"at": 5.0, "kind": kinds[0], "detail": detail}


def session(owner: str) -> list[Any]:
    return records.session_value([1, 0, "x"], owner, True, None)


@pytest.mark.parametrize(("old", "new", "kinds"), [
    (None, session("n1"), []),
    (session("n1"), None, []),
    (session("n1"), session("n1"), []),
    (session("n1"), session("n2"), ["session_moved"]),  # a takeover there or a handover: not only takeovers
])
def test_session_events(old: Any, new: Any, kinds: list[str]) -> None:
    events = ClusterEvents(clock=lambda: 1.0)
    events.on_session(records.session_key("dev-1"), old, new)
    assert [e["kind"] for e in events.recent()] == kinds
    if kinds:
        assert events.recent()[0]["detail"] == "the session of client 'dev-1' moved from n1 to n2"
    assert "takeover" not in KINDS  # the word has one meaning, the metric's (docs/operations.md, "Takeovers")


@pytest.mark.parametrize(("old", "new", "kinds"), [
    (None, ["record"], ["member_joined"]),
    (["record"], None, ["member_left"]),
    (["record"], ["newer"], []),
])
def test_membership_events(old: Any, new: Any, kinds: list[str]) -> None:
    events = ClusterEvents(clock=lambda: 1.0)
    events.on_membership(("n2@h",), old, new)
    assert [e["kind"] for e in events.recent()] == kinds
    assert all("n2@h" in e["detail"] for e in events.recent())


def test_unknown_kind_and_bad_capacity_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown cluster event kind"):
        ClusterEvents().record("explosion", "x")
    with pytest.raises(ValueError, match="at least 1"):
        ClusterEvents(capacity=0)


@given(st.integers(min_value=1, max_value=10), st.integers(min_value=0, max_value=40))
def test_the_ring_keeps_the_newest_in_order(capacity: int, count: int) -> None:
    events = ClusterEvents(capacity=capacity)
    for i in range(count):
        events.record("session_moved", str(i), at=float(i))
    kept = events.recent()
    assert [e["detail"] for e in kept] == [str(i) for i in range(max(0, count - capacity), count)]
    kept.clear()  # a copy: the caller cannot empty the ring
    assert len(events.recent()) == min(count, capacity)


def test_default_capacity_is_bounded() -> None:
    events = ClusterEvents()
    for i in range(CAPACITY + 10):
        events.record("member_joined", str(i))
    assert len(events.recent()) == CAPACITY


# -- MemberRows ----------------------------------------------------------------------------------------------------

async def test_member_rows_never_wait_long_on_a_slow_member() -> None:
    gate = asyncio.Event()
    gate.set()
    asked: list[int] = []

    async def ask() -> tuple[list[dict[str, Any]], str | None]:
        asked.append(len(asked))
        await gate.wait()
        return [{"node": "a", "call": len(asked)}], None

    rows = MemberRows(ask, fresh_wait=0.01)
    assert await rows.get() == ([{"node": "a", "call": 1}], None)
    gate.clear()  # a member went silent: the next question hangs
    for _ in range(3):
        late_rows, note = await asyncio.wait_for(rows.get(), 1)
        assert late_rows == [{"node": "a", "call": 1}]
        assert note == "some members have not answered yet; their rows are from the previous refresh"
    assert len(asked) == 2  # one question at a time
    gate.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert await rows.get() == ([{"node": "a", "call": 3}], None)


# -- the HTTP routes -----------------------------------------------------------------------------------------------

def node_with(**settings: str) -> FakeNode:
    """FakeNode with on/off settings for metrics.public and status.public."""
    node = FakeNode()
    node.settings.update(settings)
    return node


async def client_for(node: FakeNode, tmp_path: Path) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = TestClient(TestServer(build_app(node, KeyStore(tmp_path, node))))
    await client.start_server()
    return client


@pytest.mark.parametrize(("settings", "path", "key", "status"), [
    ({}, "/metrics", False, 401),
    ({}, "/metrics", True, 200),
    ({"metrics.public": "off"}, "/metrics", False, 401),
    ({"metrics.public": "on"}, "/metrics", False, 200),
    ({}, "/status.json", False, 401),
    ({}, "/status.json", True, 200),
    ({"status.public": "on"}, "/status.json", False, 200),
    ({"metrics.public": "on"}, "/status.json", False, 401),
    ({"status.public": "on"}, "/metrics", False, 401),
    ({}, "/status", False, 200),  # the page itself holds no data: it asks for the key
])
async def test_routes_and_keys(settings: dict[str, str], path: str, key: bool, status: int,
                               tmp_path: Path) -> None:
    ensure_node_key(tmp_path)
    client = await client_for(node_with(**settings), tmp_path)
    try:
        headers = {"Authorization": f"Bearer {(tmp_path / 'api.key').read_text().strip()}"} if key else {}
        answer = await client.get(path, headers=headers)
        assert answer.status == status
        if path == "/status.json" and status == 401:
            assert "WWW-Authenticate" not in answer.headers  # no browser login dialog over the page
    finally:
        await client.close()


async def test_status_json_joins_the_overview_and_the_rows(tmp_path: Path) -> None:
    node = node_with()
    key = ensure_node_key(tmp_path)
    client = await client_for(node, tmp_path)
    try:
        doc = await (await client.get("/status.json", headers={"x-api-key": key})).json()
        assert doc["node"] == node.node_name()
        assert [m["Node"] for m in doc["members"]] == [r["Node"] for r in node.members]
        assert doc["policy"]["readiness"] == "all" and doc["events"] == []
        assert [r["node"] for r in doc["nodes"]] == [r["Node"] for r in node.members]
        page = await client.get("/status")
        assert page.headers["Content-Type"].startswith("text/html")
        assert node.node_name() in await page.text()
    finally:
        await client.close()


def test_status_page_module_exports() -> None:
    assert status_page.REFRESH_MS == 1000 and status_page.FRESH_WAIT_S < status_page.REFRESH_MS / 1000


# -- the headline and /status.json ---------------------------------------------------------------------------------

N1, N2, N3 = "n1@h1", "n2@h2", "n3@h3"
ALL_OPS = ["register", "publish", "subscribe", "unsubscribe"]
ALL_RULE = "see cluster.readiness (all: every member must be reachable)"
MAJORITY_RULE = "see cluster.readiness (majority: this node must be in a majority of members that reach each other)"
LEFT = "this node left its cluster: `vmq-admin cluster join discovery-node=...` to rejoin"


def member(name: str, reachable: bool = True) -> dict[str, Any]:
    return {"Node": name, "Running": reachable, "Reachable": reachable, "Ready": reachable}


def status_doc(state: str = "ready", reason: str = "all 3 members reachable", serves: list[str] | None = None,
               unreachable: tuple[str, ...] = (), readiness: str = "all",
               others: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    """n1's /status.json: its state, the members it does not reach, and the (node, state) rows of the others."""
    return {
        "node": N1, "state": state, "reason": reason, "serves": ALL_OPS if serves is None else serves,
        "members": [member(N1)] + [member(n, n not in unreachable) for n in (N2, N3)],
        "policy": {"readiness": readiness, "unreachable": list(unreachable)},
        "nodes": [{"node": N1, "state": state}] + [{"node": n, "state": s} for n, s in others],
    }


@pytest.mark.parametrize(("doc", "level", "text"), [
    (status_doc(), "ok", "serving: all 3 members reachable and ready"),
    ({**status_doc(), "members": [member(N1)]}, "ok", f"serving: {N1} is the only member"),
    # stop-serving, VerneMQ's default: a member down stops the cluster taking new clients
    (status_doc("not ready", "not ready: ...", [], (N3,)), "bad", f"not serving: {N3} unreachable, {ALL_RULE}"),
    (status_doc("not ready", "not ready: ...", [], (N2, N3), "majority"), "bad",
     f"not serving: {N2}, {N3} unreachable, {MAJORITY_RULE}"),
    (status_doc("not ready", "not ready: ...", ["publish", "subscribe"], (N3,)), "bad",
     f"not serving new clients: {N3} unreachable; connected clients may still publish, subscribe "
     f"(allow_*_during_netsplit), {ALL_RULE}"),
    (status_doc("not ready", "not ready: ...", ["register", "publish"], (N3,)), "warn",
     f"partly serving: {N3} unreachable; refuses subscribe, unsubscribe, see allow_*_during_netsplit"),
    (status_doc("not ready", "not ready: ...", ALL_OPS, (N3,)), "warn",
     f"serving, consistency traded: {N3} unreachable; both sides of the split take writes, see trade_consistency"),
    # not ready although every member answers (a view that lags): the node's own reason
    (status_doc("not ready", "not ready: every member must be reachable; unreachable: ", []), "bad",
     f"not serving: not ready: every member must be reachable; unreachable: , {ALL_RULE}"),
    (status_doc("ready", "unreachable: n3@h3", ALL_OPS, (N3,), "majority"), "warn",
     f"serving: {N3} unreachable; this node is in the majority that serves, see cluster.readiness (majority)"),
    (status_doc("left", LEFT, []), "bad", f"not serving: {LEFT}"),
    (status_doc("joining", "joining a cluster: ...", []), "bad", "not serving: joining a cluster: ..."),
    (status_doc("draining", "draining (draining, 3 connections left)", ALL_OPS[1:]), "warn",
     f"{N1} takes no new clients: draining (draining, 3 connections left)"),
    (status_doc(others=((N2, "ready"), (N3, "draining"))), "warn", f"serving; {N3} draining"),
])
def test_headline(doc: dict[str, Any], level: str, text: str) -> None:
    assert status_page.headline(doc) == status_page.Headline(level, text)


@pytest.mark.parametrize(("serves", "word"), [
    (ALL_OPS, "yes"), (list(reversed(ALL_OPS)), "yes"), ([], "no"), (["publish"], "partly"),
    (ALL_OPS[1:], "partly"), (["unknown"], "no"),
])
def test_the_serving_column(serves: list[str], word: str) -> None:
    assert status_page.serving(serves) == word


def overview(state: str = "ready", reachable: bool = True) -> dict[str, Any]:
    return {"node": N1, "state": state, "reason": "why", "serves": ALL_OPS if state == "ready" else [],
            "version": "2.0", "members": [member(N1), member(N2, reachable)],
            "policy": {"readiness": "all", "unreachable": [] if reachable else [N2]}}


def test_document_takes_this_nodes_state_fresh_and_each_members_version() -> None:
    stale_own = {"node": N1, "state": "ready", "reason": "earlier", "serves": ALL_OPS, "version": "1.9"}
    rows = [stale_own, {"node": N2, "state": "draining", "reason": "d", "serves": ["publish"], "version": "1.9"}]
    doc = status_page.document(overview("not ready"), rows, None)
    assert [(m["Node"], m["State"], m["Version"]) for m in doc["members"]] == [(N1, "not ready", "2.0"),
                                                                             (N2, "draining", "1.9")]
    assert [(r["node"], r["serving"], r["reason"]) for r in doc["nodes"]] == [(N1, "no", "why"), (N2, "partly", "d")]
    assert doc["headline"]["level"] == "bad" and "note" not in doc
    assert rows[0] == stale_own  # the caller's rows are not changed


def test_the_version_column_says_which_build_of_the_core_each_member_runs() -> None:
    rows = [{"node": N1, "serves": ALL_OPS},
            {"node": N2, "state": "ready", "serves": ALL_OPS, "version": "2.0", "core": "pure"}]
    doc = status_page.document({**overview(), "core": "compiled"}, rows, None)
    assert [m["Version"] for m in doc["members"]] == ["2.0 (compiled)", "2.0 (pure)"]


def test_document_leaves_out_the_rows_of_members_it_no_longer_reaches() -> None:
    rows = [{"node": N1, "serves": ALL_OPS}, {"node": N2, "state": "ready", "serves": ALL_OPS, "version": "2.0"}]
    doc = status_page.document(overview("not ready", reachable=False), rows, "no answer from x")
    assert [r["node"] for r in doc["nodes"]] == [N1]
    assert doc["note"] == f"no answer from x; not reachable from this node: {N2}"
    assert [(m["State"], m["Version"]) for m in doc["members"]] == [("not ready", "2.0"), ("unreachable", None)]
    assert doc["headline"] == {"level": "bad", "text": f"not serving: {N2} unreachable, {ALL_RULE}"}


def test_a_member_that_has_not_answered_has_no_state_yet() -> None:
    doc = status_page.document(overview(), [{"node": N1}], None)
    assert [(m["State"], m["Version"]) for m in doc["members"]] == [("ready", "2.0"), (None, None)]


@given(st.lists(st.sampled_from(ALL_OPS), unique=True), st.sets(st.sampled_from((N2, N3))),
       st.sampled_from(("ready", "not ready", "left", "joining", "draining", "leaving")))
def test_the_headline_says_not_serving_exactly_when_new_clients_are_refused(
        serves: list[str], unreachable: set[str], state: str) -> None:
    top = status_page.headline(status_doc(state, "because", serves, tuple(sorted(unreachable))))
    # a node that left or joins serves nothing whatever its policy allows (vmqpy.facade.NodeFacade.serves)
    refuses_clients = state in ("left", "joining") or (state == "not ready" and "register" not in serves)
    assert top.text.startswith("not serving") == refuses_clients == (top.level == "bad")
    assert top.level in ("ok", "warn", "bad") and (top.level == "ok") == (top.text.startswith("serving:")
                                                                          and state == "ready" and not unreachable)


def test_a_member_on_an_older_version_reports_only_whether_it_is_ready() -> None:
    rows: list[dict[str, Any]] = [{"node": N1}, {"node": N2, "ready": False, "reason": "not ready: ...",
                                                 "version": "0.1.0"}]
    doc = status_page.document(overview(), rows, None)
    assert [(r["node"], r["state"], r["serving"]) for r in doc["nodes"]] == [(N1, "ready", "yes"),
                                                                           (N2, "not ready", "no")]
    assert doc["headline"] == {"level": "warn", "text": f"serving; {N2} not ready"}
