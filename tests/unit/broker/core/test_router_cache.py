"""The router remembers the local subscriptions matching each topic: every add or remove of a subscription
changes what the next message on any topic reaches, as if nothing were remembered."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.broker.sessions import entry, online
from vmqpy.broker.core import router as router_module
from vmqpy.broker.core.router import Router
from vmqpy.broker.core.session import Session
from vmqpy.mqtt.topics import matches
from vmqpy.sessions.message import Message

CLIENTS = ("c0", "c1", "c2")
FILTERS = ("a/b", "a/+", "a/#", "#", "+/b", "b")
TOPICS = ("a/b", "a/c", "b", "a", "$SYS/x")

operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(CLIENTS), st.sampled_from(FILTERS)),
        st.tuples(st.just("remove"), st.sampled_from(CLIENTS), st.sampled_from(FILTERS)),
        st.tuples(st.just("route"), st.just(""), st.sampled_from(TOPICS)),
    ),
    max_size=40,
)


@settings(max_examples=150)
@given(operations, st.sampled_from([1, 2, 4096]))
def test_a_message_reaches_exactly_the_subscriptions_in_force_when_it_is_routed(
    ops: list[tuple[str, str, str]], cached: int
) -> None:
    router_module.ROUTES_CACHED, saved = cached, router_module.ROUTES_CACHED  # also with a cache that fills up
    try:
        sessions: dict[str, Session] = {}
        sinks = {client_id: online(sessions, client_id) for client_id in CLIENTS}
        router = Router(sessions)
        current: set[tuple[str, str]] = set()
        expected = {client_id: 0 for client_id in CLIENTS}
        for op, client_id, arg in ops:
            if op == "add":
                router.add(client_id, entry(arg, qos=0))
                current.add((client_id, arg))
            elif op == "remove" and (client_id, arg) in current:
                router.remove(client_id, entry(arg, qos=0))
                current.discard((client_id, arg))
            elif op == "route":
                router.route(Message(arg, b"x", 0), 0.0)
                for reached in {c for c, f in current if matches(f, arg)}:
                    expected[reached] += 1
        assert {c: len(sinks[c].publishes()) for c in CLIENTS} == expected
    finally:
        router_module.ROUTES_CACHED = saved


def test_a_subscription_added_after_a_topic_was_routed_gets_the_next_message() -> None:
    sessions: dict[str, Session] = {}
    first, second = online(sessions, "first"), online(sessions, "second")
    router = Router(sessions)
    router.add("first", entry("t/+"))
    router.route(Message("t/1", b"a", 0), 0.0)
    router.add("second", entry("t/#"))
    router.route(Message("t/1", b"b", 0), 0.0)
    router.remove("first", entry("t/+"))
    router.route(Message("t/1", b"c", 0), 0.0)
    assert [p.payload for p in first.publishes()] == [b"a", b"b"]
    assert [p.payload for p in second.publishes()] == [b"b", b"c"]
