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
from vmqpy.broker import records
from vmqpy.cluster.events import CAPACITY, ClusterEvents
from vmqpy.cluster.view import View

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
    (session("n1"), session("n2"), ["takeover"]),
])
def test_session_events(old: Any, new: Any, kinds: list[str]) -> None:
    events = ClusterEvents(clock=lambda: 1.0)
    events.on_session(records.session_key("dev-1"), old, new)
    assert [e["kind"] for e in events.recent()] == kinds
    if kinds:
        assert events.recent()[0]["detail"] == "client 'dev-1' moved from n1 to n2"


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
        events.record("takeover", str(i), at=float(i))
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
    client: TestClient[Any, Any] = TestClient(TestServer(build_app(node, KeyStore(tmp_path))))
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
