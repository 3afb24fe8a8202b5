"""MQTT 3.1.1 load generator on raw asyncio sockets (uvloop), for `bench.compare` and `bench.bench_cluster`.

    python -m bench.loadgen --port P [--shape pairs|fanin] [--clients N] [--qos 0|1] ...   one run, JSON out
    python -m bench.loadgen --port P --rate R ...   the same at a fixed total rate of R msgs/s (open loop)

Modules, in the order a run uses them:
  scenarios  the shape of a run (pairs or fan-in, QoS, windows) and how its clients spread over processes
  runner     `run()`: the controller that starts the worker processes and drives the timeline; `main`, the CLI
  worker     one worker process: connects its clients and follows the controller over a pipe
  clients    the publisher and subscriber protocols (handshake, QoS 0 flood, QoS 1 window, delivery accounting)
  schedule   fixed-rate mode: when each publisher's messages are due, which deliveries count (pure)
  paced      fixed-rate mode: the publisher that sends on that schedule
  wire       payload format, PUBLISH frames, the frame splitter
  results    per-client accounting and `summarize`: rates, losses, latency percentiles

Every PUBLISH carries a 64-byte payload whose first 20 bytes are `>IQQ`: publisher id, sequence number, send time
(`time.monotonic_ns()`, CLOCK_MONOTONIC, comparable between processes of one machine; at a fixed rate, the time the
message was due); the other 44 bytes are padding. Every loop is bounded in count or time.
"""

from __future__ import annotations

from bench.loadgen.clients import Publisher, Subscriber, monotonic_ns
from bench.loadgen.paced import PacedPublisher
from bench.loadgen.results import (
    PubResult,
    RunResult,
    SubResult,
    acked_not_delivered,
    count_set,
    latency_ms,
    mark,
    percentile,
    summarize,
)
from bench.loadgen.runner import machine_busy_seconds, main, run
from bench.loadgen.scenarios import Scenario, default_scenarios
from bench.loadgen.schedule import Schedule, in_window, rate_milli
from bench.loadgen.wire import (
    HEADER,
    PAD,
    PAYLOAD_SIZE,
    ClientError,
    build_qos0,
    build_stamped,
    payload,
    publish_prefix,
    split_frames,
    vbi,
)

__all__ = [
    "HEADER",
    "PAD",
    "PAYLOAD_SIZE",
    "ClientError",
    "PacedPublisher",
    "PubResult",
    "Publisher",
    "RunResult",
    "Scenario",
    "Schedule",
    "SubResult",
    "Subscriber",
    "acked_not_delivered",
    "build_qos0",
    "build_stamped",
    "count_set",
    "default_scenarios",
    "in_window",
    "latency_ms",
    "machine_busy_seconds",
    "main",
    "mark",
    "monotonic_ns",
    "payload",
    "percentile",
    "publish_prefix",
    "rate_milli",
    "run",
    "split_frames",
    "summarize",
    "vbi",
]
