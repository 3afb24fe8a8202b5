"""The node's metrics under their published names: Prometheus's `/metrics` and `vmq-admin metrics show
--format=vernemq` (docs/operations.md, "Metrics").

`families(raw)` reads the metric table (admin.metric_table, where every published name is declared once): it
turns the node's live counters (`AdminNode.metrics()`,
dotted keys such as `broker.publish_received`, the same numbers the $SYS tree publishes) into metric families
with VerneMQ's names where VerneMQ has the metric (`mqtt_connect_received`, `queue_message_drop`, ...) and
`vmqpy_...` names for ours. Pure: a mapping in, a list of `Family` out. Every counter of the table is there from
the node's start: a key the node has not reported yet (a counter that never moved) is a 0, and a labelled
family has every label value it can take at 0 (the CONNACK return codes, the netsplit policy's operations), so
`increase()` and `rate()` see the first event; every histogram has its buckets at 0. A gauge the node does not
report (no cluster, a file not created yet) is left out, not faked.

Names as scraped (`sample_name`): a counter under VerneMQ's name is exposed as VerneMQ does, without a suffix
(`mqtt_publish_received{node="..."} 3`), typed `untyped` in the text format (the format's counter type asks for
the `_total` suffix, and promtool checks it; PromQL's `rate()`/`increase()` treat both alike); our `vmqpy_`
counters follow the OpenMetrics rule, `NAME_total`. `prometheus_namespace` (VerneMQ 2.x) prefixes every name of
the table: `vernemq_mqtt_publish_received`.

`NodeCollector` is a prometheus-client Collector over a live node: every scrape reads `metrics()` again and
labels every sample with `node`. `registry(...)` gives each HTTP app its own `CollectorRegistry` (never the
global default one, so two nodes in one process do not mix) holding it and prometheus-client's process, platform
and garbage-collector collectors (`process_resident_memory_bytes`, `process_open_fds`, `python_info`,
`python_gc_collections_total`, ...). `exposed_names(...)` lists the sample names a scrape can show, for the
Grafana dashboard's test.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from prometheus_client import GC_COLLECTOR, CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from admin.metric_table import (
    CONNACK_RETURN_CODES,
    HISTOGRAMS,
    INACTIVE_SESSIONS,
    LATENCY,
    LATENCY_BOUNDS_US,
    NETSPLIT_OPERATIONS,
    PATTERNS,
    RETURN_CODE_ALIASES,
    SPECS,
    HistogramSpec,
    Kind,
    Labels,
    Spec,
)

__all__ = [
    "CONNACK_RETURN_CODES",
    "HISTOGRAMS",
    "LATENCY",
    "LATENCY_BOUNDS_US",
    "NETSPLIT_OPERATIONS",
    "PATTERNS",
    "RUNTIME_NAMES",
    "SPECS",
    "Family",
    "HistogramSpec",
    "NodeCollector",
    "Spec",
    "exposed_names",
    "families",
    "histogram_family",
    "registry",
    "sample_name",
    "vernemq_lines",
    "vernemq_named",
]

Raw = Mapping[str, int | float]


@dataclass(slots=True)
class Family:
    """A named metric and its samples ((labels, value) pairs; for a histogram: `buckets` (upper bound,
    cumulative count) with +Inf last, `count` and `sum`)."""

    name: str
    kind: Kind
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)
    buckets: list[tuple[str, float]] = field(default_factory=list)
    count: float = 0.0
    sum: float = 0.0


def _num(value: float) -> float:
    return float(value)


def families(raw: Raw) -> list[Family]:
    """The published metric families of a node's counters `raw`: every counter and histogram (0 for a key not
    reported yet), the gauges the node reports."""
    out: dict[str, Family] = {}

    def family(name: str, kind: Kind, help: str) -> Family:
        if name not in out:
            out[name] = Family(name, kind, help)
        return out[name]

    for spec in SPECS:
        present = [raw[key] for key in spec.sources if key in raw]
        if present or spec.kind == "counter":
            family(spec.name, spec.kind, spec.help).samples.append((spec.labels, _num(sum(present))))
    inactive_name, inactive_help, *inactive_keys = INACTIVE_SESSIONS
    inactive = [raw[key] for key in inactive_keys if key in raw]
    if len(inactive) == 2:
        family(inactive_name, "gauge", inactive_help).samples.append(((), _num(inactive[0] - inactive[1])))
    for name, help, pattern, label, declared in PATTERNS:
        values = dict.fromkeys(declared, 0.0)
        for key in sorted(raw):
            match = pattern.fullmatch(key)
            if match is not None:
                value = RETURN_CODE_ALIASES.get(match.group(1), match.group(1))
                values[value] = values.get(value, 0.0) + _num(raw[key])
        family(name, "counter", help).samples.extend(
            (((label, value),), count) for value, count in sorted(values.items()))
    for histogram_spec in HISTOGRAMS:
        out[histogram_spec.name] = histogram_family(histogram_spec, raw)
    return list(out.values())


def histogram_family(spec: HistogramSpec, raw: Raw) -> Family:
    """The histogram `spec` of the node's counters `raw`: cumulative buckets in seconds (every bound of the spec,
    then +Inf = the count, the total of every bucket key); all 0 when the node never observed one. A bucket key
    of a bound the spec does not know (a node of another version) adds to the next larger bound, or only to
    +Inf."""
    source = spec.source
    counts = [0.0] * len(spec.bounds_us)
    prefix = source + "_le_"
    total = 0.0
    for key, value in raw.items():
        if key.startswith(prefix):
            bound = key[len(prefix):]
            if bound.isdigit():
                total += _num(value)
                index = bisect_left(spec.bounds_us, int(bound))
                if index < len(counts):
                    counts[index] += _num(value)
            elif bound == "inf":
                total += _num(value)
    buckets, running = [], 0.0
    for us, count in zip(spec.bounds_us, counts, strict=True):
        running += count
        buckets.append((repr(us / 1_000_000), running))
    buckets.append(("+Inf", _num(total)))
    return Family(spec.name, "histogram", spec.help, buckets=buckets, count=_num(total),
                  sum=_num(raw.get(source + "_sum_us", 0)) / 1_000_000)


def vernemq_named(name: str) -> bool:
    """Whether the family `name` of the table carries VerneMQ's name (ours start with `vmqpy_`)."""
    return not name.startswith("vmqpy_")


def _prefixed(name: str, namespace: str) -> str:
    return f"{namespace}_{name}" if namespace else name


def sample_name(fam: Family, namespace: str = "") -> str:
    """The name of `fam`'s samples in a scrape: VerneMQ's counters without a suffix, ours with `_total`, a
    histogram's base name (its samples add `_bucket`, `_count`, `_sum`); prefixed by `namespace` and `_`."""
    suffix = "_total" if fam.kind == "counter" and not vernemq_named(fam.name) else ""
    return _prefixed(fam.name, namespace) + suffix


def _metric(fam: Family, node: str, namespace: str) -> Metric:
    name = _prefixed(fam.name, namespace)
    if fam.kind == "histogram":
        histogram = HistogramMetricFamily(name, fam.help, labels=["node"])
        histogram.add_metric([node], fam.buckets, fam.sum)
        return histogram
    label_names = ["node", *(label for label, _ in fam.samples[0][0])]
    if fam.kind == "counter" and vernemq_named(fam.name):
        # VerneMQ's exposition: the sample carries the family's name, no `_total`; see the module's docstring
        untyped = Metric(name, fam.help, "unknown")
        for labels, value in fam.samples:
            untyped.add_sample(name, dict(zip(label_names, [node, *(v for _, v in labels)], strict=True)), value)
        return untyped
    metric: CounterMetricFamily | GaugeMetricFamily
    if fam.kind == "counter":
        metric = CounterMetricFamily(name, fam.help, labels=label_names)
    else:
        metric = GaugeMetricFamily(name, fam.help, labels=label_names)
    for labels, value in fam.samples:
        metric.add_metric([node, *(v for _, v in labels)], value)
    return metric


class NodeCollector(Collector):
    """Reads the node's counters at every scrape (`metrics()`), labelled with `node()`, names prefixed with
    `namespace()` (the node's `prometheus_namespace`)."""

    def __init__(self, node: Callable[[], str], metrics: Callable[[], Raw],
                 namespace: Callable[[], str] = lambda: "") -> None:
        self._node = node
        self._metrics = metrics
        self._namespace = namespace

    def collect(self) -> Iterator[Metric]:
        node, namespace = self._node(), self._namespace()
        for fam in families(self._metrics()):
            yield _metric(fam, node, namespace)


class BuildCollector(Collector):
    """`vmqpy_build_info{version="...",core="compiled"} 1` (or core="pure"): which build of the node's core runs
    (vmqpy/native.py), as prometheus-client's `python_info` says which interpreter; nothing without `build()`."""

    def __init__(self, build: Callable[[], Mapping[str, str]]) -> None:
        self._build = build

    def collect(self) -> Iterator[Metric]:
        labels = dict(self._build())
        if labels:
            yield InfoMetricFamily("vmqpy_build", "The vmqpy version and which build of its core runs", value=labels)


#: the families prometheus-client's own collectors add (process: Linux /proc; python_gc_*: `gc.get_stats`), and
#: the build's (`BuildCollector`)
RUNTIME_NAMES: Final = frozenset({"vmqpy_build_info",
    "process_virtual_memory_bytes", "process_resident_memory_bytes", "process_start_time_seconds",
    "process_cpu_seconds_total", "process_open_fds", "process_max_fds", "python_info",
    "python_gc_objects_collected_total", "python_gc_objects_uncollectable_total", "python_gc_collections_total"})


def registry(node: Callable[[], str], metrics: Callable[[], Raw], namespace: Callable[[], str] = lambda: "",
             build: Callable[[], Mapping[str, str]] = dict) -> CollectorRegistry:
    """A registry of its own (not prometheus-client's global one) holding one `NodeCollector`, the build's, and
    the process, platform and garbage-collector collectors (their names are the client library's, never prefixed)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(NodeCollector(node, metrics, namespace))
    reg.register(BuildCollector(build))
    ProcessCollector(registry=reg)
    PlatformCollector(registry=reg)
    if GC_COLLECTOR is not None:  # None where the interpreter has no gc.get_stats
        GCCollector(registry=reg)
    return reg


def exposed_names(raw: Raw, namespace: str = "") -> set[str]:
    """The sample names of the node's own families a scrape of a node with counters `raw` shows (VerneMQ's
    counters as named, ours with `_total`, histograms with `_bucket`, `_count`, `_sum`); `RUNTIME_NAMES` apart."""
    names: set[str] = set()
    for fam in families(raw):
        name = sample_name(fam, namespace)
        if fam.kind == "histogram":
            names.update({name + "_bucket", name + "_count", name + "_sum"})
        else:
            names.add(name)
    return names


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _labels(labels: Labels) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else ""


def vernemq_lines(fams: list[Family]) -> list[str]:
    """`vmq-admin metrics show` in VerneMQ's form: `counter.mqtt_connect_received = 3`, `gauge.NAME = N`,
    labelled samples as `counter.mqtt_connack_sent{return_code="success"} = 3`; a histogram as its
    `_bucket{le=...}`, `_count` and `_sum` lines. Sorted by name."""
    lines: list[str] = []
    for fam in sorted(fams, key=lambda f: f.name):
        if fam.kind == "histogram":
            for bound, count in fam.buckets:
                lines.append(f'histogram.{fam.name}_bucket{{le="{bound}"}} = {_number(count)}')
            lines.append(f"histogram.{fam.name}_count = {_number(fam.count)}")
            lines.append(f"histogram.{fam.name}_sum = {fam.sum:.6f}")
            continue
        for labels, value in fam.samples:
            lines.append(f"{fam.kind}.{fam.name}{_labels(labels)} = {_number(value)}")
    return lines
