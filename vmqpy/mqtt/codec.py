"""Sans-I/O MQTT 3.1 / 3.1.1 / 5.0 codec: bytes in, packets out (`Decoder`), packets in, bytes out (`encode`).

The decoder is incremental: feed it any split of the byte stream with `receive_data` and call `next_packet`
until it returns `NEED_DATA`. It validates strictly and raises a `RemoteProtocolError` subclass carrying the
MQTT 5.0 reason code to answer with; after an error it is dead (it raises the same error again).
`encode` raises `LocalProtocolError` when asked for something the peer would have to reject.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.errors import (
    LocalProtocolError,
    MalformedPacket,
    PacketTooLarge,
    ProtocolViolation,
    RemoteProtocolError,
    UnsupportedProtocolVersion,
)
from vmqpy.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    SubOptions,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)
from vmqpy.mqtt.properties import BY_ID, PROPERTIES, WILL, WIRE_MAX, WireType, is_empty

__all__ = ["MAX_PACKET_SIZE", "MAX_REMAINING_LENGTH", "NEED_DATA", "Decoder", "NeedData", "encode"]

MAX_REMAINING_LENGTH: Final = 268_435_455
MAX_PACKET_SIZE: Final = 268_435_460  # 1 type byte + 4 length bytes + the largest remaining length


class NeedData:
    """Type of `NEED_DATA`: `next_packet` needs more bytes before it can return a packet."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final[NeedData] = NeedData()

_PUBLISH = int(PacketType.PUBLISH)
_NAMES: Final = {int(t): t.name for t in PacketType}
_CLIENT_ONLY: Final = frozenset({PacketType.CONNECT, PacketType.SUBSCRIBE, PacketType.UNSUBSCRIBE,
                                 PacketType.PINGREQ})
_SERVER_ONLY: Final = frozenset({PacketType.CONNACK, PacketType.SUBACK, PacketType.UNSUBACK,
                                 PacketType.PINGRESP})
# Shared SubOptions (frozen) for every valid option byte: index = byte & 0x3F.
_SUBOPTS: Final = tuple(
    SubOptions(qos=o & 3, no_local=bool(o & 4), retain_as_published=bool(o & 8), retain_handling=(o >> 4) & 3)
    for o in range(64)
)
_SUBACK_311: Final = frozenset({0, 1, 2, 0x80})


# --------------------------------------------------------------------------------------------------- reading


def _read_vbi(b: bytes, i: int, end: int) -> tuple[int, int]:
    """A Variable Byte Integer at b[i:end] -> (value, next index)."""
    value = 0
    shift = 0
    while True:
        if i >= end:
            raise MalformedPacket("truncated variable byte integer")
        byte = b[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7
        if shift == 28:
            raise MalformedPacket("variable byte integer longer than 4 bytes")


def _read_u16(b: bytes, i: int, end: int, what: str) -> int:
    if i + 2 > end:
        raise MalformedPacket(f"truncated {what}")
    return (b[i] << 8) | b[i + 1]


def _read_str(b: bytes, i: int, end: int, what: str = "string") -> tuple[str, int]:
    """A UTF-8 Encoded String (2-byte length prefix) -> (str, next index). Ill-formed UTF-8 or U+0000 is
    malformed; Python's strict UTF-8 decoder also rejects surrogates, overlong forms and > U+10FFFF."""
    if i + 2 > end:
        raise MalformedPacket(f"truncated {what} length")
    j = i + 2 + ((b[i] << 8) | b[i + 1])
    if j > end:
        raise MalformedPacket(f"{what} runs past the end of its packet")
    try:
        s = b[i + 2 : j].decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedPacket(f"{what} is not well-formed UTF-8") from e
    if "\x00" in s:
        raise MalformedPacket(f"{what} contains U+0000")
    return s, j


def _read_bin(b: bytes, i: int, end: int, what: str) -> tuple[bytes, int]:
    if i + 2 > end:
        raise MalformedPacket(f"truncated {what} length")
    j = i + 2 + ((b[i] << 8) | b[i + 1])
    if j > end:
        raise MalformedPacket(f"{what} runs past the end of its packet")
    return b[i + 2 : j], j


def _read_properties(b: bytes, i: int, n: int, where: int) -> tuple[Properties, int]:
    """The Property Length and properties at b[i:n] for packet type `where` (or WILL) -> (Properties, end)."""
    plen, i = _read_vbi(b, i, n)
    props = Properties()
    if plen == 0:
        return props, i
    end = i + plen
    if end > n:
        raise MalformedPacket("property length runs past the end of the packet")
    seen = 0
    while i < end:
        pid, i = _read_vbi(b, i, end)
        d = BY_ID.get(pid)
        if d is None:
            raise MalformedPacket(f"unknown property identifier 0x{pid:02X}")
        if where not in d.allowed:
            raise MalformedPacket(f"property {d.name} is not allowed in {_where_name(where)}")
        wt = d.wire_type
        value: int | str | bytes | tuple[str, str]
        if wt is WireType.BYTE:
            if i >= end:
                raise MalformedPacket(f"truncated property {d.name}")
            value = b[i]
            i += 1
        elif wt is WireType.TWO_BYTE_INT:
            value = _read_u16(b, i, end, d.name)
            i += 2
        elif wt is WireType.FOUR_BYTE_INT:
            if i + 4 > end:
                raise MalformedPacket(f"truncated property {d.name}")
            value = int.from_bytes(b[i : i + 4], "big")
            i += 4
        elif wt is WireType.VAR_BYTE_INT:
            value, i = _read_vbi(b, i, end)
        elif wt is WireType.UTF8_STRING:
            value, i = _read_str(b, i, end, d.name)
        elif wt is WireType.BINARY:
            value, i = _read_bin(b, i, end, d.name)
        else:  # UTF8_PAIR
            k, i = _read_str(b, i, end, "user property name")
            v, i = _read_str(b, i, end, "user property value")
            value = (k, v)
        if isinstance(value, int):
            if d.min_value is not None and value < d.min_value:
                raise ProtocolViolation(f"property {d.name} has the invalid value {value}")
            if d.max_value is not None and value > d.max_value:
                raise ProtocolViolation(f"property {d.name} has the invalid value {value}")
        if d.multiple:
            getattr(props, d.name).append(value)
        else:
            bit = 1 << pid
            if seen & bit:
                raise ProtocolViolation(f"property {d.name} appears more than once")
            seen |= bit
            setattr(props, d.name, value)
    return props, end


def _where_name(where: int) -> str:
    return "Will Properties" if where == WILL else _NAMES[where]


# --------------------------------------------------------------------------------------------------- decoder


class Decoder:
    """Incremental decoder of one direction of one connection.

    `server=True` decodes what a client sends (the first packet must be CONNECT, which sets `protocol_level`);
    `server=False` decodes what a server sends and needs `protocol_level`. A server-side decoder created with
    a `protocol_level` behaves as if the CONNECT had already been decoded.
    """

    __slots__ = ("_buf", "_chunks", "_connected", "_error", "_first", "_hlen", "_max", "_pending", "_pos", "_rl",
                 "_server", "protocol_level")

    def __init__(self, *, server: bool = True, protocol_level: int | None = None,
                 max_packet_size: int = MAX_PACKET_SIZE) -> None:
        if protocol_level not in (None, 3, 4, 5):
            raise LocalProtocolError(f"unsupported protocol level {protocol_level!r}")
        if not server and protocol_level is None:
            raise LocalProtocolError("a client-side decoder needs the protocol_level")
        if not 2 <= max_packet_size <= MAX_PACKET_SIZE:
            raise LocalProtocolError(f"max_packet_size must be in 2..{MAX_PACKET_SIZE}")
        self.protocol_level: int | None = protocol_level
        self._server = server
        self._connected = protocol_level is not None
        self._max = max_packet_size
        # Received bytes: `_buf[_pos:]`, then `_chunks` (`_pending` bytes in all). Chunks are joined into
        # `_buf` only when the packet being decoded is complete (or its fixed header needs them), so every byte
        # is copied O(1) times whatever the split, and a PUBLISH is decoded straight from the received bytes.
        self._buf = b""
        self._pos = 0
        self._chunks: list[bytes] = []
        self._pending = 0
        self._first = -1  # first byte of the packet whose fixed header is parsed, or -1
        self._hlen = 0  # its fixed header length
        self._rl = 0  # its remaining length
        self._error: RemoteProtocolError | None = None

    def receive_data(self, data: bytes) -> None:
        """Append bytes from the peer (b"" is a no-op). Data after an error is ignored."""
        if not data or self._error is not None:
            return
        if self._pos >= len(self._buf) and not self._chunks:
            self._buf = bytes(data)  # no copy for bytes
            self._pos = 0
        else:
            self._chunks.append(bytes(data))
            self._pending += len(data)

    def _join(self) -> None:
        with memoryview(self._buf) as rest:
            self._buf = b"".join((rest[self._pos :], *self._chunks))
        self._pos = 0
        self._chunks = []
        self._pending = 0

    def next_packet(self) -> Packet | NeedData:
        """The next complete packet, or NEED_DATA. Raises a RemoteProtocolError subclass on bad input."""
        if self._error is not None:
            raise self._error
        first = self._first
        try:
            if self._chunks:
                avail = len(self._buf) - self._pos
                if first < 0:
                    if avail < 5:  # a fixed header is at most 5 bytes
                        self._join()
                elif avail < self._hlen + self._rl:
                    if avail + self._pending < self._hlen + self._rl:
                        return NEED_DATA
                    self._join()
            buf = self._buf
            pos = self._pos
            size = len(buf)
            if first < 0:
                if pos >= size:
                    return NEED_DATA
                first = buf[pos]
                # Fast path: a PUBLISH with valid flags on an established connection; else the full check.
                if first >> 4 != _PUBLISH or first & 0x06 == 0x06 or first & 0x0E == 0x08 or not self._connected:
                    self._check_first_byte(first)
                if pos + 1 >= size:
                    return NEED_DATA
                rl = buf[pos + 1]
                hlen = 2
                if rl >= 0x80:  # a remaining length of more than one byte
                    rl &= 0x7F
                    shift = 7
                    i = pos + 2
                    while True:
                        if i >= size:
                            return NEED_DATA
                        byte = buf[i]
                        i += 1
                        rl |= (byte & 0x7F) << shift
                        if byte < 0x80:
                            break
                        shift += 7
                        if shift == 28:
                            raise MalformedPacket("remaining length longer than 4 bytes")
                    hlen = i - pos
                if hlen + rl > self._max:
                    raise PacketTooLarge(f"packet of {hlen + rl} bytes exceeds the maximum of {self._max}")
            else:
                hlen = self._hlen
                rl = self._rl
            start = pos + hlen
            end = start + rl
            if size < end:
                self._first = first
                self._hlen = hlen
                self._rl = rl
                if self._chunks and size - pos + self._pending >= hlen + rl:
                    return self.next_packet()  # the header came from `buf` alone; join the chunks now
                return NEED_DATA
            self._first = -1
            if end == size:
                self._buf = b""
                self._pos = 0
            else:
                self._pos = end
            if first >> 4 == _PUBLISH:
                return self._publish(first, buf, start, end)
            return _DISPATCH[first >> 4](self, first & 0x0F, buf[start:end])
        except RemoteProtocolError as e:
            self._error = e
            self._buf = b""
            self._pos = 0
            self._chunks = []
            self._pending = 0
            raise

    def _check_first_byte(self, first: int) -> None:
        ptype = first >> 4
        flags = first & 0x0F
        level = self.protocol_level
        if ptype == _PUBLISH:
            qos = (flags >> 1) & 3
            if qos == 3:
                raise MalformedPacket("PUBLISH with QoS 3")
            if qos == 0 and flags & 0x08:
                raise MalformedPacket("PUBLISH QoS 0 with the DUP flag set")
        elif ptype == 0:
            raise MalformedPacket("reserved packet type 0")
        if self._server:
            if not self._connected:
                if ptype != PacketType.CONNECT:
                    raise ProtocolViolation(f"first packet is {_NAMES[ptype]}, not CONNECT")
            elif ptype == PacketType.CONNECT:
                raise ProtocolViolation("second CONNECT on a connection")
            if ptype in _SERVER_ONLY:
                raise ProtocolViolation(f"a client may not send {_NAMES[ptype]}")
        elif ptype in _CLIENT_ONLY:
            raise ProtocolViolation(f"a server may not send {_NAMES[ptype]}")
        elif ptype == PacketType.DISCONNECT and level != 5:
            raise ProtocolViolation("a 3.1.1 server may not send DISCONNECT")
        if ptype == PacketType.AUTH and level != 5:
            raise MalformedPacket("packet type 15 (AUTH) is reserved before MQTT 5.0")
        if ptype == _PUBLISH:
            return
        if ptype in (PacketType.PUBREL, PacketType.SUBSCRIBE, PacketType.UNSUBSCRIBE):
            if flags != 0b0010:
                raise MalformedPacket(f"{_NAMES[ptype]} fixed header flags must be 0b0010, got {flags:#06b}")
        elif flags:
            raise MalformedPacket(f"{_NAMES[ptype]} fixed header flags must be 0, got {flags:#06b}")

    # -- one method per packet type; `b` is the body (everything after the fixed header)

    def _publish(self, first: int, b: bytes, start: int, end: int) -> Publish:
        """PUBLISH at b[start:end], decoded in place (the hot path)."""
        if end - start < 2:
            raise MalformedPacket("truncated PUBLISH topic")
        i = start + 2 + ((b[start] << 8) | b[start + 1])
        if i > end:
            raise MalformedPacket("PUBLISH topic runs past the end of the packet")
        try:
            topic = b[start + 2 : i].decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedPacket("PUBLISH topic is not well-formed UTF-8") from e
        qos = (first >> 1) & 3
        packet_id: int | None = None
        if qos:
            if i + 2 > end:
                raise MalformedPacket("truncated PUBLISH packet identifier")
            packet_id = (b[i] << 8) | b[i + 1]
            i += 2
            if packet_id == 0:
                raise ProtocolViolation("PUBLISH with packet identifier 0")
        if self.protocol_level == 5:
            if i >= end:
                raise MalformedPacket("PUBLISH without property length")
            if b[i] == 0:
                props = Properties()
                i += 1
            else:
                props, i = _read_properties(b, i, end, _PUBLISH)
                if props.topic_alias == 0:
                    raise RemoteProtocolError("PUBLISH with Topic Alias 0", rc.TOPIC_ALIAS_INVALID)
                if self._server and props.subscription_identifiers:
                    raise ProtocolViolation("a client may not send a Subscription Identifier in PUBLISH")
        else:
            props = Properties()
        if "\x00" in topic:
            raise MalformedPacket("PUBLISH topic contains U+0000")
        if "+" in topic or "#" in topic:
            raise RemoteProtocolError(f"PUBLISH topic {topic!r} contains a wildcard", rc.TOPIC_NAME_INVALID)
        if not topic and props.topic_alias is None:
            raise ProtocolViolation("PUBLISH with an empty topic and no Topic Alias")
        return Publish(topic, b[i:end], qos, bool(first & 1), bool(first & 8), packet_id, props)

    def _connect(self, flags: int, b: bytes) -> Connect:
        n = len(b)
        name, i = _read_str(b, 0, n, "protocol name")
        if i >= n:
            raise MalformedPacket("truncated CONNECT protocol level")
        level = b[i]
        i += 1
        if name == "MQTT":
            if level not in (4, 5):
                raise UnsupportedProtocolVersion(f"protocol MQTT level {level}", level)
        elif name == "MQIsdp":
            if level != 3:
                raise UnsupportedProtocolVersion(f"protocol MQIsdp level {level}", level)
        else:
            raise ProtocolViolation(f"unknown protocol name {name!r}")
        self.protocol_level = level
        if i >= n:
            raise MalformedPacket("truncated CONNECT flags")
        cflags = b[i]
        i += 1
        if cflags & 0x01:
            raise MalformedPacket("CONNECT reserved flag is set")
        will_qos = (cflags >> 3) & 3
        if cflags & 0x04:
            if will_qos == 3:
                raise MalformedPacket("CONNECT Will QoS 3")
        elif will_qos or cflags & 0x20:
            raise MalformedPacket("CONNECT Will QoS or Will Retain set without the Will flag")
        if cflags & 0x40 and not cflags & 0x80 and level < 5:
            raise MalformedPacket("CONNECT password flag without user name flag")
        keep_alive = _read_u16(b, i, n, "keep alive")
        i += 2
        if level == 5:
            props, i = _read_properties(b, i, n, PacketType.CONNECT)
            if props.authentication_data is not None and props.authentication_method is None:
                raise ProtocolViolation("CONNECT Authentication Data without Authentication Method")
        else:
            props = Properties()
        client_id, i = _read_str(b, i, n, "client identifier")
        will = None
        if cflags & 0x04:
            if level == 5:
                wprops, i = _read_properties(b, i, n, WILL)
            else:
                wprops = Properties()
            wtopic, i = _read_str(b, i, n, "will topic")
            wpayload, i = _read_bin(b, i, n, "will payload")
            will = Will(wtopic, wpayload, will_qos, bool(cflags & 0x20), wprops)
        username = None
        password = None
        if cflags & 0x80:
            username, i = _read_str(b, i, n, "user name")
        if cflags & 0x40:
            password, i = _read_bin(b, i, n, "password")
        if i != n:
            raise MalformedPacket(f"{n - i} unexpected bytes at the end of CONNECT")
        self._connected = True
        return Connect(client_id, level, name, bool(cflags & 0x02), keep_alive, will, username, password,
                       props)

    def _connack(self, flags: int, b: bytes) -> Connack:
        n = len(b)
        if n < 2:
            raise MalformedPacket("truncated CONNACK")
        if b[0] & 0xFE:
            raise MalformedPacket("CONNACK reserved acknowledge flags set")
        if self.protocol_level == 5:
            props, i = _read_properties(b, 2, n, PacketType.CONNACK)
        else:
            props, i = Properties(), 2
            if b[1] > 5:
                raise MalformedPacket(f"reserved 3.1.1 CONNACK return code {b[1]}")
            if b[0] and self.protocol_level == 3:
                raise MalformedPacket("MQTT 3.1 CONNACK with a non-zero first byte")
        if i != n:
            raise MalformedPacket("unexpected bytes at the end of CONNACK")
        return Connack(bool(b[0] & 1), b[1], props)

    def _ack(self, ptype: PacketType, b: bytes) -> tuple[int, int, Properties]:
        n = len(b)
        packet_id = _read_u16(b, 0, n, "packet identifier")
        if packet_id == 0:
            raise ProtocolViolation(f"{ptype.name} with packet identifier 0")
        if self.protocol_level != 5:
            if n != 2:
                raise MalformedPacket(f"{ptype.name} must have a remaining length of 2 before MQTT 5.0")
            return packet_id, 0, Properties()
        if n == 2:
            return packet_id, 0, Properties()
        reason = b[2]
        if n == 3:
            return packet_id, reason, Properties()
        props, i = _read_properties(b, 3, n, ptype)
        if i != n:
            raise MalformedPacket(f"unexpected bytes at the end of {ptype.name}")
        return packet_id, reason, props

    def _puback(self, flags: int, b: bytes) -> Puback:
        return Puback(*self._ack(PacketType.PUBACK, b))

    def _pubrec(self, flags: int, b: bytes) -> Pubrec:
        return Pubrec(*self._ack(PacketType.PUBREC, b))

    def _pubrel(self, flags: int, b: bytes) -> Pubrel:
        return Pubrel(*self._ack(PacketType.PUBREL, b))

    def _pubcomp(self, flags: int, b: bytes) -> Pubcomp:
        return Pubcomp(*self._ack(PacketType.PUBCOMP, b))

    def _id_and_props(self, ptype: PacketType, b: bytes) -> tuple[int, Properties, int]:
        n = len(b)
        packet_id = _read_u16(b, 0, n, "packet identifier")
        if packet_id == 0:
            raise ProtocolViolation(f"{ptype.name} with packet identifier 0")
        if self.protocol_level == 5:
            props, i = _read_properties(b, 2, len(b), ptype)
            return packet_id, props, i
        return packet_id, Properties(), 2

    def _subscribe(self, flags: int, b: bytes) -> Subscribe:
        packet_id, props, i = self._id_and_props(PacketType.SUBSCRIBE, b)
        if len(props.subscription_identifiers) > 1:
            raise ProtocolViolation("SUBSCRIBE with more than one Subscription Identifier")
        v5 = self.protocol_level == 5
        n = len(b)
        subs: list[Subscription] = []
        while i < n:
            topic_filter, i = _read_str(b, i, n, "topic filter")
            if i >= n:
                raise MalformedPacket("SUBSCRIBE topic filter without subscription options")
            o = b[i]
            i += 1
            if v5:
                if o & 0xC0:
                    raise MalformedPacket("SUBSCRIBE options reserved bits set")
                if o & 3 == 3:
                    raise ProtocolViolation("SUBSCRIBE with maximum QoS 3")
                if o & 0x30 == 0x30:
                    raise ProtocolViolation("SUBSCRIBE with Retain Handling 3")
                if o & 0x04 and topic_filter.startswith("$share/"):
                    raise ProtocolViolation("No Local set on a shared subscription")
            elif o & 0xFC or o == 3:
                raise MalformedPacket(f"3.1.1 SUBSCRIBE requested QoS byte {o:#04x}")
            subs.append(Subscription(topic_filter, _SUBOPTS[o]))
        if not subs:
            raise ProtocolViolation("SUBSCRIBE without topic filters")
        return Subscribe(packet_id, subs, props)

    def _suback(self, flags: int, b: bytes) -> Suback:
        packet_id, props, i = self._id_and_props(PacketType.SUBACK, b)
        codes = list(b[i:])
        if not codes:
            raise ProtocolViolation("SUBACK without reason codes")
        if self.protocol_level != 5 and not _SUBACK_311.issuperset(codes):
            raise MalformedPacket(f"reserved 3.1.1 SUBACK return codes in {codes}")
        return Suback(packet_id, codes, props)

    def _unsubscribe(self, flags: int, b: bytes) -> Unsubscribe:
        packet_id, props, i = self._id_and_props(PacketType.UNSUBSCRIBE, b)
        n = len(b)
        filters: list[str] = []
        while i < n:
            topic_filter, i = _read_str(b, i, n, "topic filter")
            filters.append(topic_filter)
        if not filters:
            raise ProtocolViolation("UNSUBSCRIBE without topic filters")
        return Unsubscribe(packet_id, filters, props)

    def _unsuback(self, flags: int, b: bytes) -> Unsuback:
        packet_id, props, i = self._id_and_props(PacketType.UNSUBACK, b)
        if self.protocol_level != 5:
            if len(b) != 2:
                raise MalformedPacket("3.1.1 UNSUBACK must have a remaining length of 2")
            return Unsuback(packet_id)
        codes = list(b[i:])
        if not codes:
            raise ProtocolViolation("UNSUBACK without reason codes")
        return Unsuback(packet_id, codes, props)

    def _pingreq(self, flags: int, b: bytes) -> Pingreq:
        if b:
            raise MalformedPacket("PINGREQ with a body")
        return Pingreq()

    def _pingresp(self, flags: int, b: bytes) -> Pingresp:
        if b:
            raise MalformedPacket("PINGRESP with a body")
        return Pingresp()

    def _reason_and_props(self, ptype: PacketType, b: bytes) -> tuple[int, Properties]:
        n = len(b)
        if n == 0:
            return 0, Properties()
        if self.protocol_level != 5:
            raise MalformedPacket(f"{ptype.name} with a body before MQTT 5.0")
        if n == 1:
            return b[0], Properties()
        props, i = _read_properties(b, 1, n, ptype)
        if i != n:
            raise MalformedPacket(f"unexpected bytes at the end of {ptype.name}")
        return b[0], props

    def _disconnect(self, flags: int, b: bytes) -> Disconnect:
        return Disconnect(*self._reason_and_props(PacketType.DISCONNECT, b))

    def _auth(self, flags: int, b: bytes) -> Auth:
        return Auth(*self._reason_and_props(PacketType.AUTH, b))

    def _reserved(self, flags: int, b: bytes) -> Packet:  # pragma: no cover - rejected by _check_first_byte
        raise MalformedPacket("reserved packet type")


_DISPATCH: Final[tuple[Callable[[Decoder, int, bytes], Packet], ...]] = (
    Decoder._reserved,
    Decoder._connect,
    Decoder._connack,
    Decoder._reserved,  # PUBLISH is decoded in place by next_packet
    Decoder._puback,
    Decoder._pubrec,
    Decoder._pubrel,
    Decoder._pubcomp,
    Decoder._subscribe,
    Decoder._suback,
    Decoder._unsubscribe,
    Decoder._unsuback,
    Decoder._pingreq,
    Decoder._pingresp,
    Decoder._disconnect,
    Decoder._auth,
)


# --------------------------------------------------------------------------------------------------- encoding

_VBI_SMALL: Final = tuple(bytes((n,)) for n in range(128))
_U16: Final = tuple((n).to_bytes(2, "big") for n in range(256))  # two-byte lengths of short strings


def _vbi(n: int) -> bytes:
    if n < 128:
        return _VBI_SMALL[n]
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _u16(value: int, what: str) -> bytes:
    if not 0 <= value <= 0xFFFF:
        raise LocalProtocolError(f"{what} {value} does not fit in two bytes")
    return value.to_bytes(2, "big")


def _packet_id(value: int | None, what: str) -> bytes:
    if value is None or not 0 < value <= 0xFFFF:
        raise LocalProtocolError(f"{what} needs a packet identifier in 1..65535, got {value!r}")
    return value.to_bytes(2, "big")


def _byte(value: int, what: str) -> bytes:
    if not 0 <= value <= 0xFF:
        raise LocalProtocolError(f"{what} {value} does not fit in a byte")
    return _BYTES[value]


_BYTES: Final = tuple(bytes((n,)) for n in range(256))


def _enc_str(s: str, what: str) -> bytes:
    try:
        data = s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise LocalProtocolError(f"{what} cannot be encoded as UTF-8") from e
    n = len(data)
    if n > 0xFFFF:
        raise LocalProtocolError(f"{what} is longer than 65535 bytes")
    if "\x00" in s:
        raise LocalProtocolError(f"{what} contains U+0000")
    return (_U16[n] if n < 256 else n.to_bytes(2, "big")) + data


def _enc_bin(data: bytes, what: str) -> bytes:
    n = len(data)
    if n > 0xFFFF:
        raise LocalProtocolError(f"{what} is longer than 65535 bytes")
    return n.to_bytes(2, "big") + bytes(data)


def _enc_properties(p: Properties, where: int) -> bytes:
    """Property Length + properties, or b"\\x00" for none. LocalProtocolError if one is not allowed here."""
    if is_empty(p):
        return b"\x00"
    out = bytearray()
    for d in PROPERTIES:
        value = getattr(p, d.name)
        if value is None or (d.multiple and not value):
            continue
        if where not in d.allowed:
            raise LocalProtocolError(f"property {d.name} is not allowed in {_where_name(where)}")
        head = _BYTES[d.id]
        wt = d.wire_type
        if wt is WireType.UTF8_PAIR:
            for pair in value:
                k, v = pair
                out += head + _enc_str(k, "user property name") + _enc_str(v, "user property value")
            continue
        if wt is WireType.UTF8_STRING:
            out += head + _enc_str(value, d.name)
            continue
        if wt is WireType.BINARY:
            out += head + _enc_bin(value, d.name)
            continue
        values = value if d.multiple else (value,)
        if d.multiple and where == PacketType.SUBSCRIBE and len(values) > 1:
            raise LocalProtocolError("SUBSCRIBE carries at most one Subscription Identifier")
        for v in values:
            if not isinstance(v, int) or not 0 <= v <= WIRE_MAX[wt]:
                raise LocalProtocolError(f"property {d.name} value {v!r} out of range")
            if (d.min_value is not None and v < d.min_value) or (d.max_value is not None and v > d.max_value):
                raise LocalProtocolError(f"property {d.name} value {v} is not allowed")
            if wt is WireType.BYTE:
                out += head + _BYTES[v]
            elif wt is WireType.TWO_BYTE_INT:
                out += head + v.to_bytes(2, "big")
            elif wt is WireType.FOUR_BYTE_INT:
                out += head + v.to_bytes(4, "big")
            else:
                out += head + _vbi(v)
    if len(out) > MAX_REMAINING_LENGTH:
        raise LocalProtocolError("properties too long")
    return _vbi(len(out)) + bytes(out)


def _frame(first: int, *parts: bytes) -> bytes:
    body = b"".join(parts)
    n = len(body)
    if n > MAX_REMAINING_LENGTH:
        raise LocalProtocolError(f"packet body of {n} bytes exceeds the MQTT maximum")
    return _BYTES[first] + _vbi(n) + body


def _encode_publish(p: Publish, level: int) -> bytes:
    topic = p.topic
    try:
        t = topic.encode("utf-8")
    except UnicodeEncodeError as e:
        raise LocalProtocolError("PUBLISH topic cannot be encoded as UTF-8") from e
    tl = len(t)
    if tl > 0xFFFF:
        raise LocalProtocolError("PUBLISH topic is longer than 65535 bytes")
    if "+" in topic or "#" in topic or "\x00" in topic:
        raise LocalProtocolError(f"PUBLISH topic {topic!r} is not a valid topic name")
    qos = p.qos
    first = 0x30 | (qos << 1)
    if p.retain:
        first |= 0x01
    if qos == 0:
        if p.dup:
            raise LocalProtocolError("PUBLISH QoS 0 cannot have the DUP flag")
        pid = b""
    elif qos == 1 or qos == 2:
        if p.dup:
            first |= 0x08
        pid = _packet_id(p.packet_id, "PUBLISH QoS>0")
    else:
        raise LocalProtocolError(f"PUBLISH QoS {qos!r}")
    if level == 5:
        props = p.properties
        if is_empty(props):
            pb = b"\x00"
            if not tl:
                raise LocalProtocolError("PUBLISH with an empty topic needs a Topic Alias")
        else:
            pb = _enc_properties(props, _PUBLISH)
            if props.topic_alias == 0 or (not tl and props.topic_alias is None):
                raise LocalProtocolError("PUBLISH with an empty topic needs a non-zero Topic Alias")
    else:
        pb = b""
        if not tl:
            raise LocalProtocolError("PUBLISH with an empty topic")
    payload = p.payload
    rl = 2 + tl + len(pid) + len(pb) + len(payload)
    if rl < 128:
        head = bytes((first, rl))
    elif rl > MAX_REMAINING_LENGTH:
        raise LocalProtocolError("PUBLISH too large")
    else:
        head = _BYTES[first] + _vbi(rl)
    return b"".join((head, _U16[tl] if tl < 256 else tl.to_bytes(2, "big"), t, pid, pb, payload))


def _encode_connect(c: Connect, level: int) -> bytes:
    name = c.protocol_name
    if level == 3 and name == "MQTT":
        name = "MQIsdp"
    flags = 0x02 if c.clean_start else 0
    will = c.will
    if will is not None:
        if will.qos not in (0, 1, 2):
            raise LocalProtocolError(f"Will QoS {will.qos!r}")
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if c.username is not None:
        flags |= 0x80
    if c.password is not None:
        flags |= 0x40
        if c.username is None and level < 5:
            raise LocalProtocolError("3.1.1 CONNECT cannot carry a password without a user name")
    parts = [_enc_str(name, "protocol name"), bytes((level, flags)), _u16(c.keep_alive, "keep alive")]
    if level == 5:
        parts.append(_enc_properties(c.properties, PacketType.CONNECT))
    parts.append(_enc_str(c.client_id, "client identifier"))
    if will is not None:
        if level == 5:
            parts.append(_enc_properties(will.properties, WILL))
        parts.append(_enc_str(will.topic, "will topic"))
        parts.append(_enc_bin(will.payload, "will payload"))
    if c.username is not None:
        parts.append(_enc_str(c.username, "user name"))
    if c.password is not None:
        parts.append(_enc_bin(c.password, "password"))
    return _frame(0x10, *parts)


def _encode_connack(p: Connack, level: int) -> bytes:
    code = p.reason_code
    if level < 5:
        if code >= 0x80:
            code = rc.connack_code_for(level, code)
        elif code > 5:
            raise LocalProtocolError(f"3.1.1 CONNACK return code {code} (must be 0..5 or a 5.0 error code)")
    flags = 1 if p.session_present and level > 3 else 0
    body = [_BYTES[flags], _byte(code, "CONNACK reason code")]
    if level == 5:
        body.append(_enc_properties(p.properties, PacketType.CONNACK))
    return _frame(0x20, *body)


def _encode_ack(first: int, ptype: PacketType, p: Puback | Pubrec | Pubrel | Pubcomp, level: int) -> bytes:
    pid = _packet_id(p.packet_id, ptype.name)
    if level < 5:
        return bytes((first, 2)) + pid
    if is_empty(p.properties):
        if p.reason_code == 0:
            return bytes((first, 2)) + pid
        return bytes((first, 3)) + pid + _byte(p.reason_code, "reason code")
    return _frame(first, pid, _byte(p.reason_code, "reason code"), _enc_properties(p.properties, ptype))


def _encode_puback(p: Puback, level: int) -> bytes:
    return _encode_ack(0x40, PacketType.PUBACK, p, level)


def _encode_pubrec(p: Pubrec, level: int) -> bytes:
    return _encode_ack(0x50, PacketType.PUBREC, p, level)


def _encode_pubrel(p: Pubrel, level: int) -> bytes:
    return _encode_ack(0x62, PacketType.PUBREL, p, level)


def _encode_pubcomp(p: Pubcomp, level: int) -> bytes:
    return _encode_ack(0x70, PacketType.PUBCOMP, p, level)


def _encode_subscribe(p: Subscribe, level: int) -> bytes:
    if not p.subscriptions:
        raise LocalProtocolError("SUBSCRIBE needs at least one subscription")
    parts = [_packet_id(p.packet_id, "SUBSCRIBE")]
    if level == 5:
        parts.append(_enc_properties(p.properties, PacketType.SUBSCRIBE))
    for s in p.subscriptions:
        o = s.options
        if o.qos not in (0, 1, 2) or o.retain_handling not in (0, 1, 2):
            raise LocalProtocolError(f"invalid subscription options {o!r}")
        byte = o.qos
        if level == 5:
            byte |= (o.no_local << 2) | (o.retain_as_published << 3) | (o.retain_handling << 4)
        parts.append(_enc_str(s.topic_filter, "topic filter"))
        parts.append(_BYTES[byte])
    return _frame(0x82, *parts)


def _encode_suback(p: Suback, level: int) -> bytes:
    if not p.reason_codes:
        raise LocalProtocolError("SUBACK needs at least one reason code")
    codes = p.reason_codes
    if level < 5:
        # 3.1.1 knows 0, 1, 2 and 0x80 (failure): every 5.0 error code becomes 0x80.
        codes = [0x80 if c >= 0x80 else c for c in codes]
        if not _SUBACK_311.issuperset(codes):
            raise LocalProtocolError(f"3.1.1 SUBACK return codes {p.reason_codes!r}")
    parts = [_packet_id(p.packet_id, "SUBACK")]
    if level == 5:
        parts.append(_enc_properties(p.properties, PacketType.SUBACK))
    try:
        parts.append(bytes(codes))
    except ValueError as e:
        raise LocalProtocolError(f"SUBACK reason codes {codes!r}") from e
    return _frame(0x90, *parts)


def _encode_unsubscribe(p: Unsubscribe, level: int) -> bytes:
    if not p.topic_filters:
        raise LocalProtocolError("UNSUBSCRIBE needs at least one topic filter")
    parts = [_packet_id(p.packet_id, "UNSUBSCRIBE")]
    if level == 5:
        parts.append(_enc_properties(p.properties, PacketType.UNSUBSCRIBE))
    parts.extend(_enc_str(f, "topic filter") for f in p.topic_filters)
    return _frame(0xA2, *parts)


def _encode_unsuback(p: Unsuback, level: int) -> bytes:
    pid = _packet_id(p.packet_id, "UNSUBACK")
    if level < 5:
        return b"\xb0\x02" + pid
    if not p.reason_codes:
        raise LocalProtocolError("a 5.0 UNSUBACK needs one reason code per topic filter")
    try:
        codes = bytes(p.reason_codes)
    except ValueError as e:
        raise LocalProtocolError(f"UNSUBACK reason codes {p.reason_codes!r}") from e
    return _frame(0xB0, pid, _enc_properties(p.properties, PacketType.UNSUBACK), codes)


def _encode_pingreq(p: Pingreq, level: int) -> bytes:
    return b"\xc0\x00"


def _encode_pingresp(p: Pingresp, level: int) -> bytes:
    return b"\xd0\x00"


def _encode_reason_props(first: int, ptype: PacketType, code: int, props: Properties) -> bytes:
    if is_empty(props):
        if code == 0:
            return bytes((first, 0))
        return bytes((first, 1)) + _byte(code, f"{ptype.name} reason code")
    return _frame(first, _byte(code, f"{ptype.name} reason code"), _enc_properties(props, ptype))


def _encode_disconnect(p: Disconnect, level: int) -> bytes:
    if level < 5:
        return b"\xe0\x00"
    return _encode_reason_props(0xE0, PacketType.DISCONNECT, p.reason_code, p.properties)


def _encode_auth(p: Auth, level: int) -> bytes:
    if level < 5:
        raise LocalProtocolError("AUTH exists only in MQTT 5.0")
    return _encode_reason_props(0xF0, PacketType.AUTH, p.reason_code, p.properties)


_ENCODERS: Final[dict[type, Callable[[Any, int], bytes]]] = {
    Connect: _encode_connect,
    Connack: _encode_connack,
    Publish: _encode_publish,
    Puback: _encode_puback,
    Pubrec: _encode_pubrec,
    Pubrel: _encode_pubrel,
    Pubcomp: _encode_pubcomp,
    Subscribe: _encode_subscribe,
    Suback: _encode_suback,
    Unsubscribe: _encode_unsubscribe,
    Unsuback: _encode_unsuback,
    Pingreq: _encode_pingreq,
    Pingresp: _encode_pingresp,
    Disconnect: _encode_disconnect,
    Auth: _encode_auth,
}


def encode(packet: Packet, protocol_level: int) -> bytes:
    """The wire bytes of `packet` for a connection of `protocol_level` (3, 4 or 5).

    For 3 and 4, properties and 5.0-only fields are dropped. For CONNECT, the level byte written is
    `protocol_level` (and the protocol name "MQIsdp" for level 3 unless another name is set).
    """
    if type(packet) is Publish and (protocol_level == 5 or protocol_level == 4):
        return _encode_publish(packet, protocol_level)
    if protocol_level not in (3, 4, 5):
        raise LocalProtocolError(f"unsupported protocol level {protocol_level!r}")
    encoder = _ENCODERS.get(type(packet))
    if encoder is None:
        raise LocalProtocolError(f"not an MQTT packet: {packet!r}")
    return encoder(packet, protocol_level)
