"""The HTTP administration API: every command of `admin.commands.COMMANDS` at `/api/v1/<path>`, plus `/health`.

    GET  /api/v1/cluster/show                        -> {"type": "table", "table": [...]}
    POST /api/v1/cluster/join?discovery-node=b@host  -> {"type": "text", "text": "..."}
    any error                                        -> 4xx/5xx {"type": "error", "error": "..."}
    GET  /health (no key)                            -> 200 {"status": "ok"} | 503 {"status": "unavailable", ...}
    GET  /health/ping (no key)                       -> 200 {"status": "ok"} while the process serves HTTP
    GET  /health/listeners (no key)                  -> 200 while every MQTT listener listens, else 503 naming them
    GET  /status.json                                -> {"nodes": [one row per member], "note": "..." if some did
                                                        not answer}
    GET  /api/v1/sessions, /api/v1/cluster           -> VerneMQ's short paths of session show, cluster show
    GET  /metrics                                    -> the Prometheus text format (admin.prometheus); the key
                                                        is needed unless `metrics.public = on`
    GET  /status (no key)                            -> the status page (admin.status_page): HTML only, its data
                                                        comes from /status.json, which needs the key unless
                                                        `status.public = on`

Commands that only read answer GET (and HEAD), commands that change something answer POST only; another method
-> 405 with an `Allow` header. Parameters travel in the query string, as the words `vmq-admin` takes
(`?node=vmq2@127.0.0.1&--kill-sessions&--timeout=30`); `+` is a literal plus (an MQTT wildcard), a space is %20.

Every path under /api/ needs an API key (`admin.keys`): `Authorization: Bearer KEY` or the `x-api-key` header;
the user name of an `Authorization: Basic` header is taken too (VerneMQ's way: `curl http://KEY@host:8888/...`;
the password is ignored). Without a valid key (none, unknown, expired) the answer is 401, with no `WWW-Authenticate`
challenge: a browser never asks for the key in its own dialog, so it never keeps it and never sends it again by
itself. A key whose scope is below what the request needs (`admin.scopes`: `metrics` for /metrics, `status` for
/status.json, `read` for a command marked GET in the table, `admin` for one marked POST) gets 403 naming the scope.

A request that may change something (any method but GET, HEAD and OPTIONS) sent by a web page of another origin is
refused with 403 before its key is looked at: `Sec-Fetch-Site` other than `same-origin` or `none`, or an `Origin`
that is not this API's own (`scheme://Host`). Browsers set both headers and a page's script cannot; `vmq-admin`,
curl and scripts send neither (docs/security.md, "The admin API in a browser").

No route reads a request body (parameters travel in the query string). A body of up to MAX_IGNORED_BODY bytes
(the `{}` or empty form some HTTP clients send with every POST) is allowed and ignored; a larger one is refused
before it is read: a Content-Length over the limit at once, a chunked body once what arrived passes it. The answer
is 413 with a JSON error and `Connection: close`, and the node closes the connection instead of reading the rest
(`Expect: 100-continue` gets no 100 for such a body). The size is checked before the key, so a request too large
gets 413 with or without a key (the answer tells nothing about the key); a small one without a key gets 401.

Each request is logged through structlog (event "admin_request": method, path, command, status, ms, peer); query
strings, headers and bodies are never logged, so neither are keys. aiohttp's own access log is off.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import ssl
import time
from contextlib import AsyncExitStack
from typing import Any

import structlog
from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from yarl import URL

from admin import prometheus, status_page
from admin.commands import (
    BY_PATH,
    COMMANDS,
    Command,
    Context,
    execute,
    parse_args,
    query_to_words,
    resolve,
    result_to_json,
)
from admin.connection_cap import ConnectionCap
from admin.errors import CommandError
from admin.facade import AdminNode
from admin.keys import KeyStore
from admin.results import STREAM_CONTENT_TYPE, Lines
from admin.scopes import PATH_SCOPES, allows, needed_scope
from admin.young_garbage import YoungGarbage

API_PREFIX = "/api/v1"
#: the short paths VerneMQ's HTTP API documents, for the commands they name
HTTP_ALIASES: dict[str, tuple[str, ...]] = {
    "sessions": ("session", "show"), "cluster": ("cluster", "show"), "listeners": ("listener", "show"),
}
#: paths outside /api/ that need the key too (they list clients and counts)
KEYED_PATHS = frozenset(PATH_SCOPES)
#: keyed paths that a setting opens to anyone (`metrics.public = on`, `status.public = on`)
PUBLIC_WHEN: dict[str, str] = {"/metrics": "metrics.public", "/status.json": "status.public"}
PROMETHEUS = web.AppKey("prometheus_registry", CollectorRegistry)
MEMBER_ROWS = web.AppKey("status_member_rows", status_page.MemberRows)
CONTEXT = web.AppKey("admin_context", Context)
_COMMAND_NAME = web.RequestKey("admin_command", str)
#: URL path of each command (and alias) -> the command, for the scope its key needs (admin.scopes)
COMMAND_AT = web.AppKey("command_at", dict[str, Command])
#: bytes of request body allowed (and ignored: no route reads a body); more gets 413 before it is read
MAX_IGNORED_BODY = 1024
REFUSED = YoungGarbage()  # refused requests: their young garbage collected now and then (admin.young_garbage)
#: seconds a chunked body of at most MAX_IGNORED_BODY bytes has to arrive whole (else 408)
BODY_TIMEOUT = 10.0
#: methods that change nothing; any other is refused when another origin's web page sends it
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: `Sec-Fetch-Site` values of a request that no other origin's page made (`none`: the operator typed the URL)
OWN_FETCH_SITES = frozenset({"same-origin", "none"})

log = structlog.get_logger("admin.http")

_dumps = functools.partial(json.dumps, default=str)


def command_url_path(cmd: Command, path: tuple[str, ...] | None = None) -> str:
    return API_PREFIX + "/" + "/".join(path or cmd.path)


def _json(status: int, doc: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(doc, status=status, headers=headers, dumps=_dumps)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return _json(status, {"type": "error", "error": message}, headers)


# -- middlewares -------------------------------------------------------------------------------------------------
#: Requests that only read (a GET command only reads: `_command_handler`). Answered without error they are logged at
#: debug: a Prometheus scrape, a status page polling once a second and HAProxy's health checks would otherwise be
#: most of an idle node's log (docs/operations.md, "Admin API requests in the log").
_READS = frozenset({"GET", "HEAD", "OPTIONS"})


@web.middleware
async def _errors_and_log(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost: every failure becomes a JSON error body; one log event per request."""
    started = time.perf_counter()
    response: web.StreamResponse
    try:
        response = await handler(request)
    except CommandError as exc:
        response = _error(exc.status, exc.message)
        exc.__traceback__ = None  # answered, never logged: see below
    except web.HTTPException as exc:
        headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        what = f"no such path: {request.path}" if exc.status == 404 else (exc.reason or "error")
        response = _error(exc.status, what, headers)
        # aiohttp's router answers a path it does not know (404) or a method a route does not take (405) by
        # raising the exception its match info holds: the traceback's frames hold the request, whose match info
        # holds the exception again, a reference cycle per request (request, headers, URL, frames) that only the
        # collector frees, and it runs rarely on a node (`tune_garbage_collector`). Nothing reads the traceback.
        exc.__traceback__ = None
    except Exception as exc:
        log.exception("admin_request_failed", method=request.method, path=request.path)
        response = _error(500, f"internal error: {type(exc).__name__}: {exc}")
    fields = {
        "method": request.method,
        "path": request.path,
        "command": request.get(_COMMAND_NAME),
        "status": response.status,
        "ms": round((time.perf_counter() - started) * 1000, 1),
        "peer": request.remote,
    }
    if response.status >= 400:
        REFUSED.refused()
    if request.path.startswith("/health") or (request.method in _READS and response.status < 400):
        # scrapes, status polls, show commands; health checks even when they answer 503 (a state, not a refusal)
        log.debug("admin_request", **fields)
    else:
        log.info("admin_request", **fields)  # what changes something, and every refusal: the audit trail
    return response


@web.middleware
async def _body_limit(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Before the key: refuse a body over MAX_IGNORED_BODY before reading it (see the module's docstring)."""
    length = request.content_length  # None: no Content-Length (chunked, or no body at all)
    if length is not None and length > MAX_IGNORED_BODY:
        return await _refuse_body(request, 413, f"request body too large: {length} bytes announced; this API reads "
                                                f"no body (parameters go in the query string), at most "
                                                f"{MAX_IGNORED_BODY} bytes are allowed")
    if length is None and request.body_exists:  # chunked: counted as it arrives, never more than the limit kept
        received = 0
        try:
            async with asyncio.timeout(BODY_TIMEOUT):
                while chunk := await request.content.readany():
                    received += len(chunk)
                    if received > MAX_IGNORED_BODY:
                        return await _refuse_body(request, 413, f"request body too large: {received} bytes sent "
                                                                f"so far; at most {MAX_IGNORED_BODY} bytes are allowed")
        except TimeoutError:
            return await _refuse_body(request, 408, f"request body not complete within {BODY_TIMEOUT:g} s")
    return await handler(request)


async def _refuse_body(request: web.Request, status: int, message: str) -> web.StreamResponse:
    """Answer `status` with a JSON error and close the connection without reading the rest of the body (aiohttp
    would otherwise read it and throw it away, for up to 10 s)."""
    response = _error(status, message)
    response.force_close()  # Connection: close
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()
    return response


async def _expect_continue(request: web.Request) -> None:
    """`Expect: 100-continue` (curl sends it with a body over 1 MiB): invite the body only when it is one the API
    takes; else say nothing, and `_body_limit` answers 413 at once. Another expectation gets 417, as in aiohttp."""
    expect = request.headers.get(hdrs.EXPECT, "")
    if expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"unknown Expect: {expect}")
    length = request.content_length
    if request.version >= HttpVersion11 and (length is None or length <= MAX_IGNORED_BODY):
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer's own bytes start after the 100


def _presented_key(request: web.Request) -> str | None:
    """The key the client sent: x-api-key header, else bearer token or basic-auth user name (VerneMQ's way, for
    curl and scripts; a browser never has it, as the API never challenges); None when none."""
    header = request.headers.get("x-api-key")
    if header is not None:
        return header.strip()
    auth = request.headers.get("Authorization")
    if not auth:
        return None
    scheme, _, rest = auth.strip().partition(" ")
    if scheme.lower() == "bearer":
        return rest.strip()
    if scheme.lower() != "basic":
        return ""
    try:
        user_pass = base64.b64decode(rest.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return ""
    return user_pass.partition(":")[0]


def _foreign_page(request: web.Request) -> str | None:
    """Why `request` comes from a web page of another origin (for the 403's message), or None when it does not
    (a browser on one of this API's own pages, a navigation the operator typed, or a client that is no browser).
    Browsers set `Sec-Fetch-Site` and `Origin` themselves; a page's script cannot set or change either."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site.strip().lower() not in OWN_FETCH_SITES:
        return f"Sec-Fetch-Site: {site.strip()[:40]}"
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is not None:
        theirs = _origin_key(origin)  # None: `null` (a sandboxed frame, a data: URL), never this API's own
        if theirs is None or theirs != _origin_key(f"{request.scheme}://{request.host}"):
            return f"Origin: {origin.strip()[:200]}"
    return None


def _origin_key(origin: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of an origin, the port filled in for http and https; None for `null` or garbage."""
    try:
        url = URL(origin.strip())
    except ValueError:
        return None
    if not url.scheme or not url.host:
        return None
    return url.scheme.lower(), url.host.lower(), url.port


@web.middleware
async def _refuse_foreign_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Before the key: a request that may change something, sent by another origin's page, gets 403 (a form or a
    `fetch` of another site must not act with credentials the browser may hold for this API)."""
    if request.method not in SAFE_METHODS and (why := _foreign_page(request)) is not None:
        log.warning("admin_request_from_another_page", method=request.method, path=request.path, why=why,
                    peer=request.remote)
        return _error(403, f"refused: a request that changes something came from another web page ({why}); "
                           "use vmq-admin, curl or a script")
    return await handler(request)


@web.middleware
async def _auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The key for /api/ and KEYED_PATHS: 401 without a valid one (never with a `WWW-Authenticate` challenge), 403
    when its scope is below the one the request needs (admin.scopes.needed_scope, from the command table)."""
    opened_by = PUBLIC_WHEN.get(request.path)
    if opened_by is not None and _setting_on(request.app[CONTEXT].facade, opened_by):
        return await handler(request)
    if request.path == "/api" or request.path.startswith("/api/") or request.path in KEYED_PATHS:
        command = request.app[COMMAND_AT].get(request.path)
        if command is not None:
            request[_COMMAND_NAME] = command.name  # for the access log line of a refusal too
        needed = needed_scope(request.path, request.method, command.method if command else None)
        try:
            granted = request.app[CONTEXT].keys.authenticate(_presented_key(request) or "")
        except CommandError as exc:
            return _error(exc.status, exc.message)
        if not allows(granted, needed):
            what = f"'{command.name}'" if command else f"{request.method} {request.path}"
            return _error(403, f"this API key's scope is '{granted.label}'; {what} needs scope '{needed.label}' "
                               f"(vmq-admin api-key create scope={needed.label})")
    return await handler(request)


def _metric_namespace(facade: AdminNode) -> str:
    """The node's `prometheus_namespace` (admin.prometheus); "" when the node has no such setting."""
    try:
        return facade.get_setting("prometheus_namespace")
    except CommandError:
        return ""


def _setting_on(facade: AdminNode, key: str) -> bool:
    """Whether the on/off setting `key` is on now (read at each request: `vmq-admin set` may change it)."""
    try:
        return facade.get_setting(key) == "on"
    except CommandError:
        return False


# -- handlers ----------------------------------------------------------------------------------------------------
def _command_handler(cmd: Command) -> Handler:
    allowed = ("GET", "HEAD") if cmd.method == "GET" else ("POST",)

    async def handle(request: web.Request) -> web.StreamResponse:
        request[_COMMAND_NAME] = cmd.name
        if request.method not in allowed:
            return _error(
                405,
                f"'{cmd.name}' takes {cmd.method}, not {request.method}"
                + (" (it only reads)" if cmd.method == "GET" else " (it changes the node)"),
                {"Allow": ", ".join(allowed)},
            )
        args = parse_args(cmd, query_to_words(request.rel_url.raw_query_string))
        result = await execute(cmd, args, request.app[CONTEXT])
        if isinstance(result, Lines):
            return await _stream(request, result)
        return _json(200, result_to_json(result))

    return handle


async def _stream(request: web.Request, result: Lines) -> web.StreamResponse:
    """Send each line as it comes (chunked, one JSON object per line), then an end object. A client that goes
    away ends the iterator (its cleanup stops what produced the lines)."""
    response = web.StreamResponse(status=200, headers={"Content-Type": STREAM_CONTENT_TYPE})
    await response.prepare(request)
    lines = result.lines
    try:
        async for line in lines:
            await response.write((_dumps({"type": "line", "line": line}) + "\n").encode())
        await response.write((_dumps({"type": "end"}) + "\n").encode())
        await response.write_eof()
    except ConnectionError:
        pass  # the operator's terminal went away
    finally:
        aclose = getattr(lines, "aclose", None)
        if aclose is not None:
            await aclose()
    return response


async def _unknown(request: web.Request) -> web.StreamResponse:
    words = [w for w in request.match_info.get("tail", "").split("/") if w]
    cmd, _rest = resolve(words)  # CommandError 404 naming the unknown command
    raise CommandError(f"no such API path: {request.path}; '{cmd.name}' is at {command_url_path(cmd)}", 404)


async def _listeners_health(request: web.Request) -> web.StreamResponse:
    """VerneMQ's /health/listeners: 200 while every MQTT listener of the node listens, else 503 naming the
    stopped ones (`vmq-admin listener stop`, a drain, a node that left)."""
    rows = request.app[CONTEXT].facade.listener_show()
    stopped = [f"{r['name']} ({r['ip']}:{r['port']})" for r in rows if r.get("status") != "running"]
    if stopped:
        return _json(503, {"status": "unavailable", "reason": "listeners not running: " + ", ".join(stopped)})
    return _json(200, {"status": "ok", "listeners": len(rows)})


async def _ping(request: web.Request) -> web.StreamResponse:
    return _json(200, {"status": "ok"})


async def _metrics(request: web.Request) -> web.StreamResponse:
    body = generate_latest(request.app[PROMETHEUS])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _status_page(request: web.Request) -> web.StreamResponse:
    facade = request.app[CONTEXT].facade
    page = status_page.render(facade.node_name(), public=_setting_on(facade, "status.public"))
    return web.Response(text=page, content_type="text/html", headers={"Cache-Control": "no-store"})


async def _status_json(request: web.Request) -> web.StreamResponse:
    facade = request.app[CONTEXT].facade
    rows, note = await request.app[MEMBER_ROWS].get()
    return _json(200, status_page.document(facade.overview(), rows, note))


async def _health(request: web.Request) -> web.StreamResponse:
    try:
        ready, reason = request.app[CONTEXT].facade.health()
    except CommandError as exc:
        ready, reason = False, exc.message
    if ready:
        return _json(200, {"status": "ok"})
    return _json(503, {"status": "unavailable", "reason": reason})


def build_app(facade: AdminNode, keys: KeyStore) -> web.Application:
    """The aiohttp application: one route per command path and alias, /health, JSON errors, API-key auth."""
    app = web.Application(middlewares=[_errors_and_log, _body_limit, _refuse_foreign_pages, _auth])
    app[CONTEXT] = Context(facade, keys)
    app[COMMAND_AT] = {command_url_path(cmd, path): cmd for cmd in COMMANDS for path in (cmd.path, *cmd.aliases)}
    app[COMMAND_AT].update({f"{API_PREFIX}/{alias}": BY_PATH[path] for alias, path in HTTP_ALIASES.items()})
    app[PROMETHEUS] = prometheus.registry(facade.node_name, facade.metrics,
                                          functools.partial(_metric_namespace, facade), facade.build_info)
    app[MEMBER_ROWS] = status_page.MemberRows(facade.status)
    route = functools.partial(app.router.add_route, expect_handler=_expect_continue)
    for cmd in COMMANDS:
        for path in (cmd.path, *cmd.aliases):
            route("*", command_url_path(cmd, path), _command_handler(cmd))
    for alias, path in HTTP_ALIASES.items():
        route("*", f"{API_PREFIX}/{alias}", _command_handler(BY_PATH[path]))
    route("GET", "/health", _health)
    route("GET", "/health/ping", _ping)
    route("GET", "/health/listeners", _listeners_health)
    route("GET", "/status.json", _status_json)
    route("GET", "/status", _status_page)
    route("GET", "/metrics", _metrics)
    route("*", API_PREFIX + "/{tail:.*}", _unknown)
    return app


# -- serving -----------------------------------------------------------------------------------------------------
class OneLineBadRequests(logging.Filter):
    """aiohttp logs every request it cannot parse (which it answers with a 4xx itself) as an error with a
    traceback: anyone who reaches the port could fill the log with them. Such a record becomes one warning line
    (bench/fuzz_admin.py sends those requests; tests/integration/test_fuzz_node.py checks the log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 0) < 500:
            peer = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            first_line = (exc.message or "").strip().splitlines()[:1]
            record.msg = "bad HTTP request from %s answered %s: %s"
            record.args = (peer, exc.code, first_line[0][:200] if first_line else "")
            record.exc_info = None
            record.exc_text = None
            record.levelno = logging.WARNING
            record.levelname = "WARNING"
            # The error's traceback holds the frame of aiohttp's data_received, whose locals hold the error again
            # (and the connection's protocol and the bytes read): a reference cycle per refused request, which
            # only a full collection frees, rare on a node (`tune_garbage_collector`). Nothing reads the
            # traceback after this line: drop it, and the request is freed at once.
            exc.__traceback__ = None
        return True


class RequestErrorLog(logging.Logger):
    """The logger of the admin API's aiohttp request handlers (`web.AppRunner(logger=...)`), a child of
    aiohttp.server with `OneLineBadRequests` on it. Once an error is logged (or not, below the level), nothing
    reads its traceback again, and the traceback holds aiohttp's frame, whose locals hold the error again, the
    connection's protocol and the bytes read: a reference cycle per refused request that only a full collection
    frees, rare on a node (`tune_garbage_collector`). So it is dropped, and the request is freed at once. aiohttp
    logs through `debug` (a first request that is not HTTP at all) and `exception` (which calls `error`)."""

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        super().debug(msg, *args, **kwargs)
        _drop_traceback(kwargs.get("exc_info"))
        if kwargs.get("exc_info") is not None:
            REFUSED.refused()

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        super().error(msg, *args, **kwargs)
        _drop_traceback(kwargs.get("exc_info"))
        if kwargs.get("exc_info") is not None:
            REFUSED.refused()


def _drop_traceback(exc_info: object) -> None:
    if isinstance(exc_info, BaseException):
        exc_info.__traceback__ = None


def request_error_log() -> RequestErrorLog:
    """A RequestErrorLog under aiohttp.server (its records go to the same handlers)."""
    logger = RequestErrorLog("aiohttp.server.admin")
    logger.parent = logging.getLogger("aiohttp.server")
    logger.addFilter(OneLineBadRequests())
    return logger


def quiet_bad_requests() -> None:
    """Install `OneLineBadRequests` on aiohttp's server logger (once; the MQTT WebSocket listeners share it)."""
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, OneLineBadRequests) for f in server_log.filters):
        server_log.addFilter(OneLineBadRequests())


class ApiServer:
    """A running API; `stop()` undoes what `start_api` did, in reverse order, and may be called more than once."""

    def __init__(self, stack: AsyncExitStack, host: str, port: int) -> None:
        self._stack = stack
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        await self._stack.aclose()


async def start_api(
    facade: AdminNode,
    keys: KeyStore,
    host: str = "127.0.0.1",
    port: int = 8888,
    *,
    shutdown_timeout: float = 5.0,
    ssl_context: ssl.SSLContext | None = None,
    max_connections: int = 64,
    request_timeout: float = 10.0,
) -> ApiServer:
    """Serve the API on the running event loop at host:port (0: a free port, see `ApiServer.port`).

    Each step that succeeds registers its undoing on an exit stack; when a later step fails (the port is taken),
    the earlier ones are undone in reverse before the error propagates. `shutdown_timeout`: how long `stop()`
    lets requests in progress finish. `ssl_context`: serve HTTPS with it. An address that cannot be bound raises
    OSError naming it. At most `max_connections` connections at once (more get 503, admin.connection_cap); a
    connection without a whole request head `request_timeout` seconds after it opened or after its last answer
    is closed (`listener.http.max_connections`, `listener.http.request_timeout`).
    """
    quiet_bad_requests()
    stack = AsyncExitStack()
    try:
        runner = web.AppRunner(build_app(facade, keys), access_log=None, shutdown_timeout=shutdown_timeout,
                               logger=request_error_log(), keepalive_timeout=request_timeout)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)  # closes the connections, after the listening socket (below)
        assert runner.server is not None
        cap = ConnectionCap(runner.server, max_connections, host, port)
        try:  # no aiohttp site: the listening socket's protocol is the cap's (HTTPS with a context)
            server = await asyncio.get_running_loop().create_server(cap.protocol, host, port, ssl=ssl_context,
                                                                    reuse_address=True)
        except OSError as exc:
            raise OSError(exc.errno, f"HTTP admin API cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        stack.callback(server.close)
        actual_port = int(server.sockets[0].getsockname()[1])
    except BaseException:
        await stack.aclose()
        raise
    log.info("admin_api_started", host=host, port=actual_port)
    stack.callback(log.info, "admin_api_stopped", host=host, port=actual_port)
    return ApiServer(stack, host, actual_port)
