"""Test clients for the end-to-end suite: a raw-socket MQTT client with its own (independent) codec,
a thin synchronous wrapper around paho-mqtt 2.x, and helpers for the mosquitto_pub/mosquitto_sub CLIs.

The raw codec is deliberately hand-written (not vmqpy.mqtt.codec) so that the tests do not share bugs with
the broker and can produce arbitrary, including malformed, byte sequences.
"""

from __future__ import annotations

import itertools
import queue
import socket
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.subscribeoptions import SubscribeOptions

HOST = "127.0.0.1"

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH = 8, 9, 10, 11, 12, 13, 14, 15
TYPE_NAMES = {
    1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 4: "PUBACK", 5: "PUBREC", 6: "PUBREL", 7: "PUBCOMP",
    8: "SUBSCRIBE", 9: "SUBACK", 10: "UNSUBSCRIBE", 11: "UNSUBACK", 12: "PINGREQ", 13: "PINGRESP",
    14: "DISCONNECT", 15: "AUTH",
}

_uid = itertools.count(1)


def unique(prefix: str = "t") -> str:
    """A topic / client-id fragment unique within this test process."""
    return f"{prefix}{next(_uid)}x{int(time.monotonic() * 1000) % 100000}"


# --------------------------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------------------------

def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n % 128
        n //= 128
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def utf8(s: str | bytes) -> bytes:
    b = s.encode("utf-8") if isinstance(s, str) else s
    return len(b).to_bytes(2, "big") + b


def binary(b: bytes) -> bytes:
    return len(b).to_bytes(2, "big") + b


# name -> (identifier, kind)
PROPS: dict[str, tuple[int, str]] = {
    "payload_format_indicator": (0x01, "byte"),
    "message_expiry_interval": (0x02, "u32"),
    "content_type": (0x03, "str"),
    "response_topic": (0x08, "str"),
    "correlation_data": (0x09, "bin"),
    "subscription_identifier": (0x0B, "varint"),
    "session_expiry_interval": (0x11, "u32"),
    "assigned_client_identifier": (0x12, "str"),
    "server_keep_alive": (0x13, "u16"),
    "authentication_method": (0x15, "str"),
    "authentication_data": (0x16, "bin"),
    "request_problem_information": (0x17, "byte"),
    "will_delay_interval": (0x18, "u32"),
    "request_response_information": (0x19, "byte"),
    "response_information": (0x1A, "str"),
    "server_reference": (0x1C, "str"),
    "reason_string": (0x1F, "str"),
    "receive_maximum": (0x21, "u16"),
    "topic_alias_maximum": (0x22, "u16"),
    "topic_alias": (0x23, "u16"),
    "maximum_qos": (0x24, "byte"),
    "retain_available": (0x25, "byte"),
    "user_property": (0x26, "pair"),
    "maximum_packet_size": (0x27, "u32"),
    "wildcard_subscription_available": (0x28, "byte"),
    "subscription_identifier_available": (0x29, "byte"),
    "shared_subscription_available": (0x2A, "byte"),
}
PROP_BY_ID = {ident: (name, kind) for name, (ident, kind) in PROPS.items()}
REPEATABLE = {"user_property", "subscription_identifier"}


def encode_props(props: dict[str, Any] | None) -> bytes:
    body = bytearray()
    for name, value in (props or {}).items():
        ident, kind = PROPS[name]
        values = value if name in REPEATABLE and isinstance(value, list) else [value]
        for v in values:
            body += varint(ident)
            if kind == "byte":
                body.append(v)
            elif kind == "u16":
                body += v.to_bytes(2, "big")
            elif kind == "u32":
                body += v.to_bytes(4, "big")
            elif kind == "varint":
                body += varint(v)
            elif kind == "str":
                body += utf8(v)
            elif kind == "bin":
                body += binary(v)
            elif kind == "pair":
                body += utf8(v[0]) + utf8(v[1])
    return varint(len(body)) + bytes(body)


def frame(ptype: int, flags: int, body: bytes) -> bytes:
    return bytes([(ptype << 4) | flags]) + varint(len(body)) + body


def enc_connect(client_id: str, version: int = 4, clean: bool = True, keepalive: int = 60,
                will: dict[str, Any] | None = None, username: str | None = None,
                password: bytes | None = None, props: dict[str, Any] | None = None,
                protocol_name: str | None = None) -> bytes:
    name = protocol_name or ("MQIsdp" if version == 3 else "MQTT")
    flags = 0x02 if clean else 0
    if will is not None:
        flags |= 0x04 | (will.get("qos", 0) << 3) | (0x20 if will.get("retain") else 0)
    if username is not None:
        flags |= 0x80
    if password is not None:
        flags |= 0x40
    body = bytearray(utf8(name) + bytes([version, flags]) + keepalive.to_bytes(2, "big"))
    if version == 5:
        body += encode_props(props)
    body += utf8(client_id)
    if will is not None:
        if version == 5:
            body += encode_props(will.get("props"))
        payload = will.get("payload", b"")
        body += utf8(will["topic"]) + binary(payload.encode() if isinstance(payload, str) else payload)
    if username is not None:
        body += utf8(username)
    if password is not None:
        body += binary(password)
    return frame(CONNECT, 0, bytes(body))


def enc_publish(topic: str | bytes, payload: bytes | str = b"", qos: int = 0, retain: bool = False,
                dup: bool = False, packet_id: int | None = None, props: dict[str, Any] | None = None,
                version: int = 4) -> bytes:
    if isinstance(payload, str):
        payload = payload.encode()
    flags = (0x08 if dup else 0) | (qos << 1) | (0x01 if retain else 0)
    body = bytearray(utf8(topic))
    if qos > 0:
        assert packet_id is not None, "QoS>0 PUBLISH needs a packet id"
        body += packet_id.to_bytes(2, "big")
    if version == 5:
        body += encode_props(props)
    body += payload
    return frame(PUBLISH, flags, bytes(body))


def enc_ack(ptype: int, packet_id: int, version: int = 4, reason: int | None = None,
            props: dict[str, Any] | None = None) -> bytes:
    flags = 0x02 if ptype == PUBREL else 0
    body = bytearray(packet_id.to_bytes(2, "big"))
    if version == 5 and (reason is not None or props):
        body.append(reason or 0)
        if props:
            body += encode_props(props)
    return frame(ptype, flags, bytes(body))


def sub_options(qos: int = 0, no_local: bool = False, rap: bool = False, rh: int = 0) -> int:
    return qos | (0x04 if no_local else 0) | (0x08 if rap else 0) | (rh << 4)


def enc_subscribe(packet_id: int, filters: list[tuple[str, int]], version: int = 4,
                  props: dict[str, Any] | None = None) -> bytes:
    """filters: (topic_filter, options byte); for 3.1.1 the options byte is just the QoS."""
    body = bytearray(packet_id.to_bytes(2, "big"))
    if version == 5:
        body += encode_props(props)
    for f, opts in filters:
        body += utf8(f) + bytes([opts])
    return frame(SUBSCRIBE, 0x02, bytes(body))


def enc_unsubscribe(packet_id: int, filters: list[str], version: int = 4) -> bytes:
    body = bytearray(packet_id.to_bytes(2, "big"))
    if version == 5:
        body += encode_props(None)
    for f in filters:
        body += utf8(f)
    return frame(UNSUBSCRIBE, 0x02, bytes(body))


def enc_pingreq() -> bytes:
    return b"\xc0\x00"


def enc_disconnect(version: int = 4, reason: int | None = None, props: dict[str, Any] | None = None) -> bytes:
    if version == 5 and (reason is not None or props):
        return frame(DISCONNECT, 0, bytes([reason or 0]) + encode_props(props))
    return frame(DISCONNECT, 0, b"")


# --------------------------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------------------------

class MalformedFromBroker(AssertionError):
    pass


@dataclass
class Packet:
    type: int
    flags: int
    raw: bytes
    session_present: bool = False
    reason_code: int | None = None
    reason_codes: list[int] = field(default_factory=list)
    topic: str = ""
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    props: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return TYPE_NAMES.get(self.type, f"TYPE{self.type}")

    def __repr__(self) -> str:
        parts = [self.name]
        if self.type == PUBLISH:
            parts.append(f"topic={self.topic!r} payload={self.payload[:40]!r} qos={self.qos} "
                         f"retain={int(self.retain)} dup={int(self.dup)} pid={self.packet_id}")
        elif self.packet_id is not None:
            parts.append(f"pid={self.packet_id}")
        if self.type == CONNACK:
            parts.append(f"sp={int(self.session_present)}")
        if self.reason_code is not None:
            parts.append(f"rc=0x{self.reason_code:02x}")
        if self.reason_codes:
            parts.append(f"rcs={self.reason_codes}")
        if self.props:
            parts.append(f"props={self.props}")
        return "<" + " ".join(parts) + ">"


def decode_props(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
    length, pos = _read_varint(buf, pos)
    end = pos + length
    props: dict[str, Any] = {}
    while pos < end:
        ident, pos = _read_varint(buf, pos)
        if ident not in PROP_BY_ID:
            raise MalformedFromBroker(f"unknown property id 0x{ident:02x}")
        name, kind = PROP_BY_ID[ident]
        if kind == "byte":
            v: Any = buf[pos]
            pos += 1
        elif kind == "u16":
            v = int.from_bytes(buf[pos:pos + 2], "big")
            pos += 2
        elif kind == "u32":
            v = int.from_bytes(buf[pos:pos + 4], "big")
            pos += 4
        elif kind == "varint":
            v, pos = _read_varint(buf, pos)
        elif kind == "str":
            v, pos = _read_str(buf, pos)
        elif kind == "bin":
            n = int.from_bytes(buf[pos:pos + 2], "big")
            v = bytes(buf[pos + 2:pos + 2 + n])
            pos += 2 + n
        else:
            k, pos = _read_str(buf, pos)
            val, pos = _read_str(buf, pos)
            v = (k, val)
        if name in REPEATABLE:
            props.setdefault(name, []).append(v)
        else:
            props[name] = v
    if pos != end:
        raise MalformedFromBroker("property length mismatch")
    return props, end


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    mult, value = 1, 0
    for _ in range(4):
        b = buf[pos]
        pos += 1
        value += (b & 0x7F) * mult
        if not b & 0x80:
            return value, pos
        mult *= 128
    raise MalformedFromBroker("variable byte integer longer than 4 bytes")


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    n = int.from_bytes(buf[pos:pos + 2], "big")
    return bytes(buf[pos + 2:pos + 2 + n]).decode("utf-8"), pos + 2 + n


def parse_packet(first: int, body: bytes, version: int) -> Packet:
    ptype, flags = first >> 4, first & 0x0F
    p = Packet(type=ptype, flags=flags, raw=bytes([first]) + varint(len(body)) + body)
    if ptype == CONNACK:
        p.session_present = bool(body[0] & 1)
        p.reason_code = body[1]
        if version == 5 and len(body) > 2:
            p.props, _ = decode_props(body, 2)
    elif ptype == PUBLISH:
        p.dup, p.qos, p.retain = bool(flags & 8), (flags >> 1) & 3, bool(flags & 1)
        p.topic, pos = _read_str(body, 0)
        if p.qos:
            p.packet_id = int.from_bytes(body[pos:pos + 2], "big")
            pos += 2
        if version == 5:
            p.props, pos = decode_props(body, pos)
        p.payload = bytes(body[pos:])
    elif ptype in (PUBACK, PUBREC, PUBREL, PUBCOMP):
        p.packet_id = int.from_bytes(body[0:2], "big")
        p.reason_code = body[2] if len(body) > 2 else 0
        if version == 5 and len(body) > 3:
            p.props, _ = decode_props(body, 3)
    elif ptype in (SUBACK, UNSUBACK):
        p.packet_id = int.from_bytes(body[0:2], "big")
        pos = 2
        if version == 5:
            p.props, pos = decode_props(body, pos)
        p.reason_codes = list(body[pos:])
    elif ptype in (DISCONNECT, AUTH):
        p.reason_code = body[0] if body else 0
        if version == 5 and len(body) > 1:
            p.props, _ = decode_props(body, 1)
    return p


# --------------------------------------------------------------------------------------------------------------
# Raw client
# --------------------------------------------------------------------------------------------------------------

class Closed(Exception):
    """The broker closed the connection."""


class RawClient:
    """A blocking socket client: send arbitrary bytes, read whole packets with deadlines."""

    def __init__(self, port: int, host: str = HOST, version: int = 4, connect_timeout: float = 5.0,
                 receive_buffer: int | None = None):
        self.version = version
        if receive_buffer is None:
            self.sock = socket.create_connection((host, port), timeout=connect_timeout)
        else:  # set before the connect, so that the window the kernel announces is small from the start
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            self.sock.settimeout(connect_timeout)
            self.sock.connect((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.stash: deque[Packet] = deque()
        self.closed_by_peer = False
        self._pid = itertools.count(1)

    # -- plumbing ---------------------------------------------------------------------------------------------
    def next_id(self) -> int:
        return next(self._pid) % 65535 + 1

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _frame_in_buffer(self) -> Packet | None:
        if len(self.buf) < 2:
            return None
        mult, length, pos = 1, 0, 1
        while True:
            if pos >= len(self.buf):
                return None
            if pos > 4:
                raise MalformedFromBroker("broker sent a remaining length longer than 4 bytes")
            b = self.buf[pos]
            length += (b & 0x7F) * mult
            mult *= 128
            pos += 1
            if not b & 0x80:
                break
        if len(self.buf) < pos + length:
            return None
        first = self.buf[0]
        body = bytes(self.buf[pos:pos + length])
        del self.buf[:pos + length]
        return parse_packet(first, body, self.version)

    def _read_packet(self, timeout: float) -> Packet:
        deadline = time.monotonic() + timeout
        while True:
            pkt = self._frame_in_buffer()
            if pkt is not None:
                return pkt
            if self.closed_by_peer:
                raise Closed()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no packet within {timeout}s")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                raise TimeoutError(f"no packet within {timeout}s") from None
            except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
                data = b""
            if not data:
                self.closed_by_peer = True
                if self.buf:
                    continue
                raise Closed()
            self.buf += data

    def recv(self, timeout: float = 5.0) -> Packet:
        if self.stash:
            return self.stash.popleft()
        return self._read_packet(timeout)

    def expect(self, ptype: int, timeout: float = 5.0) -> Packet:
        """The next packet of type ptype; other packets that arrive meanwhile are kept for recv()."""
        for i, p in enumerate(self.stash):
            if p.type == ptype:
                del self.stash[i]
                return p
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {TYPE_NAMES[ptype]} within {timeout}s (stashed: {list(self.stash)})")
            try:
                p = self._read_packet(remaining)
            except TimeoutError:
                raise TimeoutError(
                    f"no {TYPE_NAMES[ptype]} within {timeout}s (stashed: {list(self.stash)})") from None
            if p.type == ptype:
                return p
            self.stash.append(p)

    def wait_closed(self, timeout: float = 5.0) -> list[Packet]:
        """Read until the broker closes the connection; return the packets received before the close.
        AssertionError if the connection is still open at the deadline."""
        got = list(self.stash)
        self.stash.clear()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"connection not closed by the broker within {timeout}s; got {got}")
            try:
                got.append(self._read_packet(remaining))
            except Closed:
                return got
            except TimeoutError:
                raise AssertionError(
                    f"connection not closed by the broker within {timeout}s; got {got}") from None

    def assert_silent(self, duration: float) -> None:
        """Nothing arrives for `duration` seconds (a bounded check for absence)."""
        if self.stash:
            raise AssertionError(f"unexpected packets: {list(self.stash)}")
        try:
            p = self._read_packet(duration)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected packet {p!r}")

    def is_open(self, timeout: float = 0.2) -> bool:
        """PINGREQ/PINGRESP probe."""
        try:
            self.send(enc_pingreq())
            self.expect(PINGRESP, timeout)
            return True
        except (Closed, OSError):
            return False

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- protocol helpers -------------------------------------------------------------------------------------
    def connect(self, client_id: str, clean: bool = True, keepalive: int = 60, will: dict[str, Any] | None = None,
                props: dict[str, Any] | None = None, expect_rc: int | None = 0, timeout: float = 5.0,
                **kw: Any) -> Packet:
        self.send(enc_connect(client_id, self.version, clean, keepalive, will, props=props, **kw))
        ack = self.expect(CONNACK, timeout)
        if expect_rc is not None:
            assert ack.reason_code == expect_rc, f"CONNACK {ack!r}, expected rc {expect_rc}"
        return ack

    def subscribe(self, *filters: str | tuple[str, int], qos: int = 0, props: dict[str, Any] | None = None,
                  timeout: float = 5.0, check: bool = True) -> Packet:
        fl = [(f, qos) if isinstance(f, str) else f for f in filters]
        pid = self.next_id()
        self.send(enc_subscribe(pid, fl, self.version, props))
        ack = self.expect(SUBACK, timeout)
        assert ack.packet_id == pid, f"SUBACK for {ack.packet_id}, expected {pid}"
        if check:
            for (_, opts), rc in zip(fl, ack.reason_codes, strict=True):
                assert rc == opts & 3, f"SUBACK {ack!r} for {fl}"
        return ack

    def publish(self, topic: str | bytes, payload: bytes | str = b"", qos: int = 0, retain: bool = False,
                props: dict[str, Any] | None = None, timeout: float = 5.0,
                packet_id: int | None = None) -> Packet | None:
        """Publish; for QoS 1 wait for the PUBACK, for QoS 2 complete the PUBREC/PUBREL/PUBCOMP flow."""
        pid = (packet_id or self.next_id()) if qos else None
        self.send(enc_publish(topic, payload, qos, retain, packet_id=pid, props=props, version=self.version))
        if qos == 1:
            ack = self.expect(PUBACK, timeout)
            assert ack.packet_id == pid, f"{ack!r} for packet id {pid}"
            return ack
        if qos == 2:
            rec = self.expect(PUBREC, timeout)
            assert rec.packet_id == pid, f"{rec!r} for packet id {pid}"
            self.send(enc_ack(PUBREL, pid, self.version))
            comp = self.expect(PUBCOMP, timeout)
            assert comp.packet_id == pid, f"{comp!r} for packet id {pid}"
            return comp
        return None

    def ack(self, p: Packet) -> None:
        """Acknowledge an incoming PUBLISH (PUBACK for QoS 1, PUBREC for QoS 2) or PUBREL (PUBCOMP)."""
        if p.type == PUBLISH and p.qos == 1:
            self.send(enc_ack(PUBACK, p.packet_id or 0, self.version))
        elif p.type == PUBLISH and p.qos == 2:
            self.send(enc_ack(PUBREC, p.packet_id or 0, self.version))
        elif p.type == PUBREL:
            self.send(enc_ack(PUBCOMP, p.packet_id or 0, self.version))

    def recv_publishes(self, n: int, timeout: float = 5.0, ack: bool = True) -> list[Packet]:
        """n PUBLISH packets (acknowledged unless ack=False; QoS 2 flows completed when ack=True)."""
        out: list[Packet] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"received {len(out)} of {n} PUBLISH within {timeout}s: {out}")
            try:
                p = self.recv(remaining)
            except TimeoutError:
                raise AssertionError(f"received {len(out)} of {n} PUBLISH within {timeout}s: {out}") from None
            if p.type == PUBLISH:
                out.append(p)
                if ack:
                    self.ack(p)
            elif p.type == PUBREL:
                if ack:
                    self.ack(p)
            else:
                raise AssertionError(f"unexpected {p!r} while waiting for PUBLISH")
        return out

    def disconnect(self, reason: int | None = None, props: dict[str, Any] | None = None) -> None:
        try:
            self.send(enc_disconnect(self.version, reason, props))
        except OSError:
            pass
        self.close()


# --------------------------------------------------------------------------------------------------------------
# paho-mqtt wrapper
# --------------------------------------------------------------------------------------------------------------

def paho_props(ptype: int, **kw: Any) -> PahoProperties:
    p = PahoProperties(ptype)
    for k, v in kw.items():
        setattr(p, k, v)
    return p


class PahoClient:
    """paho-mqtt 2.x client driven from the test thread: blocking connect/subscribe/publish with deadlines,
    received messages in a thread-safe queue."""

    def __init__(self, port: int, version: int = 5, client_id: str = "", clean: bool = True,
                 session_expiry: int | None = None, host: str = HOST, max_inflight: int | None = None,
                 receive_maximum: int | None = None, transport: str = "tcp"):
        self.port, self.host, self.version = port, host, version
        self.clean, self.session_expiry, self.receive_maximum = clean, session_expiry, receive_maximum
        kw: dict[str, Any] = {}
        if version != 5:
            kw["clean_session"] = clean
        self.client = paho.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=paho.MQTTv5 if version == 5 else paho.MQTTv311,
                                  transport=transport, **kw)  # type: ignore[arg-type]
        if max_inflight is not None:
            self.client.max_inflight_messages = max_inflight
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.connacks: queue.Queue[tuple[Any, Any, Any]] = queue.Queue()
        self.disconnects: queue.Queue[Any] = queue.Queue()
        self._cond = threading.Condition()
        self._subacks: dict[int, list[Any]] = {}
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.client.on_disconnect = self._on_disconnect
        self._started = False

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        self.connacks.put((flags, rc, props))

    def _on_message(self, client: Any, userdata: Any, msg: paho.MQTTMessage) -> None:
        self.messages.put(msg)

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, rcs: Any, props: Any) -> None:
        with self._cond:
            self._subacks[mid] = list(rcs)
            self._cond.notify_all()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        self.disconnects.put(rc)

    def will_set(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False,
                 properties: PahoProperties | None = None) -> None:
        self.client.will_set(topic, payload, qos, retain, properties)

    def connect(self, keepalive: int = 60, timeout: float = 10.0, expect_success: bool = True) -> tuple[Any, Any, Any]:
        if self.version == 5:
            props = PahoProperties(PacketTypes.CONNECT)
            if self.session_expiry is not None:
                props.SessionExpiryInterval = self.session_expiry
            if self.receive_maximum is not None:
                props.ReceiveMaximum = self.receive_maximum
            self.client.connect(self.host, self.port, keepalive, clean_start=self.clean, properties=props)
        else:
            self.client.connect(self.host, self.port, keepalive)
        if not self._started:
            self.client.loop_start()
            self._started = True
        try:
            flags, rc, props = self.connacks.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"paho: no CONNACK within {timeout}s") from None
        if expect_success:
            assert not rc.is_failure, f"paho CONNACK failed: {rc}"
        return flags, rc, props

    def subscribe(self, topic: str, qos: int = 0, timeout: float = 5.0, no_local: bool = False,
                  rap: bool = False, rh: int = 0, sub_id: int | None = None) -> list[Any]:
        if self.version == 5:
            props = None
            if sub_id is not None:
                props = paho_props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=sub_id)
            opts = SubscribeOptions(qos=qos, noLocal=no_local, retainAsPublished=rap, retainHandling=rh)
            res, mid = self.client.subscribe(topic, options=opts, properties=props)
        else:
            res, mid = self.client.subscribe(topic, qos)
        assert res == paho.MQTT_ERR_SUCCESS, f"paho subscribe: {res}"
        deadline = time.monotonic() + timeout
        with self._cond:
            while mid not in self._subacks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"paho: no SUBACK for {topic} within {timeout}s")
                self._cond.wait(remaining)
            rcs = self._subacks.pop(mid)
        for rc in rcs:
            value = rc.value if hasattr(rc, "value") else rc
            assert value == qos, f"SUBACK for {topic}: {rcs} (asked QoS {qos})"
        return rcs

    def publish(self, topic: str, payload: bytes | str = b"", qos: int = 0, retain: bool = False,
                props: PahoProperties | None = None, wait: bool = True, timeout: float = 5.0) -> paho.MQTTMessageInfo:
        info = self.client.publish(topic, payload, qos, retain, props)
        if wait:
            info.wait_for_publish(timeout)
            assert info.is_published(), f"paho: publish to {topic} not completed within {timeout}s"
        return info

    def get(self, timeout: float = 5.0) -> paho.MQTTMessage:
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"paho: no message within {timeout}s") from None

    def collect(self, n: int, timeout: float = 5.0) -> list[paho.MQTTMessage]:
        out: list[paho.MQTTMessage] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"paho: {len(out)} of {n} messages within {timeout}s: "
                                     f"{[(m.topic, m.payload) for m in out]}")
            try:
                out.append(self.messages.get(timeout=remaining))
            except queue.Empty:
                continue
        return out

    def until_marker(self, marker: str | Any, timeout: float = 5.0) -> list[paho.MQTTMessage]:
        """Messages received before the marker (consumed): the first message on topic `marker` when it is
        a str, else the first message for which marker(msg) is true."""
        is_marker = (lambda m: m.topic == marker) if isinstance(marker, str) else marker
        out: list[paho.MQTTMessage] = []
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"paho: marker {marker} not received within {timeout}s; "
                                     f"got {[(m.topic, m.payload) for m in out]}")
            try:
                m = self.messages.get(timeout=remaining)
            except queue.Empty:
                continue
            if is_marker(m):
                return out
            out.append(m)

    def assert_no_message(self, within: float) -> None:
        try:
            m = self.messages.get(timeout=within)
        except queue.Empty:
            return
        raise AssertionError(f"paho: unexpected message {m.topic} {m.payload!r}")

    def disconnect(self) -> None:
        if self._started:
            try:
                self.client.disconnect()
            except Exception:
                pass
            self.disconnects_wait(2.0)

    def disconnects_wait(self, timeout: float) -> Any:
        try:
            return self.disconnects.get(timeout=timeout)
        except queue.Empty:
            return None

    def stop(self) -> None:
        """Stop the network thread, then close the socket without a DISCONNECT (the broker sees a lost
        connection). The thread is told to end and woken the way paho wakes it for a queued packet (a byte on
        its socket pair): loop_stop() alone waits out the thread's 1 s select() timeout, ~0.8 s per client."""
        if self._started:
            # what loop_stop() does, on the thread taken first: woken, the thread ends and clears the client's
            # `_thread` itself, which raced loop_stop()'s own check-then-join (an AttributeError on None, seen
            # once in a fresh `make test`)
            thread = self.client._thread
            self.client._thread_terminate = True
            wake = self.client._sockpairW
            if wake is not None:
                try:
                    wake.send(b"0")
                except OSError:
                    pass  # the thread ended already (its socket pair is closed)
            if thread is not None:
                thread.join()
            self._started = False
        try:
            self.client.socket() and self.client.socket().close()
        except Exception:
            pass


def prop(msg: paho.MQTTMessage, name: str, default: Any = None) -> Any:
    props = getattr(msg, "properties", None)
    return getattr(props, name, default) if props is not None else default


# --------------------------------------------------------------------------------------------------------------
# mosquitto_pub / mosquitto_sub
# --------------------------------------------------------------------------------------------------------------

#: How long after its -W seconds a mosquitto_sub that has not exited is taken as hung and killed. Its -W timer is
#: SIGALRM, and the handler disconnects from inside the signal handler: when the alarm comes while the client
#: holds its log mutex (every -d line, every message) the handler waits for that mutex forever (eclipse-mosquitto
#: issue 3175, in 2.0.11 here). What it printed until then is all it would have printed.
CLI_SUB_HUNG_AFTER_S = 2.0


class CliSub:
    """mosquitto_sub in the background, started with -d so that readiness (SUBACK) can be observed."""

    def __init__(self, port: int, topic: str, version: int, extra: list[str] | None = None, count: int = 1,
                 wait: int = 10):
        v = "mqttv5" if version == 5 else "mqttv311"
        # stdbuf: line-buffered stdout, so that the -d debug lines (SUBACK) can be watched as they come
        self.cmd = ["stdbuf", "-oL", "mosquitto_sub", "-h", HOST, "-p", str(port), "-V", v, "-t", topic,
                    "-C", str(count),
                    "-W", str(wait), "-d", *(extra or [])]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.hung_at = time.monotonic() + wait + CLI_SUB_HUNG_AFTER_S  # -W has fired by then, unless it hung
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_subscribed(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not any("received SUBACK" in ln for ln in self.lines):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"mosquitto_sub not subscribed: {self.lines}")
                self._cond.wait(min(remaining, 0.2))

    def finish(self, timeout: float = 12.0) -> tuple[int, list[str]]:
        """Wait for the exit (at -C messages or at -W seconds): its exit code and every line printed. Past -W, a
        process still running is killed (its -W handler hung, see CLI_SUB_HUNG_AFTER_S): exit code -9."""
        deadline = time.monotonic() + timeout
        try:
            rc = self.proc.wait(max(0.0, min(deadline, self.hung_at) - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(5)
            if time.monotonic() < self.hung_at:
                raise AssertionError(f"mosquitto_sub did not exit within {timeout}s: {self.lines}") from None
        self._reader.join(5)
        return rc, list(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def cli_pub(port: int, topic: str, message: str, version: int, extra: list[str] | None = None,
            timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    v = "mqttv5" if version == 5 else "mqttv311"
    cmd = ["mosquitto_pub", "-h", HOST, "-p", str(port), "-V", v, "-t", topic, "-m", message, *(extra or [])]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{cmd} -> {res.returncode}: {res.stdout} {res.stderr}"
    return res


class RoundTrips:
    """A well-behaved client doing PINGREQ and QoS 1 PUBLISH (to its own subscription) round trips on the node at
    `port`, one after the other, in a thread: the end time of each (`between` counts them in a window)."""

    def __init__(self, port: int) -> None:
        self.client = RawClient(port, version=5)
        self.client.connect("well-behaved")
        self.client.subscribe(("rt/echo", 1))
        self.done: list[float] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            for n in range(1_000_000):
                if self._stop.is_set():
                    return
                if n % 2:
                    self.client.send(enc_pingreq())
                    self.client.expect(PINGRESP, 120)
                else:
                    self.client.publish("rt/echo", b"x", qos=1, timeout=120)  # waits for its PUBACK
                    message = self.client.expect(PUBLISH, 120)
                    self.client.ack(message)
                self.done.append(time.monotonic())
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def __enter__(self) -> RoundTrips:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(130)
        self.client.close()
        assert not self._thread.is_alive(), "the well-behaved client's round trip never ended"
        assert self.error is None, f"the well-behaved client failed: {self.error!r}"

    def between(self, start: float, end: float) -> int:
        return sum(1 for t in list(self.done) if start < t < end)
