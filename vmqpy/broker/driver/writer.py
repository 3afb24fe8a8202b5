"""The output of one client connection (vmqpy.broker.driver.connection): `Writer` owns the bytes not yet written, when
they are flushed, whether the socket takes more (`pause`/`resume`, asyncio's pause_writing/resume_writing) and
how a packet or a routed message becomes bytes.

Everything queued in one pass of the event loop leaves in one `transport.write` (`flush`, scheduled with the
first bytes of the pass; the driver flushes at once what answers a client's own packets). A routed message is
written for the common cases first, each without an object it does not need (docs/performance.md, "Latency
under load at fixed rates"):

- QoS 0 without properties, topic aliases or subscription identifiers: the bytes are made once per message and
  protocol level and shared by every such subscriber (`Message.frames`);
- QoS 1/2 without properties: the bytes straight from the message (`encode_plain_publish`), no `Publish`;
- anything else: the message's `Publish` for this subscriber (subscription identifiers, expiry, 5.0 properties,
  an outgoing topic alias), encoded.

The protocol level and the outgoing topic aliases are read from the connection machine's state
(vmqpy.broker.machine.connection_state.ConnectionState), which decides them; what the connection does around a
delivery (the
QoS 2 hold, counters, traces, the resend timer) is `MQTTConnection.write_publish`'s.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from vmqpy.broker.machine.connection_state import ConnectionState
from vmqpy.mqtt.codec import encode, encode_plain_publish
from vmqpy.mqtt.packets import Packet
from vmqpy.sessions.message import Message

__all__ = ["Writer"]


class Writer:
    """The bytes of one connection on their way to its socket."""

    __slots__ = ("closed", "loop", "out", "scheduled", "state", "transport", "writable")

    def __init__(self, loop: asyncio.AbstractEventLoop, state: ConnectionState) -> None:
        self.loop = loop
        self.state = state  # the machine's: the protocol level and the outgoing topic aliases
        self.transport: asyncio.Transport | None = None
        # the writes queued for the next flush: always this list (emptied, never replaced), so that the driver
        # compares its length before and after a read without a call (`pending`, inline)
        self.out: list[bytes] = []
        # a flush is due in this pass of the event loop (scheduled with the first bytes queued). The driver sets it
        # while it dispatches a read, whose answers it flushes itself at the end (no callback for them), and puts it
        # back after (MQTTConnection.process)
        self.scheduled = False
        self.writable = True  # False while the socket's buffer is above its high water mark (`pause`)
        self.closed = False  # nothing more leaves (the connection closed; what it had queued was flushed)

    def pending(self) -> int:
        """How many writes wait for the next flush."""
        return len(self.out)

    def data(self, data: bytes) -> None:
        """Queue bytes, to leave with everything else queued in this pass of the event loop."""
        self.out.append(data)
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def packet(self, packet: Packet) -> None:
        """Queue `packet`, encoded for the connection's protocol level."""
        self.out.append(encode(packet, self.state.level))  # `data`, inline
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def publish(self, message: Message, qos: int, retain: bool, packet_id: int | None, subscription_ids: list[int],
                now: float, dup: bool) -> None:
        """Queue `message` as a PUBLISH of `qos` for this client."""
        state = self.state
        aliases = state.aliases_out
        level = state.level
        if aliases is None and qos == 0 and not subscription_ids and message.expires_at is None:
            # The same bytes serve every QoS 0 subscriber of this protocol level: encode once per message.
            frames = message.frames
            if frames is None:
                frames = message.frames = {}
            key = (level, retain)
            data = frames.get(key)
            if data is None:
                data = frames[key] = \
                    encode_plain_publish(message.topic, message.payload, 0, retain, False, None, level) \
                    if message.plain else encode(message.to_publish(0, retain, None, now), level)
        elif aliases is None and not subscription_ids and message.plain:
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
        self.out.append(data)  # `data`, inline: this runs for every delivery
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what is queued in one write (dropped once `closed`, or when the socket is closing)."""
        self.scheduled = False
        out = self.out
        if not out:
            return
        transport = self.transport
        if transport is not None and not self.closed and not transport.is_closing():  # closing: half-closed
            transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    def pause(self) -> None:
        """asyncio's pause_writing: the socket's buffer is above its high water mark."""
        self.writable = False

    def resume(self) -> None:
        """asyncio's resume_writing: the socket takes more."""
        self.writable = True
