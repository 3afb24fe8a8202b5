"""docs/admin.md, "Coming from VerneMQ": each vmq-admin line and HTTP path of that table, run as VerneMQ
documents it (its flag spellings) with the real `vmq-admin` against two real nodes, and its answer checked."""

from __future__ import annotations

import json
import shlex
import urllib.request
from typing import Any

import pytest

from tests.integration.cluster import ClusterNode
from tests.integration.conftest import wait_until
from tests.integration.test_admin_cluster import http, rows

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("VerneMQ's operator command lines")]


def run(node: ClusterNode, line: str) -> str:
    """One vmq-admin command line as an operator types it (after `vmq-admin`); it must succeed."""
    answer = node.admin(*shlex.split(line))
    assert answer.returncode == 0, f"vmq-admin {line}: {answer.stderr}"
    return answer.stdout


def table(node: ClusterNode, line: str) -> list[dict[str, Any]]:
    return rows(node, *shlex.split(line))


def test_verneMQs_command_lines_run_as_written(pair: list[ClusterNode]) -> None:
    n1, n2 = pair
    client = n1.client(5, "vc-a", clean=False, session_expiry=3600)
    client.client.reconnect_delay_set(min_delay=120, max_delay=120)  # stay away once disconnected
    client.subscribe("vc/#", qos=1)
    client.publish("vc/kept", b"kept value", qos=1, retain=True)
    wait_until(lambda: any(r["topic"] == "vc/kept" for r in table(n2, "retain show")), 10, what="retained on n2")

    assert {r["Node"] for r in table(n2, "cluster show")} == {n1.name, n2.name}
    assert table(n2, "cluster status") == table(n2, "cluster show")

    assert {"client_id": "vc-a", "is_online": True} in table(n2, "session show --client_id --is_online "
                                                                  "--limit=10 --rowtimeout=100")
    assert table(n2, "session show --client_id=vc-a --topic --qos") == [{"client_id": "vc-a", "topic": "vc/#",
                                                                         "qos": 1}]
    assert run(n2, "session reauthorize username=u1 client-id=vc-a").splitlines()[0] == "Unchanged"

    assert {"topic": "vc/kept", "payload": "kept value"} in table(n2, "retain show")
    assert table(n2, "retain show --payload --topic=vc/kept") == [{"topic": "vc/kept", "payload": "kept value"}]

    [listener] = table(n1, "listener show")
    assert (listener["type"], listener["status"], listener["mountpoint"]) == ("mqtt", "running", "")
    assert int(listener["port"]) == n1.mqtt_port

    assert run(n1, "metrics show")
    assert any(line.startswith("counter.mqtt_connect_received = ") for line in
               run(n1, "metrics show --format=vernemq").splitlines())
    trace = run(n1, "trace client client-id=vc-a --rate-max=10 --rate-interval=100 --trunc-payload=200 "
                    "--stop-after=1").splitlines()
    assert "tracing client 'vc-a'" in trace[0] and trace[-1].endswith("ended after 1 s")

    run(n2, "set allow_register_during_netsplit=on")
    assert "on" in run(n2, "show allow_register_during_netsplit")
    run(n2, "set allow_register_during_netsplit=off")
    assert run(n2, "api-key create").strip()
    assert table(n2, "api-key show")

    key = n2.api_key()
    for path in ("/api/v1/session/show?--client_id&--is_online", "/api/v1/sessions", "/api/v1/cluster",
                 "/api/v1/listeners"):
        status, body = http(n2, path, key)
        assert status == 200 and body["type"] == "table" and body["table"], path
    for path in ("/health", "/health/ping", "/health/listeners"):
        assert http(n2, path)[0] == 200, path
    assert http(n2, "/status.json", key)[0] == 200
    request = urllib.request.Request(n1.url + "/metrics", headers={"Authorization": f"Bearer {n1.api_key()}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert b"mqtt_connect_received" in answer.read()

    run(n1, f"listener stop address={n1.host} port={n1.mqtt_port} -k")
    wait_until(lambda: table(n2, "session show --client_id=vc-a --is_online") == [
        {"client_id": "vc-a", "is_online": False}], 10, what="vc-a disconnected by the listener stop")
    assert http(n1, "/health/listeners")[0] == 503
    run(n1, f"listener restart address={n1.host} port={n1.mqtt_port}")
    assert http(n1, "/health/listeners")[0] == 200

    run(n2, "session disconnect client-id=vc-a --cleanup")
    wait_until(lambda: table(n2, "session show --client_id=vc-a") == [], 10, what="vc-a's session removed")
    client.stop()

    left = run(n1, f"cluster leave node={n2.name} -k -i 5 -t 60")
    assert n2.name in left
    wait_until(lambda: [r["Node"] for r in table(n1, "cluster show")] == [n1.name], 15, what="n2 gone")
    assert json.loads(n1.admin("cluster", "show", "--format=json").stdout) == table(n1, "cluster show")
