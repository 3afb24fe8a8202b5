"""Logins cannot take the node from its clients (docs/security.md, "Failed logins"): a real node with a real password
file (made by `vmqpy passwd`), real sockets.

* A few hundred wrong guesses for a known user arrive at once while a well-behaved client keeps publishing QoS 1:
  it gets every PUBACK; every guess gets a refusal (0x86 checked, 0x89 pool full, 0x9F address throttled), and the
  metrics count each exactly once. The p99 of its round trip before and during the guesses is printed, not asserted.
* An unknown user costs a password check like a known one (no timing oracle): counted by the metric.
* Behind the PROXY protocol the throttle counts the address of the header: a blocked address is refused at once
  even with the right password, another address behind the same proxy is not.
* Passwords are bytes: bytes that are not UTF-8 do not log in as the password made of U+FFFD.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.admin_api import metrics
from tests.integration.clients import RawClient, unique
from tests.integration.conftest import REPO, Broker, free_port, wait_until
from tests.integration.password_guesses import LIMIT, Guesses
from vmqpy.broker.listeners.proxy_protocol import Address, encode_v1

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's login pool and failed-login throttle")]

GUESSES = 300
ROUND_TRIPS = 200


def make_passwords(path: Path, users: dict[str, bytes]) -> None:
    """The real `vmqpy passwd`, the password on standard input (as bytes)."""
    for user, password in users.items():
        done = subprocess.run([sys.executable, "-m", "vmqpy", "passwd", str(path), user], input=password + b"\n",
                              capture_output=True, timeout=60, cwd=REPO)
        assert done.returncode == 0, done.stderr


def start(factory: Callable[..., Broker], tmp_path: Path, **extra: Any) -> tuple[Broker, str]:
    passwd = tmp_path / "vmq.passwd"
    make_passwords(passwd, {"alice": b"alice-secret", "text": "\ufffd".encode()})
    http_port = free_port()
    broker = factory(**{"password_file": passwd, "allow_anonymous": "off", "auth.failed_login_delay": "100ms",
                        "listener.http.default": f"127.0.0.1:{http_port}", **extra})
    url = f"http://127.0.0.1:{http_port}"
    wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200, 15, what="admin API")
    return broker, url


def counters(broker: Broker, url: str) -> dict[str, int]:
    values = metrics(url, broker.data_dir)
    names = ("login_failed", "login_throttled", "login_busy", "login_password_checks")
    return {name: int(values[f"broker.{name}"]) for name in names}


def p99_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


def round_trip(client: RawClient, topic: str) -> float:
    started = time.perf_counter()
    client.publish(topic, b"ping", qos=1, timeout=10)  # asserts its PUBACK
    return time.perf_counter() - started


def test_parallel_wrong_guesses_leave_a_publisher_served(broker_factory: Callable[..., Broker],
                                                         tmp_path: Path) -> None:
    broker, url = start(broker_factory, tmp_path)
    at_start = counters(broker, url)
    assert at_start == dict.fromkeys(at_start, 0)  # every counter exported from the start, at 0
    client = RawClient(broker.port, version=5)
    client.connect(unique("steady-"), username="alice", password=b"alice-secret")
    topic = unique("steady/")
    before = [round_trip(client, topic) for _ in range(ROUND_TRIPS)]
    guesses = Guesses(broker.port, GUESSES)
    guesses.start()
    during: list[float] = []
    deadline = time.monotonic() + 90
    while guesses.is_alive() and time.monotonic() < deadline:
        during.append(round_trip(client, topic))
    guesses.join(30)
    assert not guesses.is_alive(), "the guesses were not all answered"
    print(f"\nQoS 1 round trip p99: {p99_ms(before):.2f} ms before, {p99_ms(during or [0.0]):.2f} ms during "
          f"{GUESSES} parallel wrong guesses ({len(during)} round trips during); guesses refused: "
          f"{guesses.codes.count(0x86)} checked, {guesses.codes.count(0x89)} busy, "
          f"{guesses.codes.count(0x9F)} throttled")
    assert len(guesses.codes) == GUESSES
    refusals = {0x86: "checked", 0x89: "busy", 0x9F: "throttled"}
    assert set(guesses.codes) <= set(refusals), guesses.codes
    # How many guesses were checked (and so counted as failed) before the rest arrived depends on the machine's
    # speed: on a loaded one all 300 arrive before the first check ends, the pool takes ~33 and refuses the rest
    # busy, and none is throttled yet (CI, 2026-11-29). Either way the address is over the limit now.
    assert guesses.codes.count(0x86) >= LIMIT, "the pool checked at least auth.failed_login_limit guesses"
    late = RawClient(broker.port, version=5)
    late.connect(unique("late-guess-"), username="alice", password=b"wrong-late", expect_rc=0x9F)
    late.wait_closed()
    for _ in range(20):  # the well-behaved client is still served after the guesses
        round_trip(client, topic)
    after = counters(broker, url)
    assert after["login_failed"] == guesses.codes.count(0x86)
    assert after["login_busy"] == guesses.codes.count(0x89)
    assert after["login_throttled"] == guesses.codes.count(0x9F) + 1  # + the late guess
    assert after["login_password_checks"] == after["login_failed"] + 1  # + the steady client's own login
    client.close()


def test_an_unknown_user_costs_a_password_check_like_a_known_one(broker_factory: Callable[..., Broker],
                                                                 tmp_path: Path) -> None:
    broker, url = start(broker_factory, tmp_path)
    for username in ("alice", "mallory"):
        checked = counters(broker, url)["login_password_checks"]
        client = RawClient(broker.port, version=5)
        client.connect(unique("oracle-"), username=username, password=b"wrong", expect_rc=0x86)
        client.wait_closed()
        assert counters(broker, url)["login_password_checks"] == checked + 1, username


def test_a_password_is_compared_as_bytes(broker_factory: Callable[..., Broker], tmp_path: Path) -> None:
    broker, _url = start(broker_factory, tmp_path)
    client = RawClient(broker.port, version=4)
    client.connect(unique("bytes-"), username="text", password=b"\xff", expect_rc=4)  # not U+FFFD's bytes
    client.wait_closed()
    client = RawClient(broker.port, version=4)
    client.connect(unique("bytes-"), username="text", password="\ufffd".encode())
    client.close()


def proxied_connect(port: int, source: str, password: bytes) -> int:
    """CONNECT (3.1.1) as user alice through a PROXY v1 header naming `source`; the CONNACK's return code."""
    header = encode_v1(Address(source, 40000), Address("127.0.0.1", port))
    client = RawClient(port, version=4)
    try:
        client.send(header)
        return int(client.connect(unique("proxied-"), username="alice", password=password, expect_rc=None)
                   .reason_code)
    finally:
        client.close()


def test_the_throttle_counts_the_address_behind_the_proxy(broker_factory: Callable[..., Broker],
                                                          tmp_path: Path) -> None:
    broker, url = start(broker_factory, tmp_path, **{"listener.tcp.default.proxy_protocol": "on",
                                                     "auth.failed_login_limit": "3"})
    blocked, other = "203.0.113.7", "203.0.113.8"
    assert [proxied_connect(broker.port, blocked, b"wrong") for _ in range(3)] == [4, 4, 4]
    checked = counters(broker, url)["login_password_checks"]
    assert proxied_connect(broker.port, blocked, b"alice-secret") == 3  # refused at once: server unavailable
    assert counters(broker, url)["login_password_checks"] == checked  # without hashing
    assert counters(broker, url)["login_throttled"] == 1
    assert proxied_connect(broker.port, other, b"alice-secret") == 0  # the proxy's other clients are served
