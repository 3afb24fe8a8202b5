"""The admin API refuses a request body it does not need before reading it (admin.http, MAX_IGNORED_BODY): 413
with a JSON error and the connection closed, the body's size checked before the key; a real node whose admin port
receives hundreds of 2 MiB bodies keeps its memory; the real `vmq-admin` still works. And a request that aiohttp
refuses before the API sees it (a 10,000-byte header, an unknown method: 400) is freed at once, not left as a
reference cycle for the node's rare full collections (admin.http.RequestErrorLog); and bench.fuzz_admin's
hostile mix does not keep the node's memory (admin.young_garbage)."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from admin.http import MAX_IGNORED_BODY
from admin.young_garbage import FULL_AFTER
from bench import fuzz_admin
from tests.integration.admin_api import admin, node
from tests.integration.conftest import Broker, broker_kind, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("the vmqpy admin API")]

__all__ = ["node"]  # the fixture this module's tests take

TWO_MIB = 2 * 1024 * 1024
SENT_BEFORE_READING = 256 * 1024  # what the client pushes before it reads the answer (the rest after, if it can)
# What 200 refused 2 MiB bodies may leave in the node's RSS. Before the limit, aiohttp read and discarded every
# body: 1,200 such requests took RSS from 193 to 824 MiB (docs/security.md), ~0.5 MiB each, i.e. ~100 MiB for 200.
# Now each request costs its headers plus what arrived before its answer (a socket read or two of the first
# 256 KiB); what the allocator keeps of that is a few MiB whatever the count, hence 24 MiB, a quarter of before.
RSS_GROWTH_BOUND_KIB = 24 * 1024
REFUSED_REQUESTS = 200
# Each 400 for a 10,000-byte header used to leave 13.5 KiB in RSS until a full collection (1,000 of them: 65 -> 78
# MiB, docs/security.md), one for an unknown method ~100 KiB; freed at once, 1,000 of them cost ~0.1 KiB each.
HTTP_LAYER_REFUSALS = 1000
HTTP_LAYER_GROWTH_BOUND_KIB = 4 * 1024


@pytest.fixture(scope="module")
def _module_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, str]]:
    http_port = free_port()
    broker = Broker(broker_kind(), tmp_path_factory.mktemp("admin-statuses"),
                    {"listener.http.default": f"127.0.0.1:{http_port}"})
    try:
        yield broker, f"http://127.0.0.1:{http_port}"
    finally:
        broker.stop()


@pytest.fixture
def status_node(_module_node: tuple[Broker, str]) -> Iterator[tuple[Broker, str]]:
    """One node with its API for the tests that assert only on the answers to their own requests (not on its
    memory, which the other tests measure on a fresh node each): a start per module instead of per case. A test
    that leaves the node dead fails, and the next one gets it restarted."""
    broker, url = _module_node
    if not broker.alive():
        if broker.proc is not None:
            broker.stop()  # collect the exit code of a node that died earlier
        broker.start()
        wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200, 15, what="admin API")
    yield broker, url
    if not broker.alive():
        pytest.fail(f"the node died during the test:\n{broker.log_tail(60)}", pytrace=False)


def api_key(data_dir: Path) -> str:
    return (data_dir / "api.key").read_text().strip()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for process {pid}")


def http_request(url: str, path: str, *, method: str = "GET", key: str | None = None, body_size: int = 0,
                 chunked: bool = False, expect_continue: bool = False) -> tuple[int, dict[str, str], Any, bytes]:
    """One request over a raw socket, with a body of `body_size` bytes announced by Content-Length
    or sent chunked; the client sends the first SENT_BEFORE_READING bytes, reads the answer, then tries to send
    the rest as a careless client would. Returns (status, headers, JSON body, bytes before the answer)."""
    host, port = url.removeprefix("http://").split(":")
    head = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    if key is not None:
        head.append(f"x-api-key: {key}")
    body = b"x" * body_size
    if chunked:
        head.append("Transfer-Encoding: chunked")
        body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece)
                        for piece in (body[i:i + 65536] for i in range(0, len(body), 65536))) + b"0\r\n\r\n"
    elif body_size:
        head.append(f"Content-Length: {body_size}")
    if expect_continue:
        head.append("Expect: 100-continue")
    request_head = ("\r\n".join(head) + "\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        sock.sendall(request_head)
        interim = b""
        if expect_continue:  # a careful client waits for the invitation (curl: 1 s), then sends anyway
            sock.settimeout(1.0)
            try:
                interim = sock.recv(65536)
            except TimeoutError:
                pass
            sock.settimeout(15)
        # the final answer may come in the same read as the 100 (the API never waits for a body)
        answer = interim.partition(b"\r\n\r\n")[2] if interim.startswith(b"HTTP/1.1 100") else interim
        try:
            if not answer:
                sock.sendall(body[:SENT_BEFORE_READING])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the node closed: its answer may still be there to read
        try:
            while b"\r\n\r\n" not in answer or len(answer) < _answer_length(answer):
                piece = sock.recv(65536)
                if not piece:
                    break
                answer += piece
            sock.sendall(body[SENT_BEFORE_READING:])
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass
    return (*_parse(answer), interim)


def _answer_length(answer: bytes) -> int:
    head, _, _ = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(head) + 4 + int(value)
    return len(answer) + 1  # not known yet: read on


def _parse(answer: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 "), f"not an HTTP answer: {answer[:200]!r}"
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body) if body else None


@pytest.mark.parametrize(("with_key", "body_size", "chunked", "status"), [
    (False, 0, False, 401),  # no body, no key
    (False, 100, False, 401),  # a small body does not hide a missing key
    (False, 100, True, 401),
    (False, TWO_MIB, False, 413),  # the size is checked first: 413 with or without a key
    (False, TWO_MIB, True, 413),
    (True, TWO_MIB, False, 413),
    (True, TWO_MIB, True, 413),
    (True, MAX_IGNORED_BODY + 1, False, 413),
    (True, MAX_IGNORED_BODY, False, 200),  # allowed and ignored
    (True, MAX_IGNORED_BODY, True, 200),
    (True, 0, False, 200),
])
def test_a_body_over_the_limit_is_refused_before_the_key_is_looked_at(
        status_node: tuple[Broker, str], with_key: bool, body_size: int, chunked: bool, status: int) -> None:
    broker, url = status_node
    key = api_key(broker.data_dir) if with_key else None
    got, headers, doc, _ = http_request(url, "/api/v1/cluster/show", key=key, body_size=body_size, chunked=chunked)
    assert got == status, doc
    if status != 200:
        assert doc["type"] == "error" and doc["error"]
    if status == 413:
        assert "too large" in doc["error"] and headers.get("connection", "").lower() == "close"


def test_expect_100_continue_is_not_answered_for_a_body_the_api_refuses(status_node: tuple[Broker, str]) -> None:
    broker, url = status_node
    status, _, doc, interim = http_request(url, "/api/v1/cluster/show", key=api_key(broker.data_dir),
                                           body_size=TWO_MIB, expect_continue=True)
    assert status == 413 and not interim.startswith(b"HTTP/1.1 100"), interim[:100]
    status, _, doc, interim = http_request(url, "/api/v1/cluster/show", key=api_key(broker.data_dir),
                                           body_size=10, expect_continue=True)
    assert interim.startswith(b"HTTP/1.1 100 Continue") and status == 200, doc
    status, _, doc, _ = http_request(url, "/api/v1/cluster/show", method="POST", key=api_key(broker.data_dir),
                                     body_size=10)
    assert status == 405, doc  # a small body on a wrong method: the route's own answer


def test_refused_bodies_do_not_grow_the_node_memory_and_vmq_admin_still_works(node: Any) -> None:
    broker, url = node
    key = api_key(broker.data_dir)
    for index in range(20):  # warm-up: the first requests grow aiohttp's and the allocator's pools
        http_request(url, "/api/v1/cluster/show", key=key if index % 2 else None, body_size=TWO_MIB,
                     chunked=index % 4 == 0)
    before = rss_kib(broker.pid)
    statuses = [http_request(url, "/api/v1/cluster/show", key=key if index % 2 else None, body_size=TWO_MIB,
                             chunked=index % 4 == 0)[0] for index in range(REFUSED_REQUESTS)]
    after = rss_kib(broker.pid)
    assert statuses == [413] * REFUSED_REQUESTS
    assert after - before <= RSS_GROWTH_BOUND_KIB, f"RSS grew from {before} to {after} KiB"
    show = admin(url, broker.data_dir, "cluster", "show", "--json")
    assert show.returncode == 0 and json.loads(show.stdout)[0]["Running"] is True, show.stderr
    created = admin(url, broker.data_dir, "api-key", "create")  # a POST: vmq-admin sends an empty body
    assert created.returncode == 0, created.stderr


BAD_REQUESTS = {
    "a 10,000-byte header": (b"GET /api/v1/cluster/show HTTP/1.1\r\nHost: x\r\nx-api-key: " + b"k" * 10_000
                             + b"\r\n\r\n"),
    "an unknown method": b"FROB /api/v1/cluster/show HTTP/1.1\r\nHost: x\r\n\r\n" + b"q" * 4096,
}


def bad_request(url: str, request: bytes) -> bytes:
    """Send `request`, which aiohttp refuses before the API sees it: the status line of the answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        sock.sendall(request)
        answer = b""
        while len(answer) < 4096 and (piece := sock.recv(65536)):  # the node closes after its answer
            answer += piece
    return answer.split(b"\r\n", 1)[0]


@pytest.mark.parametrize("kind", sorted(BAD_REQUESTS))
def test_requests_refused_by_the_http_layer_are_freed_at_once(node: Any, kind: str) -> None:
    broker, url = node
    for _ in range(100):  # warm-up
        bad_request(url, BAD_REQUESTS[kind])
    before = rss_kib(broker.pid)
    answers = {bad_request(url, BAD_REQUESTS[kind]) for _ in range(HTTP_LAYER_REFUSALS)}
    after = rss_kib(broker.pid)
    assert answers == {b"HTTP/1.0 400 Bad Request"}  # aiohttp answers a request it could not parse in HTTP/1.0
    assert after - before <= HTTP_LAYER_GROWTH_BOUND_KIB, f"RSS grew from {before} to {after} KiB"


# bench.fuzz_admin's mix (every path, method, key and query kind; bodies up to 2 MiB), sent with aiohttp's client
# (keep-alive, 16 at a time). The cycles these requests leave in aiohttp were collected by the youngest generation
# only, and those still alive at a collection moved to older generations the node collects rarely: RSS grew ~6 KiB
# a request for ever (15,000 requests: 73 -> 172 MiB; these 6,000 after a warm-up of 2,000: +60 MiB). Now the two
# younger generations are collected every 100 refusals, and a full collection then glibc's malloc_trim follow
# every refusal within admin.young_garbage.FULL_AFTER seconds: the same 6,000 grew RSS by 0.0-0.1 MiB in 3 runs,
# and RSS ended within 1 MiB of the fresh node's (docs/security.md). Before the trim they grew it by 0-11.6 MiB.
FUZZ_WARM_UP = 2000
FUZZ_REQUESTS = 6000
FUZZ_GROWTH_BOUND_KIB = 8 * 1024
BASELINE_BOUND_KIB = 8 * 1024  # RSS at the end over RSS of the fresh node


def test_fuzzed_admin_requests_do_not_keep_memory(node: Any) -> None:
    broker, url = node
    key = api_key(broker.data_dir)
    fresh = rss_kib(broker.pid)
    warm_up = fuzz_admin.fuzz_admin(url, key, FUZZ_WARM_UP, 1000)
    time.sleep(FULL_AFTER + 1)  # the full collection the last refusals scheduled
    before = rss_kib(broker.pid)
    report = fuzz_admin.fuzz_admin(url, key, FUZZ_REQUESTS, 1001)
    time.sleep(FULL_AFTER + 1)
    after = rss_kib(broker.pid)
    assert not warm_up.failures and not report.failures, (warm_up.failures + report.failures)[:5]
    assert after - before <= FUZZ_GROWTH_BOUND_KIB, f"RSS grew from {before} to {after} KiB"
    assert after - fresh <= BASELINE_BOUND_KIB, f"RSS {fresh} KiB fresh, {after} KiB after 8,000 requests"
    show = admin(url, broker.data_dir, "cluster", "show", "--json")
    assert show.returncode == 0, show.stderr
