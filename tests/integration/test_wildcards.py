"""Topic matching: '+', '#', 'a/#' matching 'a', '$'-topics, overlapping subscriptions, shared subscriptions."""

from __future__ import annotations

import queue
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.clients import unique

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(shared_broker):
    """Tests in this module share one broker per module (unique client ids and topics); see conftest."""
    return shared_broker

VERSIONS = [pytest.param(4, id="v311"), pytest.param(5, id="v5")]


def deliveries(sub, pub, publish_topics, marker_topic):
    """Publish a message to each topic (payload = topic), then the marker; return the topics delivered to sub."""
    for t in publish_topics:
        pub.publish(t, t.encode(), qos=1)
    pub.publish(marker_topic, b"marker", qos=1)
    got = sub.until_marker(marker_topic)
    sub.assert_no_message(0.2)
    return [m.topic for m in got]


def drain(client, duration):
    """Everything that arrives within `duration` seconds."""
    out = []
    deadline = time.monotonic() + duration
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            out.append(client.messages.get(timeout=remaining))
        except queue.Empty:
            break
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_plus_matches_exactly_one_level(broker, clients, version):
    b = unique("wc/plus")
    sub = clients.paho(broker, version)
    sub.subscribe(f"{b}/+/c", qos=1)
    sub.subscribe(f"{b}-marker", qos=1)
    pub = clients.paho(broker, version)
    got = deliveries(sub, pub, [f"{b}/x/c", f"{b}/x/d", f"{b}/x/c/d", f"{b}/c", f"{b}//c", f"{b}/y/c"],
                     f"{b}-marker")
    assert sorted(got) == sorted([f"{b}/x/c", f"{b}//c", f"{b}/y/c"]), got


@pytest.mark.parametrize("version", VERSIONS)
def test_hash_matches_parent_and_all_descendants(broker, clients, version):
    b = unique("wc/hash")
    sub = clients.paho(broker, version)
    sub.subscribe(f"{b}/#", qos=1)
    sub.subscribe(f"{b}-marker", qos=1)
    pub = clients.paho(broker, version)
    got = deliveries(sub, pub, [b, f"{b}/x", f"{b}/x/y/z", f"{b}/", f"{b}x", f"other/{b}"], f"{b}-marker")
    assert sorted(got) == sorted([b, f"{b}/x", f"{b}/x/y/z", f"{b}/"]), got


@pytest.mark.parametrize("version", VERSIONS)
def test_plus_at_start_and_end(broker, clients, version):
    b = unique("wcpe")
    sub = clients.paho(broker, version)
    sub.subscribe(f"+/{b}/+", qos=1)
    sub.subscribe(f"{b}-marker", qos=1)
    pub = clients.paho(broker, version)
    got = deliveries(sub, pub, [f"a/{b}/z", f"/{b}/", f"a/{b}", f"a/{b}/z/w", f"{b}/z"], f"{b}-marker")
    assert sorted(got) == sorted([f"a/{b}/z", f"/{b}/"]), got


@pytest.mark.parametrize("version", VERSIONS)
def test_dollar_topics_not_matched_by_leading_wildcards(fresh_broker, clients, version):
    broker = fresh_broker  # a '#' subscriber would get every retained message of a shared broker
    b = unique("dl")
    dollar = f"$test{b}/x"
    wild = clients.paho(broker, version)
    wild.subscribe("#", qos=1)
    wild.subscribe("+/x", qos=1)
    direct = clients.paho(broker, version)
    direct.subscribe(f"$test{b}/#", qos=1)
    pub = clients.paho(broker, version)
    pub.publish(dollar, b"dollar", qos=1)
    m = direct.get()
    assert (m.topic, m.payload) == (dollar, b"dollar"), "an explicit $-filter receives the $-topic"
    pub.publish(f"{b}-marker/x", b"marker", qos=1)
    before = wild.until_marker(lambda m: m.payload == b"marker")
    before += drain(wild, 0.3)  # e.g. a second copy of the marker (overlap of '#' and '+/x')
    assert [m.topic for m in before if m.topic.startswith("$")] == [], (
        f"'#' / '+/x' must not match topics starting with '$': {[m.topic for m in before]}")


@pytest.mark.parametrize("version", VERSIONS)
def test_topics_are_case_sensitive_and_exact(broker, clients, version):
    b = unique("wc/case")
    sub = clients.paho(broker, version)
    sub.subscribe(f"{b}/Room", qos=1)
    sub.subscribe(f"{b}-marker", qos=1)
    pub = clients.paho(broker, version)
    got = deliveries(sub, pub, [f"{b}/room", f"{b}/Room", f"{b}/Room/", f"{b}/Room "], f"{b}-marker")
    assert got == [f"{b}/Room"], got


@pytest.mark.parametrize("version", VERSIONS)
def test_overlapping_subscriptions_max_qos(broker, clients, version):
    """A message matching two subscriptions of one client: one copy with the maximum QoS, or one copy per
    subscription (allowed by 5.0 and tolerated by 3.1.1) — at least one copy must have the maximum QoS."""
    b = unique("wc/ovl")
    sub = clients.paho(broker, version)
    sub.subscribe(f"{b}/#", qos=0)
    sub.subscribe(f"{b}/+", qos=2)
    pub = clients.paho(broker, version)
    pub.publish(f"{b}/x", b"both", qos=2)
    got = [sub.get()]
    got += drain(sub, 0.6)  # a possible second copy (copies of different QoS are not ordered)
    qos = sorted(m.qos for m in got)
    assert all(m.payload == b"both" for m in got)
    assert qos in ([2], [0, 2]), f"copies delivered with QoS {qos}"
    print(f"overlapping subscriptions ({'5.0' if version == 5 else '3.1.1'}): "
          f"{'one copy per subscription' if len(qos) == 2 else 'single copy with max QoS'}")


# ---------------------------------------------------------------------------------------- shared subscriptions


@pytest.mark.parametrize("version", VERSIONS)
def test_shared_subscription_splits_messages(broker, clients, version):
    b = unique("sh")
    members = [clients.paho(broker, version) for _ in range(2)]
    for m in members:
        m.subscribe(f"$share/grp{b}/{b}/#", qos=1)
    normal = clients.paho(broker, version)
    normal.subscribe(f"{b}/#", qos=1)
    pub = clients.paho(broker, version)
    n = 20
    for i in range(n):
        pub.publish(f"{b}/t", f"{i}".encode(), qos=1)
    assert sorted(int(m.payload) for m in normal.collect(n)) == list(range(n)), "non-shared subscriber gets all"
    # the members together get each message exactly once
    got: list[list[int]] = [[], []]
    deadline = time.monotonic() + 5
    while sum(map(len, got)) < n and time.monotonic() < deadline:
        for i, m in enumerate(members):
            try:
                got[i].append(int(m.messages.get(timeout=0.05).payload))
            except queue.Empty:
                pass
    for i, m in enumerate(members):
        got[i] += [int(x.payload) for x in drain(m, 0.2)]
    a, c = set(got[0]), set(got[1])
    assert len(got[0]) == len(a) and len(got[1]) == len(c), f"duplicates within a member: {got}"
    assert not (a & c), f"a message went to both members: {sorted(a & c)}"
    assert a | c == set(range(n)), f"missing: {sorted(set(range(n)) - (a | c))}"
    assert a and c, f"both members must get a part: {len(a)} / {len(c)}"
    print(f"shared subscription split: {len(a)} / {len(c)}")


@pytest.mark.parametrize("version", VERSIONS)
def test_shared_subscription_member_leaving(broker, clients, version):
    """After one member disconnects, the remaining member receives everything."""
    b = unique("shl")
    stay = clients.paho(broker, version)
    stay.subscribe(f"$share/g/{b}", qos=1)
    leave = clients.paho(broker, version)
    leave.subscribe(f"$share/g/{b}", qos=1)
    leave.disconnect()
    pub = clients.paho(broker, version)
    for i in range(6):
        pub.publish(b, f"{i}".encode(), qos=1)
    assert sorted(int(m.payload) for m in stay.collect(6)) == list(range(6))


@pytest.mark.vmqpy_only("mosquitto 2.0.11 sends retained messages when a shared subscription is made "
                        "(5.0 3.3.1.3: only for a new non-shared subscription)")
def test_shared_subscription_no_retained_on_subscribe_v5(broker, clients):
    """5.0 4.8.2: retained messages are not sent when a shared subscription is established."""
    b = unique("shr")
    clients.paho(broker, 5).publish(b, b"retained", qos=1, retain=True)
    m = clients.paho(broker, 5)
    m.subscribe(f"$share/g/{b}", qos=1)
    m.subscribe(f"{b}-marker", qos=1)
    clients.paho(broker, 5).publish(f"{b}-marker", b"marker", qos=1)
    before = m.until_marker(f"{b}-marker")
    assert before == [], f"retained message sent on a shared subscription: {[x.payload for x in before]}"


# ------------------------------------------------------------------------- property: broker vs a reference


def reference_match(filter_levels: list[str], topic_levels: list[str]) -> bool:
    for i, f in enumerate(filter_levels):
        if f == "#":
            return True
        if i >= len(topic_levels):
            return False
        if f != "+" and f != topic_levels[i]:
            return False
    return len(filter_levels) == len(topic_levels)


_topic_level = st.sampled_from(["a", "b", "", "c"])
_topic = st.lists(_topic_level, min_size=1, max_size=4)
_filter = st.tuples(st.lists(st.sampled_from(["a", "b", "", "+"]), min_size=0, max_size=3), st.booleans()).map(
    lambda t: [*t[0], "#"] if t[1] else t[0]).filter(bool)


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(filt=_filter, topics=st.lists(_topic, min_size=1, max_size=6, unique_by=tuple))
def test_matching_agrees_with_reference_matcher(broker, filt, topics):
    """Random filters (with '+', '#', empty levels) against random topics under a unique root: the broker
    delivers exactly the topics a reference matcher says match."""
    root = unique("prop")
    flt = "/".join([root, *filt])
    marker = f"{root}-marker"
    sub, pub = broker.raw(4), broker.raw(4)
    try:
        sub.connect(unique("propsub-"))
        sub.subscribe(flt, marker, qos=1)
        pub.connect(unique("proppub-"))
        for t in topics:
            pub.publish("/".join([root, *t]), b"x", qos=1)
        pub.publish(marker, b"m", qos=1)
        got = []
        for _ in range(len(topics) + 1):  # bounded: at most every topic, then the marker
            [p] = sub.recv_publishes(1)
            if p.topic == marker:
                break
            got.append(p.topic)
        expected = ["/".join([root, *t]) for t in topics if reference_match(["x", *filt], ["x", *t])]
        assert sorted(got) == sorted(expected), f"filter {flt!r}: delivered {got}, expected {expected}"
    finally:
        sub.close()
        pub.close()
