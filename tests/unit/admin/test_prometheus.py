"""admin.prometheus (the published names of the node's counters) and vmqpy.client_metrics (the counters
the connection driver keeps for them)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from admin import prometheus
from admin.prometheus import SPECS, Family, exposed_names, families, registry, vernemq_lines
from vmqpy import client_metrics
from vmqpy.mqtt import reason_codes as rc

RAW: dict[str, int | float] = {
    "broker.mqtt_connect_received": 5,
    "broker.publish_received": 12,
    "broker.sessions": 4,
    "broker.sessions_online": 3,
    "broker.mqtt_connack_success_sent": 4,
    "broker.mqtt_connack_server_unavailable_sent": 1,
    "broker.mqtt_connack_bad_credentials_sent": 2,
    "netsplit.refused_register": 1,
    "netsplit.refused_publish": 7,
    "cluster.links.bytes_out": 949,
    "metadata.exchanges_completed": 3,
    "metadata.exchanges_failed": 1,
    "broker.connect_latency_le_1000": 2,
    "broker.connect_latency_le_5000": 1,
    "broker.connect_latency_le_inf": 1,
    "broker.connect_latency_sum_us": 7_000_500,
    "broker.publish_withheld_not_authorized": 6,
    "broker.retained_not_authorized": 2,
    "broker.socket_linger_cut": 0,
    "broker.connection_turn_yielded": 4,
    "replication_log.rotations": 9,
}


def by_name(fams: list[Family]) -> dict[str, Family]:
    return {f.name: f for f in fams}


@pytest.mark.parametrize(("name", "samples"), [
    ("mqtt_connect_received", [((), 5.0)]),
    ("mqtt_publish_received", [((), 12.0)]),
    ("active_sessions", [((), 3.0)]),
    ("inactive_sessions", [((), 1.0)]),
    ("cluster_bytes_sent", [((), 949.0)]),
    ("mqtt_connack_sent", [((("return_code", "bad_username_or_password"),), 2.0),
                           ((("return_code", "client_identifier_not_valid"),), 0.0),
                           ((("return_code", "not_authorized"),), 0.0),
                           ((("return_code", "other"),), 0.0),
                           ((("return_code", "server_unavailable"),), 1.0),
                           ((("return_code", "success"),), 4.0),
                           ((("return_code", "unsupported_protocol_version"),), 0.0)]),
    ("vmqpy_netsplit_refused", [((("operation", "publish"),), 7.0), ((("operation", "register"),), 1.0),
                                ((("operation", "subscribe"),), 0.0), ((("operation", "unsubscribe"),), 0.0)]),
    ("mqtt_publish_sent", [((), 0.0)]),  # never moved: at 0 from the start
    ("vmqpy_takeovers", [((("side", "local"),), 0.0), ((("side", "remote"),), 0.0)]),
    ("vmqpy_metadata_exchanges", [((("outcome", "started"),), 0.0), ((("outcome", "completed"),), 3.0),
                                  ((("outcome", "failed"),), 1.0)]),
    ("vmqpy_publish_withheld", [((("delivery", "routed"),), 6.0), ((("delivery", "retained"),), 2.0)]),
    ("vmqpy_socket_linger_cut", [((), 0.0)]),  # exported at 0
    ("vmqpy_connection_turn_yielded", [((), 4.0)]),
    ("vmqpy_replication_log_rotations", [((), 9.0)]),
])
def test_names_and_values(name: str, samples: list[tuple[tuple[tuple[str, str], ...], float]]) -> None:
    assert by_name(families(RAW))[name].samples == samples


def test_a_fresh_node_exports_every_counter_and_histogram_at_0_and_no_gauge_it_lacks() -> None:
    """The first incident must be seen by increase(): a counter that waited for its first event to appear would
    read its first value as the start of the series."""
    fams = by_name(families({}))
    counters = {spec.name for spec in SPECS if spec.kind == "counter"} | {"mqtt_connack_sent",
                                                                           "vmqpy_netsplit_refused"}
    assert {name for name, fam in fams.items() if fam.kind == "counter"} == counters
    for spec in SPECS:
        if spec.kind == "counter":
            assert (spec.labels, 0.0) in fams[spec.name].samples, spec
    for histogram in prometheus.HISTOGRAMS:
        fam = fams[histogram.name]
        assert fam.count == 0 and fam.buckets[-1] == ("+Inf", 0.0) and len(fam.buckets) == len(histogram.bounds_us) + 1
    assert not any(fam.kind == "gauge" for fam in fams.values())  # a gauge the node does not report is not faked
    one = by_name(families({"broker.queue_message_drop": 1}))
    assert one["queue_message_drop"].samples == [((), 1.0)]


@pytest.mark.parametrize(("namespace", "name"), [
    ("", "mqtt_publish_received"), ("vernemq", "vernemq_mqtt_publish_received"),
])
def test_vernemqs_names_have_no_suffix_ours_have_total_and_the_namespace_prefixes_both(namespace: str,
                                                                                       name: str) -> None:
    reg = registry(lambda: "n@h", lambda: {"broker.publish_received": 3}, lambda: namespace,
                   lambda: {"version": "0.1.0", "core": "compiled"})
    text = generate_latest(reg).decode()
    assert f'{name}{{node="n@h"}} 3.0' in text.splitlines()
    assert f"# TYPE {name} untyped" in text.splitlines()
    prefix = namespace + "_" if namespace else ""
    assert f'{prefix}vmqpy_takeovers_total{{node="n@h",side="local"}} 0.0' in text.splitlines()
    assert f"{prefix}mqtt_publish_received_total" not in text
    assert "\nprocess_resident_memory_bytes " in text and "\npython_info{" in text  # never prefixed
    assert 'vmqpy_build_info{core="compiled",version="0.1.0"} 1.0' in text.splitlines()  # nor the build's
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert names - prometheus.RUNTIME_NAMES == exposed_names({"broker.publish_received": 3}, namespace)
    assert prometheus.RUNTIME_NAMES <= names


def test_histogram_buckets_are_cumulative_and_end_with_the_count() -> None:
    hist = by_name(families(RAW))["vmqpy_connect_latency_seconds"]
    assert hist.kind == "histogram"
    assert hist.buckets[0] == ("0.001", 2.0)
    assert dict(hist.buckets)["0.005"] == 3.0
    assert dict(hist.buckets)["5.0"] == 3.0  # the slow one is above every bound
    assert hist.buckets[-1] == ("+Inf", 4.0)
    assert len(hist.buckets) == len(prometheus.LATENCY_BOUNDS_US) + 1
    assert hist.count == 4.0
    assert hist.sum == pytest.approx(7.0005)


def test_the_exporter_and_the_node_use_the_same_buckets() -> None:
    assert prometheus.LATENCY_BOUNDS_US == client_metrics.LATENCY_BOUNDS_US
    exported = {spec.source.split(".", 1)[1]: spec.bounds_us for spec in prometheus.HISTOGRAMS}
    assert exported == client_metrics.BOUNDS_US
    assert {h.name: h.bounds for h in client_metrics.HISTOGRAMS} == client_metrics.BOUNDS_US
    # the node keeps the handover histogram in registration's counters, the others in the broker's
    assert {spec.source for spec in prometheus.HISTOGRAMS} == {
        "broker.connect_latency", "broker.delivery_latency", "registration.handover_duration"}


def test_queue_in_and_out_add_up_the_sessions_keys() -> None:
    raw = {"broker.queue_message_direct": 5, "broker.queue_message_queued": 2, "broker.queue_message_dequeued": 1}
    fams = by_name(families(raw))
    assert fams["queue_message_in"].samples == [((), 7.0)]
    assert fams["queue_message_out"].samples == [((), 6.0)]
    assert fams["queue_message_in"].kind == fams["queue_message_out"].kind == "counter"


@pytest.mark.parametrize("name", ["queue_message_drop", "queue_message_expired", "mqtt_pubrec_received",
                                  "mqtt_pubrel_received",
                                  "mqtt_pubcomp_received", "mqtt_unsubscribe_received", "mqtt_pingreq_received",
                                  "mqtt_disconnect_sent", "mqtt_pubrec_sent", "mqtt_suback_sent",
                                  "mqtt_disconnect_received"])
def test_vernemqs_counters_are_counters_of_the_broker(name: str) -> None:
    [spec] = [s for s in SPECS if s.name == name]
    assert spec.kind == "counter" and spec.sources == (f"broker.{name}",)


def test_an_unknown_bucket_bound_adds_to_the_next_larger_one() -> None:
    raw = {"broker.delivery_latency_le_300": 2, "broker.delivery_latency_le_99999999": 1,
           "broker.delivery_latency_le_inf": 1, "broker.delivery_latency_sum_us": 10}
    hist = by_name(families(raw))["vmqpy_publish_delivery_seconds"]
    assert dict(hist.buckets)["0.00025"] == 0.0 and dict(hist.buckets)["0.0005"] == 2.0
    assert dict(hist.buckets)["5.0"] == 2.0 and hist.buckets[-1] == ("+Inf", 4.0)


def test_exposition_parses_with_the_node_label() -> None:
    reg = registry(lambda: "n1@127.0.0.11", lambda: RAW)
    parsed = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
    [sample] = parsed["mqtt_connect_received"].samples
    assert (sample.name, sample.labels, sample.value) == ("mqtt_connect_received", {"node": "n1@127.0.0.11"}, 5)
    connacks = {s.labels["return_code"]: s.value for s in parsed["mqtt_connack_sent"].samples if s.value}
    assert connacks == {"success": 4, "server_unavailable": 1, "bad_username_or_password": 2}
    inf = [s for s in parsed["vmqpy_connect_latency_seconds"].samples if s.labels.get("le") == "+Inf"]
    assert [s.value for s in inf] == [4]
    names = {s.name for f in parsed.values() for s in f.samples if not s.name.endswith("_created")}
    assert names - prometheus.RUNTIME_NAMES == exposed_names(RAW)


def test_each_node_has_its_own_registry_and_the_global_one_is_untouched() -> None:
    before = generate_latest(REGISTRY)
    one = registry(lambda: "a@h", lambda: {"broker.publish_received": 1})
    two = registry(lambda: "b@h", lambda: {"broker.publish_received": 2})
    assert b'node="a@h"} 1.0' in generate_latest(one) and b"b@h" not in generate_latest(one)
    assert b'node="b@h"} 2.0' in generate_latest(two)
    assert b"mqtt_publish_received" not in generate_latest(REGISTRY)
    assert generate_latest(REGISTRY).count(b"\n") == before.count(b"\n")


def test_every_scrape_reads_the_counters_again() -> None:
    live: dict[str, int | float] = {"broker.publish_received": 1}
    reg = registry(lambda: "n@h", lambda: live)
    assert b'mqtt_publish_received{node="n@h"} 1.0' in generate_latest(reg)
    live["broker.publish_received"] = 9
    assert b'mqtt_publish_received{node="n@h"} 9.0' in generate_latest(reg)


def test_vernemq_lines() -> None:
    lines = vernemq_lines(families(RAW))
    assert "counter.mqtt_connect_received = 5" in lines
    assert "gauge.active_sessions = 3" in lines
    assert 'counter.mqtt_connack_sent{return_code="success"} = 4' in lines
    assert 'histogram.vmqpy_connect_latency_seconds_bucket{le="+Inf"} = 4' in lines
    assert "histogram.vmqpy_connect_latency_seconds_sum = 7.000500" in lines
    names = [line.split(" = ")[0].split(".", 1)[1].split("{")[0] for line in lines]
    families_in_order = [n.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum") for n in names]
    assert families_in_order == sorted(families_in_order)
    assert all(" = " in line for line in lines)


def test_spec_names_are_unique_per_label_set_and_valid() -> None:
    seen = set()
    for spec in SPECS:
        assert (spec.name, spec.labels) not in seen
        seen.add((spec.name, spec.labels))
        assert spec.name.replace("_", "").isalnum() and not spec.name.endswith("_total")
        assert spec.sources and spec.help


# -- vmqpy.client_metrics --------------------------------------------------------------------------------

@pytest.mark.parametrize(("seconds", "key"), [
    (0.0, "connect_latency_le_1000"),
    (0.001, "connect_latency_le_1000"),
    (0.0010004, "connect_latency_le_1000"),  # rounds to whole microseconds
    (0.0011, "connect_latency_le_2500"),
    (4.9, "connect_latency_le_5000000"),
    (5.1, "connect_latency_le_inf"),
    (-0.5, "connect_latency_le_1000"),  # a clock that stepped back counts as instant, never a crash
])
def test_latency_bucket_key(seconds: float, key: str) -> None:
    assert client_metrics.latency_bucket_key(seconds) == key


@pytest.mark.parametrize(("code", "label"), [
    (rc.SUCCESS, "success"), (rc.SERVER_UNAVAILABLE, "server_unavailable"),
    (rc.NOT_AUTHORIZED, "not_authorized"), (rc.BAD_USER_NAME_OR_PASSWORD, "bad_username_or_password"),
    (rc.CLIENT_IDENTIFIER_NOT_VALID, "client_identifier_not_valid"), (rc.PROTOCOL_ERROR, "other"),
])
def test_connack_label(code: int, label: str) -> None:
    assert client_metrics.connack_label(code) == label


@given(st.lists(st.floats(min_value=0, max_value=20, allow_nan=False), max_size=40))
def test_observed_latencies_export_as_a_consistent_histogram(samples: list[float]) -> None:
    counter: Counter[str] = Counter()
    for seconds in samples:
        client_metrics.observe_connect_latency(counter, seconds)
    raw = {f"broker.{k}": v for k, v in counter.items()}
    fams = by_name(families(raw))
    hist = fams["vmqpy_connect_latency_seconds"]
    counts = [count for _, count in hist.buckets]
    assert counts == sorted(counts)  # cumulative
    assert counts[-1] == hist.count == len(samples)
    for (bound, count) in hist.buckets[:-1]:
        assert count == sum(1 for s in samples if round(s * 1_000_000) <= round(float(bound) * 1_000_000))


@given(st.dictionaries(st.sampled_from(sorted({key for spec in SPECS for key in spec.sources})),
                       st.integers(min_value=0, max_value=2**40)))
def test_any_counters_give_a_parseable_exposition(raw: dict[str, int]) -> None:
    text = generate_latest(registry(lambda: "n@h", lambda: raw)).decode()
    parsed = list(text_string_to_metric_families(text))
    assert {f.name for f in families(raw)} <= {f.name for f in parsed}
    for spec in SPECS:
        if all(key in raw for key in spec.sources):
            [fam] = [f for f in parsed if f.name == spec.name]
            wanted = {"node": "n@h", **dict(spec.labels)}
            values = [s.value for s in fam.samples if s.labels == wanted and not s.name.endswith("_created")]
            assert values == [sum(raw[key] for key in spec.sources)]


@pytest.mark.parametrize(("histogram", "us", "key"), [
    (client_metrics.DELIVERY_LATENCY, 0, "delivery_latency_le_100"),
    (client_metrics.DELIVERY_LATENCY, 100, "delivery_latency_le_100"),
    (client_metrics.DELIVERY_LATENCY, 101, "delivery_latency_le_250"),
    (client_metrics.DELIVERY_LATENCY, 5_000_001, "delivery_latency_le_inf"),
    (client_metrics.HANDOVER_DURATION, 10_000_000, "handover_duration_le_10000000"),
    (client_metrics.HANDOVER_DURATION, 10_000_001, "handover_duration_le_inf"),
])
def test_bucket_keys(histogram: client_metrics.Histogram, us: int, key: str) -> None:
    assert histogram.bucket_key(us) == key


def test_observe_ns_counts_whole_microseconds_and_a_step_back_as_zero() -> None:
    counter: Counter[str] = Counter()
    client_metrics.DELIVERY_LATENCY.observe_ns(counter, 250_999)
    client_metrics.DELIVERY_LATENCY.observe_ns(counter, -5_000)
    client_metrics.DELIVERY_LATENCY.observe(counter, -7)
    assert counter == Counter({"delivery_latency_le_250": 1, "delivery_latency_le_100": 2,
                               "delivery_latency_sum_us": 250})


@pytest.mark.parametrize("bounds", [(), (0, 10), (10, 5), (5, 5)])
def test_bad_bounds_are_refused(bounds: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="bounds"):
        client_metrics.Histogram("h", bounds)


@given(st.sampled_from(client_metrics.HISTOGRAMS), st.lists(st.integers(min_value=0, max_value=20_000_000),
                                                             max_size=40))
def test_every_histogram_exports_what_the_node_observed(histogram: client_metrics.Histogram,
                                                         samples: list[int]) -> None:
    counter: Counter[str] = Counter()
    for us in samples:
        histogram.observe(counter, us)
    [spec] = [h for h in prometheus.HISTOGRAMS if h.source.endswith("." + histogram.name)]
    prefix = spec.source.split(".", 1)[0]
    raw = {f"{prefix}.{k}": v for k, v in counter.items()}
    fam = prometheus.histogram_family(spec, raw)
    assert fam.count == len(samples) and fam.buckets[-1] == ("+Inf", len(samples))
    assert fam.sum == pytest.approx(sum(samples) / 1_000_000)
    for bound, count in fam.buckets[:-1]:
        assert count == sum(1 for us in samples if us <= round(float(bound) * 1_000_000))
    text = generate_latest(registry(lambda: "n@h", lambda: raw)).decode()
    [parsed] = [f for f in text_string_to_metric_families(text) if f.name == spec.name]
    assert parsed.type == "histogram"


def test_node_counters_are_a_counter_with_dicts_item_assignment() -> None:
    counters = client_metrics.NodeCounters()
    counters["a"] += 1
    counters["b"] += 3
    assert isinstance(counters, Counter) and counters["missing"] == 0 and "missing" not in counters
    assert counters.most_common(1) == [("b", 3)] and dict(counters) == {"a": 1, "b": 3}
    assert client_metrics.NodeCounters.__delitem__ is dict.__delitem__  # the C slot: no Python-level detour
    del counters["a"]
    with pytest.raises(KeyError):
        del counters["a"]


def test_every_packet_the_driver_counts_is_published() -> None:
    published = {key for spec in SPECS for key in spec.sources}
    assert {f"broker.{key}" for key in client_metrics.SENT_COUNTERS.values()} <= published
