"""Routing: local deliveries, overlapping and shared subscriptions, and which nodes get a forward."""

from __future__ import annotations

import random

from tests.unit.broker.sessions import entry, online
from vmqpy.broker.core.router import Router
from vmqpy.broker.core.session import Session
from vmqpy.sessions.message import Message, decode_record, encode_record
from vmqpy.sessions.records import forward_record, parse_forward


def test_overlapping_subscriptions_give_one_copy_at_highest_qos_with_all_ids() -> None:
    sessions: dict[str, Session] = {}
    sink = online(sessions, "c")
    router = Router(sessions)
    router.add("c", entry("a/+", qos=0, sub_id=1))
    router.add("c", entry("a/#", qos=1, sub_id=2))
    result = router.route(Message("a/b", b"x", 2), 0.0)
    (publish,) = sink.publishes()
    assert (publish.qos, sorted(publish.properties.subscription_identifiers)) == (1, [1, 2])
    assert result.matched == 1 and not result.remote


def test_no_local_skips_the_publisher() -> None:
    sessions: dict[str, Session] = {}
    sink = online(sessions, "c")
    router = Router(sessions)
    router.add("c", entry("a", no_local=True))
    router.route(Message("a", b"x", 0, publisher="c"), 0.0)
    router.route(Message("a", b"y", 0, publisher="other"), 0.0)
    assert [p.payload for p in sink.publishes()] == [b"y"]


def test_shared_group_gets_each_message_once() -> None:
    sessions: dict[str, Session] = {}
    sinks = [online(sessions, f"m{i}") for i in range(3)]
    router = Router(sessions, random.Random(3))
    for i in range(3):
        router.add(f"m{i}", entry("$share/g/t/#"))
    for n in range(30):
        router.route(Message("t/x", str(n).encode(), 1), 0.0)
    got = sorted(int(p.payload) for sink in sinks for p in sink.publishes())
    assert got == list(range(30))
    assert all(sink.publishes() for sink in sinks)


def test_remote_nodes_get_one_forward_each_and_shared_groups_prefer_local() -> None:
    sessions: dict[str, Session] = {}
    online(sessions, "local")
    router = Router(sessions, random.Random(1))
    router.add_remote("n2", "r1", entry("t/#"))
    router.add_remote("n2", "r2", entry("t/+"))
    router.add_remote("n3", "r3", entry("t/x"))
    router.add_remote("n3", "g1", entry("$share/g/t/#"))
    router.add_remote("n4", "h1", entry("$share/h/t/#"))
    router.add("local", entry("$share/g/t/#"))
    result = router.route(Message("t/x", b"1", 1), 0.0)
    assert result.remote == {"n2": [], "n3": [], "n4": [("h", "t/#")]}
    router.remove_remote("n2", "r1", entry("t/#"))
    router.remove_remote("n2", "r2", entry("t/+"))
    assert "n2" not in router.route(Message("t/x", b"2", 1), 0.0).remote


def test_a_single_local_subscriber_and_remote_subscriptions_that_come_and_go() -> None:
    """The one-plain-subscriber path asks for other nodes only while some remote subscription is held (the router
    remembers whether any is): forwarded while there is one, not after the last one left, again once one is back."""
    sessions: dict[str, Session] = {}
    online(sessions, "local")
    router = Router(sessions)
    router.add("local", entry("t/x"))
    assert router.route(Message("t/x", b"0", 1), 0.0).remote == {}
    router.add_remote("n2", "r1", entry("t/#"))
    router.add_remote("n3", "r2", entry("t/+"))
    assert router.route(Message("t/x", b"1", 1), 0.0).remote == {"n2": [], "n3": []}
    router.remove_remote("n2", "r1", entry("t/#"))
    assert router.route(Message("t/x", b"2", 1), 0.0).remote == {"n3": []}
    router.remove_remote("n3", "r2", entry("t/+"))
    assert router.route(Message("t/x", b"3", 1), 0.0).remote == {}
    router.add_remote("n3", "r2", entry("t/+"))
    result = router.route(Message("t/x", b"4", 1), 0.0)
    assert result.remote == {"n3": []} and result.matched == 1


def test_forwarded_message_serves_only_the_named_groups() -> None:
    sessions: dict[str, Session] = {}
    plain, member = online(sessions, "plain"), online(sessions, "member")
    router = Router(sessions)
    router.add("plain", entry("t/#"))
    router.add("member", entry("$share/g/t/#"))
    router.route(Message("t/1", b"a", 1), 0.0, only_groups=[])
    router.route(Message("t/1", b"b", 1), 0.0, only_groups=[("g", "t/#")])
    assert [p.payload for p in plain.publishes()] == [b"a", b"b"]
    assert [p.payload for p in member.publishes()] == [b"b"]


def test_a_forward_naming_its_clients_reaches_only_them() -> None:
    """A forward passed on to a moved subscriber's new node names that subscriber: the node's other subscribers
    got the message from the publisher's node directly, so they must not get it twice."""
    sessions: dict[str, Session] = {}
    moved, other, member = online(sessions, "moved"), online(sessions, "other"), online(sessions, "member")
    router = Router(sessions)
    router.add("moved", entry("t/#"))
    router.add("other", entry("t/+"))
    router.add("member", entry("$share/g/t/#"))
    router.route(Message("t/1", b"a", 1), 0.0, only_groups=[], only_clients={"moved"})
    router.route(Message("t/1", b"b", 1), 0.0, only_groups=[], only_clients={"moved", "other"})
    assert [p.payload for p in moved.publishes()] == [b"a", b"b"]
    assert [p.payload for p in other.publishes()] == [b"b"]
    assert member.publishes() == []


def test_forward_record_round_trip_through_msgpack_and_its_size_bounds_the_encoding() -> None:
    message = Message("t/1", b"\x00\x01", 1, True, "pub", 123.5, content_type="text/plain",
                      user_properties=[("k", "v")])
    record, size = forward_record(message, [("g", "t/#")])
    encoded = encode_record(record)
    assert len(encoded) <= size
    decoded, groups, clients = parse_forward(decode_record(encoded))
    assert decoded == message and groups == [("g", "t/#")] and clients is None
    for plain in (Message("t/é/😀", b"x" * 70_000, 0, False, "pöb"), Message("", b"", 2, True, "")):
        record, size = forward_record(plain, [])
        encoded = encode_record(record)
        assert len(encoded) <= size
        assert parse_forward(decode_record(encoded)) == (plain, [], None)
    record, size = forward_record(message, [], ["c1", "c2"])  # passed on to a moved subscriber's new node
    encoded = encode_record(record)
    assert len(encoded) <= size
    assert parse_forward(decode_record(encoded)) == (message, [], {"c1", "c2"})


def test_a_forward_record_that_is_not_one_is_refused() -> None:
    import pytest

    for bad in ([2, [], []], [1, ["t"], []], 5, [1, ["t", b"", 0, False, "p", None, [None] * 3, []], []]):
        with pytest.raises((ValueError, TypeError, KeyError)):
            parse_forward(bad)


def test_routes_to_other_nodes_follow_every_change_of_their_subscriptions() -> None:
    """The routes to other nodes are remembered per topic: a subscription added or removed elsewhere changes
    them at once, and the memory stays bounded."""
    from vmqpy.broker.core.router import REMOTE_ROUTES_CACHED

    router = Router({}, random.Random(1))
    router.add_remote("n2", "a", entry("t/#"))
    assert router.route(Message("t/x", b"1", 1), 0.0).remote == {"n2": []}
    router.add_remote("n3", "b", entry("t/x"))
    assert router.route(Message("t/x", b"2", 1), 0.0).remote == {"n2": [], "n3": []}
    router.add_remote("n4", "g", entry("$share/g/t/x"))
    assert router.route(Message("t/x", b"3", 1), 0.0).remote == {"n2": [], "n3": [], "n4": [("g", "t/x")]}
    router.remove_remote("n2", "a", entry("t/#"))
    assert router.route(Message("t/x", b"4", 1), 0.0).remote == {"n3": [], "n4": [("g", "t/x")]}
    for i in range(REMOTE_ROUTES_CACHED + 10):
        router.route(Message(f"u/{i}", b"", 0), 0.0)
    assert len(router._remote_routes) <= REMOTE_ROUTES_CACHED
    assert router.route(Message("t/x", b"5", 1), 0.0).remote == {"n3": [], "n4": [("g", "t/x")]}
