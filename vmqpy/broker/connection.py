"""The connection driver: moves bytes between one TCP socket and the broker and arms the keepalive timer. Its
CONNECT half (registration, CONNACK, refusals) is in vmqpy/broker/connect_flow.py, the pace of reading and the
resends to 3.1.1 clients in vmqpy/broker/pacing.py.

The MQTT rules of the connection are in the sans-I/O machine (vmqpy/broker/protocol.py): this file decodes
bytes into packets, hands them to the machine and carries out its decisions (registering with the cluster,
routing through the broker, writing packets). Acknowledgements that depend on a disk write (a QoS 1/2 message
queued for a persistent session, a retained message, a persistent subscription) wait for the storage barrier
and leave in order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from time import monotonic_ns, perf_counter
from typing import Any

import structlog

from vmqpy.broker import connect_flow, keepalive, pacing, publish_out, subscribe_slices
from vmqpy.broker.ack_order import AckQueue
from vmqpy.broker.auth import Authenticator
from vmqpy.broker.broker import Broker
from vmqpy.broker.client_metrics import SENT_COUNTERS
from vmqpy.broker.connect_budget import LARGEST_PACKET, connect_max_size
from vmqpy.broker.decisions import (
    Authenticate,
    Close,
    Decision,
    Decisions,
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
from vmqpy.broker.linger import CLOSE_TIMEOUT, close_lingering
from vmqpy.broker.message import Message
from vmqpy.broker.protocol import ConnectionMachine
from vmqpy.broker.rate_limit import TokenBucket
from vmqpy.broker.session import Session
from vmqpy.broker.tls import certificate_identity
from vmqpy.broker.topic_aliases import OutboundAliases
from vmqpy.broker.trace import RECEIVED, SENT, Trace
from vmqpy.broker.turn_budget import TURN_BUDGET, TURN_YIELDED, YIELDED_READ_LIMIT
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.decoder import LongSubscribe
from vmqpy.mqtt.errors import RemoteProtocolError, UnsupportedProtocolVersion
from vmqpy.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Puback,
    Publish,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
)
from vmqpy.storage import Storage

log = structlog.get_logger("vmqpy.connection")

WRITE_HIGH_WATER = 256 * 1024


class MQTTConnection(asyncio.Protocol):
    """One client connection: the Sink of its session while it owns it."""

    # No attribute dictionary: a node holds one of these per client (about 1.5 KB less each, docs/performance.md).
    __slots__ = (
        "__weakref__", "_abort_timer", "_aliases_out", "_announced", "_asked_client_id", "_blocked_on", "_connect_at",
        "_flush_scheduled", "_log", "_out", "_peer", "_rate", "_rate_held", "_reading_paused", "_refusing",
        "_registering", "_retries", "_retry_timer", "_subscribing", "_timer", "_writable", "_yield_paused", "_yielded",
        "acks", "broker",
        "client_id", "closing", "config", "connect_waited", "decoder", "identity_as_username", "keep_alive",
        "keepalive_bucket", "last_received", "listener", "loop", "machine", "normal_close", "on_connected", "on_lost",
        "session", "storage", "traces", "transport", "username",
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
        # Until its CONNECT is accepted a client may send no more than a CONNECT needs (mqtt.connect_max_size: a
        # WebSocket's frames are not bounded by a prelude); then the largest packet (`connect_completed`).
        self.decoder = Decoder(server=True, max_packet_size=connect_max_size(config))
        self.decoder.long_subscribe = subscribe_slices.LONG_SUBSCRIBE  # decoded a slice a turn (subscribe_slices)
        self.transport: asyncio.Transport | None = None
        self.session: Session | None = None
        self.client_id = ""
        self.traces: tuple[Trace, ...] = ()  # `vmq-admin trace client` of this client (vmqpy.broker.trace)
        self._peer: tuple[str, int] | None = None  # the client's address from a PROXY header (else: `peer`)
        self.identity_as_username = False  # a TLS listener's use_identity_as_username (set before connection_made)
        self.username: str | None = None
        self._log: Any = None  # the logger bound to this connection's fields, made at its first use (`log`)
        self.connect_waited = False  # a prelude waited for the whole CONNECT, with mqtt.connect_timeout (listeners)
        self.keep_alive = 0
        self.last_received = 0.0
        self.normal_close = False
        self.closing = False
        self._writable = True
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._reading_paused = False
        self._blocked_on = 0
        self._rate = TokenBucket(config.max_message_rate, self.loop.time()) if config.max_message_rate else None
        self._rate_held = False  # over max_message_rate: nothing read until the rate allows the next PUBLISH
        self._timer: asyncio.TimerHandle | None = None  # the CONNECT timer of a connection no prelude waited for
        self.keepalive_bucket: set[keepalive.Watched] | None = None  # where it waits in the node's keep-alive wheel
        self._retries = False  # resends of what the client leaves unacknowledged (3.1.1 with retry_interval)
        self._retry_timer: asyncio.TimerHandle | None = None
        self._abort_timer: asyncio.TimerHandle | None = None
        self._aliases_out: OutboundAliases | None = None
        self.acks = AckQueue(self.loop, storage, self._ack_failed)  # acknowledgements, durable and in order
        self._registering = False
        self._subscribing = False  # a SUBSCRIBE of many filters is added a slice a turn: nothing is read meanwhile
        self._yielded = False  # its packets took a turn's budget: the rest waits in the bulk lane (turn_budget)
        self._yield_paused = False  # meanwhile it read YIELDED_READ_LIMIT bytes more: reading paused
        self._refusing = False  # a refused login waits for its CONNACK (auth.failed_login_delay): nothing is read
        self._connect_at = 0.0  # loop time the CONNECT was read (CONNECT-to-CONNACK latency)
        self._asked_client_id = ""  # the client id the CONNECT asked for (logged when it is refused)
        self._announced = False  # a "client connected" line was logged: log its disconnect too
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

    # ------------------------------------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)  # type: ignore[union-attr]
        if self.identity_as_username:  # listener.ssl.use_identity_as_username: the certificate's CN is the user
            self.machine.identity = certificate_identity(transport.get_extra_info("peercert"))
        self.last_received = self.loop.time()
        # mqtt.connect_timeout: tcp and ssl listeners had it before already (vmqpy.broker.preludes.ConnectPrelude),
        # which hands on a socket with its first packet whole: it is decided in this callback, no timer needed.
        if not self.connect_waited:
            self._timer = self.loop.call_later(self.config.connect_timeout, self._on_timer)

    def data_received(self, data: bytes) -> None:
        self.last_received = self.loop.time()
        self.decoder.receive_data(data)
        if self._yielded:  # what it sent before waits in the bulk lane: this waits behind it
            self._hold_reading()
            return
        self._process()

    def _process(self, first: Packet | None = None) -> None:
        """Dispatch `first` (a packet decoded in slices: subscribe_slices.decode), then every complete packet
        received (until a CONNECT starts registering)."""
        decoder = self.decoder
        until = perf_counter() + TURN_BUDGET
        queued = len(self._out)
        try:
            if first is not None:
                self._dispatch(first)
            while (not self.closing and not self._registering and not self._rate_held and not self._refusing
                   and not self._subscribing and not self._yielded):
                packet = decoder.next_packet()
                if packet is NEED_DATA:
                    break
                self._dispatch(packet)  # type: ignore[arg-type]
                if perf_counter() > until and not self.closing and decoder.buffered():
                    self._yield_turn()
        except UnsupportedProtocolVersion as exc:
            self.log.info("refused connect", reason=str(exc), level=exc.level)
            self._write_bytes(b"\x20\x02\x00\x01")  # CONNACK, 3.1.1 layout: unacceptable protocol version
            self.close()
        except RemoteProtocolError as exc:
            self.log.warning("protocol error", reason=str(exc), reason_code=hex(exc.reason_code))
            self.protocol_error(exc.reason_code)
        except Exception:
            self.log.exception("internal error on connection")
            self.protocol_error(rc.UNSPECIFIED_ERROR)
        if len(self._out) > queued:  # its answers leave now, not after the turn's later callbacks (the bulk lane)
            self._flush()

    def _yield_turn(self) -> None:
        """This client's packets took the turn's budget (vmqpy.broker.turn_budget): the rest of what it sent is
        dispatched by the node's bulk lane, a budget's worth a turn, after the other clients' packets."""
        self._yielded = True
        self.broker.metrics[TURN_YIELDED] += 1
        self._hold_reading()
        self.broker.lane.add(self._next_turn, self.loop.call_soon)

    def _hold_reading(self) -> None:
        """Stop reading a client waiting in the lane once it holds YIELDED_READ_LIMIT bytes not dispatched."""
        if not self._yield_paused and self.decoder.buffered() > YIELDED_READ_LIMIT:
            self._yield_paused = True
            self._blocked_on += 1
            pacing.set_reading(self)

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
            self._process()
        if not self._yielded and not self.closing and self.decoder.buffered() != waiting:
            self._yielded = True
            self.broker.lane.add(self._next_turn, self.loop.call_soon)
            return
        if not self._yielded and self._yield_paused:  # all dispatched (or it is gone): read again
            self._yield_paused = False
            self._blocked_on -= 1
            pacing.set_reading(self)

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
        self.acks.close()
        for timer in (self._timer, self._retry_timer, self._abort_timer):  # the abort's: the socket is gone
            if timer is not None:
                timer.cancel()
        keepalive.Buckets.discard(self)
        self._retry_timer = None
        self.broker.metrics["socket_close"] += 1
        connect_flow.disconnected(self, exc)

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        if self.session is not None and self.session.sink is self:
            self.session.pump(time.time())

    # ------------------------------------------------------------------------------------------ Sink

    def write_packet(self, packet: Packet) -> None:
        sent = SENT_COUNTERS.get(type(packet))
        if sent is not None:
            self.broker.metrics[sent] += 1
        if self.traces:
            self._trace(SENT, packet, time.time())
        self._out.append(encode(packet, self.machine.state.level))  # `_write_bytes` and `level`, inline
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)
        if self._retries and self._retry_timer is None and type(packet) is Pubrel:
            pacing.arm_retry(self)

    write_publish = publish_out.write_publish  # Sink.write_publish: a routed message's bytes (its module)

    def can_write(self) -> bool:
        return self._writable and not self.closing

    def take_over(self, reason_code: int = rc.SESSION_TAKEN_OVER) -> tuple[Message | None, float]:
        return connect_flow.take_over(self, reason_code)

    def move_away(self, reference: str | None) -> None:
        connect_flow.move_away(self, reference)

    # ------------------------------------------------------------------------------------------ writing, closing

    def _write_bytes(self, data: bytes) -> None:
        """Queue bytes; everything queued in one pass of the event loop leaves in one write (the answers to a
        client's own packets leave as soon as they are dispatched: `_process`)."""
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        transport = self.transport
        if transport is not None and not self.closing and not transport.is_closing():  # closing: half-closed
            transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    def close(self, linger: bool = True) -> None:
        """Close the socket; a TCP one lingers (`linger`, vmqpy.broker.linger) unless the client ended the
        connection itself with DISCONNECT: then it has nothing more to send or to read, as on the code before
        lingering closes, and a half-close, a drain timer and a second read would be work for nothing."""
        if self.closing:
            return
        self._flush()
        self.closing = True
        self.acks.active = False
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        transport = self.transport
        if transport is not None:
            # A TCP socket lingers (vmqpy.broker.linger): half-closed and drained for a bounded time and size, so
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
                self._abort_timer = self.loop.call_later(CLOSE_TIMEOUT, transport.abort)

    def protocol_error(self, reason_code: int) -> None:
        """The client broke the protocol: 5.0 gets DISCONNECT with the reason code, or a CONNACK carrying it when
        its CONNECT was the bad packet (MQTT 5.0 3.1.4, docs/mqtt-codec.md), then the socket closes."""
        if self.level == 5 and self.session is not None:
            self.write_packet(Disconnect(reason_code))
        elif self.session is None and self.decoder.protocol_level == 5:
            self._write_bytes(encode(Connack(False, reason_code), 5))
        self.close()

    def _on_timer(self) -> None:  # the CONNECT timer of a connection no prelude waited for
        self._timer = None
        if self.closing:
            return
        if self.session is None:
            self.log.info("no CONNECT in time")
            self.close()
            return
        keepalive.check(self, self.loop.time())

    def _ack_failed(self, error: BaseException) -> None:
        self.log.error("cannot confirm what the client sent (storage failed, or a node it went to left); "
                       "closing without acknowledging", error=str(error))
        self.close()

    # ------------------------------------------------------------------------------------------ decisions

    def _dispatch(self, packet: Packet | LongSubscribe) -> None:
        now = time.time()
        machine = self.machine
        if self.traces and type(packet) is not LongSubscribe:  # traced once decoded (subscribe_slices.decode)
            self._trace(RECEIVED, packet, now)
        if self._rate is not None and type(packet) is Publish:
            pacing.spend_rate(self, self._rate)
        if type(packet) is Publish and machine.connected_now:  # the hot path, without a Route (same decisions)
            decided = machine.publish(packet, now)
            if type(decided) is Message:
                decided.arrived_ns = monotonic_ns()
                qos = packet.qos
                result = self.broker.publish(decided, now)
                if qos or result.congested or result.congested_nodes:
                    for follow in machine.routed(qos, packet.packet_id or 0, result):
                        if type(follow) is Reply and follow.note is None:  # the PUBACK/PUBREC, inline
                            if self.acks.free(follow.durable, follow.remote):  # nothing to wait for: written now
                                machine.reply_sent(follow.packet)  # (`_write_reply`, inline)
                                self.write_packet(follow.packet)
                            else:
                                self.acks.after(follow.durable, partial(self._write_reply, follow.packet),
                                                follow.remote)
                        else:
                            self._carry_out(follow)
                return
            assert isinstance(decided, tuple)
            decisions: Decisions = decided
        elif type(packet) is Puback and machine.connected_now and self.session is not None:
            self.broker.metrics["mqtt_puback_received"] += 1
            self.session.on_puback(packet.packet_id, now)  # the table's (CONNECTED, PUBACK) row, without a call
            return
        else:
            if type(packet) is Connect:
                self.broker.metrics["mqtt_connect_received"] += 1
                self._connect_at = self.loop.time()
                self._asked_client_id = packet.client_id
            if isinstance(packet, LongSubscribe):
                subscribe_slices.decode(self, packet)
                return
            if type(packet) is Subscribe and machine.connected_now and subscribe_slices.sliced(packet):
                subscribe_slices.start(self, packet)  # vmqpy.broker.subscribe_slices
                return
            if type(packet) is Connect and self.broker.tracers:
                self.follow(*self.broker.tracers.of(packet.client_id))
                if self.traces:
                    self._trace(RECEIVED, packet, now)
            decisions = machine.receive(packet, now)
        for decision in decisions:
            self._carry_out(decision)

    # ------------------------------------------------------------------------------------------ tracing

    def follow(self, *traces: Trace) -> None:
        """Report this connection's packets to `traces` too (`vmq-admin trace client`)."""
        if traces:
            self.traces = (*(t for t in self.traces if not t.done), *traces)

    def _trace(self, direction: str, packet: Packet | object, now: float) -> None:
        running = tuple(t for t in self.traces if not t.done)
        self.traces = running
        peer = f"{self.peer[0]}:{self.peer[1]}" if self.peer is not None else "-"
        for trace in running:
            trace.packet(direction, peer, packet, now)

    def _route(self, message: Message, qos: int, packet_id: int, now: float) -> None:
        message.arrived_ns = monotonic_ns()
        result = self.broker.publish(message, now)
        if qos or result.congested or result.congested_nodes:
            for follow in self.machine.routed(qos, packet_id, result):
                self._carry_out(follow)

    def _carry_out(self, decision: Decision) -> None:
        kind = type(decision)
        if kind is Reply:  # the most frequent first
            assert isinstance(decision, Reply)
            if decision.note is not None:
                self._note(decision.note, decision.warn, decision.packet)
            packet = decision.packet
            self.acks.after(decision.durable, lambda: self._write_reply(packet), decision.remote)
        elif kind is Route:
            assert isinstance(decision, Route)
            self._route(decision.message, decision.qos, decision.packet_id, time.time())
        elif kind is Send:
            assert isinstance(decision, Send)
            self.write_packet(decision.packet)
        elif kind is Throttle:
            assert isinstance(decision, Throttle)
            pacing.block(self, decision.result)
        elif kind is SubscribeTo:
            assert isinstance(decision, SubscribeTo)
            self._subscribe(decision.packet, decision.refused)
        elif kind is UnsubscribeFrom:
            assert isinstance(decision, UnsubscribeFrom)
            session = self.session
            assert session is not None
            if subscribe_slices.unsubscribe_sliced(decision.packet):
                subscribe_slices.start_unsubscribe(self, decision.packet)  # vmqpy.broker.subscribe_slices
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
            self.normal_close = decision.normal
            self.close(linger=not decision.by_client)

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
        self.broker.metrics["mqtt_subscribe_received"] += 1
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
            self.broker.deliver_retained(session, added, time.time())

        self.acks.after(session.persistent, answer, self.broker.routes_applied(confirm))
