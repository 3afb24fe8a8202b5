"""docs/admin.md, "Coming from VerneMQ": each vmq-admin line and HTTP path of that table, run as VerneMQ
documents it (its flag spellings) with the real `vmq-admin` against real nodes, and its answer checked: the
`session show` columns of VerneMQ's `vmq_info` table and its `=~` filter, `session unsubscribe` across nodes,
`retain delete-expired`, `log level logger=`, `show` of every setting, `set --all` / `--node=`."""

from __future__ import annotations

import json
import shlex
import urllib.error
import urllib.request
from typing import Any

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.integration.clients import RawClient
from tests.integration.cluster import ClusterNode
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("VerneMQ's operator command lines")]


def run(node: ClusterNode, line: str) -> str:
    """One vmq-admin command line as an operator types it (after `vmq-admin`); it must succeed."""
    answer = node.admin(*shlex.split(line))
    assert answer.returncode == 0, f"vmq-admin {line}: {answer.stderr}"
    return answer.stdout


def table(node: ClusterNode, line: str) -> list[dict[str, Any]]:
    return node.rows(*shlex.split(line))


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
        status, body = n2.get(path, key)
        assert status == 200 and body["type"] == "table" and body["table"], path
    for path in ("/health", "/health/ping", "/health/listeners"):
        assert n2.get(path)[0] == 200, path
    assert n2.get("/status.json", key)[0] == 200
    request = urllib.request.Request(n1.url + "/metrics", headers={"Authorization": f"Bearer {n1.api_key()}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert b"mqtt_connect_received" in answer.read()

    run(n1, f"listener stop address={n1.host} port={n1.mqtt_port} -k")
    wait_until(lambda: table(n2, "session show --client_id=vc-a --is_online") == [
        {"client_id": "vc-a", "is_online": False}], 10, what="vc-a disconnected by the listener stop")
    assert n1.get("/health/listeners")[0] == 503
    run(n1, f"listener restart address={n1.host} port={n1.mqtt_port}")
    assert n1.get("/health/listeners")[0] == 200

    run(n2, "session disconnect client-id=vc-a --cleanup")
    wait_until(lambda: table(n2, "session show --client_id=vc-a") == [], 10, what="vc-a's session removed")
    client.stop()

    left = run(n1, f"cluster leave node={n2.name} -k -i 5 -t 60")
    assert n2.name in left
    wait_until(lambda: [r["Node"] for r in table(n1, "cluster show")] == [n1.name], 15, what="n2 gone")
    assert json.loads(n1.admin("cluster", "show", "--format=json").stdout) == table(n1, "cluster show")


def refused(node: ClusterNode, line: str) -> str:
    """A vmq-admin line the node must refuse: its error text."""
    answer = node.admin(*shlex.split(line))
    assert answer.returncode != 0, f"vmq-admin {line} succeeded: {answer.stdout}"
    return answer.stderr


def test_session_columns_of_verneMQs_table_and_its_regex_filter(pair: list[ClusterNode]) -> None:
    n1, n2 = pair
    kept = n1.client(5, "vq-kept", clean=False, session_expiry=3600)
    kept.client.reconnect_delay_set(min_delay=120, max_delay=120)  # stay away once disconnected
    kept.subscribe("vq/#", qos=1)
    other = n2.client(5, "vq-other")
    n2.client(5, "ignored-1")

    found = table(n2, "session show --client_id=~^vq- --node --statename --is_offline --num_sessions "
                      "--session_started_at --deliver_mode")
    assert sorted((r["client_id"], r["node"], r["statename"], r["is_offline"], r["num_sessions"], r["deliver_mode"])
                  for r in found) == [("vq-kept", n1.name, "online", False, 1, "fanout"),
                                      ("vq-other", n2.name, "online", False, 1, "fanout")]
    assert all(isinstance(r["session_started_at"], int) and r["session_started_at"] > 0 for r in found)
    assert table(n1, "session show --client_id=~^vq-k --topic --qos --rap --no_local") == [
        {"client_id": "vq-kept", "topic": "vq/#", "qos": 1, "rap": False, "no_local": False}]
    assert table(n1, "session show --client_id=~ignored --is_online") == [{"client_id": "ignored-1",
                                                                          "is_online": True}]
    assert {"ignored-1", "vq-kept", "vq-other"} <= {r["client_id"] for r in table(n1, "session show")}
    assert list(table(n1, "session show")[0]) == ["client_id", "is_online", "mountpoint", "peer_host", "peer_port",
                                                  "user", "node"]  # VerneMQ's default columns, and the node

    # offline, messages wait: the queue columns and one row per queued message
    run(n1, "session disconnect client-id=vq-kept")
    wait_until(lambda: table(n2, "session show --client_id=vq-kept --statename") == [
        {"client_id": "vq-kept", "statename": "offline"}], 10, what="vq-kept offline")
    for n in range(3):
        other.publish(f"vq/{n}", f"m{n}".encode(), qos=1)
    wait_until(lambda: table(n2, "session show --client_id=vq-kept --offline_messages --online_messages "
                                 "--queue_size --is_offline") == [
        {"client_id": "vq-kept", "offline_messages": 3, "online_messages": 0, "queue_size": 3, "is_offline": True}],
        10, what="three messages queued for vq-kept")
    assert table(n2, "session show --client_id=vq-kept --routing_key --msg_qos --payload=~^m[12]$") == [
        {"client_id": "vq-kept", "routing_key": "vq/1", "msg_qos": 1, "payload": "m1"},
        {"client_id": "vq-kept", "routing_key": "vq/2", "msg_qos": 1, "payload": "m2"}]

    # a bad expression is refused with its cause, on the command line and over HTTP
    assert "not a regular expression" in refused(n2, "session show --client_id=~(")
    status, body = n2.get("/api/v1/session/show?--client_id=~%28", n2.api_key())
    assert status == 400 and "not a regular expression" in body["error"]


def test_session_unsubscribe_reaches_the_session_on_another_node(cluster: list[ClusterNode]) -> None:
    n1, n2, n3 = cluster
    subscriber = n3.client(5, "vu-sub", clean=False, session_expiry=3600)
    subscriber.subscribe("vu/gone/#", qos=1)
    subscriber.subscribe("vu/kept", qos=1)
    publisher = n1.client(5, "vu-pub")
    wait_until(lambda: {r["Filter"] for r in table(n1, "subscription show client-id=vu-sub")} ==
               {"vu/gone/#", "vu/kept"}, 10, what="both subscriptions known on n1")
    publisher.publish("vu/gone/1", b"before", qos=1)
    assert subscriber.get(10).payload == b"before"

    answer = run(n2, "session unsubscribe client-id=vu-sub topic=vu/gone/#")
    assert answer.splitlines() == ["Done", f"vu-sub on {n3.name}: unsubscribed from vu/gone/#"]
    assert table(n2, "session show --client_id=vu-sub --topic") == [{"client_id": "vu-sub", "topic": "vu/kept"}]
    wait_until(lambda: [r["Filter"] for r in table(n1, "subscription show client-id=vu-sub")] == ["vu/kept"], 10,
               what="the removed subscription gone from n1's replica")
    publisher.publish("vu/gone/2", b"after", qos=1)
    publisher.publish("vu/kept", b"marker", qos=1)  # after it, in order: "after" would have come first
    assert subscriber.until_marker("vu/kept", timeout=10) == []

    assert "has no subscription" in refused(n2, "session unsubscribe client-id=vu-sub topic=vu/gone/#")
    assert "no session of client id 'nobody'" in refused(n2, "session unsubscribe client-id=nobody topic=a")


def test_retain_delete_expired_and_log_level_forms(pair: list[ClusterNode]) -> None:
    n1, n2 = pair
    publisher = n1.client(5, "vr-pub")
    expiring = Properties(PacketTypes.PUBLISH)
    expiring.MessageExpiryInterval = 1
    publisher.publish("vr/short", b"soon gone", qos=1, retain=True, props=expiring)
    publisher.publish("vr/long", b"stays", qos=1, retain=True)
    wait_until(lambda: {r["topic"] for r in table(n2, "retain show --topic=vr/#")} == {"vr/short", "vr/long"}, 10,
               what="both retained on n2")
    removed: list[int] = []

    def expired_removed() -> bool:
        removed.extend(int(r["expired"]) for r in table(n2, "retain delete-expired"))
        return sum(removed) >= 1

    wait_until(expired_removed, 15, interval=0.3, what="the expired retained message removed")
    assert sum(removed) == 1
    for node in (n1, n2):  # removed cluster-wide
        wait_until(lambda node=node: [r["topic"] for r in table(node, "retain show --topic=vr/#")] == ["vr/long"],
                   10, what=f"only vr/long retained on {node.name}")

    assert run(n1, "log level logger=default level=debug").strip() == "log.console.level = debug"
    assert run(n1, "log level").strip() == "log.console.level = debug"
    assert table(n1, "log show config")[0]["level"] == "debug"
    assert run(n1, "log level level=info").strip() == "log.console.level = info"
    assert "no logger 'lager'" in refused(n1, "log level logger=lager level=info")


def test_settings_are_listed_and_set_on_every_member_or_one(cluster: list[ClusterNode]) -> None:
    n1, n2, n3 = cluster
    every = {r["Setting"]: r for r in table(n1, "show")}
    assert every["max_inflight_messages"]["Run time"].startswith("for every session")
    assert every["nodename"]["Value"] == n1.name and every["nodename"]["Run time"].startswith("no: ")
    assert "max_inflight_messages" in run(n1, "set --help")

    answer = run(n1, "set max_inflight_messages=30 max_offline_messages=2 --all")
    assert sorted(answer.splitlines()) == sorted(f"{n.name}: {k} = {v}" for n in cluster
                                                 for k, v in (("max_inflight_messages", 30),
                                                              ("max_offline_messages", 2)))
    for node in cluster:
        assert table(node, "show max_inflight_messages max_offline_messages") == [
            {"Setting": "max_inflight_messages", "Value": "30"}, {"Setting": "max_offline_messages", "Value": "2"}]

    run(n1, f"set log.console.level=debug --node={n2.name}")
    assert [table(n, "show log.console.level")[0]["Value"] for n in cluster] == ["info", "debug", "info"]

    # the new max_offline_messages is in force at once: an offline session keeps 2 of 5 messages
    kept = n3.client(5, "vs-kept", clean=False, session_expiry=3600)
    kept.client.reconnect_delay_set(min_delay=120, max_delay=120)
    kept.subscribe("vs/#", qos=1)
    run(n3, "session disconnect client-id=vs-kept")
    wait_until(lambda: table(n3, "session show --client_id=vs-kept --is_online") == [
        {"client_id": "vs-kept", "is_online": False}], 10, what="vs-kept offline")
    publisher = n3.client(5, "vs-pub")
    for n in range(5):
        publisher.publish(f"vs/{n}", b"x", qos=1)
    wait_until(lambda: table(n3, "session show --client_id=vs-kept --offline_messages --dropped") == [
        {"client_id": "vs-kept", "offline_messages": 2, "dropped": 3}], 10, what="2 kept, 3 dropped")

    # allow_anonymous at once for the next CONNECT: a client without a user name is refused (0x87), one already
    # connected stays
    run(n2, "set allow_anonymous=off")
    refused_client = RawClient(n2.mqtt_port, n2.host, 5)
    try:
        assert refused_client.connect("vs-anon", expect_rc=None).reason_code == 0x87
    finally:
        refused_client.close()
    assert table(n3, "session show --client_id=vs-pub --is_online") == [{"client_id": "vs-pub", "is_online": True}]
    run(n2, "set allow_anonymous=on")
    accepted = RawClient(n2.mqtt_port, n2.host, 5)
    try:
        accepted.connect("vs-anon")
    finally:
        accepted.close()

    assert "cannot be changed while the node runs: every member must hold the same cookie" in refused(
        n1, "set distributed_cookie=other --all")
    request = urllib.request.Request(n1.url + "/api/v1/set?nodename=x", method="POST",
                                     headers={"x-api-key": n1.api_key()})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    with caught.value as answer:
        status, body = answer.code, json.loads(answer.read())
    assert status == 409 and "nodename cannot be changed while the node runs: it is the node's name" in body["error"]
    assert "no member 'vmq9@127.0.0.99'" in refused(n1, "set max_inflight_messages=5 --node=vmq9@127.0.0.99")
