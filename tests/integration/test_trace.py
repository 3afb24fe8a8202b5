"""`vmq-admin trace client` against a real node (docs/admin.md): the real vmq-admin prints a real client's
packets as they go, both ways, never its password; a trace over its rate stops and says so; one that runs out
of time ends by itself."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.integration.admin_api import VMQ_ADMIN, node
from tests.integration.clients import PahoClient, unique

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's vmq-admin trace client")]

__all__ = ["node"]  # the fixture this module's tests take


class Tracer:
    """A running `vmq-admin trace client`, its output read at the end."""

    def __init__(self, url: str, data_dir: object, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VMQ")}
        env["VMQ_ADMIN_URL"] = url
        env["VMQ_DATA_DIR"] = str(data_dir)
        self.proc = subprocess.Popen([*VMQ_ADMIN, "trace", "client", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)

    def finish(self, timeout: float = 30) -> tuple[int, list[str], str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate(timeout=5)
            raise AssertionError(f"the trace did not end: {out!r} {err!r}") from None
        return self.proc.returncode, out.splitlines(), err


def started(tracer: Tracer) -> None:
    """Wait for the first line ("tracing client ..."): the trace is registered on the node."""
    assert tracer.proc.stdout is not None
    line = tracer.proc.stdout.readline()
    assert "tracing client" in line, line


def test_a_trace_shows_a_clients_packets_both_ways(node) -> None:  # type: ignore[no-untyped-def]
    broker, url = node
    client_id = unique("traced")
    tracer = Tracer(url, broker.data_dir, f"client-id={client_id}", "--stop-after=4")
    started(tracer)
    client = PahoClient(broker.port, 5, client_id)
    client.client.username_pw_set("alice", "s3cret-pass")  # no password file, anonymous allowed: any is taken
    client.connect()
    topic = unique("trace/t/")
    client.subscribe(topic, qos=1)
    client.publish(topic, b"traced payload", qos=1)
    client.get(5)
    client.disconnect()
    client.stop()
    code, lines, err = tracer.finish()
    assert code == 0, err
    text = "\n".join(lines)
    assert "s3cret-pass" not in text, "a password is never shown"
    assert f"<- CONNECT(v5) client_id='{client_id}'" in text and "password=(hidden)" in text
    assert "-> CONNACK" in text
    assert f"<- SUBSCRIBE id=1 ['{topic}' q1]" in text and "-> SUBACK" in text
    assert "<- PUBLISH(d0 q1 r0 id=" in text and "payload='traced payload'" in text
    assert "-> PUBACK" in text and "-> PUBLISH(d0 q1 r0 id=" in text
    assert "<- DISCONNECT" in text
    assert lines[-1].endswith("ended after 4 s")


def test_a_trace_over_its_rate_stops(node) -> None:  # type: ignore[no-untyped-def]
    broker, url = node
    client_id = unique("chatty")
    client = PahoClient(broker.port, 5, client_id)
    client.connect()
    tracer = Tracer(url, broker.data_dir, f"client_id={client_id}", "--rate-max=5", "--rate-interval=1000",
                    "--stop-after=20")
    started(tracer)
    for i in range(20):
        client.publish("chatty/t", f"m{i}".encode(), qos=0, wait=False)
    t0 = time.monotonic()
    code, lines, err = tracer.finish()
    assert code == 0, err
    assert time.monotonic() - t0 < 15, "stopped by its rate, not by its time"
    assert "more than 5 packets in 1 s" in lines[-1], lines
    assert sum(" <- PUBLISH" in line for line in lines) == 5
    client.stop()


def test_tracing_an_unknown_client_waits_for_it_and_ends(node) -> None:  # type: ignore[no-untyped-def]
    broker, url = node
    tracer = Tracer(url, broker.data_dir, "client-id=nobody-here", "--stop-after=1")
    code, lines, err = tracer.finish()
    assert code == 0, err
    assert "0 connection(s) now" in lines[0] and lines[-1].endswith("ended after 1 s")
