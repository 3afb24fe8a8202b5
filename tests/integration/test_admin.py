"""The HTTP admin API and the real `vmq-admin` against a real node."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.integration.admin_api import admin, node

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("the vmqpy admin API")]

__all__ = ["node"]  # the fixture this module's tests take


def test_commands_answer_with_the_node_state(node, clients) -> None:  # type: ignore[no-untyped-def]
    broker, url = node
    sub = clients.paho(broker, 4, client_id="admin-sub", clean=False)
    sub.subscribe("admin/#", qos=1)
    pub = clients.paho(broker, 4)
    pub.publish("admin/kept", b"retained value", qos=1, retain=True)
    show = admin(url, broker.data_dir, "cluster", "show", "--json")
    assert show.returncode == 0, show.stderr
    (row,) = json.loads(show.stdout)
    assert (row["Running"], row["Reachable"], row["Ready"]) == (True, True, True)
    columns = ("--client_id", "--clean_session", "--json")
    sessions = json.loads(admin(url, broker.data_dir, "session", "show", *columns).stdout)
    assert {"client_id": "admin-sub", "clean_session": False} in sessions
    subs = admin(url, broker.data_dir, "subscription", "show", "client-id=admin-sub")
    assert subs.returncode == 0 and "admin/#" in subs.stdout
    retained = json.loads(admin(url, broker.data_dir, "retain", "show", "topic=admin/#", "--json").stdout)
    assert retained == [{"topic": "admin/kept", "payload": "retained value"}], "VerneMQ's default columns"
    chosen = admin(url, broker.data_dir, "retain", "show", "--topic=admin/#", "--qos", "--payload", "--json")
    assert json.loads(chosen.stdout) == [{"topic": "admin/kept", "payload": "retained value", "qos": 1}]
    metrics = json.loads(admin(url, broker.data_dir, "metrics", "show", "--json").stdout)
    values = {r["Metric"]: r["Value"] for r in metrics} if isinstance(metrics, list) else metrics
    assert values["broker.retained"] == 1


def test_settings_show_masks_secrets_and_refuse_what_cannot_change(node) -> None:  # type: ignore[no-untyped-def]
    broker, url = node
    cookie = admin(url, broker.data_dir, "show", "distributed_cookie")
    assert cookie.returncode == 0 and "********" in cookie.stdout
    refused = admin(url, broker.data_dir, "set", "max_message_size=5000")  # a key read when listeners open
    assert refused.returncode != 0 and "cannot be changed while the node runs: the WebSocket" in refused.stderr
    unknown = admin(url, broker.data_dir, "show", "no_such_setting")
    assert unknown.returncode != 0 and "unknown setting" in unknown.stderr


def test_api_refuses_requests_without_a_valid_key(node) -> None:  # type: ignore[no-untyped-def]
    broker, url = node
    for key in (None, "wrong-key"):
        request = urllib.request.Request(f"{url}/api/v1/cluster/show")
        if key is not None:
            request.add_header("x-api-key", key)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=5)
        assert err.value.code == 401
    wrong = admin(url, Path("/nonexistent"), "cluster", "show", key="wrong-key")
    assert wrong.returncode != 0 and "401" in wrong.stderr
    key = (broker.data_dir / "api.key").read_text().strip()
    assert (broker.data_dir / "api.key").stat().st_mode & 0o777 == 0o600
    request = urllib.request.Request(f"{url}/api/v1/cluster/show", headers={"x-api-key": key})
    body = json.loads(urllib.request.urlopen(request, timeout=5).read())
    assert body["type"] == "table" and body["table"][0]["Ready"] is True


def test_single_node_cannot_join(node) -> None:  # type: ignore[no-untyped-def]
    broker, url = node
    answer = admin(url, broker.data_dir, "cluster", "join", "discovery-node=n1@127.0.0.11")
    assert answer.returncode != 0 and "listener.vmq.clustering" in answer.stderr
