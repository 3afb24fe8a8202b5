"""The connection driver: moves bytes between one TCP socket and the broker, arms the keepalive timer and the
timer of resends to 3.1.1 clients (`retry_interval`, decided by the machine), and stops reading a client over
its `max_message_rate` (vmqpy/broker/rate_limit.py) as it does one whose subscribers are congested.

The MQTT rules of the connection are in the sans-I/O machine (vmqpy/broker/protocol.py): this file decodes
bytes into packets, hands them to the machine and carries out its decisions (registering with the cluster,
routing through the broker, writing packets). Acknowledgements that depend on a disk write (a QoS 1/2 message
queued for a persistent session, a retained message, a persistent subscription) wait for the storage barrier
and leave in order.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from functools import partial
from typing import Any

import structlog

from vmqpy.broker.ack_order import AckQueue
from vmqpy.broker.auth import Authenticator
from vmqpy.broker.broker import Broker, Registrar
from vmqpy.broker.client_metrics import connack_label, observe_connect_latency
from vmqpy.broker.handover import RegistrationRefused, Ticket
from vmqpy.broker.message import Message
from vmqpy.broker.negotiation import Accepted, keepalive_check_after, keepalive_expired
from vmqpy.broker.protocol import (
    Close,
    ConnectionMachine,
    Decision,
    Decisions,
    OutboundAliases,
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
from vmqpy.broker.rate_limit import TokenBucket
from vmqpy.broker.router import RouteResult
from vmqpy.broker.session import Session
from vmqpy.broker.tls import certificate_identity
from vmqpy.broker.trace import RECEIVED, SENT, Trace
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.errors import RemoteProtocolError, UnsupportedProtocolVersion
from vmqpy.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Properties,
    Puback,
    Publish,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
)
from vmqpy.storage import Storage

log = structlog.get_logger("vmqpy.connection")

CONNECT_TIMEOUT = 10.0
CLOSE_TIMEOUT = 5.0
WRITE_HIGH_WATER = 256 * 1024
ALIAS_PROPERTY_BYTES = 4  # Topic Alias: identifier byte and two value bytes, and one more byte of property length


class MQTTConnection(asyncio.Protocol):
    """One client connection: the Sink of its session while it owns it."""

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
        self.decoder = Decoder(server=True, max_packet_size=config.max_message_size or 268_435_460)
        self.transport: asyncio.Transport | None = None
        self.session: Session | None = None
        self.client_id = ""
        self.traces: tuple[Trace, ...] = ()  # `vmq-admin trace client` of this client (vmqpy.broker.trace)
        self.peer: tuple[str, int] | None = None  # the client's address (host, port)
        self.identity_as_username = False  # a TLS listener's use_identity_as_username (set before connection_made)
        self.username: str | None = None
        self.log: Any = log
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
        self._timer: asyncio.TimerHandle | None = None
        self._retries = False  # resends of what the client leaves unacknowledged (3.1.1 with retry_interval)
        self._retry_timer: asyncio.TimerHandle | None = None
        self._aliases_out: OutboundAliases | None = None
        self.acks = AckQueue(self.loop, storage, self._ack_failed)  # acknowledgements, durable and in order
        self._registering = False
        self._refusing = False  # a refused login waits for its CONNACK (auth.failed_login_delay): nothing is read
        self._connect_at = 0.0  # loop time the CONNECT was read (CONNECT-to-CONNACK latency)
        self._asked_client_id = ""  # the client id the CONNECT asked for (logged when it is refused)
        self._announced = False  # a "client connected" line was logged: log its disconnect too
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

    # ------------------------------------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)  # type: ignore[union-attr]
        if self.peer is None:  # else a PROXY header gave the client's address (vmqpy.broker.preludes)
            peer = transport.get_extra_info("peername")
            self.peer = (str(peer[0]), int(peer[1])) if peer else None
        peer = self.peer
        self.log = log.bind(peer=f"{peer[0]}:{peer[1]}" if peer else "?", listener=self.listener)
        if self.identity_as_username:  # listener.ssl.use_identity_as_username: the certificate's CN is the user
            self.machine.identity = certificate_identity(transport.get_extra_info("peercert"))
        self.last_received = self.loop.time()
        self._timer = self.loop.call_later(CONNECT_TIMEOUT, self._on_timer)

    def data_received(self, data: bytes) -> None:
        self.last_received = self.loop.time()
        self.decoder.receive_data(data)
        self._process()

    def _process(self) -> None:
        """Dispatch every complete packet received (until a CONNECT starts registering)."""
        decoder = self.decoder
        try:
            while not self.closing and not self._registering and not self._rate_held and not self._refusing:
                packet = decoder.next_packet()
                if packet is NEED_DATA:
                    break
                self._dispatch(packet)  # type: ignore[arg-type]
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

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.acks.active = False
        if self._timer is not None:
            self._timer.cancel()
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        self.broker.metrics["socket_close"] += 1
        session = self.session
        self.session = None
        if session is not None:
            now = time.time()
            will = None if self.normal_close else self.will
            self.broker.close_session(session, self, now, will, self.will_delay)
        if self._announced:
            self.log.info("client disconnected", user=self.username, protocol=self.level, normal=self.normal_close,
                          reason=None if exc is None else str(exc) or type(exc).__name__, node=self.broker.node)

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        if self.session is not None and self.session.sink is self:
            self.session.pump(time.time())

    # ------------------------------------------------------------------------------------------ Sink

    def write_packet(self, packet: Packet) -> None:
        if self.traces:
            self._trace(SENT, packet, time.time())
        self._write_bytes(encode(packet, self.level))
        if self._retries and self._retry_timer is None and type(packet) is Pubrel:
            self._arm_retry()

    def write_publish(
        self, message: Message, qos: int, retain: bool, packet_id: int | None, subscription_ids: list[int],
        now: float, dup: bool = False,
    ) -> None:
        self.broker.metrics["mqtt_publish_sent"] += 1
        if self.traces:
            self._trace(SENT, message.to_publish(qos, retain, packet_id, now, subscription_ids), now)
        aliases = self._aliases_out
        if aliases is None and qos == 0 and not subscription_ids and message.expires_at is None:
            # The same bytes serve every QoS 0 subscriber of this protocol level: encode once per message.
            frames = message.frames
            if frames is None:
                frames = message.frames = {}
            key = (self.level, retain)
            frame = frames.get(key)
            if frame is None:
                frame = frames[key] = encode(message.to_publish(0, retain, None, now), self.level)
            self._write_bytes(frame)
            return
        if self._retries and self._retry_timer is None and packet_id is not None:
            self._arm_retry()
        publish = message.to_publish(qos, retain, packet_id, now, subscription_ids)
        publish.dup = dup
        if aliases is not None:
            alias, known = aliases.alias_for(publish.topic)
            plain = not subscription_ids and message.plain  # to_publish shared its empty properties
            publish.properties = aliases.properties(alias) if plain else replace(publish.properties, topic_alias=alias)
            if known:
                publish.topic = ""
        self._write_bytes(encode(publish, self.level))

    def can_write(self) -> bool:
        return self._writable and not self.closing

    def take_over(self, reason_code: int = rc.SESSION_TAKEN_OVER) -> tuple[Message | None, float]:
        self.log.info("session taken over" if reason_code == rc.SESSION_TAKEN_OVER else "disconnected by an operator")
        if self.level == 5:
            self.write_packet(Disconnect(reason_code))
        will, delay = self.will, self.will_delay
        self.machine.state.will = None
        self.session = None
        self.close()
        return will, delay

    def move_away(self, reference: str | None) -> None:
        """The node leaves the cluster: 5.0 clients get DISCONNECT 0x9C (Use another server) naming
        `reference`; no will is published (the client is expected to reconnect elsewhere)."""
        self.log.info("disconnecting: this node leaves the cluster", server_reference=reference)
        if self.level == 5 and self.session is not None:
            props = Properties()
            props.server_reference = reference
            self.write_packet(Disconnect(rc.USE_ANOTHER_SERVER, props))
        self.normal_close = True
        self.close()

    # ------------------------------------------------------------------------------------------ writing, closing

    def _write_bytes(self, data: bytes) -> None:
        """Queue bytes; everything queued in one pass of the event loop leaves in one write."""
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
        if transport is not None and not transport.is_closing():
            transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    def close(self) -> None:
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
            transport.close()
            self.loop.call_later(CLOSE_TIMEOUT, transport.abort)

    def protocol_error(self, reason_code: int) -> None:
        """The client broke the protocol: 5.0 gets DISCONNECT with the reason code, then the socket closes."""
        if self.level == 5 and self.session is not None:
            self.write_packet(Disconnect(reason_code))
        self.close()

    def _on_timer(self) -> None:
        self._timer = None
        if self.closing:
            return
        if self.session is None:
            self.log.info("no CONNECT in time")
            self.close()
            return
        now = self.loop.time()
        idle = now - self.last_received
        # A client we stopped reading (backpressure) is not silent by its own doing: it counts as active.
        if keepalive_expired(self.keep_alive, idle) and not self._reading_paused:
            self.log.info("keepalive expired", keep_alive=self.keep_alive)
            if self.level == 5:
                self.write_packet(Disconnect(rc.KEEP_ALIVE_TIMEOUT))
            self.close()
            return
        check_after = keepalive_check_after(self.keep_alive, idle)
        if check_after is None:
            return
        if self._reading_paused:
            self.last_received = now
        self._timer = self.loop.call_later(check_after, self._on_timer)

    def _ack_failed(self, error: BaseException) -> None:
        self.log.error("cannot confirm what the client sent (storage failed, or a node it went to left); "
                       "closing without acknowledging", error=str(error))
        self.close()

    # ------------------------------------------------------------------------------------------ backpressure

    def _block(self, result: RouteResult) -> None:
        """Backpressure: stop reading this publisher until the congested subscribers drained."""
        transport = self.transport
        if transport is None or self.closing:
            return
        for session in result.congested:
            self._blocked_on += 1
            session.wait_for_drain(self._unblock)
        for node in result.congested_nodes:
            self._blocked_on += 1
            self.broker.wait_for_node(node, self._unblock)
        self._set_reading()

    def _unblock(self) -> None:
        self._blocked_on -= 1
        if self._blocked_on <= 0:
            self._blocked_on = 0
            self._set_reading()

    def _spend_rate(self, rate: TokenBucket) -> None:
        """`max_message_rate`: a PUBLISH over the client's rate stops the reading of its socket, and of what was
        read already, until the rate allows the next one (the client is slowed down, nothing is dropped)."""
        wait = rate.take(self.loop.time())
        if wait > 0.0 and not self._rate_held:
            self._rate_held = True
            self._set_reading()
            self.loop.call_later(wait, self._release_rate)

    def _release_rate(self) -> None:
        self._rate_held = False
        if self.closing:
            return
        self._set_reading()
        self._process()  # the packets read before the hold

    def _set_reading(self) -> None:
        """Read the socket unless congested subscribers (`_blocked_on`) or the publish rate (`_rate_held`) hold
        it."""
        transport = self.transport
        if transport is None or self.closing:
            return
        paused = self._blocked_on > 0 or self._rate_held
        if paused != self._reading_paused:
            self._reading_paused = paused
            if paused:
                transport.pause_reading()
            else:
                transport.resume_reading()

    # ------------------------------------------------------------------------------------------ resends

    def _arm_retry(self) -> None:
        """Come back when the oldest PUBLISH or PUBREL the client has not acknowledged is due for a resend."""
        deadline = self.machine.retry_deadline()
        if deadline is not None and not self.closing:
            self._retry_timer = self.loop.call_later(max(0.0, deadline - time.time()), self._on_retry)

    def _on_retry(self) -> None:
        self._retry_timer = None
        if self.closing or self.session is None:
            return
        deadline = self.machine.handle_retry(time.time())
        if deadline is not None:
            self._retry_timer = self.loop.call_later(max(0.0, deadline - time.time()), self._on_retry)

    # ------------------------------------------------------------------------------------------ decisions

    def _dispatch(self, packet: Packet) -> None:
        now = time.time()
        machine = self.machine
        if self.traces:
            self._trace(RECEIVED, packet, now)
        if self._rate is not None and type(packet) is Publish:
            self._spend_rate(self._rate)
        if type(packet) is Publish and machine.connected_now:  # the hot path, without a Route (same decisions)
            decided = machine.publish(packet, now)
            if type(decided) is Message:
                qos = packet.qos
                result = self.broker.publish(decided, now)
                if qos or result.congested or result.congested_nodes:
                    for follow in machine.routed(qos, packet.packet_id or 0, result):
                        if type(follow) is Reply and follow.note is None:  # the PUBACK/PUBREC, inline
                            self.acks.after(follow.durable, partial(self._write_reply, follow.packet), follow.remote)
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
            self._block(decision.result)
        elif kind is SubscribeTo:
            assert isinstance(decision, SubscribeTo)
            self._subscribe(decision.packet, decision.refused)
        elif kind is UnsubscribeFrom:
            assert isinstance(decision, UnsubscribeFrom)
            session = self.session
            assert session is not None
            codes = self.broker.unsubscribe(session, decision.packet.topic_filters)
            reply = Unsuback(decision.packet.packet_id, codes)
            self.acks.after(session.persistent, lambda: self.write_packet(reply))
        elif kind is Unanswered:
            assert isinstance(decision, Unanswered)
            self._note(decision.why, decision.warn, None)
        elif kind is Register:
            assert isinstance(decision, Register)
            self._start_registration(decision.accepted)
        elif kind is RefuseConnect:
            assert isinstance(decision, RefuseConnect)
            if decision.failed_login:
                self._refuse_login(decision)
            else:
                self._refuse(decision.reason_code, decision.why)
        elif kind is Close:
            assert isinstance(decision, Close)
            self.normal_close = decision.normal
            self.close()

    def _note(self, why: str, warn: bool, packet: Packet | None) -> None:
        fields = {"qos": 1 if isinstance(packet, Puback) else 2} if packet is not None else {}
        (self.log.warning if warn else self.log.info)(why, **fields)

    def _write_reply(self, packet: Packet) -> None:
        if type(packet) is Puback:
            self.broker.metrics["mqtt_puback_sent"] += 1
        self.machine.reply_sent(packet)
        self.write_packet(packet)

    def _subscribe(self, packet: Subscribe, refused: dict[int, int]) -> None:
        """Add the subscriptions but the `refused` ones (over max_subscriptions_per_client); SUBACK once durable."""
        session = self.session
        assert session is not None
        self.broker.metrics["mqtt_subscribe_received"] += 1
        ids = packet.properties.subscription_identifiers
        subscriptions = packet.subscriptions
        if refused:
            subscriptions = [sub for index, sub in enumerate(subscriptions) if index not in refused]
        codes, added = self.broker.subscribe(session, subscriptions, ids[0] if ids else None)
        if refused:
            codes = suback_codes(len(packet.subscriptions), refused, codes)
        reply = Suback(packet.packet_id, codes)

        def answer() -> None:
            self.write_packet(reply)
            self.broker.deliver_retained(session, added, time.time())

        self.acks.after(session.persistent, answer)

    # ------------------------------------------------------------------------------------------ CONNECT

    def _start_registration(self, accepted: Accepted) -> None:
        self.client_id = accepted.client_id
        self.username = accepted.username
        self.log = self.log.bind(client_id=accepted.client_id)
        self.keep_alive = accepted.keep_alive
        registrar = self.broker.registrar
        if registrar is None:
            self._complete_connect(accepted, None)
            return
        # Registration goes through the client id's leader and may wait for another node: nothing more is
        # read from this client until it is done (the CONNECT timer stops; registration has its own bounds).
        self._registering = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.pause_reading()
        self.loop.create_task(self._register(registrar, accepted))

    async def _register(self, registrar: Registrar, accepted: Accepted) -> None:
        try:
            ticket = await registrar.register(accepted.client_id, accepted.clean_start)
        except RegistrationRefused as exc:
            self._registering = False
            if not self.closing:
                self._refuse(rc.SERVER_UNAVAILABLE, str(exc))
            return
        except Exception:
            self._registering = False
            self.log.exception("registration failed")
            if not self.closing:
                self._refuse(rc.UNSPECIFIED_ERROR, "registration failed")
            return
        try:
            self._complete_connect(accepted, ticket)
        except Exception:
            self.log.exception("internal error completing a connect")
            registrar.connected(ticket, None)
            self.protocol_error(rc.UNSPECIFIED_ERROR)
            return
        finally:
            self._registering = False
        if self.closing:
            return
        if self.transport is not None:
            self.transport.resume_reading()
        self._process()  # what the client sent while it was registering

    def _complete_connect(self, accepted: Accepted, ticket: Ticket | None) -> None:
        now = time.time()
        session, present = self.broker.open_session(accepted.client_id, accepted.level, accepted.clean_start,
                                                    accepted.expiry, self, now,
                                                    None if ticket is None else ticket.image, accepted.username)
        if ticket is not None and self.broker.registrar is not None:
            self.broker.registrar.connected(ticket, self.broker.node)
        if self.closing:  # the client went away while it was registering: its session stays, offline
            self.broker.attach(session, self, 65535, 0, now)
            self.broker.close_session(session, self, now, self.will, self.will_delay)
            return
        self.session = session
        self.machine.connected(session)
        self._retries = self.machine.resends
        self.write_packet(Connack(present, rc.SUCCESS, accepted.connack))
        metrics = self.broker.metrics
        metrics["mqtt_connack_success_sent"] += 1
        observe_connect_latency(metrics, self.loop.time() - self._connect_at)
        self._announced = True
        self.log.info("client connected", user=accepted.username, protocol=accepted.level,
                      clean_start=accepted.clean_start, session_present=present, node=self.broker.node)
        self.log.debug("connection granted", keep_alive=accepted.keep_alive, send_window=accepted.send_window,
                       max_packet_out=accepted.max_packet_out)
        self._aliases_out = self.machine.state.aliases_out
        max_packet = accepted.max_packet_out
        if max_packet and self._aliases_out is not None:
            # The first PUBLISH of a topic to this client carries the topic and its alias (the session measures
            # packets without it): keep room for the property and a longer property length.
            max_packet = max(1, max_packet - ALIAS_PROPERTY_BYTES)
        self.broker.attach(session, self, accepted.send_window, max_packet, now)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        first_check = keepalive_check_after(self.keep_alive, 0.0)
        if first_check is not None:
            self.last_received = self.loop.time()
            self._timer = self.loop.call_later(first_check, self._on_timer)

    def _refuse_login(self, decision: RefuseConnect) -> None:
        """Refused credentials: counted for the peer's address, and the CONNACK leaves after `decision.delay`
        seconds, reading nothing meanwhile (the event loop and the other clients go on)."""
        host = self.peer[0] if self.peer is not None else "?"
        failures = self.broker.access.login_failed(host)
        code = decision.reason_code
        refused = "not_authorized" if code == rc.NOT_AUTHORIZED else "bad_credentials"
        self.broker.metrics[f"mqtt_connack_{refused}_sent"] += 1
        self.log.info("refused connect", reason=decision.why, reason_code=hex(code), failed_logins=failures,
                      hint=decision.hint)
        self._refusing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.pause_reading()
        self.loop.call_later(decision.delay, self._send_refusal, code, decision.why)

    def _send_refusal(self, reason_code: int, why: str) -> None:
        if self.closing:
            return
        props = Properties(reason_string=why) if self.level == 5 else Properties()
        self.write_packet(Connack(False, rc.connack_code_for(self.level, reason_code), props))
        self.close()

    def _refuse(self, reason_code: int, why: str) -> None:
        self.broker.metrics[f"mqtt_connack_{connack_label(reason_code)}_sent"] += 1
        self.log.info("refused connect", reason=why, reason_code=hex(reason_code), user=self.machine.state.username,
                      client_id=self.client_id or self._asked_client_id, node=self.broker.node)
        # 5.0 clients are told why (a reason string is allowed on CONNACK whatever the client asked for).
        props = Properties(reason_string=why) if self.level == 5 else Properties()
        self.write_packet(Connack(False, rc.connack_code_for(self.level, reason_code), props))
        self.close()
