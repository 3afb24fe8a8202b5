"""The connection driver: moves bytes between one socket and the connection machine. Its CONNECT half
(registration, CONNACK, refusals) is in vmqpy/broker/driver/connect_flow.py; its output (the buffer, flushing, encoding,
pause/resume of writing) is a `Writer` (vmqpy/broker/driver/writer.py); whether its socket is read (CONNECT holds,
backpressure, max_message_rate, the bulk lane) is a `ReadGate` (vmqpy/broker/driver/pacing.py).

The MQTT rules of the connection are in the sans-I/O machine (vmqpy/broker/machine/protocol.py): every packet decoded
goes through its table, and this file carries out its decisions (registering with the cluster, routing through
the broker, writing packets, closing with the DISCONNECT it chose). Each callback reads the clock once and
passes `now` down. The connection arms one timer, for the machine's next deadline (`next_deadline`) or the end
of a rate hold; the keep alive is the node's keep-alive wheel's (vmqpy/broker/driver/keepalive.py). Acknowledgements
that depend on a disk write (a QoS 1/2 message queued for a persistent session, a retained message, a persistent
subscription) wait for the storage barrier and leave in order.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Callable
from functools import partial
from time import monotonic_ns, perf_counter
from time import time as wall_clock  # a name of its own: compiled, `time.time()` escapes the simulation's clock
from typing import Any, Final

import structlog

from vmqpy.broker.access.auth import Authenticator, certificate_identity
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.session import Session
from vmqpy.broker.core.turn_budget import TURN_BUDGET, TURN_YIELDED, YIELDED_READ_LIMIT
from vmqpy.broker.driver import connect_flow, keepalive, subscribe_slices
from vmqpy.broker.driver.ack_order import AckQueue
from vmqpy.broker.driver.connect_budget import LARGEST_PACKET, connect_max_size
from vmqpy.broker.driver.linger import CLOSE_TIMEOUT, close_lingering
from vmqpy.broker.driver.pacing import ReadGate
from vmqpy.broker.driver.rate_limit import TokenBucket
from vmqpy.broker.driver.writer import Writer
from vmqpy.broker.machine.decisions import (
    Authenticate,
    Close,
    Decision,
    RecordIncoming,
    RefuseConnect,
    Register,
    Reply,
    Route,
    Send,
    SubscribeTo,
    Throttle,
    Unanswered,
    UnsubscribeFrom,
    suback_codes,
)
from vmqpy.broker.machine.protocol import ConnectionMachine
from vmqpy.broker.operations.trace import RECEIVED, SENT, Trace
from vmqpy.client_metrics import DELIVERY_LATENCY, SENT_COUNTERS
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.codec import NEED_DATA, Decoder
from vmqpy.mqtt.decoder import LongSubscribe
from vmqpy.mqtt.errors import RemoteProtocolError, UnsupportedProtocolVersion
from vmqpy.mqtt.packets import (
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from vmqpy.sessions.message import Message
from vmqpy.storage import Storage

log = structlog.get_logger("vmqpy.connection")

_DELIVERY_BOUNDS: Final = DELIVERY_LATENCY.bounds
_DELIVERY_KEYS: Final = DELIVERY_LATENCY.keys
_DELIVERY_SUM: Final = DELIVERY_LATENCY.sum_key

WRITE_HIGH_WATER = 256 * 1024
# the counter of each kind of packet a client sends, counted as it is dispatched (a PUBLISH is counted by the
# broker as it routes it, `publish_received`; a SUBSCRIBE handled in slices by vmqpy.broker.driver.subscribe_slices at
# its SUBACK)
RECEIVED_COUNTERS: dict[type, str] = {
    Connect: "mqtt_connect_received", Puback: "mqtt_puback_received", Pubrec: "mqtt_pubrec_received",
    Pubrel: "mqtt_pubrel_received", Pubcomp: "mqtt_pubcomp_received", Subscribe: "mqtt_subscribe_received",
    Unsubscribe: "mqtt_unsubscribe_received", Pingreq: "mqtt_pingreq_received",
    Disconnect: "mqtt_disconnect_received",
}


class MQTTConnection(asyncio.Protocol):
    """One client connection: the Sink of its session while it owns it. Its output is its `writer`'s, whether its
    socket is read its `gate`'s, its MQTT rules its `machine`'s; it arms one timer (`arm_timer`)."""

    # No attribute dictionary: a node holds one of these per client (about 1.5 KB less each, docs/performance.md).
    __slots__ = (
        "__weakref__", "_connect_at", "_log", "_peer", "_rate", "_timer", "_timer_at",
        "_yield_paused", "_yielded", "acks", "announced", "asked_client_id", "broker", "client_id", "closing",
        "config", "connect_waited", "decoder", "gate", "identity_as_username", "keep_alive", "keepalive_bucket",
        "last_received", "listener", "loop", "machine", "normal_close", "on_connected", "on_lost", "refusing",
        "registering", "retries", "session", "storage", "subscribing", "traces", "transport", "username", "writer",
    )

    def __init__(
        self, broker: Broker, config: Config, storage: Storage | None, auth: Authenticator, listener: str
    ) -> None:
        self.broker = broker
        self.config = config
        self.storage = storage
        self.loop = asyncio.get_running_loop()
        self.listener = listener
        # Credentials are checked against the broker's access rules once the node loaded their files (they are
        # reloaded there); `auth` serves a broker without them (unit tests, benchmarks).
        access = broker.access
        self.machine = ConnectionMachine(config, access if access.loaded else auth, broker.policy, access=access)
        self.writer = Writer(self.loop, self.machine.state)
        self.gate = ReadGate()
        # Until its CONNECT is accepted a client may send no more than a CONNECT needs (mqtt.connect_max_size: a
        # WebSocket's frames are not bounded by a prelude); then the largest packet (`connect_completed`).
        self.decoder = Decoder(server=True, max_packet_size=connect_max_size(config))
        self.decoder.long_subscribe = subscribe_slices.LONG_SUBSCRIBE  # decoded a slice a turn (subscribe_slices)
        self.transport: asyncio.Transport | None = None
        self.session: Session | None = None
        self.client_id = ""
        self.traces: tuple[Trace, ...] = ()  # `vmq-admin trace client` of this client (vmqpy.broker.operations.trace)
        self._peer: tuple[str, int] | None = None  # the client's address from a PROXY header (else: `peer`)
        self.identity_as_username = False  # a TLS listener's use_identity_as_username (set before connection_made)
        self.username: str | None = None
        self._log: Any = None  # the logger bound to this connection's fields, made at its first use (`log`)
        self.connect_waited = False  # a prelude waited for the whole CONNECT, with mqtt.connect_timeout (listeners)
        self.keep_alive = 0
        self.last_received = 0.0
        self.normal_close = False
        self.closing = False
        self._rate = TokenBucket(config.max_message_rate, wall_clock()) if config.max_message_rate else None
        # the connection's one timer (`arm_timer`: the machine's next deadline or the end of a rate hold; once
        # closed, the abort of a socket that does not drain) and the time it is armed for
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self.keepalive_bucket: keepalive.Bucket | None = None  # where it waits in the node's keep-alive wheel
        self.retries = False  # resends of what the client leaves unacknowledged (3.1.1 with retry_interval)
        self.acks = AckQueue(self.loop, storage, self._ack_failed)  # acknowledgements, durable and in order
        self.registering = False  # its password is checked, or its client id registered: nothing is read
        self.subscribing = False  # a SUBSCRIBE of many filters is added a slice a turn: nothing is read meanwhile
        self._yielded = False  # its packets took a turn's budget: the rest waits in the bulk lane (turn_budget)
        self._yield_paused = False  # meanwhile it read YIELDED_READ_LIMIT bytes more: reading paused
        self.refusing = False  # a refused login waits for its CONNACK (auth.failed_login_delay): nothing is read
        self._connect_at = 0.0  # loop time the CONNECT was read (CONNECT-to-CONNACK latency, `connect_took`)
        self.asked_client_id = ""  # the client id the CONNECT asked for (logged when it is refused)
        self.announced = False  # a "client connected" line was logged: log its disconnect too
        # what the listener does when the socket is gone (leave the node's set, free a max_connections place): each
        # is given the connection, so that none holds it (a closure over it would be a cycle kept until the
        # garbage collector's next full pass)
        self.on_lost: tuple[Callable[[MQTTConnection], None], ...] = ()
        # runs once the CONNECT is accepted (a WebSocket's PreConnectMeter gives its bytes back to the budget)
        self.on_connected: Callable[[], None] | None = None
        broker.metrics["socket_open"] += 1

    @property
    def level(self) -> int:
        return self.machine.state.level

    @property
    def will(self) -> Message | None:
        return self.machine.state.will

    @property
    def will_delay(self) -> float:
        return self.machine.state.will_delay

    @property
    def log(self) -> Any:
        """The logger bound to this connection, made at its first use (connect_flow.bound_logger)."""
        bound = self._log
        if bound is None:
            bound = self._log = connect_flow.bound_logger(self, log)
        return bound

    def forget_log(self) -> None:
        """Bind the logger again at its next use (the fields changed: the client id of an accepted CONNECT)."""
        self._log = None

    @property
    def peer(self) -> tuple[str, int] | None:
        """The client's address: a PROXY header's, else the socket's, read when asked (connect_flow.socket_peer)."""
        return self._peer if self._peer is not None else connect_flow.socket_peer(self.transport)

    @peer.setter
    def peer(self, peer: tuple[str, int] | None) -> None:
        self._peer = peer

    @property
    def listener_kind(self) -> str:
        """tcp, ssl, ws or wss: the kind of listener the client came through (its label is NAME for tcp)."""
        kind, dot, _name = self.listener.partition(".")
        return kind if dot else "tcp"

    def connect_took(self, loop_now: float) -> float:
        """Seconds from the CONNECT read to `loop_now` (its CONNACK written); the time is not kept after."""
        took = loop_now - self._connect_at
        self._connect_at = 0.0  # the shared constant again: a float of its own costs an idle connection 24 bytes
        return took

    # ------------------------------------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.writer.transport = self.gate.transport = self.transport
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)  # type: ignore[union-attr]
        if self.identity_as_username:  # listener.ssl.use_identity_as_username: the certificate's CN is the user
            self.machine.identity = certificate_identity(transport.get_extra_info("peercert"))
        self.last_received = self.loop.time()
        # mqtt.connect_timeout: tcp and ssl listeners had it before already
        # (vmqpy.broker.listeners.preludes.ConnectPrelude),
        # which hands on a socket with its first packet whole: it is decided in this callback, no timer needed.
        if not self.connect_waited:
            now = wall_clock()
            self.machine.opened(now, False)
            self.arm_timer(now)

    def data_received(self, data: bytes) -> None:
        self.last_received = self.loop.time()
        self.decoder.receive_data(data)
        if self._yielded:  # what it sent before waits in the bulk lane: this waits behind it
            self._hold_reading()
            return
        self.process()

    def process(self, first: Packet | None = None, now: float | None = None) -> None:
        """Dispatch `first` (a packet decoded in slices: subscribe_slices.decode), then every complete packet
        received (until a CONNECT starts registering). The clock is read once for them all (`now`, unless the
        caller read it)."""
        if now is None:
            now = wall_clock()
        arrived_ns = monotonic_ns()  # when the PUBLISHes of this read arrived (publish-to-delivery latency)
        decoder = self.decoder
        writer = self.writer
        out = writer.out  # the writer's queue (Writer.pending, inline: twice a read)
        gate = self.gate
        until = perf_counter() + TURN_BUDGET
        queued = len(out)
        scheduled = writer.scheduled
        writer.scheduled = True  # what this read answers is flushed below: no flush callback for it
        try:
            if first is not None:
                self._dispatch(first, now, arrived_ns)
            while (not self.closing and not self.registering and not gate.rate_until and not self.refusing
                   and not self.subscribing and not self._yielded):
                packet = decoder.next_packet()
                if packet is NEED_DATA:
                    break
                self._dispatch(packet, now, arrived_ns)  # type: ignore[arg-type]
                if perf_counter() > until and not self.closing and decoder.buffered():
                    self._yield_turn()
        except UnsupportedProtocolVersion as exc:
            self.log.info("refused connect", reason=str(exc), level=exc.level)
            for decision in self.machine.unsupported_protocol():
                self.carry_out(decision)
        except RemoteProtocolError as exc:
            self.log.warning("protocol error", reason=str(exc), reason_code=hex(exc.reason_code))
            self.protocol_error(exc.reason_code)
        except Exception:
            self.log.exception("internal error on connection")
            self.protocol_error(rc.UNSPECIFIED_ERROR)
        finally:
            writer.scheduled = scheduled
        if len(out) > queued:  # its answers leave now, not after the turn's later callbacks (the bulk lane)
            writer.flush()


    def _yield_turn(self) -> None:
        """This client's packets took the turn's budget (vmqpy.broker.core.turn_budget): the rest of what it sent is
        dispatched by the node's bulk lane, a budget's worth a turn, after the other clients' packets."""
        self._yielded = True
        self.broker.metrics[TURN_YIELDED] += 1
        self._hold_reading()
        self.broker.lane.add(self._next_turn, self.loop.call_soon)

    def _hold_reading(self) -> None:
        """Stop reading a client waiting in the lane once it holds YIELDED_READ_LIMIT bytes not dispatched."""
        if not self._yield_paused and self.decoder.buffered() > YIELDED_READ_LIMIT:
            self._yield_paused = True
            self.gate.add_block()

    def _next_turn(self) -> None:
        """The lane's step of a client that yielded: a budget's worth of what it sent (then back in the lane).
        A step that dispatched the last of it keeps the client in the lane for one more turn, so that what it
        sends meanwhile waits for that turn instead of being dispatched when read, in the same loop turn: one
        client's packets get one `TURN_BUDGET` a loop turn, not one in the lane and another when read. A step
        that finds nothing new lets the client go back to being dispatched when read."""
        if not self._yielded:
            return
        self._yielded = False
        waiting = self.decoder.buffered()
        if not self.closing:
            self.process()
        if not self._yielded and not self.closing and self.decoder.buffered() != waiting:
            self._yielded = True
            self.broker.lane.add(self._next_turn, self.loop.call_soon)
            return
        if not self._yielded and self._yield_paused:  # all dispatched (or it is gone): read again
            self._yield_paused = False
            self.gate.unblock()

    def connect_completed(self) -> None:
        """The CONNECT was accepted: from now on the largest packet is max_message_size (or MQTT's), no longer
        what a CONNECT needs, and what held bytes of this client before its CONNECT lets them go."""
        self.decoder.max_packet_size = self.config.max_message_size or LARGEST_PACKET
        on_connected, self.on_connected = self.on_connected, None
        if on_connected is not None:
            on_connected()

    def connection_lost(self, exc: Exception | None) -> None:
        on_lost, self.on_lost = self.on_lost, ()
        for callback in on_lost:
            callback(self)
        self.closing = True
        self.writer.closed = True
        self.gate.close()
        self.acks.close()
        self.cancel_timer()  # also the abort's: the socket is gone
        keepalive.of_loop(self.loop).buckets.discard(self)
        self.broker.metrics["socket_close"] += 1
        connect_flow.disconnected(self, exc)

    def pause_writing(self) -> None:
        self.writer.pause()

    def resume_writing(self) -> None:
        self.writer.resume()
        if self.session is not None and self.session.sink is self:
            self.session.pump(wall_clock())

    # ------------------------------------------------------------------------------------------ Sink

    def write_packet(self, packet: Packet) -> None:
        kind = type(packet)
        sent = SENT_COUNTERS.get(kind)
        if sent is not None:
            self.broker.metrics[sent] += 1
        if self.traces:
            self.trace(SENT, packet, wall_clock())
        self.writer.packet(packet)
        if kind is Pubrel and self.retries and self._timer is None:
            self.arm_timer(wall_clock())

    def write_publish(self, message: Message, qos: int, retain: bool, packet_id: int | None,
                      subscription_ids: list[int], now: float, dup: bool = False, held: bool = False) -> None:
        """Write `message` to the client as a PUBLISH of `qos` (Sink.write_publish; the bytes are the writer's);
        `held`: the write the storage barrier held back (the machine's `waits_for_disk`), now due."""
        if qos == 2 and not held and (session := self.session) is not None and \
                self.machine.waits_for_disk(2, session.persistent):
            self.acks.after(True, partial(self.write_publish, message, 2, retain, packet_id, subscription_ids, now,
                                          dup, True))  # exactly once across a failover: once its id is on disk
            return
        metrics = self.broker.metrics
        metrics["mqtt_publish_sent"] += 1
        if message.arrived_ns and not dup:  # publish-to-delivery latency: DELIVERY_LATENCY.observe_ns, written out
            # (compiled here; the histogram's module stays interpreted: a call to it was 4 % of a saturated node)
            ns = monotonic_ns() - message.arrived_ns
            us = ns // 1_000 if ns > 0 else 0
            metrics[_DELIVERY_KEYS[bisect_left(_DELIVERY_BOUNDS, us)]] += 1
            metrics[_DELIVERY_SUM] += us
        if self.traces:
            self.trace(SENT, message.to_publish(qos, retain, packet_id, now, subscription_ids), now)
        if packet_id is not None and self.retries and self._timer is None:
            self.arm_timer(now)
        self.writer.publish(message, qos, retain, packet_id, subscription_ids, now, dup)

    def can_write(self) -> bool:
        return self.writer.writable and not self.closing

    def take_over(self, reason_code: int = rc.SESSION_TAKEN_OVER) -> tuple[Message | None, float]:
        return connect_flow.take_over(self, reason_code)

    def move_away(self, reference: str | None) -> None:
        connect_flow.move_away(self, reference)

    # ------------------------------------------------------------------------------------------ timer, closing

    def arm_timer(self, now: float) -> None:
        """Arm the connection's one timer for its next deadline (`now`: the caller's read of the clock): the
        machine's (the CONNECT timeout, a refused login's CONNACK, a resend to a 3.1.1 client) or the end of a
        max_message_rate hold, whichever comes first; none when nothing is due."""
        if self.closing:
            return
        deadline = self.machine.next_deadline()
        rate_until = self.gate.rate_until
        if rate_until and (deadline is None or rate_until < deadline):
            deadline = rate_until
        timer = self._timer
        if deadline is None:
            if timer is not None:
                self.cancel_timer()
            return
        if timer is not None:
            if self._timer_at <= deadline:
                return
            timer.cancel()
        self._timer_at = deadline
        self._timer = self.loop.call_later(max(0.0, deadline - now), self._on_timer)

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_at = 0.0

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = 0.0
        if self.closing:
            return
        now = wall_clock()
        gate = self.gate
        if gate.rate_until and gate.rate_until <= now:  # max_message_rate allows the next PUBLISH
            gate.release_rate()
            self.process(None, now)  # the packets read before the hold
            if self.closing:
                return
        for decision in self.machine.handle_timer(now):
            if type(decision) is Close and not self.refusing:
                self.log.info(decision.why)
            self.carry_out(decision)
        self.arm_timer(now)

    def close(self, linger: bool = True) -> None:
        """Close the socket; a TCP one lingers (`linger`, vmqpy.broker.driver.linger) unless the client ended the
        connection itself with DISCONNECT: then it has nothing more to send or to read, as on the code before
        lingering closes, and a half-close, a drain timer and a second read would be work for nothing."""
        if self.closing:
            return
        self.writer.flush()
        self.closing = True
        self.writer.closed = True
        self.gate.close()
        self.acks.active = False
        self.cancel_timer()
        transport = self.transport
        if transport is not None:
            # A TCP socket lingers (vmqpy.broker.driver.linger): half-closed and drained for a bounded time and size, so
            # that a client still writing reads our last packet (a DISCONNECT's reason) rather than a reset. The
            # connection ends now, as asyncio would end it after close(): in the next pass of the loop.
            if linger and close_lingering(transport, self.loop, self.broker.metrics):
                self.loop.call_soon(self.connection_lost, None)
                return
            # Else: close() waits for the buffer to drain, which a client that reads nothing never lets happen:
            # then abort after CLOSE_TIMEOUT (always for TLS and WebSocket, whose close waits for a closing
            # handshake of the client's as well, discarding what the client still sends meanwhile).
            pending = transport.get_write_buffer_size()
            transport.close()
            if pending or self.listener_kind != "tcp":
                self._timer = self.loop.call_later(CLOSE_TIMEOUT, transport.abort)

    def end(self, close: Close) -> None:
        """Carry out the machine's `close`: its DISCONNECT (reason code, Server Reference), then the socket."""
        if close.reason_code is not None and not self.closing:
            if close.server_reference is None:
                self.write_packet(Disconnect(close.reason_code))
            else:
                props = Properties()
                props.server_reference = close.server_reference
                self.write_packet(Disconnect(close.reason_code, props))
        self.normal_close = close.normal
        self.close(linger=not close.by_client)

    def protocol_error(self, reason_code: int) -> None:
        """The client broke the protocol (or the node failed on its packet): what the machine says to send, for
        the client's level and phase, then the socket closes."""
        for decision in self.machine.protocol_error(reason_code, self.decoder.protocol_level):
            self.carry_out(decision)

    def _ack_failed(self, error: BaseException) -> None:
        self.log.error("cannot confirm what the client sent (storage failed, or a node it went to left); "
                       "closing without acknowledging", error=str(error))
        self.close()

    # ------------------------------------------------------------------------------------------ decisions

    def _dispatch(self, packet: Packet | LongSubscribe, now: float, arrived_ns: int) -> None:
        """One packet from the client: counted, traced, through the machine's table, its decisions carried out."""
        kind = type(packet)
        if kind is Publish:  # counted by the broker as it routes it
            if self._rate is not None:
                self._spend_rate(now)
        else:
            if kind is LongSubscribe:
                assert isinstance(packet, LongSubscribe)
                subscribe_slices.decode(self, packet)  # traced and counted once decoded
                return
            if kind is Connect:
                assert isinstance(packet, Connect)
                self._connect_at = self.loop.time()
                self.asked_client_id = packet.client_id
                if self.broker.tracers:
                    self.follow(*self.broker.tracers.of(packet.client_id))
            elif kind is Subscribe and self.machine.connected_now and subscribe_slices.sliced(packet):  # type: ignore[arg-type]
                if self.traces:
                    self.trace(RECEIVED, packet, now)
                subscribe_slices.start(self, packet)  # type: ignore[arg-type]  # counted at its SUBACK
                return
            counter = RECEIVED_COUNTERS.get(kind)
            if counter is not None:
                self.broker.metrics[counter] += 1
        if self.traces:
            self.trace(RECEIVED, packet, now)
        machine = self.machine
        handler = machine.row.get(kind)  # the machine's table (`receive` without its frame; it raises for the rest)
        decisions = handler(machine, packet, now) if handler is not None else machine.receive(packet, now)  # type: ignore[arg-type]
        for decision in decisions:
            if type(decision) is Route:  # a PUBLISH to route: only ever decided here, for a packet read
                message, qos, packet_id = decision
                message.arrived_ns = arrived_ns
                result = self.broker.publish(message, now)
                if qos or result.congested or result.congested_nodes:
                    for follow in machine.routed(qos, packet_id, result):
                        # carry_out's Reply without a note, inline (the PUBACK of every QoS 1 PUBLISH)
                        if type(follow) is Reply and follow.note is None and self.acks.free(follow.durable,
                                                                                             follow.remote):
                            machine.reply_sent(follow.packet)
                            self.write_packet(follow.packet)
                        else:
                            self.carry_out(follow)
            else:
                self.carry_out(decision)

    def _spend_rate(self, now: float) -> None:
        """`max_message_rate`: a PUBLISH over the client's rate stops the reading of its socket, and of what was
        read already, until the rate allows the next one (the client is slowed down, nothing is dropped)."""
        assert self._rate is not None
        wait = self._rate.take(now)
        if wait > 0.0 and not self.gate.rate_until:
            self.gate.hold_rate(now + wait)
            self.arm_timer(now)

    # ------------------------------------------------------------------------------------------ tracing

    def follow(self, *traces: Trace) -> None:
        """Report this connection's packets to `traces` too (`vmq-admin trace client`)."""
        if traces:
            self.traces = (*(t for t in self.traces if not t.done), *traces)

    def trace(self, direction: str, packet: Packet | object, now: float) -> None:
        running = tuple(t for t in self.traces if not t.done)
        self.traces = running
        peer = f"{self.peer[0]}:{self.peer[1]}" if self.peer is not None else "-"
        for trace in running:
            trace.packet(direction, peer, packet, now)


    def carry_out(self, decision: Decision) -> None:
        """Do what the machine decided (a `Route` is carried out where packets are dispatched, `_dispatch`, the
        only place it is decided)."""
        if type(decision) is Reply:  # the most frequent first (narrowed without an isinstance call)
            if decision.note is not None:
                self._note(decision.note, decision.warn, decision.packet)
            packet = decision.packet
            if self.acks.free(decision.durable, decision.remote):  # nothing to wait for: written now
                self.machine.reply_sent(packet)
                self.write_packet(packet)
            else:
                self.acks.after(decision.durable, partial(self._write_reply, packet), decision.remote)
            return
        kind = type(decision)
        if kind is RecordIncoming:
            assert isinstance(decision, RecordIncoming) and self.session is not None
            self.session.journal.save_incoming(self.session, decision.packet_id, decision.awaiting)
        elif kind is Send:
            assert isinstance(decision, Send)
            self.write_packet(decision.packet)
        elif kind is Throttle:
            assert isinstance(decision, Throttle)
            self.gate.block(decision.result, self.broker.backpressure.wait_for_node)
        elif kind is SubscribeTo:
            assert isinstance(decision, SubscribeTo)
            self._subscribe(decision.packet, decision.refused)
        elif kind is UnsubscribeFrom:
            assert isinstance(decision, UnsubscribeFrom)
            session = self.session
            assert session is not None
            if subscribe_slices.unsubscribe_sliced(decision.packet):
                subscribe_slices.start_unsubscribe(self, decision.packet)  # vmqpy.broker.driver.subscribe_slices
            else:
                confirm = self.broker.route_confirmation()
                codes = self.broker.unsubscribe(session, decision.packet.topic_filters, confirm)
                reply = Unsuback(decision.packet.packet_id, codes)
                self.acks.after(session.persistent, lambda: self.write_packet(reply),
                                self.broker.routes_applied(confirm))
        elif kind is Unanswered:
            assert isinstance(decision, Unanswered)
            self._note(decision.why, decision.warn, None)
        elif kind is Authenticate:
            assert isinstance(decision, Authenticate)
            connect_flow.authenticate(self, decision)
        elif kind is Register:
            assert isinstance(decision, Register)
            connect_flow.start_registration(self, decision.accepted)
        elif kind is RefuseConnect:
            assert isinstance(decision, RefuseConnect)
            if decision.failed_login:
                connect_flow.refuse_login(self, decision)
            else:
                connect_flow.refuse(self, decision.reason_code, decision.why)
        elif kind is Close:
            assert isinstance(decision, Close)
            self.end(decision)
        else:
            raise TypeError(f"not a decision to carry out here: {decision!r}")


    def _note(self, why: str, warn: bool, packet: Packet | None) -> None:
        fields = {"qos": 1 if isinstance(packet, Puback) else 2} if packet is not None else {}
        (self.log.warning if warn else self.log.info)(why, **fields)

    def _write_reply(self, packet: Packet) -> None:
        self.machine.reply_sent(packet)
        self.write_packet(packet)

    def _subscribe(self, packet: Subscribe, refused: dict[int, int]) -> None:
        """Add the subscriptions but the `refused` ones (over max_subscriptions_per_client); SUBACK once durable
        and, with `subscription.acknowledge = cluster`, once the reachable members route by them."""
        session = self.session
        assert session is not None
        ids = packet.properties.subscription_identifiers
        subscriptions = packet.subscriptions
        if refused:
            subscriptions = [sub for index, sub in enumerate(subscriptions) if index not in refused]
        confirm = self.broker.route_confirmation()
        codes, added = self.broker.subscribe(session, subscriptions, ids[0] if ids else None, confirm)
        if refused:
            codes = suback_codes(len(packet.subscriptions), refused, codes)
        reply = Suback(packet.packet_id, codes)

        def answer() -> None:
            self.write_packet(reply)
            self.broker.deliver_retained(session, added, wall_clock())

        self.acks.after(session.persistent, answer, self.broker.routes_applied(confirm))
