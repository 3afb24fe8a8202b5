"""The ACL enforced where topics enter and leave, without sockets: the connection machine's decisions on
SUBSCRIBE (0x87 / 0x80 per filter), PUBLISH (5.0 PUBACK/PUBREC 0x87; 3.1.1 acknowledged, not routed) and on a
refused login (delayed, counted); the broker's on wills, retained messages, and the subscriptions an ACL change
(or a reconnect under another user name) no longer allows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.broker.fakes import MemoryMetadata, Policy, RecordingSink
from vmqpy.broker.access.acl import parse_acl
from vmqpy.broker.access.auth import hash_password
from vmqpy.broker.access.control import AccessControl
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.session import Session
from vmqpy.broker.machine.decisions import RefuseConnect, Register, Reply, SubscribeTo, Unanswered
from vmqpy.broker.machine.protocol import ConnectionMachine
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.packets import (
    Connect,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    SubOptions,
    Subscribe,
    Subscription,
    Will,
)
from vmqpy.sessions.message import Message

NOW = 1_000.0
ACL_TEXT = """\
topic read public/#
topic deny public/secret
user alice
topic alice/#
topic write shared/in
pattern read devices/%c/#
"""


def access_with(text: str, allow_anonymous: bool = True) -> AccessControl:
    access = AccessControl(allow_anonymous)
    access.acl = parse_acl(text, "test.acl")
    access.generation += 1
    return access


def machine(access: AccessControl, level: int = 5, username: str | None = "alice", client_id: str = "dev1",
            config: Config | None = None) -> ConnectionMachine:
    m = ConnectionMachine(config or Config(), access, Policy(), access=access)
    [decision] = m.receive(Connect(client_id, protocol_level=level, username=username), NOW)
    assert isinstance(decision, Register)
    m.connected(Session(client_id, protocol_level=level, expiry_interval=0.0, max_inflight=20, max_online=100,
                        max_offline=100))
    return m


def subscribe(*filters: str) -> Subscribe:
    return Subscribe(7, [Subscription(f) for f in filters])


# ---------------------------------------------------------------------------------------------- SUBSCRIBE


@pytest.mark.parametrize(("level", "code"), [(5, rc.NOT_AUTHORIZED), (4, rc.V311_SUBACK_FAILURE)])
def test_subscribe_refuses_each_filter_the_client_may_not_read(level: int, code: int) -> None:
    access = access_with(ACL_TEXT)
    m = machine(access, level)
    packet = subscribe("alice/x", "bob/x", "a/#/b", "devices/dev1/#", "public/secret", "$share/g/alice/+",
                       "public/#")
    [decision] = m.receive(packet, NOW)
    # the invalid filter (position 2) is left to the broker's own refusal; public/# only overlaps the deny of
    # public/secret: granted, that topic withheld per message (vmqpy.broker.access.read_guard)
    assert decision == SubscribeTo(packet, {1: code, 4: code})
    assert access.metrics["mqtt_subscribe_auth_error"] == 2


# (user name, systree_allow_anonymous, ACL text or None, filter, refused)
SYSTEM_TREE: list[tuple[str | None, bool, str | None, str, bool]] = [
    (None, False, None, "$SYS/#", True),  # anonymous, no ACL: refused by default (issue 33, finding 8)
    (None, False, None, "$SYS", True),
    (None, False, None, "$SYS/node/uptime", True),
    (None, False, None, "$share/g/$SYS/#", True),
    (None, False, None, "$SYSTEM/x", False),  # not the broker's tree
    (None, False, None, "#", False),  # matches no $SYS topic anyway
    (None, True, None, "$SYS/#", False),  # the setting lets anonymous clients read it
    ("alice", False, None, "$SYS/#", False),  # a client with a user name reads it
    (None, True, "topic read #\n", "$SYS/#", True),  # an ACL in force must allow it too
    (None, True, "topic read $SYS/#\n", "$SYS/#", False),
    ("alice", False, "topic read $SYS/#\n", "$SYS/#", False),
]


@pytest.mark.parametrize(("username", "allow_anonymous", "acl", "topic_filter", "refused"), SYSTEM_TREE)
def test_who_may_subscribe_to_the_system_tree(username: str | None, allow_anonymous: bool, acl: str | None,
                                              topic_filter: str, refused: bool) -> None:
    access = AccessControl(True) if acl is None else access_with(acl)
    m = machine(access, 5, username=username, config=Config(systree_allow_anonymous=allow_anonymous))
    packet = subscribe(topic_filter, "other/x") if acl is None else subscribe(topic_filter)
    [decision] = m.receive(packet, NOW)
    if refused:
        assert decision in (Reply(Suback(7, [rc.NOT_AUTHORIZED])), SubscribeTo(packet, {0: rc.NOT_AUTHORIZED}))
        assert access.metrics["mqtt_subscribe_auth_error"] == 1
    else:
        assert decision == SubscribeTo(packet, {}), decision


def test_subscribe_of_only_forbidden_filters_is_answered_at_once() -> None:
    m = machine(access_with(ACL_TEXT), 5, username=None)
    assert m.receive(subscribe("alice/x", "public/secret"), NOW) == (
        Reply(Suback(7, [rc.NOT_AUTHORIZED, rc.NOT_AUTHORIZED])),)


def test_a_refused_filter_takes_no_place_in_the_subscription_quota() -> None:
    m = machine(access_with(ACL_TEXT), 5, config=Config(max_subscriptions_per_client=1))
    packet = subscribe("bob/x", "alice/x", "alice/y")
    assert m.receive(packet, NOW) == (SubscribeTo(packet, {0: rc.NOT_AUTHORIZED, 2: rc.QUOTA_EXCEEDED}),)


def test_without_an_acl_every_filter_is_taken() -> None:
    m = machine(AccessControl(True))
    packet = subscribe("anything/#")
    assert m.receive(packet, NOW) == (SubscribeTo(packet, {}),)


# ---------------------------------------------------------------------------------------------- PUBLISH


def test_an_allowed_publish_is_routed() -> None:
    m = machine(access_with(ACL_TEXT))
    decided = m.publish(Publish("alice/x", b"p", 1, packet_id=3), NOW)
    assert isinstance(decided, Message) and decided.topic == "alice/x"


def test_a_forbidden_publish_on_5_is_refused_with_0x87() -> None:
    access = access_with(ACL_TEXT)
    m = machine(access, 5)
    [first] = m.receive(Publish("public/news", b"p", 0), NOW)
    assert isinstance(first, Unanswered)  # QoS 0: nothing to answer; the first refusal is logged
    assert m.receive(Publish("public/news", b"p", 0), NOW) == ()  # later ones only counted
    assert m.receive(Publish("public/news", b"p", 1, packet_id=3), NOW) == (Reply(Puback(3, rc.NOT_AUTHORIZED)),)
    assert m.receive(Publish("bob/x", b"p", 2, packet_id=4), NOW) == (Reply(Pubrec(4, rc.NOT_AUTHORIZED)),)
    assert access.metrics["mqtt_publish_auth_error"] == 4
    m.reply_sent(Puback(3, rc.NOT_AUTHORIZED))
    assert m.state.unacked_qos1 == 0


def test_a_forbidden_publish_on_311_is_acknowledged_and_not_routed() -> None:
    access = access_with(ACL_TEXT)
    m = machine(access, 4)
    [reply] = m.receive(Publish("bob/x", b"p", 1, packet_id=3), NOW)
    assert isinstance(reply, Reply) and reply.packet == Puback(3) and reply.note is not None
    assert m.state.unacked_qos1 == 1
    m.reply_sent(reply.packet)
    assert m.state.unacked_qos1 == 0
    assert m.receive(Publish("bob/x", b"p", 2, packet_id=4), NOW) == (Reply(Pubrec(4)),)
    assert m.receive(Pubrel(4), NOW) == (Reply(Pubcomp(4, 0)),)  # the flow ends as for any QoS 2 PUBLISH
    assert access.metrics["mqtt_publish_auth_error"] == 2


def test_the_decision_cache_follows_an_acl_change() -> None:
    access = access_with(ACL_TEXT)
    m = machine(access)
    assert isinstance(m.publish(Publish("alice/x", b"p", 0), NOW), Message)
    access.acl = parse_acl("topic read alice/#\n", "new.acl")
    access.generation += 1
    assert not isinstance(m.publish(Publish("alice/x", b"p", 0), NOW), Message)
    assert access.metrics["mqtt_publish_auth_error"] == 1


def test_the_will_of_a_connect_does_not_refuse_it() -> None:
    """A will to a forbidden topic is judged when it would be published (the broker), not at CONNECT."""
    access = access_with(ACL_TEXT)
    m = ConnectionMachine(Config(), access, Policy(), access=access)
    [decision] = m.receive(Connect("c", protocol_level=5, will=Will("bob/will", b"x")), NOW)
    assert isinstance(decision, Register)


# ---------------------------------------------------------------------------------------------- logins


def test_an_anonymous_client_is_refused_after_the_delay_with_a_hint() -> None:
    access = AccessControl(False)
    m = ConnectionMachine(Config(failed_login_delay=0.5), access, Policy(), access=access)
    [decision] = m.receive(Connect("c", protocol_level=5), NOW)
    assert isinstance(decision, RefuseConnect)
    assert (decision.reason_code, decision.delay, decision.failed_login) == (rc.NOT_AUTHORIZED, 0.5, True)
    assert decision.hint is not None and "allow_anonymous = on" in decision.hint


def test_bad_credentials_are_refused_after_the_delay() -> None:
    access = AccessControl(False)
    access.authenticator.users = {"alice": hash_password("right", iterations=1000)}
    m = ConnectionMachine(Config(), access, Policy(), access=access)
    [decision] = m.receive(Connect("c", protocol_level=4, username="alice", password=b"wrong"), NOW)
    assert isinstance(decision, RefuseConnect)
    assert (decision.reason_code, decision.delay, decision.failed_login) == (rc.BAD_USER_NAME_OR_PASSWORD, 1.0, True)
    assert "wrong" not in f"{decision}"  # the password appears in no decision (nor, so, in any log line)


def test_other_refusals_are_not_delayed() -> None:
    m = ConnectionMachine(Config(max_client_id_size=23), AccessControl(True), Policy())
    [decision] = m.receive(Connect("c" * 24, protocol_level=5), NOW)
    assert decision == RefuseConnect(rc.CLIENT_IDENTIFIER_NOT_VALID, "client id too long")


def test_the_acl_judges_the_authenticated_user_name() -> None:
    access = AccessControl(False)
    access.authenticator.users = {"alice": hash_password("right", iterations=1000)}
    m = ConnectionMachine(Config(), access, Policy(), access=access)
    [decision] = m.receive(Connect("c", protocol_level=5, username="alice", password=b"right"), NOW)
    assert isinstance(decision, Register) and m.state.username == "alice"


# ---------------------------------------------------------------------------------------------- the broker


def online(broker: Broker, client_id: str, username: str | None, *filters: str,
           clean: bool = True) -> tuple[Session, RecordingSink]:
    sink = RecordingSink()
    session, _present = broker.open_session(client_id, 5, clean, 0.0 if clean else None, sink, NOW,
                                            username=username)
    broker.attach(session, sink, 65535, 0, NOW)
    if filters:
        broker.subscribe(session, [Subscription(f, SubOptions(0)) for f in filters], None)
    return session, sink


def topics(sink: RecordingSink) -> list[str]:
    return [p.topic for p in sink.publishes()]


def test_a_will_to_a_forbidden_topic_is_not_published(node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, _metadata = node_b
    broker.access.acl = parse_acl("topic read #\nuser alice\ntopic write will/#\n", "w.acl")
    _watcher, seen = online(broker, "watcher", None, "will/#")
    online(broker, "anon", None)
    online(broker, "alice-dev", "alice")
    broker.publish_will(Message("will/anon", b"gone", 0, publisher="anon"), NOW)
    broker.publish_will(Message("will/alice", b"gone", 0, publisher="alice-dev"), NOW)
    assert topics(seen) == ["will/alice"]
    assert broker.metrics["will_not_authorized"] == 1


def test_retained_messages_the_client_may_not_read_are_not_delivered(node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, _metadata = node_b
    for topic in ("a/open", "a/secret", "b/x"):
        broker.publish(Message(topic, b"kept", 0, retain=True), NOW)
    broker.access.acl = parse_acl("topic read #\ntopic deny a/secret\n", "r.acl")
    session, sink = online(broker, "reader", None)
    _codes, added = broker.subscribe(session, [Subscription("a/+", SubOptions(0))], None)
    broker.deliver_retained(session, added, NOW)
    assert topics(sink) == ["a/open"]
    assert broker.metrics["retained_not_authorized"] == 1


def test_a_subscription_overlapping_a_deny_gets_the_other_topics_only(node_b: tuple[Broker, MemoryMetadata]) -> None:
    """Finding 9 (issue 33): `#` with `topic #` and `topic deny secret/#` is granted; the denied topics are
    withheld message by message, live and queued for an offline session alike, and counted."""
    broker, _metadata = node_b
    broker.access.acl = parse_acl("topic #\ntopic deny secret/#\n", "d.acl")
    broker.access.generation += 1
    _monitor, seen = online(broker, "monitor", None, "#")
    offline, sink = online(broker, "later", None, clean=False)
    broker.subscribe(offline, [Subscription("#", SubOptions(1))], None)
    broker.close_session(offline, sink, NOW, None, 0.0)
    for topic in ("public/x", "secret/x", "secret/x/y", "public/y"):
        broker.publish(Message(topic, b"m", 1), NOW)
    assert topics(seen) == ["public/x", "public/y"]
    assert [out.message.topic for out in offline.queue] == ["public/x", "public/y"]
    assert broker.metrics["publish_withheld_not_authorized"] == 4


def test_withheld_deliveries_follow_the_acl_in_force(node_b: tuple[Broker, MemoryMetadata]) -> None:
    """The remembered decisions are forgotten when the ACL changes, and judged for the user name the client
    connected with."""
    broker, _metadata = node_b
    broker.access.acl = parse_acl("topic #\ntopic deny a/x\nuser alice\ntopic deny a/y\n", "1.acl")
    broker.access.generation += 1
    _s, seen = online(broker, "dev", "alice", "a/+")
    for topic in ("a/x", "a/y", "a/z"):
        broker.publish(Message(topic, b"1", 0), NOW)
    assert topics(seen) == ["a/z"]
    broker.access.acl = parse_acl("topic #\ntopic deny a/z\n", "2.acl")
    broker.access.generation += 1
    for topic in ("a/x", "a/y", "a/z"):
        broker.publish(Message(topic, b"2", 0), NOW)
    assert topics(seen) == ["a/z", "a/x", "a/y"]
    broker.access.acl = None  # no ACL: nothing judged, nothing withheld
    broker.publish(Message("a/z", b"3", 0), NOW)
    assert topics(seen)[-1] == "a/z"


def test_a_retained_message_of_a_denied_topic_is_withheld_from_an_overlapping_filter(
    node_b: tuple[Broker, MemoryMetadata],
) -> None:
    broker, _metadata = node_b
    for topic in ("public/r", "secret/r"):
        broker.publish(Message(topic, b"kept", 0, retain=True), NOW)
    broker.access.acl = parse_acl("topic #\ntopic deny secret/#\n", "r.acl")
    session, sink = online(broker, "monitor", None)
    _codes, added = broker.subscribe(session, [Subscription("#", SubOptions(0))], None)
    broker.deliver_retained(session, added, NOW)
    assert topics(sink) == ["public/r"]


def test_an_acl_change_removes_the_subscriptions_it_no_longer_allows(node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, _metadata = node_b
    broker.access.acl = parse_acl("user alice\ntopic read a/#\ntopic read b/#\n", "1.acl")
    session, sink = online(broker, "dev", "alice", "a/#", "b/#")
    broker.publish(Message("b/x", b"1", 0), NOW)
    broker.access.acl = parse_acl("user alice\ntopic read a/#\n", "2.acl")
    assert broker.enforcer.enforce() == 1
    assert list(session.subscriptions) == ["a/#"]
    broker.publish(Message("b/x", b"2", 0), NOW)
    broker.publish(Message("a/x", b"3", 0), NOW)
    assert [p.payload for p in sink.publishes()] == [b"1", b"3"]
    assert broker.metrics["subscription_revoked"] == 1


def test_a_session_is_not_resumed_under_another_user(node_b: tuple[Broker, MemoryMetadata]) -> None:
    """Another user's connect with the client id ends the session (vmqpy.sessions.owners): bob starts clean."""
    broker, _metadata = node_b
    broker.access.acl = parse_acl("user alice\ntopic read a/#\nuser bob\ntopic read b/#\n", "u.acl")
    session, _sink = online(broker, "dev", "alice", "a/#", clean=False)
    broker.close_session(session, session.sink, NOW, None, 0.0)  # type: ignore[arg-type]
    resumed, _sink = online(broker, "dev", "bob", clean=False)
    assert resumed is not session and resumed.subscriptions == {} and resumed.user == "bob"
    assert broker.metrics["session_foreign_user_cleaned"] == 1


def test_reload_access_reads_the_file_and_enforces_it(node_b: tuple[Broker, MemoryMetadata], tmp_path: Path) -> None:
    broker, _metadata = node_b
    acl = tmp_path / "vmq.acl"
    acl.write_text("topic read a/#\ntopic read b/#\n")
    broker.access.load(acl, None)
    session, _sink = online(broker, "dev", None, "a/#", "b/#")
    acl.write_text("topic read a/#\ntopic read zz/#\n")  # another size: seen as a change at once
    [answer] = broker.enforcer.reload(acl=True, passwords=False)
    assert answer.changed and list(session.subscriptions) == ["a/#"]
    acl.write_text("topic read a/#\ntopic read b/##\n")
    [answer] = broker.enforcer.reload(force=True, acl=True, passwords=False)
    assert answer.error is not None and answer.error.startswith(f"{acl}:2:")
    assert list(session.subscriptions) == ["a/#"]


def test_reauthorize_checks_a_session_for_the_user_named(node_b: tuple[Broker, MemoryMetadata]) -> None:
    """`vmq-admin session reauthorize username=U client-id=C` (VerneMQ's command)."""
    broker, _metadata = node_b
    assert broker.enforcer.reauthorize("dev", "alice") is None, "no session here"
    broker.access.acl = parse_acl("user alice\ntopic read a/#\ntopic read b/#\nuser bob\ntopic read b/#\n", "r.acl")
    session, _sink = online(broker, "dev", "alice", "a/#", "b/#")
    assert broker.enforcer.reauthorize("dev", "alice") == (2, 0), "alice may read both: unchanged"
    assert broker.enforcer.reauthorize("dev", "bob") == (1, 1)
    assert list(session.subscriptions) == ["b/#"]
    broker.access.acl = None
    assert broker.enforcer.reauthorize("dev", "nobody") == (1, 0), "no ACL: nothing is removed"
