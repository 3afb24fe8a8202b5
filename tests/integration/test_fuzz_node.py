"""A short run of the live-node fuzzers (bench/fuzz_node.py, bench/fuzz_admin.py) inside `make test`: mutated MQTT
3.1/3.1.1/5.0 packets over TCP and over WebSocket binary frames, then hostile admin API requests, against one
real node. Fails on a crash (the node exits, answers DISCONNECT 0x80 or logs an internal error or a traceback),
a hang (a paho-mqtt client not served within the probe bound after a batch) or an admin answer that is a 5xx,
not 401 without the key, or a 4xx without a clear body. The long runs and their figures: docs/security.md
"Fuzzing". Replay a failing run with TEST_SEED=<printed seed>."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

import pytest

from bench.fuzz_admin import fuzz_admin
from bench.fuzz_node import Target, fuzz_node
from tests.integration.conftest import Broker, chosen_seed, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("fuzzes vmqpy's own listeners and admin API")]

CASES = 1500  # per transport: a few thousand live cases in all, well under a minute on the shared 2-core machine


@pytest.fixture
def fuzz_target(broker_factory: Callable[..., Broker]) -> Target:
    ws_port, http_port = free_port(), free_port()
    broker = broker_factory(**{
        "listener.ws.default": f"127.0.0.1:{ws_port}",
        "listener.http.default": f"127.0.0.1:{http_port}",
        "log.console.level": "warning",
    })
    url = f"http://127.0.0.1:{http_port}"
    wait_until(lambda: urllib.request.urlopen(f"{url}/health/ping", timeout=2).status == 200, 15, what="admin API")
    key_file = broker.data_dir / "api.key"
    wait_until(key_file.exists, 15, what="the node's API key")
    assert broker.proc is not None
    return Target(broker.port, ws_port, url, key_file.read_text().strip(), broker.proc.pid, broker.log,
                  broker.alive)


@pytest.mark.parametrize("websocket", [False, True], ids=["tcp", "websocket"])
def test_mutated_packets_do_not_bring_the_node_down(fuzz_target: Target, websocket: bool) -> None:
    seed = chosen_seed()
    report = fuzz_node(fuzz_target, CASES, seed, websocket=websocket, batch=500, progress=False)
    print(f"TEST_SEED={seed}\n{report.text()}")
    assert report.cases == CASES
    assert not report.crashes, f"TEST_SEED={seed}: {report.crashes[:5]}"
    assert not report.hangs, f"TEST_SEED={seed}: {report.hangs[:5]}"
    assert report.probes >= 2 * (CASES // 500), "a probe after every batch, over TCP and the fuzzed transport"
    # the node answered: protocol errors were reported to 5.0 clients as the spec prescribes
    assert report.disconnect_codes.keys() & {0x81, 0x82}, report.text()
    assert not report.client_errors, f"our side could not send: {report.client_errors}"


def test_hostile_admin_requests_get_clear_4xx_answers(fuzz_target: Target) -> None:
    seed = chosen_seed()
    assert fuzz_target.http_url is not None
    report = fuzz_admin(fuzz_target.http_url, fuzz_target.api_key, 400, seed, alive=fuzz_target.alive)
    print(f"TEST_SEED={seed}\n{report.text()}")
    assert not report.failures, f"TEST_SEED={seed}: {report.failures[:5]}"
    assert report.statuses[401] > 0 and report.statuses[405] > 0 and report.statuses[404] > 0, report.statuses
    assert not any(code >= 500 for code in report.statuses), report.statuses
    # aiohttp's own 400s (an unparsable request) are logged as one line each, not as a traceback
    assert fuzz_target.internal_errors() == [], fuzz_target.internal_errors()[:3]
