"""The HTTP API served by a real aiohttp server on 127.0.0.1 (a free port), from the test's own event loop."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp import web
from yarl import URL

import admin.http
from admin.commands import COMMANDS
from admin.errors import CommandError
from admin.http import ApiServer, start_api
from admin.keys import KeyStore
from tests.unit.admin.fakes import FakeNode

# one call per command path and alias, with valid parameters and the right method
ENDPOINTS: list[tuple[str, str]] = [
    ("GET", "/api/v1/cluster/show"),
    ("GET", "/api/v1/cluster/status"),
    ("POST", "/api/v1/cluster/join?discovery-node=vmq2@127.0.0.1"),
    ("POST", "/api/v1/cluster/leave?node=vmq1@127.0.0.1&--kill-sessions"),
    ("GET", "/api/v1/node/status"),
    ("POST", "/api/v1/node/drain?--rate=10&--timeout=5"),
    ("POST", "/api/v1/node/stop"),
    ("GET", "/api/v1/session/show"),
    ("POST", "/api/v1/session/disconnect?client-id=sensor-1"),
    ("POST", "/api/v1/session/unsubscribe?client-id=sensor-1&topic=cmd/sensor-1/%23"),
    ("POST", "/api/v1/retain/delete-expired"),
    ("GET", "/api/v1/log/show/config"),
    ("POST", "/api/v1/session/reauthorize?client-id=sensor-1&username=alice"),
    ("GET", "/api/v1/listener/show"),
    ("POST", "/api/v1/listener/stop?address=127.0.0.1&port=1883&--kill_sessions"),
    ("POST", "/api/v1/listener/start?address=127.0.0.1&port=1883"),
    ("POST", "/api/v1/listener/restart?address=127.0.0.1&port=1883"),
    ("POST", "/api/v1/retain/delete?topic=sensors/a/temp"),
    ("POST", "/api/v1/acl/reload"),
    ("GET", "/api/v1/subscription/show"),
    ("GET", "/api/v1/retain/show"),
    ("GET", "/api/v1/metrics/show"),
    ("GET", "/api/v1/metadata/dump"),
    ("GET", "/api/v1/trace/client?client-id=sensor-1&--stop-after=1"),
    ("GET", "/api/v1/show?max_inflight_messages"),
    ("POST", "/api/v1/set?max_inflight_messages=7"),
    ("POST", "/api/v1/log/level?level=info"),
    ("POST", "/api/v1/api-key/create"),
    ("POST", "/api/v1/api-key/add?key=a-key-of-my-own-choosing&scope=read"),
    ("GET", "/api/v1/api-key/show"),
    ("POST", "/api/v1/api-key/delete?key=0123456789"),
]


def test_endpoint_list_covers_the_table() -> None:
    paths = {path.split("?")[0] for _, path in ENDPOINTS}
    expected = {"/api/v1/" + "/".join(p) for c in COMMANDS for p in (c.path, *c.aliases)}
    assert paths == expected
    methods = {path.split("?")[0]: method for method, path in ENDPOINTS}
    for cmd in COMMANDS:
        assert methods["/api/v1/" + "/".join(cmd.path)] == cmd.method


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def call(
    client: aiohttp.ClientSession,
    api: ApiServer,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, Any]:
    url = URL(api.url + path, encoded=True)
    async with client.request(method, url, headers=headers) as response:
        body = await response.json(content_type=None) if method != "HEAD" else None
        return response.status, body, response.headers


# -- authentication ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path"), [*ENDPOINTS, ("GET", "/api/v1/no/such"), ("GET", "/api/v1")])
async def test_every_endpoint_needs_a_valid_key(
    client: aiohttp.ClientSession, api: ApiServer, fake: FakeNode, method: str, path: str
) -> None:
    members = fake.cluster_show()
    attempts: list[dict[str, Any]] = [
        {},
        {"headers": {"x-api-key": "wrong"}},
        {"headers": {"x-api-key": ""}},
        {"headers": basic("wrong", "")},
        {"headers": {"Authorization": "Digest username=x"}},
        {"headers": {"Authorization": "Basic !!!not-base64"}},
        {"headers": {"Authorization": "Bearer wrong"}},
    ]
    for attempt in attempts:
        status, body, headers = await call(client, api, method, path, **attempt)
        assert status == 401, (attempt, body)
        assert body["type"] == "error" and "API key" in body["error"]
        assert "WWW-Authenticate" not in headers  # no challenge: a browser never asks for the key, never keeps it
    assert fake.cluster_show() == members and fake.settings["max_inflight_messages"] == "20"
    assert not [c for c in fake.calls if c[0] in ("cluster_join", "cluster_leave", "set_setting")]


async def test_missing_and_wrong_key_messages(client: aiohttp.ClientSession, api: ApiServer) -> None:
    _, missing, _ = await call(client, api, "GET", "/api/v1/cluster/show")
    _, wrong, _ = await call(client, api, "GET", "/api/v1/cluster/show", {"x-api-key": "nope"})
    assert missing["error"].startswith("missing API key")
    assert wrong["error"] == "invalid API key"


@pytest.mark.parametrize("how", ["x-api-key", "basic", "bearer"])
async def test_valid_key(client: aiohttp.ClientSession, api: ApiServer, node_key: str, how: str) -> None:
    headers = {
        "x-api-key": {"x-api-key": node_key},
        "basic": basic(node_key, "ignored"),
        "bearer": {"Authorization": f"Bearer {node_key}"},
    }[how]
    status, body, _ = await call(client, api, "GET", "/api/v1/cluster/show", headers)
    assert status == 200
    assert body == {
        "type": "table",
        "table": [{"Node": "vmq1@127.0.0.1", "Running": True, "Reachable": True, "Ready": True}],
    }


async def test_no_path_challenges_for_the_key(client: aiohttp.ClientSession, api: ApiServer) -> None:
    for path in ("/metrics", "/status.json", "/api/v1/cluster/show", "/api"):
        for headers in ({}, basic("wrong", ""), {"Authorization": "Bearer wrong"}):
            status, _, answer_headers = await call(client, api, "GET", path, headers)
            assert status == 401 and "WWW-Authenticate" not in answer_headers, (path, headers)


# -- requests made by other web pages --------------------------------------------------------------------------
CHANGES = [(method, path) for method, path in ENDPOINTS if method == "POST"]


@pytest.mark.parametrize("foreign", [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # another port of the same host
    {"Sec-Fetch-Site": "something-new"},
    {"Origin": "http://127.0.0.2:8080"},
    {"Origin": "https://evil.example"},
    {"Origin": "null"},  # a sandboxed frame, a data: URL
    {"Origin": "http://127.0.0.1"},  # the node's host on another port (80)
    {"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:1"},
])
@pytest.mark.parametrize("how", ["x-api-key", "basic", "bearer", "no key"])
async def test_a_change_sent_by_another_page_is_refused(
    client: aiohttp.ClientSession, api: ApiServer, fake: FakeNode, node_key: str, foreign: dict[str, str], how: str
) -> None:
    key = {"x-api-key": {"x-api-key": node_key}, "basic": basic(node_key, ""), "no key": {},
           "bearer": {"Authorization": f"Bearer {node_key}"}}[how]
    calls = list(fake.calls)
    for method, path in [*CHANGES, ("PUT", "/api/v1/log/level?level=debug"), ("DELETE", "/api/v1/node/stop"),
                         ("POST", "/status.json"), ("POST", "/api/v1/no/such")]:
        status, body, _ = await call(client, api, method, path, {**key, **foreign})
        assert status == 403, (method, path, body)
        assert body["type"] == "error" and "another web page" in body["error"], body
    assert fake.calls == calls, "nothing reached the node"
    assert fake.settings["max_inflight_messages"] == "20"


async def test_reads_and_the_apis_own_pages_are_not_refused(
    client: aiohttp.ClientSession, api: ApiServer, node_key: str
) -> None:
    key = {"Authorization": f"Bearer {node_key}"}
    own = api.url
    for headers in ({"Origin": own, "Sec-Fetch-Site": "same-origin"}, {"Origin": own.upper()},
                    {"Sec-Fetch-Site": "none"}, {}):
        status, body, _ = await call(client, api, "POST", "/api/v1/set?max_inflight_messages=7", {**key, **headers})
        assert status == 200, (headers, body)
    # Reading is not refused to another page (it cannot read the answer: no CORS header is ever sent).
    status, _, answer_headers = await call(client, api, "GET", "/api/v1/cluster/show",
                                           {**key, "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})
    assert status == 200 and "Access-Control-Allow-Origin" not in answer_headers
    # A preflight for a `fetch` that would send the key from another page gets no permission either.
    status, _, answer_headers = await call(client, api, "OPTIONS", "/api/v1/log/level?level=debug",
                                           {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
                                            "Access-Control-Request-Headers": "x-api-key"})
    assert status >= 400 and "Access-Control-Allow-Origin" not in answer_headers


async def test_created_key_works_and_deleted_key_stops_working(
    client: aiohttp.ClientSession, api: ApiServer, node_key: str
) -> None:
    auth = {"x-api-key": node_key}
    status, body, _ = await call(client, api, "POST", "/api/v1/api-key/create", auth)
    assert status == 200 and body["type"] == "text"
    new_key = body["text"]
    assert (await call(client, api, "GET", "/api/v1/node/status", {"x-api-key": new_key}))[0] == 200
    status, body, _ = await call(client, api, "GET", "/api/v1/api-key/show", auth)
    assert len(body["table"]) == 2 and new_key not in str(body)
    status, body, _ = await call(client, api, "POST", f"/api/v1/api-key/delete?key={new_key}", auth)
    assert status == 200 and body["text"].startswith("deleted API key")
    assert (await call(client, api, "GET", "/api/v1/node/status", {"x-api-key": new_key}))[0] == 401


# -- methods -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
async def test_wrong_method_is_405(
    client: aiohttp.ClientSession, api: ApiServer, fake: FakeNode, node_key: str, method: str, path: str
) -> None:
    wrong = "POST" if method == "GET" else "GET"
    status, body, headers = await call(client, api, wrong, path, {"x-api-key": node_key})
    assert status == 405
    assert body["type"] == "error" and f"takes {method}, not {wrong}" in body["error"]
    assert headers["Allow"] == ("GET, HEAD" if method == "GET" else "POST")
    for other in ("PUT", "DELETE"):
        assert (await call(client, api, other, path, {"x-api-key": node_key}))[0] == 405
    assert fake.settings["max_inflight_messages"] == "20" and len(fake.members) == 1
    assert not [c for c in fake.calls if c[0] in ("cluster_join", "cluster_leave", "set_setting")]


async def test_head_on_a_read(client: aiohttp.ClientSession, api: ApiServer, node_key: str) -> None:
    assert (await call(client, api, "HEAD", "/api/v1/session/show", {"x-api-key": node_key}))[0] == 200


# -- shapes and errors -----------------------------------------------------------------------------------------------
async def test_table_and_text_shapes(
    client: aiohttp.ClientSession, api: ApiServer, fake: FakeNode, node_key: str
) -> None:
    key = {"x-api-key": node_key}
    status, body, _ = await call(client, api, "GET", "/api/v1/retain/show?topic=sensors/+/temp&limit=5", key)
    assert (status, body) == (200, {"type": "table", "table": [{"topic": "sensors/a/temp", "payload": "21.5"}]})
    assert fake.last_call() == ("retain_show", "sensors/+/temp", 5)
    status, body, _ = await call(client, api, "POST", "/api/v1/cluster/join?discovery-node=vmq2%40127.0.0.1", key)
    assert (status, body) == (200, {"type": "text", "text": "Done"})
    status, body, _ = await call(client, api, "POST", "/api/v1/cluster/leave?node=vmq2@127.0.0.1&-k&-t=3", key)
    assert (status, body) == (200, {"type": "text", "text": "vmq2@127.0.0.1 left the cluster"})
    assert fake.last_call() == ("cluster_leave", "vmq2@127.0.0.1", True, 5.0, 3.0)
    status, body, _ = await call(client, api, "POST", "/api/v1/set?allow_publish_during_netsplit=on", key)
    assert (status, body) == (200, {"type": "text", "text": "allow_publish_during_netsplit = on"})
    status, body, _ = await call(client, api, "GET", "/api/v1/show?allow_publish_during_netsplit", key)
    assert body["table"] == [{"Setting": "allow_publish_during_netsplit", "Value": "on"}]
    status, body, _ = await call(client, api, "GET", "/api/v1/session/show?client-id=sensor-2", key)
    assert [r["client_id"] for r in body["table"]] == ["sensor-2"]


@pytest.mark.parametrize(
    ("method", "path", "status", "error"),
    [
        ("GET", "/api/v1/session/show?limit=0", 400, "bad value '0' for 'limit' of 'session show'"),
        ("GET", "/api/v1/session/show?nosuch=1", 400, "unknown parameter 'nosuch' for 'session show'"),
        ("POST", "/api/v1/cluster/join", 400, "missing parameter 'discovery-node'"),
        ("POST", "/api/v1/cluster/join?discovery-node=vmq1@127.0.0.1", 409, "vmq1@127.0.0.1 is already a member"),
        ("POST", "/api/v1/cluster/join?discovery-node=down@127.0.0.1", 503, "down@127.0.0.1 is not reachable"),
        ("POST", "/api/v1/cluster/leave?node=x@h", 404, "x@h is not a cluster member"),
        ("GET", "/api/v1/show?no_such_setting", 404, "unknown setting 'no_such_setting'"),
        ("POST", "/api/v1/set?max_inflight_messages=lots", 400, "bad value for max_inflight_messages"),
        ("GET", "/api/v1/clustr/show", 404, "unknown command 'clustr show'"),
        ("GET", "/api/v1/cluster/shwo", 404, "'cluster' has: join, leave, show, status"),
        ("GET", "/api/v1/cluster/show/extra", 404, "no such API path: /api/v1/cluster/show/extra"),
        ("POST", "/api/v1/api-key/delete?key=0000000000", 404, "no API key matches"),
    ],
)
async def test_error_bodies(
    client: aiohttp.ClientSession,
    api: ApiServer,
    fake: FakeNode,
    node_key: str,
    method: str,
    path: str,
    status: int,
    error: str,
) -> None:
    fake.unreachable.add("down@127.0.0.1")
    got, body, headers = await call(client, api, method, path, {"x-api-key": node_key})
    assert got == status
    assert body["type"] == "error" and error in body["error"], body
    assert headers["Content-Type"].startswith("application/json")


async def test_unexpected_exception_is_500_json(
    client: aiohttp.ClientSession, api: ApiServer, fake: FakeNode, node_key: str
) -> None:
    async def broken(
        filters: list[tuple[str, str, str]], per_subscription: bool, limit: int, per_message: bool = False
    ) -> tuple[list[dict[str, Any]], None]:
        raise RuntimeError("session table is gone")

    fake.session_show = broken  # type: ignore[method-assign]
    status, body, _ = await call(client, api, "GET", "/api/v1/session/show", {"x-api-key": node_key})
    assert (status, body) == (500, {"type": "error", "error": "internal error: RuntimeError: session table is gone"})


async def test_other_paths_are_404_json_without_key(client: aiohttp.ClientSession, api: ApiServer) -> None:
    status, body, _ = await call(client, api, "GET", "/nothing-here")
    assert status == 404 and body == {"type": "error", "error": "no such path: /nothing-here"}


# -- health ----------------------------------------------------------------------------------------------------------
async def test_health(client: aiohttp.ClientSession, api: ApiServer, fake: FakeNode) -> None:
    assert (await call(client, api, "GET", "/health"))[:2] == (200, {"status": "ok"})
    fake.ready = (False, "joining the cluster")
    assert (await call(client, api, "GET", "/health"))[:2] == (
        503,
        {"status": "unavailable", "reason": "joining the cluster"},
    )

    def failing() -> tuple[bool, str]:
        raise CommandError("metadata store is closed", 503)

    fake.health = failing  # type: ignore[method-assign]
    assert (await call(client, api, "GET", "/health"))[:2] == (
        503,
        {"status": "unavailable", "reason": "metadata store is closed"},
    )


# -- logs ------------------------------------------------------------------------------------------------------------
async def test_requests_are_logged_without_keys(
    client: aiohttp.ClientSession, api: ApiServer, node_key: str
) -> None:
    with structlog.testing.capture_logs() as logs:
        await call(client, api, "POST", f"/api/v1/api-key/delete?key={node_key}", {"x-api-key": node_key})
        await call(client, api, "GET", "/api/v1/cluster/show", {"x-api-key": "bad-key-value"})
        created = (await call(client, api, "POST", "/api/v1/api-key/create", {"x-api-key": node_key}))[1]["text"]
    requests = [e for e in logs if e["event"] == "admin_request"]
    assert [(e["method"], e["path"], e["command"], e["status"]) for e in requests] == [
        ("POST", "/api/v1/api-key/delete", "api-key delete", 409),
        ("GET", "/api/v1/cluster/show", "cluster show", 401),  # the command it was for, also when refused
        ("POST", "/api/v1/api-key/create", "api-key create", 200),
    ]
    text = repr(logs)
    assert node_key not in text and "bad-key-value" not in text and created not in text


# -- start and stop --------------------------------------------------------------------------------------------------
async def test_stop_closes_the_port_and_is_idempotent(fake: FakeNode, keys: KeyStore) -> None:
    server = await start_api(fake, keys, "127.0.0.1", 0)
    assert server.port > 0
    await server.stop()
    await server.stop()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", server.port)) != 0


async def test_failed_start_unwinds(fake: FakeNode, keys: KeyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    cleaned: list[str] = []
    real_build = admin.http.build_app

    def build(facade: Any, store: KeyStore) -> web.Application:
        app = real_build(facade, store)

        async def on_cleanup(app: web.Application) -> None:
            cleaned.append("app")

        app.on_cleanup.append(on_cleanup)
        return app

    monkeypatch.setattr(admin.http, "build_app", build)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"HTTP admin API cannot listen on 127.0.0.1:{port}"):
            await start_api(fake, keys, "127.0.0.1", port)
    assert cleaned == ["app"]
    server = await start_api(fake, keys, "127.0.0.1", 0)  # and a later start works
    await server.stop()
    assert cleaned == ["app", "app"]


async def test_a_trace_is_streamed_one_json_object_per_line(
    client: aiohttp.ClientSession, api: ApiServer, fake: FakeNode, node_key: str
) -> None:
    url = f"{api.url}/api/v1/trace/client?client-id=c7&--rate-max=50&--stop-after=2"
    async with client.get(url, headers={"x-api-key": node_key}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/x-ndjson")
        docs = [json.loads(line) async for line in response.content]
    assert docs == [*({"type": "line", "line": f"line {i} of c7"} for i in range(3)), {"type": "end"}]
    assert fake.last_call() == ("trace_client", "c7", 50, 0.1, 200, 2.0)


async def test_listeners_health_follows_the_listeners(
    client: aiohttp.ClientSession, api: ApiServer, fake: FakeNode, node_key: str
) -> None:
    status, body, _ = await call(client, api, "GET", "/health/listeners", {})
    assert (status, body) == (200, {"status": "ok", "listeners": 1})
    key = {"x-api-key": node_key}
    status, body, _ = await call(client, api, "POST", "/api/v1/listener/stop?address=127.0.0.1&port=1883&-k", key)
    assert status == 200 and fake.last_call() == ("listener_stop", "127.0.0.1", 1883, True)
    status, body, _ = await call(client, api, "GET", "/health/listeners", {})
    assert status == 503 and body["reason"] == "listeners not running: default (127.0.0.1:1883)"
    status, body, _ = await call(client, api, "GET", "/api/v1/listeners", key)
    assert status == 200 and body["table"][0]["status"] == "stopped"
    status, body, _ = await call(client, api, "POST", "/api/v1/listener/start?address=127.0.0.1&port=1883&--ssl",
                                 key)
    assert status == 400 and "--ssl would make a new one" in body["error"]
    status, body, _ = await call(client, api, "POST", "/api/v1/listener/restart?address=127.0.0.1&port=1883", key)
    assert status == 200 and fake.last_call() == ("listener_start", "127.0.0.1", 1883)
