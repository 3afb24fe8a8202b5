"""API key scopes: the names and VerneMQ's aliases, the one rule that gives every command and path its scope, and
the API's answers (401 without a valid key, 403 naming the needed scope) for keys of each scope."""

from __future__ import annotations

import pytest
from aiohttp import ClientSession

from admin.commands import BY_PATH, COMMANDS
from admin.http import ApiServer
from admin.keys import KeyStore
from admin.scopes import Scope, allows, needed_scope, parse_scope
from tests.unit.admin.fakes import FakeNode


@pytest.mark.parametrize(("name", "scope"), [
    ("metrics", Scope.METRICS), ("status", Scope.STATUS), ("read", Scope.READ), ("admin", Scope.ADMIN),
    (" Admin ", Scope.ADMIN), ("mgmt", Scope.ADMIN), ("health", Scope.METRICS),
])
def test_parse_scope(name: str, scope: Scope) -> None:
    assert parse_scope(name) is scope


@pytest.mark.parametrize(("name", "message"), [
    ("root", "unknown scope 'root'; scopes: metrics, status, read, admin"),
    ("", "unknown scope"),
    ("api2", "not supported"),
    ("httppub", "no HTTP publish"),
])
def test_parse_scope_refuses(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_scope(name)


def test_scopes_nest() -> None:
    order = [Scope.METRICS, Scope.STATUS, Scope.READ, Scope.ADMIN]
    for i, granted in enumerate(order):
        assert [allows(granted, needed) for needed in order] == [j <= i for j in range(len(order))]


def test_every_command_needs_read_to_read_and_admin_to_change() -> None:
    for cmd in COMMANDS:
        assert cmd.scope is (Scope.READ if cmd.method == "GET" else Scope.ADMIN), cmd.name
    assert BY_PATH[("node", "stop")].scope is Scope.ADMIN
    assert BY_PATH[("cluster", "leave")].scope is Scope.ADMIN
    assert BY_PATH[("api-key", "create")].scope is Scope.ADMIN
    assert BY_PATH[("cluster", "show")].scope is Scope.READ


@pytest.mark.parametrize(("path", "method", "command_method", "scope"), [
    ("/metrics", "GET", None, Scope.METRICS),
    ("/status.json", "GET", None, Scope.STATUS),
    ("/api/v1/cluster/show", "GET", "GET", Scope.READ),
    ("/api/v1/node/stop", "POST", "POST", Scope.ADMIN),
    ("/api/v1/node/stop", "GET", "POST", Scope.ADMIN),  # the command's method decides, not the request's
    ("/api/v1/no/such", "GET", None, Scope.READ),
    ("/api/v1/no/such", "DELETE", None, Scope.ADMIN),
])
def test_needed_scope(path: str, method: str, command_method: str | None, scope: Scope) -> None:
    assert needed_scope(path, method, command_method) is scope


# -- the API -----------------------------------------------------------------------------------------------------
READ_COMMAND = ("GET", "/api/v1/cluster/show")
CHANGES = [("POST", "/api/v1/node/stop"), ("POST", "/api/v1/cluster/leave?node=vmq2@127.0.0.1"),
           ("POST", "/api/v1/api-key/create?scope=admin")]
#: (method, path) -> the least scope that gets past the key check
REQUESTS = [("GET", "/metrics", Scope.METRICS), ("GET", "/status.json", Scope.STATUS),
            (*READ_COMMAND, Scope.READ), ("GET", "/api/v1/api-key/show", Scope.READ),
            *((m, p, Scope.ADMIN) for m, p in CHANGES)]


async def answer(api: ApiServer, method: str, path: str, key: str | None) -> tuple[int, str]:
    headers = {"x-api-key": key} if key is not None else {}
    async with ClientSession() as http, http.request(method, api.url + path, headers=headers) as response:
        if response.content_type != "application/json":
            return response.status, ""
        body = await response.json()
        return response.status, str(body.get("error", "")) if isinstance(body, dict) else ""


@pytest.mark.parametrize("scope", list(Scope))
async def test_each_scope_gets_what_it_may_and_403_for_the_rest(api: ApiServer, keys: KeyStore, scope: Scope) -> None:
    key = keys.create(scope)
    for method, path, needed in REQUESTS:
        status, error = await answer(api, method, path, key)
        if allows(scope, needed):
            assert status not in (401, 403), (method, path, status, error)
        else:
            assert status == 403, (method, path, status)
            assert f"scope is '{scope.label}'" in error and f"needs scope '{needed.label}'" in error
            assert key not in error


async def test_a_metrics_key_cannot_stop_the_node(api: ApiServer, keys: KeyStore, fake: FakeNode) -> None:
    key = keys.create(Scope.METRICS)
    status, error = await answer(api, "POST", "/api/v1/node/stop", key)
    assert (status, error) == (403, "this API key's scope is 'metrics'; 'node stop' needs scope 'admin' "
                                     "(vmq-admin api-key create scope=admin)")
    assert ("node_stop",) not in fake.calls


@pytest.mark.parametrize(("key", "message"), [(None, "missing API key"), ("", "missing API key"),
                                              ("not-a-key-of-this-cluster", "invalid API key")])
async def test_no_or_unknown_key_is_401(api: ApiServer, key: str | None, message: str) -> None:
    for method, path, _ in REQUESTS:
        status, error = await answer(api, method, path, key)
        assert (status, error.startswith(message)) == (401, True), (method, path)


async def test_a_deleted_key_is_401_at_once(api: ApiServer, keys: KeyStore) -> None:
    key = keys.create(Scope.READ)
    assert (await answer(api, *READ_COMMAND, key))[0] == 200
    keys.delete(key)
    assert (await answer(api, *READ_COMMAND, key))[0] == 401
