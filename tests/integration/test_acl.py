"""Who may do what, end to end (docs/security.md): a real node with a real password file (made by `vmqpy
passwd`) and a real ACL file, real clients on MQTT 3.1.1 and 5.0, the real `vmq-admin`.

* A table of (user, action, topic) -> allowed or refused, each checked with what the client receives: SUBACK
  0x87 (5.0) / 0x80 (3.1.1); PUBLISH QoS 1 refused with PUBACK 0x87 (5.0) or acknowledged and not delivered
  (3.1.1). Delivery and non-delivery are seen by a watcher allowed to read everything: a forbidden publish is
  followed by a marker on the same connection, so that "not delivered" is "the marker came first".
* Anonymous clients are refused by default (CONNACK 0x87 / 5), with a log line saying how to allow them; bad
  passwords get 0x86 / 4, and no password reaches the log.
* Reloads: by file change (vmq_acl.acl_reload_interval) and by `vmq-admin acl reload`; a bad line keeps the
  ACL in force and is named; a live subscription the new ACL forbids stops delivering.
* A will to a forbidden topic is not published; a retained message the client may not read is not delivered.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.admin_api import admin, metrics
from tests.integration.clients import PahoClient, RawClient, unique
from tests.integration.conftest import REPO, Broker, broker_kind, free_port, wait_until
from tests.integration.node_processes import Node, nodes, write_conf

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's ACL and password files")]

__all__ = ["nodes"]  # the fixture this module's tests take

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "watcher": "watcher-secret", "carol": "carol-secret"}

ACL = """\
# everyone, anonymous clients included
topic read public/#
topic deny public/secret
pattern clients/%c/#

user alice
topic alice/#
topic write shared/inbox
pattern read users/%u/#

user bob
topic read shared/inbox
topic write will/bob
topic read retained/open
topic write retained/#

user watcher
topic read #
"""


def make_passwords(path: Path, users: dict[str, str]) -> None:
    """Add `users` to the password file with the real `vmqpy passwd` (the password on standard input)."""
    for user, password in users.items():
        done = subprocess.run([sys.executable, "-m", "vmqpy", "passwd", str(path), user], input=password + "\n",
                              capture_output=True, text=True, timeout=30, cwd=REPO)
        assert done.returncode == 0, done.stderr


def start_node(workdir: Path, acl: str = ACL, users: dict[str, str] = PASSWORDS, **extra: Any) -> tuple[Broker, Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    acl_file, passwd = workdir / "vmq.acl", workdir / "vmq.passwd"
    acl_file.write_text(acl)
    make_passwords(passwd, users)
    settings = {"acl_file": acl_file, "password_file": passwd, "allow_anonymous": "on",
                "auth.failed_login_delay": "100ms", **extra}
    return Broker(broker_kind(), workdir, settings).start(), acl_file


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker, _acl = start_node(tmp_path_factory.mktemp("acl-node"))
    yield broker
    broker.stop()


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[list[Broker]]:
    """Nodes a test starts itself (for reloads, which change the file); stopped after it."""
    started: list[Broker] = []
    yield started
    for broker in started:
        broker.stop()


def login(port: int, user: str | None, version: int, client_id: str | None = None) -> RawClient:
    client = RawClient(port, version=version)
    password = None if user is None else PASSWORDS[user].encode()
    client.connect(client_id or unique(f"{user or 'anon'}-"), username=user, password=password)
    return client


# (user, action, topic, allowed); "CID" in a topic is the client's own client id
TABLE: list[tuple[str | None, str, str, bool]] = [
    # lines before any `user`: every client, anonymous ones included
    (None, "sub", "public/news", True),
    (None, "pub", "public/news", False),  # read only
    (None, "sub", "public/secret", False),  # topic deny
    (None, "sub", "public/#", True),  # only overlaps the deny: granted, public/secret withheld per message
    (None, "sub", "alice/x", False),
    ("alice", "sub", "public/news", True),  # the lines for everyone apply to users too
    ("bob", "sub", "public/secret", False),
    # a user's section
    ("alice", "sub", "alice/x", True),
    ("alice", "pub", "alice/x", True),
    ("alice", "sub", "alice/#", True),
    ("bob", "sub", "alice/#", False),
    ("bob", "pub", "alice/x", False),
    ("alice", "pub", "shared/inbox", True),
    ("alice", "sub", "shared/inbox", False),
    ("bob", "sub", "shared/inbox", True),
    ("bob", "pub", "shared/inbox", False),
    # patterns: %u, and %c for everyone
    ("alice", "sub", "users/alice/x", True),
    ("bob", "sub", "users/alice/x", False),
    (None, "pub", "clients/CID/x", True),
    ("bob", "sub", "clients/CID/#", True),
    ("bob", "pub", "clients/someone-else/x", False),
]


def table_id(row: tuple[str | None, str, str, bool]) -> str:
    user, action, topic, allowed = row
    return f"{user or 'anonymous'}-{action}-{topic}-{'allowed' if allowed else 'refused'}"


@pytest.mark.parametrize("level", [4, 5])
@pytest.mark.parametrize(("user", "action", "topic", "allowed"), TABLE, ids=[table_id(r) for r in TABLE])
def test_the_table_end_to_end(node: Broker, level: int, user: str | None, action: str, topic: str,
                              allowed: bool) -> None:
    client_id = unique("table-")
    topic = topic.replace("CID", client_id)
    client = login(node.port, user, level, client_id)
    try:
        if action == "sub":
            check_subscribe(node, client, topic, allowed, level)
        else:
            check_publish(node, client, client_id, topic, allowed, level)
    finally:
        client.close()


def check_subscribe(node: Broker, client: RawClient, topic: str, allowed: bool, level: int) -> None:
    ack = client.subscribe(topic, qos=1, check=False)
    refused = 0x87 if level == 5 else 0x80
    assert ack.reason_codes == [1 if allowed else refused], ack
    assert client.is_open(), "a refused filter does not close the connection"


def check_publish(node: Broker, client: RawClient, client_id: str, topic: str, allowed: bool, level: int) -> None:
    watcher = login(node.port, "watcher", 5)
    marker = f"clients/{client_id}/marker"
    try:
        ack = watcher.subscribe(topic.replace("CID", client_id), marker, qos=1, check=False)
        assert ack.reason_codes == [1, 1], ack
        puback = client.publish(topic, b"payload", qos=1)
        assert puback is not None
        assert puback.reason_code == (0 if allowed or level == 4 else 0x87), puback
        client.publish(marker, b"marker", qos=1)
        got = [(p.topic, p.payload) for p in watcher.recv_publishes(2 if allowed else 1)]
        expected = [(topic, b"payload"), (marker, b"marker")] if allowed else [(marker, b"marker")]
        assert got == expected, "a refused publish is not delivered (the marker, sent after it, comes first)"
    finally:
        watcher.close()


# ---------------------------------------------------------------------------------------------- logins


@pytest.mark.parametrize(("level", "code"), [(4, 5), (5, 0x87)])
def test_anonymous_clients_are_refused_by_default(tmp_path: Path, nodes: list[Node], level: int,
                                                  code: int) -> None:
    port = free_port()
    conf = write_conf(tmp_path, ["nodename = vmqpy@127.0.0.1", f"platform_data_dir = {tmp_path / 'data'}",
                                 f"listener.tcp.default = 127.0.0.1:{port}", "auth.failed_login_delay = 100ms"])
    node = Node(conf)
    nodes.append(node)
    node.wait_listening(port)
    client = RawClient(port, version=level)
    ack = client.connect(unique("anon-"), expect_rc=code)
    assert ack.reason_code == code
    client.wait_closed()
    if level == 5:
        paho = PahoClient(port, 5, unique("paho-anon-"))
        try:
            _flags, rc, _props = paho.connect(expect_success=False)
            assert rc.value == 0x87, rc
        finally:
            paho.stop()
    log = node.log.read_text()
    assert "anonymous clients are not allowed" in log and "allow_anonymous = on" in log, log


@pytest.mark.parametrize(("level", "code"), [(4, 4), (5, 0x86)])
def test_a_bad_password_is_refused_and_never_logged(node: Broker, level: int, code: int) -> None:
    client = RawClient(node.port, version=level)
    client.connect(unique("guess-"), username="alice", password=b"guessed-wrong-1234", expect_rc=code)
    client.wait_closed()
    wrong_user = RawClient(node.port, version=level)
    wrong_user.connect(unique("guess-"), username="mallory", password=b"guessed-wrong-1234", expect_rc=code)
    wrong_user.wait_closed()
    log = node.log.read_text()
    assert "guessed-wrong-1234" not in log
    assert "failed_logins" in log


def test_paho_5_with_credentials_exchanges_messages(node: Broker) -> None:
    sub = PahoClient(node.port, 5, unique("paho-alice-"))
    pub = PahoClient(node.port, 5, unique("paho-alice-"))
    try:
        for client in (sub, pub):
            client.client.username_pw_set("alice", PASSWORDS["alice"])
            client.connect()
        topic = unique("alice/paho-")
        sub.subscribe(topic, qos=1)
        pub.publish(topic, b"from paho", qos=1)
        assert sub.get().payload == b"from paho"
    finally:
        sub.stop()
        pub.stop()


# ---------------------------------------------------------------------------------------------- wills, retained


def test_a_will_to_a_forbidden_topic_is_not_published(node: Broker) -> None:
    watcher = login(node.port, "watcher", 5)
    watcher.subscribe("will/#", "clients/+/marker", qos=1)
    alice = RawClient(node.port, version=4)
    alice.connect(unique("will-alice-"), username="alice", password=PASSWORDS["alice"].encode(),
                  will={"topic": "will/alice", "payload": b"alice gone", "qos": 1})
    bob = RawClient(node.port, version=4)
    bob_id = unique("will-bob-")
    bob.connect(bob_id, username="bob", password=PASSWORDS["bob"].encode(),
                will={"topic": "will/bob", "payload": b"bob gone", "qos": 1})
    alice.close()  # no DISCONNECT: the will is due, and alice may not publish on will/alice
    wait_until(lambda: "will not published: the ACL does not allow" in node.log.read_text(), 10,
               what="alice's will judged")
    bob.close()  # bob may publish on will/bob
    got = [(p.topic, p.payload) for p in watcher.recv_publishes(1)]
    assert got == [("will/bob", b"bob gone")], "only bob's will is published (alice's would have come first)"
    watcher.close()


def test_a_retained_message_is_delivered_only_to_clients_that_may_read_it(node: Broker) -> None:
    bob = login(node.port, "bob", 5)
    for topic in ("retained/open", "retained/hidden"):
        bob.publish(topic, b"kept " + topic.encode(), qos=1, retain=True)
    reader = login(node.port, "bob", 5)
    ack = reader.subscribe("retained/#", qos=1, check=False)
    assert ack.reason_codes == [0x87], "retained/# would deliver retained/hidden, which bob may not read"
    reader.subscribe("retained/open", qos=1)
    got = reader.recv_publishes(1)
    assert [(p.topic, p.payload) for p in got] == [("retained/open", b"kept retained/open")]
    watcher = login(node.port, "watcher", 5)
    watcher.subscribe("retained/#", qos=1)
    assert sorted(p.topic for p in watcher.recv_publishes(2)) == ["retained/hidden", "retained/open"]
    for client in (bob, reader, watcher):
        client.close()


# ---------------------------------------------------------------------------------------------- reloads

RELOAD_V1 = """\
user reader
topic read feed/#
topic read marker/#
user writer
topic write feed/#
topic write marker/#
"""
RELOAD_V2 = RELOAD_V1.replace("topic read feed/#\n", "")
RELOAD_USERS = {"reader": "reader-secret", "writer": "writer-secret"}


def feed_cut_off(writer: RawClient, reader: RawClient) -> bool:
    """Whether a feed message no longer reaches the reader: it gets the marker published after it first."""
    writer.publish("feed/now", b"feed", qos=1)
    writer.publish("marker/m", b"marker", qos=1)
    got = [p.topic for p in reader.recv_publishes(1)]
    if got == ["marker/m"]:
        return True
    assert got == ["feed/now"], got
    assert [p.topic for p in reader.recv_publishes(1)] == ["marker/m"]
    return False


def test_a_file_change_reloads_both_files_and_cuts_a_live_subscription(tmp_path: Path,
                                                                       fresh: list[Broker]) -> None:
    broker, acl_file = start_node(tmp_path / "n", RELOAD_V1, {"writer": RELOAD_USERS["writer"]}, **{
        "vmq_acl.acl_reload_interval": 1, "vmq_passwd.password_reload_interval": 1})
    fresh.append(broker)
    make_passwords(tmp_path / "n" / "vmq.passwd", {"reader": RELOAD_USERS["reader"]})
    wait_until(lambda: "password file reloaded" in broker.log.read_text(), 15, what="the password file reload")
    reader = login_as(broker.port, "reader")
    writer = login_as(broker.port, "writer")
    assert reader.subscribe("feed/#", "marker/#", qos=1, check=False).reason_codes == [1, 1]
    assert not feed_cut_off(writer, reader), "before the change the feed is delivered"
    acl_file.write_text(RELOAD_V2)
    wait_until(lambda: feed_cut_off(writer, reader), 15, interval=0.2, what="the live subscription cut off")
    assert reader.subscribe("feed/x", qos=1, check=False).reason_codes == [0x87]
    assert "subscriptions removed: the ACL no longer allows them" in broker.log.read_text()
    reader.close()
    writer.close()


def login_as(port: int, user: str, version: int = 5) -> RawClient:
    client = RawClient(port, version=version)
    client.connect(unique(f"{user}-"), username=user, password=RELOAD_USERS[user].encode())
    return client


def test_vmq_admin_acl_reload_and_a_bad_line_kept_out(tmp_path: Path, fresh: list[Broker]) -> None:
    http = free_port()
    broker, acl_file = start_node(tmp_path / "n", RELOAD_V1, {"writer": RELOAD_USERS["writer"]}, **{
        "vmq_acl.acl_reload_interval": 0, "vmq_passwd.password_reload_interval": 0,
        "listener.http.default": f"127.0.0.1:{http}"})
    fresh.append(broker)
    url = f"http://127.0.0.1:{http}"
    wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200, 15, what="admin API")
    make_passwords(tmp_path / "n" / "vmq.passwd", {"reader": RELOAD_USERS["reader"]})
    refused = RawClient(broker.port, version=5)
    refused.connect(unique("reader-"), username="reader", password=b"reader-secret", expect_rc=0x86)
    refused.close()  # the new users are not known before a reload (interval 0: never by itself)

    answer = admin(url, broker.data_dir, "acl", "reload")
    assert answer.returncode == 0, answer.stderr
    assert f"ACL {acl_file} unchanged" in answer.stdout and "reloaded (2 users)" in answer.stdout, answer.stdout
    reader = login_as(broker.port, "reader")
    assert reader.subscribe("feed/a", qos=1, check=False).reason_codes == [1]

    acl_file.write_text(RELOAD_V2)
    assert reader.subscribe("feed/b", qos=1, check=False).reason_codes == [1], "not reloaded by itself"
    answer = admin(url, broker.data_dir, "acl", "reload")
    assert answer.returncode == 0 and f"ACL {acl_file} reloaded" in answer.stdout, answer
    assert reader.subscribe("feed/c", qos=1, check=False).reason_codes == [0x87]
    assert metrics(url, broker.data_dir)["broker.subscription_revoked"] == 2  # feed/a and feed/b

    acl_file.write_text(RELOAD_V1 + "topic read feed/#/oops\n")
    answer = admin(url, broker.data_dir, "acl", "reload")
    assert answer.returncode != 0
    assert f"{acl_file}:7:" in answer.stdout + answer.stderr, answer
    assert reader.subscribe("feed/d", qos=1, check=False).reason_codes == [0x87], "the previous ACL stays"
    assert reader.subscribe("marker/d", qos=1, check=False).reason_codes == [1]
    reader.close()
