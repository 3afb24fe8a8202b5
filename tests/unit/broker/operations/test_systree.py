"""The $SYS tree: the mapping from metric names to topics and payloads (tables), rounds that publish only what
changed, the interval that turns it off, and, on one real Broker, that filters starting with a wildcard never
get it [MQTT-4.7.2-1] and that clients cannot write it."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import pytest

from tests.unit.broker.fakes import MemoryMetadata, RecordingSink
from vmqpy import config
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.operations import systree
from vmqpy.broker.operations.systree import (
    SysTreePublisher,
    changes,
    is_system_topic,
    metric_levels,
    payload,
    period,
    tree,
)
from vmqpy.config import ConfigError
from vmqpy.mqtt.packets import SubOptions, Subscription
from vmqpy.sessions import records
from vmqpy.sessions.message import Message

Node = tuple[Broker, MemoryMetadata]
NOW = 1000.0

# ---------------------------------------------------------------------------------------------- the mapping


@pytest.mark.parametrize(("name", "levels"), [
    ("broker.sessions_online", "broker/sessions_online"),
    ("broker.publish_received", "broker/publish_received"),
    ("cluster.links.bytes_out", "cluster/links/bytes_out"),
    ("netsplit.refused_publish", "netsplit/refused_publish"),
    ("storage.commits", "storage/commits"),
    ("uptime", "uptime"),
    ("a..b", None),  # an empty level
    (".a", None),
    ("a.", None),
    ("a/b", None),  # would add a level nobody asked for
    ("a.+", None),
    ("a.#", None),
    ("a.b#", None),
    ("", None),
])
def test_metric_names_to_topic_levels(name: str, levels: str | None) -> None:
    assert metric_levels(name) == levels


@pytest.mark.parametrize(("value", "text"), [
    (0, b"0"),
    (42, b"42"),
    (-3, b"-3"),
    (10**12, b"1000000000000"),
    (2.0, b"2"),
    (0.25, b"0.25"),
    (1234.5678901, b"1234.56789"),
    (True, b"1"),
    (False, b"0"),
    ("vmqpy 0.1.0", b"vmqpy 0.1.0"),
])
def test_payloads_are_plain_decimal_text(value: int | float | str, text: bytes) -> None:
    assert payload(value) == text


METRICS = {
    "broker.sessions": 5,
    "broker.sessions_online": 3,
    "broker.publish_received": 17,
    "broker.retained": 2,
    "cluster.links.bytes_out": 900,
    "bad.+": 1,
}


def test_the_tree_of_a_node() -> None:
    assert tree("n@h", METRICS, 61.9, "vmqpy 9") == [
        ("$SYS/n@h/broker/publish_received", b"17"),
        ("$SYS/n@h/broker/retained", b"2"),
        ("$SYS/n@h/broker/sessions", b"5"),
        ("$SYS/n@h/broker/sessions_online", b"3"),
        ("$SYS/n@h/clients/connected", b"3"),
        ("$SYS/n@h/clients/disconnected", b"2"),
        ("$SYS/n@h/clients/total", b"5"),
        ("$SYS/n@h/cluster/links/bytes_out", b"900"),
        ("$SYS/n@h/publish/messages/received", b"17"),
        ("$SYS/n@h/retained messages/count", b"2"),
        ("$SYS/n@h/uptime", b"61"),  # whole seconds
        ("$SYS/n@h/version", b"vmqpy 9"),
    ]


def test_familiar_topics_only_for_metrics_that_exist() -> None:
    assert tree("n@h", {"storage.ops": 1}, 0, "v") == [
        ("$SYS/n@h/storage/ops", b"1"), ("$SYS/n@h/uptime", b"0"), ("$SYS/n@h/version", b"v"),
    ]


def test_every_topic_is_below_the_node_and_is_a_valid_topic_name() -> None:
    from vmqpy.mqtt.topics import validate_topic_name

    for topic, _payload in tree("vmqpy@127.0.0.1", METRICS, 1, "v"):
        assert topic.startswith("$SYS/vmqpy@127.0.0.1/") and validate_topic_name(topic), topic


@pytest.mark.parametrize(("retained", "current", "due"), [
    ({}, [("t/a", b"1"), ("t/b", b"2")], [("t/a", b"1"), ("t/b", b"2")]),  # nothing retained yet: all of it
    ({"t/a": b"1", "t/b": b"2"}, [("t/a", b"1"), ("t/b", b"2")], []),  # nothing changed: nothing
    ({"t/a": b"1", "t/b": b"2"}, [("t/a", b"1"), ("t/b", b"3")], [("t/b", b"3")]),
    ({"t/a": b"1"}, [("t/a", b"1"), ("t/c", b"0")], [("t/c", b"0")]),  # a new metric
    ({"t/a": b"1", "t/old": b"9"}, [("t/a", b"1")], [("t/old", b"")]),  # gone: deleted
])
def test_changes_against_what_is_retained(
    retained: dict[str, bytes], current: list[tuple[str, bytes]], due: list[tuple[str, bytes]]
) -> None:
    assert changes(retained, current) == due


@pytest.mark.parametrize(("topic", "is_sys"), [
    ("$SYS", True),
    ("$SYS/", True),
    ("$SYS/n@h/uptime", True),
    ("$SYSTEM/x", False),
    ("$SYSx", False),
    ("$sys/x", False),  # topics are case sensitive
    ("SYS/x", False),
    ("a/$SYS", False),
    ("$share/g/x", False),
])
def test_system_topics(topic: str, is_sys: bool) -> None:
    assert is_system_topic(topic) is is_sys


# ---------------------------------------------------------------------------------------------- the interval


@pytest.mark.parametrize(("enabled", "interval_ms", "seconds"), [
    (True, 20000, 20.0),
    (True, 250, 0.25),
    (True, 0, None),  # 0 disables, as in VerneMQ
    (False, 20000, None),
    (False, 0, None),
])
def test_period(enabled: bool, interval_ms: int, seconds: float | None) -> None:
    assert period(enabled, interval_ms) == seconds


@pytest.mark.parametrize(("text", "ms"), [
    ("20000", 20000),  # what a vernemq.conf holds: milliseconds
    ("0", 0),
    ("20s", 20000),
    ("500ms", 500),
    ("1m", 60000),
])
def test_systree_interval_in_the_config(text: str, ms: int) -> None:
    cfg = config.load(None, environ={}, flags=[f"systree_interval={text}"])
    assert cfg.systree_interval == ms
    assert cfg.systree_enabled is True


@pytest.mark.parametrize("text", ["-1", "20 seconds", "", "1.5"])
def test_a_bad_systree_interval_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="systree_interval"):
        config.load(None, environ={}, flags=[f"systree_interval={text}"])


def test_systree_defaults_are_vernemqs() -> None:
    cfg = config.load(None, environ={}, flags=[])
    assert (cfg.systree_enabled, cfg.systree_interval) == (True, 20000)
    off = config.load(None, environ={}, flags=["systree_enabled=off"])
    assert off.systree_enabled is False and period(off.systree_enabled, off.systree_interval) is None


# ---------------------------------------------------------------------------------------------- on a broker


def retained_under(broker: Broker) -> Callable[[str], list[tuple[str, bytes]]]:
    return lambda prefix: [(t, m.payload) for t, m in broker.system_retained.match(prefix + "/#")]


def publisher(broker: Broker, metrics: dict[str, int | float]) -> SysTreePublisher:
    return SysTreePublisher("b", metrics=lambda: metrics, retained=retained_under(broker),
                            publish=broker.publish_system, version="v")


def subscriber(broker: Broker, client_id: str, *filters: str) -> RecordingSink:
    sink = RecordingSink()
    session, _present = broker.open_session(client_id, 5, True, 0.0, sink, NOW)
    broker.attach(session, sink, 65535, 0, NOW)
    _codes, added = broker.subscribe(session, [Subscription(f, SubOptions(0)) for f in filters], None)
    broker.deliver_retained(session, added, NOW)
    return sink


def topics(sink: RecordingSink) -> list[str]:
    return sorted(p.topic for p in sink.publishes())


def retain_writes(metadata: MemoryMetadata) -> list[str]:
    writes: list[str] = []
    metadata.on_change(records.RETAIN, lambda key, old, new: writes.append(str(key[1])))
    return writes


def test_a_round_publishes_only_what_changed(node_b: Node) -> None:
    broker, _metadata = node_b
    watcher = subscriber(broker, "watcher", "$SYS/#")
    metrics: dict[str, int | float] = {"broker.sessions": 1, "broker.sessions_online": 1, "storage.ops": 7}
    pub = publisher(broker, metrics)

    first = pub.publish_round(NOW, 3.0)
    assert [t for t, _ in first] == [t for t, _ in tree("b", metrics, 3.0, "v")]
    assert topics(watcher) == sorted(t for t, _ in first), "the first round delivers the whole tree"
    assert broker.system_retained.get("$SYS/b/clients/connected") is not None

    before = len(watcher.publishes())
    assert pub.publish_round(NOW + 1, 3.2) == [], "same values: nothing published"
    assert len(watcher.publishes()) == before

    metrics["storage.ops"] = 8
    assert pub.publish_round(NOW + 2, 4.0) == [("$SYS/b/storage/ops", b"8"), ("$SYS/b/uptime", b"4")]
    assert sorted(p.topic for p in watcher.publishes()[before:]) == ["$SYS/b/storage/ops", "$SYS/b/uptime"]
    message = broker.system_retained.get("$SYS/b/storage/ops")
    assert message is not None and (message.payload, message.qos, message.retain) == (b"8", 0, True)


def test_the_tree_stays_on_its_node(node_b: Node) -> None:
    """The tree is the node's own (docs/broker.md): nothing goes to the metadata store, nothing is forwarded
    to another node, and the replicated retained messages and their count do not include it."""
    broker, metadata = node_b
    writes = retain_writes(metadata)
    pub = publisher(broker, {"broker.sessions": 2, "storage.ops": 1})
    published = pub.publish_round(NOW, 1.0)
    assert published and writes == [], "no retained write to the replicated store"
    assert len(broker.retained) == 0 and len(broker.system_retained) == len(published)
    result = broker.publish_system(Message("$SYS/b/uptime", b"9", 0, retain=True), NOW)
    assert result.remote == {}, "never forwarded"
    assert writes == []


def test_a_metric_that_is_gone_is_deleted_and_the_tree_is_repaired(node_b: Node) -> None:
    broker, _metadata = node_b
    metrics: dict[str, int | float] = {"cluster.members": 3, "storage.ops": 1}
    pub = publisher(broker, metrics)
    pub.publish_round(NOW, 0)
    del metrics["cluster.members"]
    assert pub.publish_round(NOW, 0) == [("$SYS/b/cluster/members", b"")]
    assert "$SYS/b/cluster/members" not in broker.system_retained
    broker.system_retained.delete("$SYS/b/storage/ops")  # a tree changed by another path is repaired
    assert pub.publish_round(NOW, 0) == [("$SYS/b/storage/ops", b"1")], "rewritten though its value is the same"


def test_the_rounds_are_not_counted_as_received_publishes(node_b: Node) -> None:
    broker, _metadata = node_b
    publisher(broker, {"storage.ops": 1}).publish_round(NOW, 0)
    assert broker.metrics["publish_received"] == 0


def test_wildcards_at_the_start_never_get_the_tree(node_b: Node) -> None:
    """[MQTT-4.7.2-1] at the broker level: live and retained, plain and shared subscriptions."""
    broker, _metadata = node_b
    early_wild = subscriber(broker, "wild", "#", "+/#", "+/+/+", "+/b/uptime", "$share/g/#")
    early_sys = subscriber(broker, "sys", "$SYS/#")
    early_one = subscriber(broker, "one", "$SYS/+/uptime")
    pub = publisher(broker, {"broker.sessions": 3, "broker.sessions_online": 3})
    published = pub.publish_round(NOW, 5.0)
    assert len(published) > 3
    assert topics(early_wild) == []
    assert topics(early_sys) == sorted(t for t, _ in published)
    assert topics(early_one) == ["$SYS/b/uptime"]

    late_wild = subscriber(broker, "late-wild", "#", "+/#", "+/+/+")
    late_sys = subscriber(broker, "late-sys", "$SYS/#")
    assert topics(late_wild) == [], "retained $SYS messages are not sent to '#' either"
    assert topics(late_sys) == sorted(t for t, _ in published)
    assert all(p.retain for p in late_sys.publishes())


@pytest.mark.parametrize("topic", ["$SYS/b/uptime", "$SYS", "$SYS/b/new"])
@pytest.mark.parametrize("retain", [True, False])
def test_a_client_cannot_write_the_tree(node_b: Node, topic: str, retain: bool) -> None:
    broker, _metadata = node_b
    publisher(broker, {}).publish_round(NOW, 7.0)
    watcher = subscriber(broker, "watcher", "$SYS/#", "$SYS")
    before = len(watcher.publishes())
    for data in (b"999", b""):  # an empty retained payload would delete the retained message
        result = broker.publish(Message(topic, data, 1, retain=retain, publisher="intruder"), NOW)
        assert (result.matched, result.remote, result.refused) == (0, {}, False)
    assert len(watcher.publishes()) == before
    uptime = broker.system_retained.get("$SYS/b/uptime")
    assert uptime is not None and uptime.payload == b"7"
    assert "$SYS/b/new" not in broker.system_retained and "$SYS" not in broker.system_retained
    assert "$SYS/b/new" not in broker.retained and "$SYS" not in broker.retained
    assert broker.metrics["publish_sys_dropped"] == 2


def test_other_dollar_topics_stay_usable_by_clients(node_b: Node) -> None:
    """VerneMQ drops a client's publish to any '$' topic; we keep that to $SYS (docs/broker.md)."""
    broker, _metadata = node_b
    watcher = subscriber(broker, "watcher", "$SYSTEM/#", "$app/x")
    broker.publish(Message("$SYSTEM/x", b"1", 0), NOW)
    broker.publish(Message("$app/x", b"2", 0), NOW)
    assert topics(watcher) == ["$SYSTEM/x", "$app/x"]
    assert broker.metrics["publish_sys_dropped"] == 0


# ---------------------------------------------------------------------------------------------- the loop


async def test_run_publishes_a_round_each_interval_and_survives_a_failing_round() -> None:
    calls: list[tuple[float, float]] = []
    ticks = iter(range(1000))

    class Flaky(SysTreePublisher):
        def publish_round(self, now: float, uptime: float) -> list[tuple[str, bytes]]:
            calls.append((now, uptime))
            if len(calls) == 2:
                raise RuntimeError("a metric source failed")
            return []

    flaky = Flaky("b", metrics=dict, retained=lambda _p: [], publish=lambda _m, _n: None)
    task = asyncio.get_running_loop().create_task(
        systree.run(flaky, 0.001, wall=lambda: 5.0, monotonic=lambda: float(next(ticks))))
    for _ in range(200):
        await asyncio.sleep(0.002)
        if len(calls) >= 4:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(calls) >= 4, "the loop went on after the failing round"
    assert calls[0] == (5.0, 1.0) and all(b[1] > a[1] for a, b in itertools.pairwise(calls))


# ---------------------------------------------------------------------------------------------- in the node


class Facade:
    """The part of NodeFacade the $SYS service reads."""

    def __init__(self) -> None:
        self.calls = 0

    def metrics(self) -> dict[str, int | float]:
        self.calls += 1
        return {"broker.sessions": 4, "storage.ops": self.calls}


@pytest.mark.parametrize(("enabled", "interval_ms", "publishes"), [
    (True, 5, True),
    (True, 0, False),
    (False, 5, False),
])
async def test_the_node_service_starts_and_stops_with_the_node(
    node_b: Node, enabled: bool, interval_ms: int, publishes: bool
) -> None:
    from vmqpy.config import Config
    from vmqpy.node import Node as VmqNode

    broker, _metadata = node_b
    facade = Facade()
    node = VmqNode(Config(nodename="b", systree_enabled=enabled, systree_interval=interval_ms))
    async with node._systree(broker, facade):  # type: ignore[arg-type]
        for _ in range(40):
            await asyncio.sleep(0.005)
            if facade.calls >= 3:
                break
    assert (facade.calls >= 3) is publishes
    sessions = broker.system_retained.get("$SYS/b/broker/sessions")
    assert (sessions is not None and sessions.payload == b"4") is publishes
    stopped_at = facade.calls
    await asyncio.sleep(0.03)
    assert facade.calls == stopped_at, "no round after the service stopped"
