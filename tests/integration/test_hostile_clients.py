"""Every attacker of issue 33 ("Containment") at once against one real node, while a well-behaved client on the
same node goes on with its QoS 1 round trips (docs/security.md, "Threat model").

One node on free loopback ports: MQTT tcp, WebSocket, the admin API and a cluster listener, a password file made
by the real `vmqpy passwd` and an ACL file (anonymous clients allowed, limited by the ACL's lines for everyone:
the attackers that need no account). The budgets are the defaults, except a few made smaller so that their limit
is reached within the test (each named in `SETTINGS`). Each attacker runs in its own thread, bounded in count
and time; they all start together and last about 15 s. The well-behaved client is a separate process (user
`good`, its own topic; `Probe`): it publishes QoS 1 to its own subscription and waits for its PUBACK and
its own message, 2,000 times before the attack and then until the last attacker is done, so that the test's
threads do not share its interpreter. The attackers, what each must get, and the focused test of each:

 1. eve (valid password, ACL `eve/#`) takes alice's persistent client id while alice has 3 messages queued: a
    clean session, none of alice's messages
    (`test_session_owner.py::test_another_user_gets_a_clean_session_not_the_queue`).
 2. a subscriber that never reads, on a topic a publisher thread keeps busy (QoS 1, 300/s) beside a reader: the
    publisher gets every PUBACK and the reader every message, the node logs the end of the stall
    (`test_congestion.py::test_a_subscriber_that_never_reads_holds_nobody_back_for_long`).
 3. bytes before authentication: CONNECTs announcing 1 MB (closed on their header) and partial CONNECTs of 60 KB
    (closed by the node-wide budget or at mqtt.connect_timeout) on the MQTT port, WebSocket frames of 20 MB
    before CONNECT, strangers announcing 60 MB frames on the cluster port: each closed by the node
    (`test_preauth_budget.py`).
 4. idle sockets from one address: 400 on the MQTT port (those beyond listener.max_pending_per_address closed at
    once, the rest at mqtt.connect_timeout), 100 on the admin port (beyond 64: 503; the rest closed at
    listener.http.request_timeout) (`test_descriptors.py`, `test_floods.py`).
 5. 150 parallel wrong passwords from another address: each refused (0x86, 0x89 or 0x9F), then that address is
    throttled even with the right password
    (`test_login_budget.py::test_parallel_wrong_guesses_leave_a_publisher_served`).
 6. a cross-site POST on the admin API with the key, as a browser sends it (`Origin`, `Sec-Fetch-Site`): 403,
    the log level unchanged (`test_admin_cross_site.py`, with a real Chromium).
 7. one client rewriting a retained topic 2,000 times with 4 KB: the replication log stays within
    max_size x (count + 1), without the payloads; another client over its retained quota gets 0x97
    (`test_replication_log_bounds.py`, `test_retain_quota.py`).
 8. one SUBSCRIBE of 10,000 filters: one SUBACK granting all of them; then the client goes, and its clean
    session with it (`test_subscribe_slices.py`).
 9. a client subscribed to `#` under an ACL with deny lines: granted, never receives a denied topic
    (`test_acl_deny_delivery.py`).
10. clients that break Receive Maximum while still writing: each reads DISCONNECT 0x93, then the end of the
    stream, never a reset (`test_lingering_close.py`).

Asserted: every round trip of the well-behaved client completed, in order; each attacker's outcome above; the
node process alive at the end, serving; its resident memory and descriptors, sampled every 50 ms, under bounds
derived from the budgets, and its descriptors back near where they were once the attackers are gone. The round
trip's p50 and p99 before and during the attack, their ratio, its median in each second of the attack and the
peaks are printed, never asserted (timings on a shared machine). The attacker threads run at idle priority
(`idle_priority`): they stand for other machines, and their CPU would otherwise be measured as the node's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.access_files import write_access_files
from tests.integration.address_sockets import answered_busy, closed_by_peer, connect_from
from tests.integration.admin_api import metrics
from tests.integration.clients import (
    DISCONNECT,
    PUBLISH,
    SUBACK,
    Closed,
    PahoClient,
    RawClient,
    enc_connect,
    enc_pingreq,
    enc_subscribe,
    unique,
)
from tests.integration.conftest import Broker, Clients, assert_serving, free_port, wait_until
from tests.integration.congestion import Publisher, Reader, non_reader
from tests.integration.overrun import RECEIVE_MAXIMUM, overrun_while_writing
from tests.integration.password_guesses import LIMIT, Guesses
from tests.integration.preauth import (
    MIB,
    HostileSockets,
    cluster_node,
    connect_head,
    websocket_connect,
    websocket_flood,
)
from tests.integration.process_usage import descriptors, rss
from tests.integration.replication_log_files import exposes, log_files, log_text, rewrite, rotation_done
from tests.integration.session_owners import ACL as OWNER_ACL
from tests.integration.session_owners import PASSWORDS as OWNER_PASSWORDS
from tests.integration.session_owners import alice_with_queue, client_of, received_before_marker, session_present
from tests.integration.well_behaved_client import GOOD_PASSWORD, Probe

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's budgets, all at once")]

PASSWORDS = {**OWNER_PASSWORDS, "good": GOOD_PASSWORD, "monitor": "monitor-secret"}

# Lines before the first `user` apply to every client, the anonymous attackers included; then alice, eve and the
# writer of session_owners.py; the well-behaved client; the monitoring client and its deny lines.
ACL = f"""\
topic news/#
topic big/#
topic linger/#
topic retained/#
topic alive/#

{OWNER_ACL}
user good
topic good/#

user monitor
topic read #
topic deny secret/#
topic deny news/#
topic deny retained/#
"""
DENIED_TO_MONITOR = ("secret/", "news/", "retained/")

GUESS_ADDRESS = "127.0.0.2"  # the password guesses' address: the throttle blocks it, not the others'
IDLE_ADDRESS = "127.0.0.3"  # the idle sockets' address
BASELINE = 2000  # round trips before the attack (the p99 of 200 is their second slowest: too few to compare with)
ATTACK_DEADLINE = 45.0  # every attacker done within this, or the test fails

MAX_PENDING_PER_ADDRESS = 256
CONNECT_BUDGET = 4 * MIB
LOG_MAX_SIZE, LOG_COUNT = 64 * 1024, 3
RETAIN_QUOTA = 50
ADMIN_CAP = 64  # listener.http.max_connections' default
MAX_QUEUED_BYTES = 8 * MIB  # max_queued_bytes' default

SETTINGS: dict[str, Any] = {
    "allow_anonymous": "on",
    "auth.failed_login_delay": "100ms",  # as in the focused tests: the refusals come sooner
    "vmq_acl.acl_reload_interval": "0",
    # smaller than the defaults (16 MiB, an eighth of the node's sockets, 64 MiB x 5, 10,000, 20) so that their
    # limits are reached within the test
    "mqtt.connect_budget": "4MB",
    "listener.max_pending_per_address": str(MAX_PENDING_PER_ADDRESS),
    "metadata.replication_log.max_size": str(LOG_MAX_SIZE),
    "metadata.replication_log.count": str(LOG_COUNT),
    "retain.max_per_client": str(RETAIN_QUOTA),
    "receive_max_broker": str(RECEIVE_MAXIMUM),
}

# The attack's sizes (how many sockets of each kind, bytes of each)
IDLE_MQTT, IDLE_ADMIN = 400, 100
OVERSIZED, PARTIAL, PARTIAL_SIZE = 50, 100, 60_000
WEBSOCKETS, WS_FRAME = 3, 20 * MIB
STRANGERS = 6
GUESSES = 150
BUSY_TOTAL, BUSY_RATE = 2500, 300.0
REWRITES = 2000
FILTERS = 10_000
OVERRUNS = 5
ATTACK_SOCKETS = IDLE_MQTT + IDLE_ADMIN + OVERSIZED + PARTIAL + WEBSOCKETS + STRANGERS + GUESSES + OVERRUNS + 16


# -------------------------------------------------------------------------------------- the well-behaved client


def percentile_ms(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples) or [0.0]
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1000


def window_percentiles_ms(durations: list[float], started: list[float], since: float, fraction: float = 0.5,
                          width: float = 1.0) -> list[tuple[float, float, int]]:
    """The round trips' `fraction` percentile in each `width`-second window after `since`: (window start, ms,
    count)."""
    windows: dict[int, list[float]] = {}
    for took, at in zip(durations, started, strict=True):
        windows.setdefault(int((at - since) // width), []).append(took)
    return [(index * width, percentile_ms(trips, fraction), len(trips)) for index, trips in sorted(windows.items())]


# ------------------------------------------------------------------------------------------- the node's gauges


class Peaks:
    """The node's resident set and open descriptors, sampled every 50 ms in a thread until `stop()`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss, self.fds = rss(pid), descriptors(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with contextlib.suppress(OSError, AssertionError):
                self.rss = max(self.rss, rss(self.pid))
                self.fds = max(self.fds, descriptors(self.pid))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)


# ------------------------------------------------------------------------------------------------ the attackers


def idle_priority() -> None:
    """The calling thread (an attacker) runs only when a core is idle (SCHED_IDLE; what it starts inherits it).
    The attackers stand for other machines: on the test's two shared cores their own work would otherwise take
    the node's and the well-behaved client's CPU, and measure the machine, not the node (two processes that only
    burn CPU, on an idle node, put the well-behaved client's p99 at 11x its baseline; at idle priority 1.8x)."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_IDLE, os.sched_param(0))


class Attack(threading.Thread):
    """One attacker: `attack()` in its own thread, bounded in count and time, asserting the outcome it must get;
    what went wrong is kept and reported by the test after the join. `close()` releases what it still holds."""

    def __init__(self) -> None:
        super().__init__(name=type(self).__name__, daemon=True)
        self.error: str | None = None
        self.outcome = ""
        self.span = (0.0, 0.0)  # when it started and ended (monotonic)

    def run(self) -> None:
        began = time.monotonic()
        idle_priority()
        try:
            self.attack()
        except BaseException:
            self.error = traceback.format_exc()
        finally:
            self.span = (began, time.monotonic())

    def attack(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class TakesAlicesClientId(Attack):
    """1. eve connects with alice's persistent client id while alice has messages queued."""

    def __init__(self, node: Broker, paho: list[PahoClient]) -> None:
        super().__init__()
        self.node, self.paho = node, paho
        self.writer = alice_with_queue(node, paho, 5, "alice-phone")

    def attack(self) -> None:
        for _ in range(40):  # a CONNECT with a password may find the login pool full of guesses: eve tries again
            eve = client_of(self.node, self.paho, "eve", 5, "alice-phone", persistent=True)
            flags, code, _props = eve.connect(expect_success=False)
            if not code.is_failure:
                break
            assert code.value == 0x89, f"eve refused with {code}"  # Server busy
            eve.stop()
            time.sleep(0.25)  # a client's back-off before it tries again
        else:
            raise AssertionError("eve never got in")
        assert not session_present(flags), "eve resumed alice's session"
        eve.subscribe("eve/#", qos=1)
        assert received_before_marker(eve, self.writer, "eve/marker") == [], "eve received alice's queued messages"
        self.outcome = "clean session, nothing of alice's"


class NeverReads(Attack):
    """2. a subscriber that never reads, on a topic a publisher keeps busy, beside a reader."""

    def __init__(self, node: Broker) -> None:
        super().__init__()
        self.node = node
        prefix = f"news/{unique('busy')}"
        self.reader = Reader(node.port, f"{prefix}/#")
        self.stuck = non_reader(node.port, f"{prefix}/#", 1)
        self.publisher = Publisher(node.port, f"{prefix}/a", BUSY_TOTAL, rate=BUSY_RATE)

    def attack(self) -> None:
        self.reader.start()
        self.publisher.start()
        deadline = time.monotonic() + ATTACK_DEADLINE
        while not self.publisher.done.wait(1.0) and time.monotonic() < deadline:
            self.stuck.send(enc_pingreq())  # it stays connected, and never reads
        wait_until(lambda: len(self.reader.numbers) >= len(self.publisher.acked_at), 20.0,
                   what="the reader to catch up")
        assert self.publisher.error is None, self.publisher.error
        acked = len(self.publisher.acked_at)
        assert acked == BUSY_TOTAL, f"only {acked} of {BUSY_TOTAL} acknowledged"
        assert sorted(set(self.reader.numbers)) == list(range(BUSY_TOTAL)), "the reader missed messages"
        log = self.node.log.read_text(errors="replace")
        assert "held its publishers back for queue.max_stall" in log, "the stall never ended"
        self.outcome = f"{acked} PUBACKs, {len(self.reader.numbers)} read, stall ended"

    def close(self) -> None:
        self.publisher.stop.set()
        self.reader.stop.set()
        for thread, timeout in ((self.publisher, 10.0), (self.reader, 5.0)):
            if thread.ident is not None:  # started
                thread.join(timeout)
        self.stuck.close()
        self.reader.client.close()


class PartialConnects(Attack):
    """3a. CONNECTs announcing 1 MB, and partial CONNECTs of 60 KB, on the MQTT port."""

    def __init__(self, node: Broker) -> None:
        super().__init__()
        self.port = node.port
        self.oversized: HostileSockets | None = None
        self.partial: HostileSockets | None = None

    def attack(self) -> None:
        self.oversized = HostileSockets(self.port, OVERSIZED, connect_head(1_000_000), 64 * 1024)
        self.partial = HostileSockets(self.port, PARTIAL, connect_head(PARTIAL_SIZE), PARTIAL_SIZE - 64)
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            self.oversized.push()
            self.partial.push()
            if self.oversized.poll() == 0 and self.partial.poll() == 0:
                break
            time.sleep(0.05)  # the pace of the attack
        assert (self.oversized.closed, self.partial.closed) == (OVERSIZED, PARTIAL), "sockets the node never closed"
        self.outcome = f"{OVERSIZED} oversized and {PARTIAL} partial CONNECTs closed"

    def close(self) -> None:
        for sockets in (self.oversized, self.partial):
            if sockets is not None:
                sockets.close()


class BigWebSocketFrames(Attack):
    """3b. WebSockets sending one 20 MB frame (the start of a 200 MB CONNECT) before any CONNECT."""

    def __init__(self, ws_port: int) -> None:
        super().__init__()
        self.ws_port = ws_port

    def attack(self) -> None:
        ends = asyncio.run(websocket_flood(self.ws_port, WEBSOCKETS, connect_head(200_000_000) + bytes(WS_FRAME)))
        closed = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)
        assert all(end in closed for end in ends), ends
        assert asyncio.run(websocket_connect(self.ws_port))[:1] == b"\x20", "a WebSocket client got no CONNACK"
        self.outcome = f"{WEBSOCKETS} closed, a real WebSocket client served"


class ClusterStrangers(Attack):
    """3c. strangers on the cluster port announcing 60 MB frames and sending 30 MB each."""

    def __init__(self, cluster_port: int) -> None:
        super().__init__()
        self.cluster_port = cluster_port
        self.sockets: HostileSockets | None = None

    def attack(self) -> None:
        self.sockets = HostileSockets(self.cluster_port, STRANGERS, struct.pack(">I", 60 * MIB), 30 * MIB)
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            self.sockets.push()
            if self.sockets.poll() == 0:
                break
            time.sleep(0.05)  # the pace of the attack
        assert self.sockets.closed == STRANGERS, f"{self.sockets.closed} of {STRANGERS} strangers closed"
        self.outcome = f"{STRANGERS} closed"

    def close(self) -> None:
        if self.sockets is not None:
            self.sockets.close()


class IdleSockets(Attack):
    """4. idle sockets from one address on the MQTT port and on the admin port."""

    def __init__(self, node: Broker, http_port: int) -> None:
        super().__init__()
        self.port, self.http_port = node.port, http_port
        self.mqtt: list[Any] = []
        self.admin: list[Any] = []
        self.busy = 0

    def attack(self) -> None:
        for _ in range(IDLE_MQTT):
            self.mqtt.append(connect_from(IDLE_ADDRESS, self.port))
        for _ in range(IDLE_ADMIN):
            self.admin.append(connect_from(IDLE_ADDRESS, self.http_port))
        # over the admin cap: 503 at once; the MQTT sockets over the pending limit: closed at once, the rest at
        # mqtt.connect_timeout (10-12 s); the admin ones under the cap at listener.http.request_timeout (10 s)
        wait_until(lambda: sum(answered_busy(s) for s in self.admin) >= IDLE_ADMIN - ADMIN_CAP, 20.0,
                   interval=0.25, what="admin connections over the cap answered 503")
        self.busy = sum(answered_busy(s) for s in self.admin)
        wait_until(lambda: all(closed_by_peer(s) for s in self.mqtt), 30.0, interval=0.25,
                   what="idle MQTT sockets closed by the node")
        wait_until(lambda: all(answered_busy(s) or closed_by_peer(s) for s in self.admin), 30.0, interval=0.25,
                   what="idle admin connections closed by the node")
        self.outcome = f"{IDLE_MQTT} MQTT sockets closed, {self.busy} admin 503, the rest closed"

    def close(self) -> None:
        for sock in self.mqtt + self.admin:
            sock.close()


def connack_code_from(address: str, port: int, user: str, password: str) -> int | None:
    """The CONNACK code a 5.0 CONNECT from `address` gets (None: closed without one)."""
    with connect_from(address, port) as sock:
        sock.settimeout(10)
        sock.sendall(enc_connect(unique("late-guess-"), 5, username=user, password=password.encode()))
        received = b""
        with contextlib.suppress(OSError):
            while len(received) < 4:
                chunk = sock.recv(4 - len(received))
                if not chunk:
                    break
                received += chunk
    return received[3] if len(received) == 4 and received[0] >> 4 == 2 else None


class WrongPasswords(Attack):
    """5. parallel wrong passwords for a known user, from one address."""

    def __init__(self, node: Broker) -> None:
        super().__init__()
        self.port = node.port
        self.guesses = Guesses(node.port, GUESSES, source=GUESS_ADDRESS)

    def attack(self) -> None:
        self.guesses.run()  # in this thread
        codes = self.guesses.codes
        assert len(codes) == GUESSES, f"{len(codes)} of {GUESSES} guesses answered"
        assert set(codes) <= {0x86, 0x89, 0x9F}, codes  # checked, pool busy, throttled: never accepted
        assert codes.count(0x86) >= LIMIT, "the pool checked at least auth.failed_login_limit guesses"
        late = connack_code_from(GUESS_ADDRESS, self.port, "alice", PASSWORDS["alice"])
        assert late == 0x9F, f"the guessing address got {late} with the right password, not throttled"
        self.outcome = f"{codes.count(0x86)} checked, {codes.count(0x89)} busy, {codes.count(0x9F)} throttled"


class CrossSitePost(Attack):
    """6. a change on the admin API as another site's page makes a browser send it, with a valid key."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__()
        self.url, self.key = url, key
        self.answers: list[int] = []

    def post(self) -> int:
        """The status of one cross-site POST; 0 when the connection was closed without an answer (the cap)."""
        request = urllib.request.Request(
            f"{self.url}/api/v1/log/level?level=debug", data=b"", method="POST",
            headers={"x-api-key": self.key, "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return 0

    def attack(self) -> None:
        deadline = time.monotonic() + 30.0  # the idle connections hold the admin cap for up to 10 s
        while self.answers.count(403) < 3 and time.monotonic() < deadline:
            self.answers.append(self.post())
            time.sleep(0.25)  # the pace of the attack
        assert set(self.answers) <= {403, 503, 0}, self.answers  # refused, or over the cap: never done
        assert 403 in self.answers, self.answers
        self.outcome = f"answers {sorted(set(self.answers))}, {self.answers.count(403)} x 403"


class RetainedRewrites(Attack):
    """7. one client rewriting a retained topic with 4 KB payloads; another setting more retained topics than its
    quota."""

    def __init__(self, node: Broker, clients: Clients) -> None:
        super().__init__()
        self.node, self.clients = node, clients
        self.marker = f"PRIVATE-{unique('payload')}".encode()
        self.codes: list[int | None] = []

    def attack(self) -> None:
        rewrite(self.node, self.clients, f"retained/{unique('rewritten')}", self.marker, REWRITES)
        quota = self.clients.raw(self.node, 5)
        prefix = f"retained/{unique('quota')}"
        for n in range(RETAIN_QUOTA + 10):
            ack = quota.publish(f"{prefix}/{n}", b"kept", qos=1, retain=True, timeout=10)
            assert ack is not None
            self.codes.append(ack.reason_code)
        assert self.codes == [0] * RETAIN_QUOTA + [0x97] * 10, self.codes
        self.outcome = f"{REWRITES} rewrites, {self.codes.count(0x97)} over the quota refused 0x97"


class BigSubscribe(Attack):
    """8. one SUBSCRIBE of thousands of filters."""

    def __init__(self, node: Broker) -> None:
        super().__init__()
        self.client = RawClient(node.port, version=5)
        self.client.connect(unique("big-"))

    def attack(self) -> None:
        self.client.send(enc_subscribe(1, [(f"big/{i}", 0) for i in range(FILTERS)], version=5))
        suback = self.client.expect(SUBACK, 120)
        assert suback.reason_codes == [0] * FILTERS, f"SUBACK of {len(suback.reason_codes)} codes"
        self.client.publish(f"big/{FILTERS - 1}", b"last", qos=1)
        assert self.client.expect(PUBLISH, 10).payload == b"last"
        self.client.close()  # and it goes: its clean session ends, the node removes its subscriptions
        self.outcome = f"{FILTERS} filters granted in one SUBACK, then gone"

    def close(self) -> None:
        self.client.close()


class Monitor(Attack):
    """9. a client subscribed to `#` under an ACL with deny lines, while a writer publishes denied and allowed
    topics."""

    def __init__(self, node: Broker, paho: list[PahoClient]) -> None:
        super().__init__()
        self.writer = client_of(node, paho, "writer", 5)
        self.writer.connect()
        self.writer.publish("secret/retained", b"kept", qos=1, retain=True)
        self.writer.publish("public/retained", b"kept", qos=1, retain=True)
        self.client = RawClient(node.port, version=5)
        self.client.connect(unique("monitor-"), username="monitor", password=PASSWORDS["monitor"].encode())
        self.client.subscribe(("#", 1))  # asserts the SUBACK grants QoS 1
        self.topics: list[str] = []
        self.done = threading.Event()
        self.reading = threading.Thread(target=self._read, daemon=True)
        self.reading.start()

    def _read(self) -> None:
        while not self.done.is_set():
            try:
                message = self.client.recv(0.2)
            except TimeoutError:
                continue
            except (Closed, OSError):
                return
            if message.type == PUBLISH:
                self.client.ack(message)
                self.topics.append(message.topic)

    def attack(self) -> None:
        allowed = [f"public/m/{n}" for n in range(50)]
        for n, topic in enumerate(allowed):
            self.writer.publish(f"secret/m/{n}", b"denied", qos=1)
            self.writer.publish(topic, b"allowed", qos=1)
            time.sleep(0.1)  # the pace of the writer
        self.writer.publish("public/end", b"end", qos=1)
        wait_until(lambda: "public/end" in self.topics, 30.0, what="the monitor to read the end")
        denied = [t for t in self.topics if t.startswith(DENIED_TO_MONITOR)]
        assert denied == [], f"the monitor received denied topics: {denied[:10]}"
        missing = {*allowed, "public/retained"} - set(self.topics)
        assert not missing, f"the monitor missed {sorted(missing)[:10]}"
        self.outcome = f"{len(self.topics)} messages, none denied"

    def close(self) -> None:
        self.done.set()
        self.reading.join(5)
        self.client.close()


class BreaksReceiveMaximum(Attack):
    """10. clients sending one QoS 2 PUBLISH more than the Receive Maximum and writing on."""

    def __init__(self, node: Broker) -> None:
        super().__init__()
        self.port = node.port

    def attack(self) -> None:
        for run in range(OVERRUNS):
            got, ending = overrun_while_writing(RawClient(self.port, version=5))
            assert (DISCONNECT, 0x93) in got, f"run {run}: no DISCONNECT 0x93 read, ended by {ending}: {got}"
            assert ending == "eof", f"run {run}: {ending}"
            time.sleep(1.0)  # spread over the attack
        self.outcome = f"{OVERRUNS} x DISCONNECT 0x93 read, then the end of the stream"


# --------------------------------------------------------------------------------------------------------- test


def metric_values(url: str, data_dir: Path) -> dict[str, int]:
    values = metrics(url, data_dir)
    return {name: int(value) for name, value in values.items() if isinstance(value, int | float)}


def log_level(url: str, key: str) -> str:
    request = urllib.request.Request(f"{url}/api/v1/show?log.console.level", headers={"x-api-key": key})
    with urllib.request.urlopen(request, timeout=10) as answer:
        (row,) = json.loads(answer.read())["table"]
    return str(row["Value"])


@pytest.fixture
def paho() -> Iterator[list[PahoClient]]:
    made: list[PahoClient] = []
    yield made
    for client in made:
        client.stop()


def test_all_attackers_at_once_leave_a_well_behaved_client_served(
        broker_factory: Callable[..., Broker], tmp_path: Path, clients: Clients, paho: list[PahoClient]) -> None:
    acl_file, passwd = write_access_files(tmp_path / "access", ACL, PASSWORDS)
    ws_port, http_port = free_port(), free_port()
    node, cluster_port = cluster_node(broker_factory, **{
        **SETTINGS, "acl_file": str(acl_file), "password_file": str(passwd),
        "listener.ws.default": f"127.0.0.1:{ws_port}", "listener.http.default": f"127.0.0.1:{http_port}"})
    url = f"http://127.0.0.1:{http_port}"
    wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200, 15, what="admin API")
    key = (node.data_dir / "api.key").read_text().strip()
    assert node.pid is not None
    pid = node.pid

    attackers: list[Attack] = []
    rewrites = RetainedRewrites(node, clients)
    probe: Probe | None = None
    try:
        # each prepares what it needs before the attack (its clients connected, alice's queue): one at a time, so
        # that the ones made are closed whatever happens
        for make in (lambda: TakesAlicesClientId(node, paho), lambda: NeverReads(node),
                     lambda: PartialConnects(node), lambda: BigWebSocketFrames(ws_port),
                     lambda: ClusterStrangers(cluster_port), lambda: IdleSockets(node, http_port),
                     lambda: WrongPasswords(node), lambda: CrossSitePost(url, key), lambda: rewrites,
                     lambda: BigSubscribe(node), lambda: Monitor(node, paho), lambda: BreaksReceiveMaximum(node)):
            attackers.append(make())
        probe = Probe(node.port, BASELINE)  # its baseline once everything is in place, before the attack
        assert probe.line(60.0) == "ready", "the well-behaved client did not finish its baseline"
        rss_before, fds_before = rss(pid), descriptors(pid)
        peaks = Peaks(pid)
        attack_start = time.monotonic()
        probe.say("go")
        for attacker in attackers:
            attacker.start()
        deadline = time.monotonic() + ATTACK_DEADLINE
        for attacker in attackers:
            attacker.join(max(0.0, deadline - time.monotonic()))
        peaks.stop()
        probe.say("stop")
        result = json.loads(probe.line(30.0))
    finally:
        for attacker in attackers:
            attacker.close()
        if probe is not None:
            probe.stop()

    before, during = result["before"], result["during"]
    p99_before, p99_during = percentile_ms(before, 0.99), percentile_ms(during, 0.99)
    print(f"\nround trip p50 before {percentile_ms(before, 0.5):.2f} ms, during {percentile_ms(during, 0.5):.2f} ms; "
          f"p99 before {p99_before:.2f} ms, during {p99_during:.2f} ms (ratio {p99_during / p99_before:.2f}); "
          f"{len(before)} before, {len(during)} during, max during {max(during or [0.0]) * 1000:.1f} ms; "
          f"node RSS {rss_before / MIB:.0f} -> peak {peaks.rss / MIB:.0f} MiB, "
          f"descriptors {fds_before} -> peak {peaks.fds}")
    for attacker in attackers:
        began, ended = (t - attack_start for t in attacker.span)
        print(f"  {attacker.name} (+{began:.1f} to +{ended:.1f} s): {attacker.outcome or 'FAILED'}")
    medians = window_percentiles_ms(during, result["started"], attack_start)
    tails = window_percentiles_ms(during, result["started"], attack_start, 0.99)
    p50_before = percentile_ms(before, 0.5)
    worst = max(medians, key=lambda window: window[1], default=(0.0, 0.0, 0))
    print(f"  median round trip per second of the attack (ms): {[round(m, 2) for _s, m, _n in medians]}; the worst "
          f"+{worst[0]:.0f} s, {worst[1]:.2f} ms over {worst[2]} trips ({worst[1] / p50_before:.2f}x the median "
          f"before)")
    print(f"  p99 per second of the attack (ms): {[round(m, 2) for _s, m, _n in tails]}")
    slowest = sorted(zip(during, result["started"], strict=True), reverse=True)[:5]
    print("  slowest round trips during: " + ", ".join(f"{took * 1000:.1f} ms at +{at - attack_start:.2f} s"
                                                         for took, at in slowest))
    stalls = [line.split("late_by=")[1].split()[0] for line in node.log.read_text(errors="replace").splitlines()
              if "event loop stalled" in line and "late_by=" in line]
    print(f"  event loop stalls the node logged (late by, s): {stalls}")

    # the well-behaved client: every round trip done, in order (it checks each), before and throughout
    assert result["error"] is None, f"the well-behaved client failed: {result['error']}"
    assert len(before) == BASELINE and during, (len(before), len(during))
    # every attacker got what it must
    running = [a.name for a in attackers if a.is_alive()]
    assert not running, f"attackers still running after {ATTACK_DEADLINE}s: {running}"
    failed = {a.name: a.error for a in attackers if a.error is not None}
    assert not failed, "\n".join(f"{name}:\n{error}" for name, error in failed.items())

    # the node: alive, serving, within its budgets
    assert node.alive(), "the node died"
    assert_serving(node)
    # memory: the pre-CONNECT budget, a few KiB per socket (docs/security.md: ~3 KiB; 16 KiB here), the
    # non-reader's queue (max_queued_bytes), and room for the allocator, the 10,000 subscriptions and the
    # retained writes
    rss_bound = CONNECT_BUDGET + ATTACK_SOCKETS * 16 * 1024 + MAX_QUEUED_BYTES + 56 * MIB
    assert peaks.rss - rss_before < rss_bound, \
        f"the node grew by {(peaks.rss - rss_before) / MIB:.0f} MiB, bound {rss_bound / MIB:.0f} MiB"
    # descriptors: at most every attack socket the node may hold at once (the admin ones capped) and the clients'
    fds_bound = MAX_PENDING_PER_ADDRESS + OVERSIZED + PARTIAL + WEBSOCKETS + STRANGERS + GUESSES + \
        2 * ADMIN_CAP + OVERRUNS + 64
    assert peaks.fds - fds_before < fds_bound, f"descriptors {fds_before} -> {peaks.fds}, bound +{fds_bound}"
    # and back down once the attackers are gone (lingering closes end within seconds)
    wait_until(lambda: descriptors(pid) <= fds_before + 16, 30.0, interval=0.25,
               what=f"the node's descriptors back near {fds_before}")

    # what the node did, as it counts and logs it
    log = node.log.read_text(errors="replace")
    assert "before the link is authenticated" in log  # the cluster strangers
    assert "pre-CONNECT byte budget is used up" in log  # some partial CONNECTs did not fit
    assert "listener.max_pending_per_address" in log  # idle sockets over the address's limit
    assert "listener.http.max_connections" in log  # admin connections over the cap
    counts = metric_values(url, node.data_dir)
    assert counts["broker.connect_too_large"] >= OVERSIZED, counts
    assert counts["broker.connect_budget_exceeded"] >= 1, counts
    assert counts["broker.connections_refused_pending_address"] >= IDLE_MQTT - MAX_PENDING_PER_ADDRESS, counts
    assert counts["broker.retain_quota_exceeded"] == 10, counts
    assert counts["broker.session_foreign_user_cleaned"] == 1, counts
    assert log_level(url, key) == "info", "a cross-site request changed the log level"
    assert log.count("admin_request_from_another_page") >= 3

    # the replication log: within max_size x (count + 1), rotated files compressed, no payload in it
    wait_until(lambda: rotation_done(node.data_dir), 15.0, what="the last rotation compressed")
    files = log_files(node.data_dir)
    sizes = {p.name: p.stat().st_size for p in files}
    assert len(files) == LOG_COUNT + 1, sizes
    assert sum(sizes.values()) <= LOG_MAX_SIZE * (LOG_COUNT + 1), sizes
    for path in files:
        assert not exposes(log_text(path), rewrites.marker), f"a payload in {path.name}"
