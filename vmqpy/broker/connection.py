"""The connection driver: moves bytes between one TCP socket and the broker, arms the keepalive timer.

All protocol decisions are in the codec (vmqpy.mqtt), the session and the broker; this file only decodes,
dispatches and writes. Acknowledgements that depend on a disk write (a QoS 1/2 message queued for a persistent
session, a retained message, a persistent subscription) wait for the storage barrier and leave in order.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import structlog

from vmqpy.broker.auth import Authenticator
from vmqpy.broker.broker import Broker, Registrar
from vmqpy.broker.handover import RegistrationRefused, Ticket
from vmqpy.broker.message import Message
from vmqpy.broker.remote_ack import RemoteAck
from vmqpy.broker.router import RouteResult
from vmqpy.broker.session import Session
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.errors import ProtocolViolation, RemoteProtocolError, UnsupportedProtocolVersion
from vmqpy.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
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
from vmqpy.storage import Storage

log = structlog.get_logger("vmqpy.connection")

TOPIC_ALIAS_MAXIMUM = 64
CONNECT_TIMEOUT = 10.0
CLOSE_TIMEOUT = 5.0
WRITE_HIGH_WATER = 256 * 1024
SESSION_EXPIRY_NEVER = 0xFFFFFFFF


def assigned_client_id() -> str:
    """A client id for a CONNECT with an empty one: 64 random bits, unique across the cluster (every node assigns
    ids, and a client id names one session cluster-wide), 22 characters (within the 23 every server must accept)."""
    return f"vmqpy-{secrets.token_hex(8)}"


@dataclass(slots=True)
class _PendingConnect:
    """What a CONNECT asked for, kept while it registers."""

    client_id: str
    level: int
    clean_start: bool
    expiry: float | None
    assigned: str | None
    server_keep_alive: int | None
    receive_maximum: int | None
    maximum_packet_size: int | None


class MQTTConnection(asyncio.Protocol):
    """One client connection: the Sink of its session while it owns it."""

    def __init__(
        self, broker: Broker, config: Config, storage: Storage | None, auth: Authenticator, listener: str
    ) -> None:
        self.broker = broker
        self.auth = auth
        self.config = config
        self.storage = storage
        self.loop = asyncio.get_running_loop()
        self.listener = listener
        self.decoder = Decoder(server=True, max_packet_size=config.max_message_size or 268_435_460)
        self.transport: asyncio.Transport | None = None
        self.level = 4
        self.session: Session | None = None
        self.client_id = ""
        self.log: Any = log
        self.will: Message | None = None
        self.will_delay = 0.0
        self.keep_alive = 0
        self.last_received = 0.0
        self.normal_close = False
        self.closing = False
        self._writable = True
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._reading_paused = False
        self._blocked_on = 0
        self._timer: asyncio.TimerHandle | None = None
        self._aliases: dict[int, str] = {}
        # acknowledgements to write in order: (storage barrier, acknowledgement by other nodes, write)
        self._acks: deque[tuple[Future[None] | None, RemoteAck | None, Callable[[], None]]] = deque()
        self._connect_expiry = 0.0
        self._receive_maximum = 65535
        self._unacked_qos1 = 0
        self._registering = False

    # ------------------------------------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)  # type: ignore[union-attr]
        peer = transport.get_extra_info("peername")
        self.log = log.bind(peer=f"{peer[0]}:{peer[1]}" if peer else "?", listener=self.listener)
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
            while not self.closing and not self._registering:
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
        if self._timer is not None:
            self._timer.cancel()
        session = self.session
        self.session = None
        if session is not None:
            now = time.time()
            will = None if self.normal_close else self.will
            self.broker.close_session(session, self, now, will, self.will_delay)
            self.log.debug("disconnected", normal=self.normal_close)

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        if self.session is not None and self.session.sink is self:
            self.session.pump(time.time())

    # ------------------------------------------------------------------------------------------ Sink

    def write_packet(self, packet: Packet) -> None:
        self._write_bytes(encode(packet, self.level))

    def write_publish(
        self, message: Message, qos: int, retain: bool, packet_id: int | None, subscription_ids: list[int],
        now: float, dup: bool = False,
    ) -> None:
        if qos == 0 and not subscription_ids and message.expires_at is None:
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
        publish = message.to_publish(qos, retain, packet_id, now, subscription_ids)
        publish.dup = dup
        self._write_bytes(encode(publish, self.level))

    def can_write(self) -> bool:
        return self._writable and not self.closing

    def take_over(self) -> tuple[Message | None, float]:
        self.log.info("session taken over")
        if self.level == 5:
            self.write_packet(Disconnect(rc.SESSION_TAKEN_OVER))
        will, delay = self.will, self.will_delay
        self.will = None
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
        if self.keep_alive == 0:
            return
        limit = self.keep_alive * 1.5
        idle = self.loop.time() - self.last_received
        if idle >= limit and not self._reading_paused:
            self.log.info("keepalive expired", keep_alive=self.keep_alive)
            if self.level == 5:
                self.write_packet(Disconnect(rc.KEEP_ALIVE_TIMEOUT))
            self.close()
            return
        if self._reading_paused:
            self.last_received = self.loop.time()
        self._timer = self.loop.call_later(max(0.05, limit - idle), self._on_timer)

    # ------------------------------------------------------------------------------------------ acknowledgements

    def _after_durable(self, durable: bool, action: Callable[[], None], remote: RemoteAck | None = None) -> None:
        """Run `action` (write an ack) once the disk writes queued so far are committed and, with `remote`,
        the other nodes the publish went to have it; in order."""
        future: Future[None] | None = None
        if durable and self.storage is not None:
            future = self.storage.barrier()
        if future is None and remote is None:
            if self._acks:
                self._acks.append((None, None, action))
            else:
                action()
            return
        self._acks.append((future, remote, action))
        if future is not None:  # completed on the storage thread
            future.add_done_callback(lambda _f: self.loop.call_soon_threadsafe(self._flush_acks))
        if remote is not None:  # completed on this thread, by a frame from another node
            remote.add_done_callback(self._flush_acks)

    def _flush_acks(self) -> None:
        acks = self._acks
        while acks:
            future, remote, action = acks[0]
            if (future is not None and not future.done()) or (remote is not None and not remote.done()):
                return
            acks.popleft()
            error = (future.exception() if future is not None else None) or (remote.error if remote else None)
            if error is not None:
                self.log.error("cannot confirm what the client sent (storage failed, or a node it went to left); "
                               "closing without acknowledging", error=str(error))
                acks.clear()
                self.close()
                return
            if not self.closing:
                action()

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
        if self._blocked_on and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()

    def _unblock(self) -> None:
        self._blocked_on -= 1
        if self._blocked_on <= 0 and self._reading_paused:
            self._blocked_on = 0
            self._reading_paused = False
            if self.transport is not None and not self.closing:
                self.transport.resume_reading()

    # ------------------------------------------------------------------------------------------ dispatch

    def _dispatch(self, packet: Packet) -> None:
        if isinstance(packet, Publish):
            self._on_publish(packet)
            return
        if isinstance(packet, Connect):
            self._on_connect(packet)
            return
        session = self.session
        if session is None:
            raise ProtocolViolation("packet before CONNECT completed")
        now = time.time()
        if isinstance(packet, Puback):
            session.on_puback(packet.packet_id, now)
        elif isinstance(packet, Pubrec):
            answer = session.on_pubrec(packet.packet_id, packet.reason_code, now)
            if answer is not None:
                self.write_packet(answer)
        elif isinstance(packet, Pubcomp):
            session.on_pubcomp(packet.packet_id, now)
        elif isinstance(packet, Pubrel):
            self._on_pubrel(session, packet)
        elif isinstance(packet, Subscribe):
            self._on_subscribe(session, packet, now)
        elif isinstance(packet, Unsubscribe):
            if not self.broker.policy.may("unsubscribe"):
                if self.level == 5:
                    refused = Unsuback(packet.packet_id, [rc.IMPLEMENTATION_SPECIFIC_ERROR] * len(packet.topic_filters))
                    self._after_durable(False, lambda: self.write_packet(refused))
                return  # 3.1.1: no UNSUBACK, the client retries
            codes = self.broker.unsubscribe(session, packet.topic_filters)
            reply = Unsuback(packet.packet_id, codes)
            self._after_durable(session.persistent, lambda: self.write_packet(reply))
        elif isinstance(packet, Pingreq):
            self.write_packet(Pingresp())
        elif isinstance(packet, Disconnect):
            self._on_disconnect(session, packet)
        elif isinstance(packet, Auth):
            raise ProtocolViolation("AUTH without an authentication method")
        else:
            raise ProtocolViolation(f"unexpected packet {type(packet).__name__}")

    def _on_connect(self, packet: Connect) -> None:
        if self.session is not None or self.client_id:
            raise ProtocolViolation("second CONNECT")
        self.level = level = packet.protocol_level
        props = packet.properties
        client_id = packet.client_id
        assigned = None
        if not client_id:
            if level < 5 and not packet.clean_start:
                self._refuse(rc.CLIENT_IDENTIFIER_NOT_VALID, "empty client id with cleansession=0")
                return
            client_id = assigned = assigned_client_id()
        if len(client_id) > self.config.max_client_id_size:
            self._refuse(rc.CLIENT_IDENTIFIER_NOT_VALID, "client id too long")
            return
        if props.authentication_method is not None:
            self._refuse(rc.BAD_AUTHENTICATION_METHOD, "enhanced authentication is not supported")
            return
        refusal = self.auth.check(packet.username, packet.password)
        if refusal is not None:
            self._refuse(refusal, "authentication failed")
            return
        if not self.broker.policy.may("register"):
            self._refuse(rc.SERVER_UNAVAILABLE, self.broker.policy.reason())
            return
        self.client_id = client_id
        self.log = self.log.bind(client_id=client_id)
        expiry: float | None
        if level == 5:
            raw = props.session_expiry_interval or 0
            expiry = None if raw == SESSION_EXPIRY_NEVER else float(raw)
        else:
            expiry = 0.0 if packet.clean_start else self.config.persistent_client_expiration
        self._connect_expiry = -1.0 if expiry is None else expiry
        if packet.will is not None:
            will = packet.will
            self.will = Message.from_publish(
                Publish(will.topic, will.payload, will.qos, will.retain, properties=will.properties),
                client_id,
                time.time(),
            )
            self.will_delay = float(will.properties.will_delay_interval or 0) if level == 5 else 0.0
        keep_alive = packet.keep_alive
        server_keep_alive = None
        limit = self.config.max_keepalive
        if limit and (keep_alive == 0 or keep_alive > limit) and level == 5:
            keep_alive = server_keep_alive = limit
        self.keep_alive = keep_alive
        connect = _PendingConnect(client_id, level, packet.clean_start, expiry, assigned, server_keep_alive,
                                  props.receive_maximum, props.maximum_packet_size)
        registrar = self.broker.registrar
        if registrar is None:
            self._complete_connect(connect, None)
            return
        # Registration goes through the client id's leader and may wait for another node: nothing more is
        # read from this client until it is done (the CONNECT timer stops; registration has its own bounds).
        self._registering = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.pause_reading()
        self.loop.create_task(self._register(registrar, connect))

    async def _register(self, registrar: Registrar, connect: _PendingConnect) -> None:
        try:
            ticket = await registrar.register(connect.client_id, connect.clean_start)
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
            self._complete_connect(connect, ticket)
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

    def _complete_connect(self, connect: _PendingConnect, ticket: Ticket | None) -> None:
        now = time.time()
        level = connect.level
        session, present = self.broker.open_session(connect.client_id, level, connect.clean_start, connect.expiry,
                                                    self, now, None if ticket is None else ticket.image)
        if ticket is not None and self.broker.registrar is not None:
            self.broker.registrar.connected(ticket, self.broker.node)
        if self.closing:  # the client went away while it was registering: its session stays, offline
            self.broker.attach(session, self, 65535, 0, now)
            self.broker.close_session(session, self, now, self.will, self.will_delay)
            return
        self.session = session
        connack_props = Properties()
        if level == 5:
            connack_props.assigned_client_identifier = connect.assigned
            connack_props.topic_alias_maximum = TOPIC_ALIAS_MAXIMUM
            connack_props.receive_maximum = self._receive_maximum = self.config.max_inflight_messages
            connack_props.server_keep_alive = connect.server_keep_alive
            if self.config.max_message_size:
                connack_props.maximum_packet_size = self.config.max_message_size
        self.write_packet(Connack(present, rc.SUCCESS, connack_props))
        window = connect.receive_maximum or 65535 if level == 5 else 65535
        self.broker.attach(session, self, window, connect.maximum_packet_size or 0, now)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.keep_alive:
            self.last_received = self.loop.time()
            self._timer = self.loop.call_later(self.keep_alive * 1.5, self._on_timer)
        self.log.debug("connected", clean_start=connect.clean_start, session_present=present, level=level)

    def _refuse(self, reason_code: int, why: str) -> None:
        self.log.info("refused connect", reason=why, reason_code=hex(reason_code))
        # 5.0 clients are told why (a reason string is allowed on CONNACK whatever the client asked for).
        props = Properties(reason_string=why) if self.level == 5 else Properties()
        self.write_packet(Connack(False, rc.connack_code_for(self.level, reason_code), props))
        self.close()

    def _on_publish(self, packet: Publish) -> None:
        session = self.session
        if session is None:
            raise ProtocolViolation("PUBLISH before CONNECT")
        topic = packet.topic
        alias = packet.properties.topic_alias
        if alias is not None:
            if alias == 0 or alias > TOPIC_ALIAS_MAXIMUM:
                raise RemoteProtocolError(f"topic alias {alias} out of range", rc.TOPIC_ALIAS_INVALID)
            if topic:
                self._aliases[alias] = topic
            else:
                known = self._aliases.get(alias)
                if known is None:
                    raise ProtocolViolation(f"unknown topic alias {alias}")
                topic = known
            packet.topic = topic
        qos = packet.qos
        packet_id = packet.packet_id
        if qos == 2 and packet_id in session.awaiting_release:
            self.write_packet(Pubrec(packet_id))  # a resend: routed already, not again
            return
        if not self.broker.policy.may("publish"):
            self._refuse_publish(qos, packet_id)
            return
        if qos and self._unacked_qos1 + len(session.awaiting_release) >= self._receive_maximum:
            raise RemoteProtocolError("more unacknowledged QoS 1/2 PUBLISHes than Receive Maximum",
                                      rc.RECEIVE_MAXIMUM_EXCEEDED)
        now = time.time()
        result = self.broker.publish(Message.from_publish(packet, self.client_id, now), now)
        if qos and result.refused:
            # A forward to another node could not even be buffered: never acknowledge what may be lost.
            self.log.warning("publish refused: cluster buffer full", topic=packet.topic, qos=qos)
            if self.level == 5:
                refusal: Packet = Puback(packet_id or 0, rc.QUOTA_EXCEEDED) if qos == 1 else \
                    Pubrec(packet_id or 0, rc.QUOTA_EXCEEDED)
                self._after_durable(False, lambda: self.write_packet(refusal))
            return
        if qos == 1:
            ack: Packet = Puback(packet_id or 0)
            self._unacked_qos1 += 1

            def puback() -> None:
                self._unacked_qos1 -= 1
                self.write_packet(ack)

            self._after_durable(result.durable, puback, result.remote_ack)
        elif qos == 2:
            assert packet_id is not None
            session.awaiting_release.add(packet_id)
            session.journal.save_incoming(session, packet_id, True)
            rec = Pubrec(packet_id)
            self._after_durable(result.durable or session.persistent, lambda: self.write_packet(rec), result.remote_ack)
        if result.congested or result.congested_nodes:
            self._block(result)

    def _refuse_publish(self, qos: int, packet_id: int | None) -> None:
        """Netsplit: QoS 0 is dropped (counted); QoS 1/2 is not acknowledged (3.1.1) or answered 0x83 (5.0)."""
        self.log.info("publish refused: the cluster is not ready", qos=qos)
        if qos and self.level == 5:
            refusal: Packet = Puback(packet_id or 0, rc.IMPLEMENTATION_SPECIFIC_ERROR) if qos == 1 else \
                Pubrec(packet_id or 0, rc.IMPLEMENTATION_SPECIFIC_ERROR)
            self._after_durable(False, lambda: self.write_packet(refusal))

    def _on_pubrel(self, session: Session, packet: Pubrel) -> None:
        packet_id = packet.packet_id
        if packet_id in session.awaiting_release:
            session.awaiting_release.discard(packet_id)
            session.journal.save_incoming(session, packet_id, False)
            reply = Pubcomp(packet_id)
        else:
            reply = Pubcomp(packet_id, rc.PACKET_IDENTIFIER_NOT_FOUND if self.level == 5 else 0)
        self._after_durable(False, lambda: self.write_packet(reply))

    def _on_subscribe(self, session: Session, packet: Subscribe, now: float) -> None:
        if not self.broker.policy.may("subscribe"):
            failure = rc.IMPLEMENTATION_SPECIFIC_ERROR if self.level == 5 else rc.V311_SUBACK_FAILURE
            reply = Suback(packet.packet_id, [failure] * len(packet.subscriptions))
            self._after_durable(False, lambda: self.write_packet(reply))
            return
        ids = packet.properties.subscription_identifiers
        codes, added = self.broker.subscribe(session, packet.subscriptions, ids[0] if ids else None)
        reply = Suback(packet.packet_id, codes)

        def answer() -> None:
            self.write_packet(reply)
            self.broker.deliver_retained(session, added, time.time())

        self._after_durable(session.persistent, answer)

    def _on_disconnect(self, session: Session, packet: Disconnect) -> None:
        new_expiry = packet.properties.session_expiry_interval
        if new_expiry is not None:
            if self._connect_expiry == 0 and new_expiry != 0:
                raise ProtocolViolation("session expiry set on DISCONNECT after 0 on CONNECT")
            session.expiry_interval = None if new_expiry == SESSION_EXPIRY_NEVER else float(new_expiry)
        self.normal_close = packet.reason_code != rc.DISCONNECT_WITH_WILL
        self.close()
