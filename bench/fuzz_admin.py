"""Fuzz the HTTP admin API of a running node: `python -m bench.fuzz_admin --url URL --key KEY --cases N --seed S`
(bench/fuzz_node.py `--admin M` runs it against the node it started).

Requests: every command path, its aliases and the health/status/metrics pages, random and hostile paths (dot
segments, NUL and invalid percent-escapes, 6,000-character paths), every method (and an unknown one), no key,
a wrong key, malformed Authorization headers, garbage query strings, bad JSON, and bodies up to 2 MiB; plus raw
bytes that are not HTTP at all (bad request lines, lying Content-Length, oversized headers), sent on a socket.

What each answer must be:
* an answer within `timeout` seconds (else: hang), never a 5xx (except 503 from /health*, which means "not
  ready"), and the process still running;
* a request with a body over admin.http.MAX_IGNORED_BODY (the API reads no body): 413 whatever its key (the
  size is checked before the key), unless the HTTP layer refused it first (400/431); the node closes such a
  connection without reading the body, so a client still sending may see the close instead of the answer;
* a request under /api/ or to /metrics, /status.json without the right key: 401 (the key is checked first,
  after the body's size), or a 400/413/431 from the HTTP layer for a request it cannot take (a 10,000-byte
  header, a 16 KB query);
* every 4xx from the API: a JSON body {"type": "error", "error": "<non-empty message>"}; a 4xx from the HTTP
  layer before the API (a request aiohttp cannot parse): a non-empty text body; raw garbage may also be answered
  by closing the connection.
With the right key, only requests that cannot change the node are sent: GET/HEAD/PUT/DELETE/PATCH/OPTIONS
anywhere (a command that changes the node answers 405 to all but POST), POST only to paths that are not commands.
`trace client` (a stream that lasts as long as asked) is left out of the keyed GETs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from admin.commands import COMMANDS
from admin.http import API_PREFIX, HTTP_ALIASES, MAX_IGNORED_BODY

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "FROB")
COMMAND_PATHS = tuple(API_PREFIX + "/" + "/".join(p) for c in COMMANDS for p in (c.path, *c.aliases))
POST_PATHS = frozenset(API_PREFIX + "/" + "/".join(p) for c in COMMANDS if c.method == "POST"
                       for p in (c.path, *c.aliases))
STREAMING = (API_PREFIX + "/trace",)
OTHER_PATHS = ("/health", "/health/ping", "/health/listeners", "/status", "/status.json", "/metrics", "/",
               *(f"{API_PREFIX}/{a}" for a in HTTP_ALIASES))
KEYED_PATHS = ("/metrics", "/status.json")  # without `metrics.public` / `status.public`, the default


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # already percent-encoded as it goes on the wire
    query: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    key: str  # "valid", "none", "wrong", "malformed"


def _garbage_path(rng: random.Random) -> str:
    choice = rng.randrange(8)
    if choice == 0:
        return API_PREFIX + "/" + "/".join(rng.choice(("cluster", "x", "show", "..", ".", "%2e%2e", ""))
                                           for _ in range(rng.randint(1, 5)))
    if choice == 1:
        return "/api/v2/cluster/show"
    if choice == 2:
        return API_PREFIX + "/" + "a" * 6000
    if choice == 3:
        return API_PREFIX + "/%00%ff%fe/" + rng.choice(("%", "%zz", "%e2%82", "%C0%AF"))
    if choice == 4:
        return "/../../etc/passwd"
    if choice == 5:
        return "/api"
    if choice == 6:
        return API_PREFIX + "/" + "/".join(rng.choice(COMMAND_PATHS).split("/")[3:]) + "/extra/words"
    return "/" + "".join(rng.choice("abcxyz/%._-~") for _ in range(rng.randint(1, 40)))


def _query(rng: random.Random) -> str:
    choice = rng.randrange(8)
    words = ("client-id", "node", "--timeout", "topic", "--kill-sessions", "discovery-node", "limit", "--json",
             "username", "--rowtimeout", "level", "")
    values = ("", "x", "-1", "1e309", "99999999999999999999", "%ff%fe", "%", "%zz", "#", "+/+", "a" * 3000,
              "n1@127.0.0.1", "true", "null", "%00")
    if choice == 0:
        return ""
    if choice == 1:
        return "a" * 16_000
    if choice == 2:
        return "&".join("=".join((rng.choice(words), rng.choice(values))) for _ in range(rng.randint(1, 6)))
    if choice == 3:
        return "&&&==&=&%"
    return "&".join(rng.choice((rng.choice(words), f"{rng.choice(words)}={rng.choice(values)}"))
                    for _ in range(rng.randint(1, 4)))


def _body(rng: random.Random) -> tuple[bytes, tuple[tuple[str, str], ...]]:
    choice = rng.randrange(10)
    json_type = (("Content-Type", "application/json"),)
    if choice < 4:
        return b"", ()
    if choice == 4:
        return b'{"broken": [1, 2,', json_type
    if choice == 5:
        return json.dumps({"node": "x" * 100, "deep": [[[[[]]]]]}).encode(), json_type
    if choice == 6:
        return b"\xff\xfe\x00" * rng.randint(1, 100), (("Content-Type", "application/x-www-form-urlencoded"),)
    if choice == 7:
        return b"[" * 10_000, json_type
    if choice == 8 and rng.random() < 0.5:
        return rng.randbytes(rng.randint(1, 2 * 1024 * 1024)), (("Content-Type", "application/octet-stream"),)
    return b"null", json_type


def make_request(rng: random.Random) -> Request:
    r = rng.random()
    path = rng.choice(COMMAND_PATHS) if r < 0.5 else rng.choice(OTHER_PATHS) if r < 0.7 else _garbage_path(rng)
    if rng.random() < 0.05:
        path += "/"
    method = rng.choice(METHODS)
    key = rng.choice(("valid", "valid", "none", "wrong", "malformed"))
    if key == "valid" and (
        (method == "POST" and path.rstrip("/") in POST_PATHS) or path.startswith(STREAMING)
    ):
        key = "wrong"  # the right key only where nothing can change and nothing streams
    headers: list[tuple[str, str]] = []
    if key == "wrong":
        headers.append(rng.choice((("x-api-key", "not-the-key"), ("Authorization", "Bearer nope"),
                                   ("x-api-key", "k" * 10_000))))
    elif key == "malformed":
        headers.append(rng.choice((("Authorization", "Basic !!!notbase64"), ("Authorization", "Bearer"),
                                   ("Authorization", "Digest x=y"), ("x-api-key", ""), ("Authorization", "Basic "),
                                   ("Authorization", "Basic //79/w=="))))
    body, body_headers = _body(rng)
    return Request(method, path, _query(rng), tuple(headers) + body_headers, body, key)


RAW_REQUESTS: tuple[bytes, ...] = (
    b"GARBAGE\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET /api/v1/cluster/show HTTP/9.9\r\n\r\n",
    b"GET /api/v1/cluster/show HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"POST /api/v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\nabc",
    b"POST /api/v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort",
    b"POST /api/v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nbad\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"h" * 70_000 + b"\r\n\r\n",
    b"GET /health HTTP/1.1\r\n" + b"".join(b"H%d: v\r\n" % i for i in range(300)) + b"\r\n",
    b"GET /health HTTP/1.1\r\nHost: \xff\xfe\r\nBad Header Name: x\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(32),  # a TLS ClientHello on the plain port
    b"\x00" * 64,
    b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
)


@dataclass
class AdminReport:
    cases: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    plain_http_errors: int = 0  # 4xx answered by the HTTP layer (aiohttp) before the API, with a text body
    closed_without_answer: int = 0  # raw garbage answered by closing the connection
    bodies_refused: int = 0  # a large body the API does not read: the connection closed (a reset) before its answer

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def text(self) -> str:
        lines = [f"admin API: {self.cases} requests in {self.seconds:.1f} s; failures (5xx, hang, unclear error "
                 f"body, missing 401): {len(self.failures)}",
                 "  statuses: " + ", ".join(f"{k} x{v}" for k, v in sorted(self.statuses.items())),
                 f"  4xx from the HTTP layer with a text body: {self.plain_http_errors}; raw garbage answered by "
                 f"closing: {self.closed_without_answer}; large bodies refused by closing: {self.bodies_refused}"]
        return "\n".join(lines + [f"  FAIL {f}" for f in self.failures[:10]])


def _needs_key(path: str) -> bool:
    return path == "/api" or path.startswith("/api/") or path in KEYED_PATHS


def judge(req: Request, status: int, body: bytes, content_type: str) -> str | None:
    """None if the answer is what the module docstring demands, else what is wrong with it."""
    if status >= 500 and not (status == 503 and req.path.startswith("/health")):
        return f"{status} for {req.method} {req.path[:80]}: {body[:200]!r}"
    from_http_layer = not content_type.startswith("application/json")
    refused_by_http_layer = status in (400, 413, 431) and from_http_layer
    too_large = len(req.body) > MAX_IGNORED_BODY
    if too_large and status != 413 and not refused_by_http_layer:
        return f"{status} for a body of {len(req.body)} bytes to {req.method} {req.path[:80]} (expected 413)"
    if req.key != "valid" and _needs_key(req.path) and status != 401 and not refused_by_http_layer \
            and not too_large:
        return f"{status} without the right key for {req.method} {req.path[:80]} (expected 401)"
    if 400 <= status < 500 and req.method != "HEAD":
        if content_type.startswith("application/json"):
            try:
                doc = json.loads(body)
            except ValueError:
                return f"{status} with a body that is not JSON: {body[:100]!r}"
            if not (isinstance(doc, dict) and doc.get("type") == "error" and doc.get("error")):
                return f"{status} with an unclear JSON body: {body[:200]!r}"
        elif not body.strip():
            return f"{status} with an empty body for {req.method} {req.path[:80]}"
    return None


async def send(session: aiohttp.ClientSession, base: str, key: str | None, req: Request,
               timeout: float) -> tuple[int, bytes, str]:
    headers = dict(req.headers)
    if req.key == "valid" and key:
        headers["x-api-key"] = key
    url = base + req.path + (f"?{req.query}" if req.query else "")
    async with session.request(req.method, URL(url, encoded=True), headers=headers,
                               data=req.body or None, timeout=aiohttp.ClientTimeout(total=timeout),
                               allow_redirects=False) as answer:
        body = await answer.content.read(1 << 20)
        return answer.status, body, answer.headers.get("Content-Type", "")


async def send_raw(host: str, port: int, data: bytes, timeout: float) -> bytes | None:
    """Send `data` and read the answer; None if the server closed without a byte."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        with contextlib.suppress(ConnectionError):
            writer.write(data)
            await writer.drain()
        answer = await asyncio.wait_for(reader.read(65536), timeout)
    except ConnectionError:
        return None
    finally:
        writer.close()
    return answer or None


async def _run(base: str, key: str | None, cases: int, run_seed: int, timeout: float, concurrency: int,
               report: AdminReport) -> None:
    rng = random.Random(run_seed)
    requests = [make_request(rng) for _ in range(cases)]
    split = urlsplit(base)
    host, port = split.hostname or "127.0.0.1", split.port or 80
    limit = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(skip_auto_headers=("Content-Type",)) as session:

        async def one(req: Request) -> None:
            async with limit:
                try:
                    status, body, content_type = await send(session, base, key, req, timeout)
                except TimeoutError:
                    report.failures.append(f"no answer within {timeout} s: {req.method} {req.path[:80]}")
                    return
                except aiohttp.ClientResponseError as e:
                    # a status our client could not read to the end: aiohttp's own 400 to a HEAD carries a body
                    status, body, content_type = e.status, (e.message or "?").encode()[:200], "text/plain"
                except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as e:
                    if len(req.body) > MAX_IGNORED_BODY:  # the node closed rather than read a body nobody wants
                        report.bodies_refused += 1
                        return
                    report.failures.append(f"{type(e).__name__} {str(e)[:200]} for {req.method} {req.path[:80]}")
                    return
                except aiohttp.ClientError as e:
                    report.failures.append(f"{type(e).__name__} {str(e)[:200]} for {req.method} {req.path[:80]}")
                    return
            report.statuses[status] += 1
            problem = judge(req, status, body, content_type)
            if problem:
                report.failures.append(problem)
            elif 400 <= status < 500 and not content_type.startswith("application/json") and req.method != "HEAD":
                report.plain_http_errors += 1

        async def raw(data: bytes) -> None:
            async with limit:
                try:
                    answer = await send_raw(host, port, data, timeout)
                except TimeoutError:
                    report.failures.append(f"raw request not answered nor closed within {timeout} s: {data[:40]!r}")
                    return
            if answer is None:
                report.closed_without_answer += 1
                return
            try:
                status = int(answer.split(b" ", 2)[1])
            except (IndexError, ValueError):
                report.failures.append(f"raw request answered with something else than HTTP: {answer[:60]!r}")
                return
            report.statuses[status] += 1
            if status >= 500 or (status < 400 and not data.startswith(b"GET /health")):
                report.failures.append(f"raw request {data[:40]!r} answered {status}")
            else:
                report.plain_http_errors += 1

        await asyncio.gather(*(one(r) for r in requests), *(raw(d) for d in RAW_REQUESTS))
        # still serving: the node's own health and a keyed read
        async with session.get(base + "/health/ping", timeout=aiohttp.ClientTimeout(total=timeout)) as ping:
            if ping.status != 200:
                report.failures.append(f"/health/ping answered {ping.status} after the batch")
        if key:
            async with session.get(base + API_PREFIX + "/cluster/show", headers={"x-api-key": key},
                                   timeout=aiohttp.ClientTimeout(total=timeout)) as show:
                if show.status != 200:
                    report.failures.append(f"cluster/show answered {show.status} after the batch")


def fuzz_admin(base: str, key: str | None, cases: int, run_seed: int, *, timeout: float = 15.0,
               concurrency: int = 16, alive: Callable[[], bool] | None = None) -> AdminReport:
    """Send `cases` generated requests (and the raw ones) to the admin API at `base`; see the module docstring."""
    report = AdminReport()
    started = time.monotonic()
    try:
        asyncio.run(_run(base, key, cases, run_seed, timeout, concurrency, report))
    except (OSError, aiohttp.ClientError, TimeoutError) as e:
        report.failures.append(f"the API stopped answering: {type(e).__name__}: {e}")
    report.cases = cases + len(RAW_REQUESTS)
    report.seconds = time.monotonic() - started
    if alive is not None and not alive():
        report.failures.append("the node exited")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz_admin", description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="the admin API, e.g. http://127.0.0.1:8888")
    parser.add_argument("--key", default=None, help="a valid API key (DATA_DIR/api.key)")
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    run_seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    print(f"fuzz_admin: seed {run_seed}, {args.cases} requests to {args.url}", flush=True)
    report = fuzz_admin(args.url.rstrip("/"), args.key, args.cases, run_seed)
    print(report.text())
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
