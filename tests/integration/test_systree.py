"""The $SYS tree of one real node read with the real mosquitto_sub: a connected client shows up in the numbers,
a '#' subscriber gets none of it [MQTT-4.7.2-1], and a client cannot write it (docs/broker.md, "The $SYS
tree"). Anonymous clients may read it only with `systree_allow_anonymous = on` (the node of most tests here);
by default they are refused and a client with a user name reads it (issue 33, finding 8)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.clients import CliSub, RawClient, unique
from tests.integration.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's $SYS layout: $SYS/<nodename>/...")]

NODE = "vmqpy@127.0.0.1"  # the nodename conftest writes into every node's config
PREFIX = f"$SYS/{NODE}/"
INTERVAL_MS = 200  # a bare number: milliseconds, as in a vernemq.conf
FORMAT = "%r|%t|%p"  # retain flag, topic, payload: topics ("retained messages/count") and payloads have spaces


@pytest.fixture
def node(broker_factory):
    return broker_factory(systree_interval=INTERVAL_MS, systree_allow_anonymous="on")


def read(sub: CliSub) -> list[tuple[bool, str, str]]:
    """What a CliSub started with `-F FORMAT` printed: (retained, topic, payload), in arrival order. Its -d
    debug lines ("Client ... received PUBLISH ...") are left out."""
    _rc, lines = sub.finish()  # -W ends it with a non-zero exit code: that is expected
    out = []
    for line in lines:
        flag, sep, rest = line.partition("|")
        if not sep or flag not in ("0", "1"):
            continue
        topic, _sep, payload = rest.partition("|")
        out.append((flag == "1", topic, payload))
    return out


def sys_tree(port: int, seconds: int = 2) -> dict[str, str]:
    """The node's tree as a subscriber to $SYS/<node>/# sees it at the end of `seconds`: the last payload of
    each topic, keyed by the topic below the node's prefix."""
    sub = CliSub(port, PREFIX + "#", 5, ["-F", FORMAT], count=100000, wait=seconds)
    try:
        got = read(sub)
    finally:
        sub.kill()
    assert got, "nothing under $SYS/<node>/"
    return {topic.removeprefix(PREFIX): payload for _retained, topic, payload in got}


def test_a_connected_client_shows_up_in_the_numbers(node, clients):
    alone = sys_tree(node.port)
    assert alone["clients/connected"] == "1", "only mosquitto_sub itself is connected"
    assert alone["broker/sessions_online"] == "1"
    assert alone["version"].startswith("vmqpy ")
    assert int(alone["uptime"]) >= 0
    assert "publish/messages/received" not in alone, "no publish yet: the counter does not exist yet"

    client = clients.paho(node, 5, client_id=unique("sys-counted"))
    topic = unique("sys/counted/")
    for i in range(3):
        client.publish(f"{topic}{i}", b"x", qos=1)
    seen = sys_tree(node.port)
    assert seen["clients/connected"] == "2", "the paho client and mosquitto_sub"
    assert seen["broker/sessions_online"] == "2"
    assert seen["clients/total"] == "2", "mosquitto_sub's earlier clean session is gone"
    assert seen["clients/disconnected"] == "0"
    assert seen["publish/messages/received"] == seen["broker/publish_received"] == "3"


def test_hash_gets_none_of_it_while_sys_hash_gets_it_live(node, clients):
    wild = CliSub(node.port, "#", 5, ["-F", FORMAT], count=100000, wait=3)
    plus = CliSub(node.port, "+/#", 5, ["-F", FORMAT], count=100000, wait=3)
    sys_all = CliSub(node.port, "$SYS/#", 5, ["-F", FORMAT], count=100000, wait=3)
    try:
        for sub in (wild, plus, sys_all):
            sub.wait_subscribed()
        marker = unique("sys/marker/")
        clients.paho(node, 5).publish(marker, b"marker", qos=1)
        got_wild, got_plus, got_sys = read(wild), read(plus), read(sys_all)
    finally:
        for sub in (wild, plus, sys_all):
            sub.kill()
    for name, got in (("#", got_wild), ("+/#", got_plus)):
        assert (False, marker, "marker") in got, f"{name} subscriber works: {got}"
        assert [t for _r, t, _p in got if t.startswith("$")] == [], f"{name} got $-topics: {got}"
    assert any(r for r, t, _p in got_sys if t.startswith(PREFIX)), "$SYS/# got the retained tree"
    live = [t for r, t, _p in got_sys if not r]
    assert PREFIX + "uptime" in live, f"rounds went on during the 3 s and $SYS/# got them live: {got_sys}"


def test_a_client_cannot_write_the_tree(node, clients):
    intruder = clients.paho(node, 5, client_id=unique("sys-intruder"))
    intruder.publish(PREFIX + "uptime", b"hacked", qos=1, retain=True)  # acknowledged (the publish completes)
    intruder.publish(PREFIX + "version", b"", qos=1, retain=True)  # would delete it
    intruder.publish("$SYS/intruder", b"hacked", qos=1, retain=True)
    sub = CliSub(node.port, "$SYS/#", 5, ["-F", FORMAT], count=100000, wait=2)
    try:
        got = read(sub)
    finally:
        sub.kill()
    assert [p for _r, _t, p in got if p == "hacked"] == [], got
    assert "$SYS/intruder" not in {t for _r, t, _p in got}
    assert any(t == PREFIX + "version" and p.startswith("vmqpy ") for _r, t, p in got), got
    tree = sys_tree(node.port)
    assert int(tree["broker/publish_sys_dropped"]) == 3


# ---------------------------------------------------------------------------------------------- who may read it


@pytest.fixture
def guarded(broker_factory, tmp_path: Path):
    """A node with the default `systree_allow_anonymous = off`, anonymous clients allowed to connect, and one
    user (`monitor`) in a password file made by the real `vmqpy passwd`."""
    passwd = tmp_path / "vmq.passwd"
    done = subprocess.run([sys.executable, "-m", "vmqpy", "passwd", str(passwd), "monitor"], input="m-secret\n",
                          capture_output=True, text=True, timeout=30, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return broker_factory(systree_interval=INTERVAL_MS, allow_anonymous="on", password_file=passwd)


@pytest.mark.parametrize(("version", "refused"), [(4, 0x80), (5, 0x87)])
def test_an_anonymous_client_is_refused_the_tree_by_default(guarded, version: int, refused: int) -> None:
    client = RawClient(guarded.port, version=version)
    try:
        client.connect(unique("anon-sys-"))
        ack = client.subscribe("$SYS/#", f"$share/g/$SYS/{NODE}/uptime", "$SYS", "anything/#", qos=1, check=False)
        assert ack.reason_codes == [refused, refused, refused, 1]
        client.assert_silent(3 * INTERVAL_MS / 1000)  # rounds went on: nothing of the tree reached it
    finally:
        client.close()


def test_mosquitto_sub_with_a_user_name_reads_the_tree_and_without_one_does_not(guarded) -> None:
    user = CliSub(guarded.port, "$SYS/#", 5, ["-F", FORMAT, "-u", "monitor", "-P", "m-secret"], count=100000,
                  wait=2)
    anonymous = CliSub(guarded.port, "$SYS/#", 5, ["-F", FORMAT], count=100000, wait=2)
    try:
        got_user, got_anonymous = read(user), read(anonymous)
    finally:
        user.kill()
        anonymous.kill()
    assert any(t == PREFIX + "version" for _r, t, _p in got_user), got_user
    assert got_anonymous == []
    assert "Subscribed (mid: 1): 135" in anonymous.lines, anonymous.lines  # SUBACK 0x87 Not authorized
