"""The `$SYS` tree: the node's metrics as retained QoS 0 messages under `$SYS/<nodename>/`.

The topics (docs/broker.md, "The $SYS tree"):

- every metric of `NodeFacade.metrics()`, its name split on "." into topic levels:
  `broker.sessions_online` -> `$SYS/<node>/broker/sessions_online`;
- a few topics with Mosquitto's names (under the node's name, as VerneMQ does, not under `broker/`):
  `uptime` (whole seconds), `version`, `clients/connected`, `clients/disconnected`, `clients/total`,
  `publish/messages/received`, `retained messages/count`; only when the metrics they come from exist.

Payloads are plain text: numbers in decimal (`12`, `0.25`), the version as `vmqpy 0.1.0`.

A round publishes only what differs from what the broker retains under the node's prefix now, and deletes
(an empty retained payload) what it retains there and the tree no longer has. The tree is the node's own
(`Broker.publish_system` keeps it in a retained store of the node's, never replicated), and a round delivers only
the changes to subscribers: `uptime` and the counters that moved. Comparing with the retained store rather than
with the last
round also repairs what another path changed (a restart, a store emptied by a rejoin).

`tree` and `changes` are pure; `SysTreePublisher.publish_round(now, uptime)` takes the time as arguments, and
`run` is the thin asyncio loop around it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Final

import structlog

from vmqpy import __version__
from vmqpy.sessions.message import Message

log = structlog.get_logger("vmqpy.systree")

SYS: Final = "$SYS"
VERSION: Final = f"vmqpy {__version__}"

Metrics = Mapping[str, int | float]
Entry = tuple[str, bytes]  # (topic, payload)

# Mosquitto's names for values we have: (topic below the node's prefix, metric it repeats).
FAMILIAR: Final = (
    ("clients/connected", "broker.sessions_online"),
    ("clients/total", "broker.sessions"),
    ("publish/messages/received", "broker.publish_received"),
    ("retained messages/count", "broker.retained"),
)


def is_system_topic(topic: str) -> bool:
    """`$SYS` or a topic below it: the broker's own tree, which clients may read but not write."""
    return topic.startswith(SYS) and (len(topic) == len(SYS) or topic[len(SYS)] == "/")


def period(enabled: bool, interval_ms: int) -> float | None:
    """Seconds between rounds for `systree_enabled` and `systree_interval` (milliseconds); None: no tree
    (disabled, or an interval of 0, as in VerneMQ)."""
    if not enabled or interval_ms <= 0:
        return None
    return interval_ms / 1000


def prefix(node: str) -> str:
    """The topic under which `node` publishes its tree: `$SYS/<node>`."""
    return f"{SYS}/{node}"


def payload(value: int | float | str) -> bytes:
    """Plain text: integers (and booleans) in decimal, other numbers without an exponent, text as UTF-8."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bool):
        return b"1" if value else b"0"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).encode("ascii")
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.6f}".rstrip("0").rstrip(".").encode("ascii")
    return str(int(value)).encode("ascii")


def metric_levels(name: str) -> str | None:
    """The topic levels of a metric name (`cluster.links.bytes_out` -> `cluster/links/bytes_out`); None for
    a name that cannot be a topic (an empty level, a wildcard, a '/')."""
    levels = name.split(".")
    for level in levels:
        if not level or "/" in level or "+" in level or "#" in level or "\x00" in level:
            return None
    return "/".join(levels)


def tree(node: str, metrics: Metrics, uptime: float, version: str = VERSION) -> list[Entry]:
    """Every (topic, payload) of `node`'s tree, sorted by topic."""
    base = prefix(node)
    out: dict[str, bytes] = {
        f"{base}/uptime": payload(int(uptime)),
        f"{base}/version": payload(version),
    }
    for name, value in metrics.items():
        levels = metric_levels(name)
        if levels is not None:
            out[f"{base}/{levels}"] = payload(value)
    for topic, name in FAMILIAR:
        if name in metrics:
            out[f"{base}/{topic}"] = payload(metrics[name])
    if "broker.sessions" in metrics and "broker.sessions_online" in metrics:
        out[f"{base}/clients/disconnected"] = payload(metrics["broker.sessions"] - metrics["broker.sessions_online"])
    return sorted(out.items())


def changes(retained: Mapping[str, bytes], current: Iterable[Entry]) -> list[Entry]:
    """What to publish so that the retained payloads become `current`: each (topic, payload) that differs,
    then (topic, b"") to delete each retained topic no longer in `current`; in topic order."""
    wanted = dict(current)
    out = [(topic, data) for topic, data in wanted.items() if retained.get(topic) != data]
    out += [(topic, b"") for topic in retained if topic not in wanted]
    return sorted(out)


class SysTreePublisher:
    """Publishes one node's tree through the broker, changes only.

    `metrics()` gives the node's metrics (`NodeFacade.metrics`); `retained(prefix)` the (topic, payload) the
    broker retains under that prefix; `publish(message, now)` routes a message the node itself publishes
    (`Broker.publish_system`)."""

    def __init__(
        self,
        node: str,
        *,
        metrics: Callable[[], Metrics],
        retained: Callable[[str], Iterable[Entry]],
        publish: Callable[[Message, float], object],
        version: str = VERSION,
    ) -> None:
        self.node = node
        self._metrics = metrics
        self._retained = retained
        self._publish = publish
        self._version = version
        self.rounds = 0
        self.published = 0  # messages, deletions included (not a node metric: it would change every round)

    def publish_round(self, now: float, uptime: float) -> list[Entry]:
        """Publish what changed since the broker's retained values; returns what was published."""
        current = tree(self.node, self._metrics(), uptime, self._version)
        retained = dict(self._retained(prefix(self.node)))
        due = changes(retained, current)
        for topic, data in due:
            self._publish(Message(topic, data, 0, retain=True), now)
        self.rounds += 1
        self.published += len(due)
        return due


async def run(
    publisher: SysTreePublisher,
    interval: float,
    wall: Callable[[], float],
    monotonic: Callable[[], float],
) -> None:
    """A round at once, then one every `interval` seconds, until cancelled. `uptime` counts from the call
    (on the monotonic clock: a step of the wall clock does not change it)."""
    started = monotonic()
    while True:
        try:
            publisher.publish_round(wall(), monotonic() - started)
        except Exception:
            log.exception("$SYS round failed")
        await asyncio.sleep(interval)


__all__ = [
    "FAMILIAR",
    "SYS",
    "VERSION",
    "SysTreePublisher",
    "changes",
    "is_system_topic",
    "metric_levels",
    "payload",
    "period",
    "prefix",
    "run",
    "tree",
]
