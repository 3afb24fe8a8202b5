"""How a client connection writes a routed message to its client: `write_publish`, the `Sink.write_publish` of
`MQTTConnection` (vmqpy/broker/connection.py, which binds it as its method), kept here so that the driver stays
one module of a size to read.

It runs once for every message delivered, so it is written for the common cases first, each without an object
it does not need (docs/performance.md, "Latency under load at fixed rates"):

- QoS 0 without properties, topic aliases or subscription identifiers: the bytes are made once per message and
  protocol level and shared by every such subscriber (`Message.frames`);
- QoS 1/2 without properties: the bytes straight from the message (`encode_plain_publish`), no `Publish`;
- anything else: the message's `Publish` for this subscriber (subscription identifiers, expiry, 5.0 properties,
  an outgoing topic alias), encoded.

The bytes join the connection's output, written once per turn of the event loop (`MQTTConnection._flush`).
A QoS 2 message to a persistent session leaves only once its packet id is on disk (exactly once across a
failover): that write is held back behind the storage barrier (`AckQueue.after`) and made with `held`.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from time import monotonic_ns
from typing import TYPE_CHECKING

from vmqpy.broker import pacing
from vmqpy.broker.client_metrics import DELIVERY_LATENCY
from vmqpy.broker.message import Message
from vmqpy.broker.trace import SENT
from vmqpy.mqtt.codec import encode, encode_plain_publish

if TYPE_CHECKING:
    from vmqpy.broker.connection import MQTTConnection

__all__ = ["write_publish"]


def write_publish(
    conn: MQTTConnection, message: Message, qos: int, retain: bool, packet_id: int | None,
    subscription_ids: list[int], now: float, dup: bool = False, held: bool = False,
) -> None:
    """Write `message` to `conn`'s client as a PUBLISH of `qos` (Sink.write_publish); `held`: the write the
    storage barrier held back, now due."""
    if qos == 2 and not held and conn.session is not None and conn.session.persistent:  # exactly once across a
        conn.acks.after(True, partial(conn.write_publish, message, 2, retain, packet_id, subscription_ids, now, dup,
                                      True))  # failover: once its packet id is on disk (and the queue replicas')
        return
    metrics = conn.broker.metrics
    metrics["mqtt_publish_sent"] += 1
    if message.arrived_ns and not dup:  # publish-to-delivery latency (vmqpy.broker.client_metrics)
        DELIVERY_LATENCY.observe_ns(metrics, monotonic_ns() - message.arrived_ns)
    if conn.traces:
        conn._trace(SENT, message.to_publish(qos, retain, packet_id, now, subscription_ids), now)
    aliases = conn._aliases_out
    level = conn.machine.state.level
    if aliases is None and qos == 0 and not subscription_ids and message.expires_at is None:
        # The same bytes serve every QoS 0 subscriber of this protocol level: encode once per message.
        frames = message.frames
        if frames is None:
            frames = message.frames = {}
        key = (level, retain)
        data = frames.get(key)
        if data is None:
            data = frames[key] = encode_plain_publish(message.topic, message.payload, 0, retain, False, None, level) \
                if message.plain else encode(message.to_publish(0, retain, None, now), level)
    else:
        if conn._retries and conn._retry_timer is None and packet_id is not None:
            pacing.arm_retry(conn)
        if aliases is None and not subscription_ids and message.plain:
            data = encode_plain_publish(message.topic, message.payload, qos, retain, dup, packet_id, level)
        else:
            publish = message.to_publish(qos, retain, packet_id, now, subscription_ids)
            publish.dup = dup
            if aliases is not None:
                alias, known = aliases.alias_for(publish.topic)
                plain = not subscription_ids and message.plain  # to_publish shared its empty properties
                publish.properties = aliases.properties(alias) if plain else \
                    replace(publish.properties, topic_alias=alias)
                if known:
                    publish.topic = ""
            data = encode(publish, level)
    conn._out.append(data)  # MQTTConnection._write_bytes, inline: this runs for every delivery
    if not conn._flush_scheduled:
        conn._flush_scheduled = True
        conn.loop.call_soon(conn._flush)
