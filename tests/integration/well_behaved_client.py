"""The well-behaved client of test_hostile_clients.py, run as its own process (`Probe`), so that the test's
attacker threads do not share its interpreter: user `good`, QoS 1 round trips to its own subscription."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time

from tests.integration.clients import PUBLISH, RawClient, unique
from tests.integration.conftest import REPO

GOOD_PASSWORD = "good-secret"  # user `good`'s, in the password file of the node under test


def probe_main(argv: list[str]) -> None:
    """The well-behaved client, run as its own process: `port topic baseline`. It logs in as `good`, subscribes to
    `topic` (QoS 1) and does `baseline` round trips (publish QoS 1 to `topic`, its PUBACK and its own message,
    acknowledged), prints `ready`, waits for `go` on standard input, then does round trips until `stop` (or
    120 s); last it prints one JSON line: the durations before and during, and the error that ended it if any."""
    port, topic, baseline = int(argv[0]), argv[1], int(argv[2])
    stop = threading.Event()
    before: list[float] = []
    during: list[float] = []
    started: list[float] = []  # when each round trip during the attack started (the monotonic clock is the host's)
    error: str | None = None
    client = RawClient(port, version=5)
    number = 0

    def round_trip() -> float:
        nonlocal number
        number += 1
        begun = time.perf_counter()
        client.publish(topic, str(number).encode(), qos=1, timeout=10.0)  # asserts its PUBACK
        message = client.expect(PUBLISH, 10.0)
        took = time.perf_counter() - begun
        assert message.payload == str(number).encode(), f"round trip {number} got {message.payload!r}: lost or late"
        client.ack(message)
        return took

    try:
        client.connect(unique("good-"), username="good", password=GOOD_PASSWORD.encode())
        client.subscribe((topic, 1))
        before.extend(round_trip() for _ in range(baseline))
        print("ready", flush=True)
        if sys.stdin.readline().strip() == "go":
            def stop_on_the_next_line() -> None:
                sys.stdin.readline()
                stop.set()

            threading.Thread(target=stop_on_the_next_line, daemon=True).start()
            deadline = time.monotonic() + 120.0
            while not stop.is_set() and time.monotonic() < deadline:
                started.append(time.monotonic())
                during.append(round_trip())
    except BaseException as exc:  # reported to the test
        error = f"round trip {number}: {exc!r}"
    finally:
        client.close()
    print(json.dumps({"before": before, "during": during, "started": started, "error": error}), flush=True)


class Probe:
    """The well-behaved client's process, driven by lines on its standard input and output."""

    def __init__(self, port: int, baseline: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from tests.integration.well_behaved_client import probe_main; "
                                   "probe_main(sys.argv[1:])", str(port), f"good/{unique('rt')}", str(baseline)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def line(self, timeout: float) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the well-behaved client printed nothing within {timeout}s") from None

    def say(self, word: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
