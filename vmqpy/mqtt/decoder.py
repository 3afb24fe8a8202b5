"""The incremental MQTT 3.1 / 3.1.1 / 5.0 decoder of one direction of one connection: bytes in, packets out.

Feed it any split of the byte stream with `receive_data` and call `next_packet` until it returns `NEED_DATA`.
It validates strictly and raises a `RemoteProtocolError` subclass carrying the MQTT 5.0 reason code to answer
with; after an error it is dead (it raises the same error again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

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
    NO_PROPERTIES,
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
from vmqpy.mqtt.properties import WILL, read_properties
from vmqpy.mqtt.wire import MAX_PACKET_SIZE, NEED_DATA, NeedData, read_bin, read_str, read_u16, read_vbi

__all__ = ["Decoder", "LongSubscribe", "read_filters"]

_PUBLISH = int(PacketType.PUBLISH)
_PUBACK_FIRST = int(PacketType.PUBACK) << 4  # the first byte of every PUBACK (its flags are 0)
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
_SUBACK_311: Final = frozenset({0, 1, 2, 0x80})  # the 3.1.1 SUBACK return codes


def read_filters(b: bytes, i: int, v5: bool, most: int, subs: list[Subscription]) -> int:
    """Decode at most `most` topic filters with their subscription options, from b[i:] to the end of a SUBSCRIBE's
    body, into `subs`; the index after the last one decoded (len(b): all of them)."""
    n = len(b)
    while i < n and most > 0:
        most -= 1
        topic_filter, i = read_str(b, i, n, "topic filter")
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
    return i


class LongSubscribe:
    """A SUBSCRIBE whose filters take more than a decoder's `long_subscribe` bytes, as `next_packet` returns it:
    its fixed header, packet identifier and properties decoded, its filters not yet. `decode` reads them a slice
    at a time (a 1 MiB SUBSCRIBE holds up to 262,141 one-character filters: 0.5-0.75 s to decode in one piece, at
    about 2.4 us a filter), so that the caller can spread them over several turns of its loop
    (vmqpy.broker.driver.subscribe_slices); once `done`, `packet()` is the Subscribe decoded whole. The errors are those
    of a whole decode, raised by the `decode` call that reaches the bad filter."""

    __slots__ = ("_body", "_position", "_v5", "packet_id", "properties", "subscriptions")

    def __init__(self, packet_id: int, properties: Properties, body: bytes, position: int, v5: bool) -> None:
        self.packet_id = packet_id
        self.properties = properties
        self.subscriptions: list[Subscription] = []
        self._body = body
        self._position = position
        self._v5 = v5

    @property
    def done(self) -> bool:
        return self._position >= len(self._body)

    def decode(self, most: int) -> int:
        """Decode at most `most` more filters; how many were decoded."""
        before = len(self.subscriptions)
        self._position = read_filters(self._body, self._position, self._v5, most, self.subscriptions)
        return len(self.subscriptions) - before

    def packet(self) -> Subscribe:
        """The whole SUBSCRIBE (after the last `decode`)."""
        if not self.done:
            raise LocalProtocolError("the SUBSCRIBE's filters are not all decoded yet")
        if not self.subscriptions:
            raise ProtocolViolation("SUBSCRIBE without topic filters")
        return Subscribe(self.packet_id, self.subscriptions, self.properties)


class Decoder:
    """Incremental decoder of one direction of one connection.

    `server=True` decodes what a client sends (the first packet must be CONNECT, which sets `protocol_level`);
    `server=False` decodes what a server sends and needs `protocol_level`. A server-side decoder created with
    a `protocol_level` behaves as if the CONNECT had already been decoded. `long_subscribe` (bytes; 0: never):
    a SUBSCRIBE whose filters take more is returned as a `LongSubscribe`, its filters decoded by the caller.
    """

    __slots__ = ("_buf", "_chunks", "_connected", "_error", "_first", "_hlen", "_max", "_pending", "_pos", "_rl",
                 "_server", "long_subscribe", "protocol_level")

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
        self.long_subscribe = 0

    @property
    def max_packet_size(self) -> int:
        """The largest packet accepted, fixed header included (a server lowers it until the CONNECT is done)."""
        return self._max

    @max_packet_size.setter
    def max_packet_size(self, size: int) -> None:
        if not 2 <= size <= MAX_PACKET_SIZE:
            raise LocalProtocolError(f"max_packet_size must be in 2..{MAX_PACKET_SIZE}")
        self._max = size

    def buffered(self) -> int:
        """How many bytes received are not decoded yet (the rest of a packet, or more packets), as the cluster
        links' frame decoder says it."""
        return len(self._buf) - self._pos + self._pending

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

    def next_packet(self) -> Packet | LongSubscribe | NeedData:
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
                # Fast path: a PUBLISH with valid flags, or a PUBACK, on an established connection; else the full
                # check (a PUBACK is valid in both directions and at every level, its flags are 0).
                if not self._connected or (
                    (first >> 4 != _PUBLISH or first & 0x06 == 0x06 or first & 0x0E == 0x08) and first != _PUBACK_FIRST
                ):
                    self._check_first_byte(first)
                if pos + 1 >= size:
                    return NEED_DATA
                rl = buf[pos + 1]
                hlen = 2
                if rl >= 0x80:  # a remaining length of more than one byte
                    length = read_vbi(buf, pos + 1, size, "remaining length")
                    if isinstance(length, NeedData):
                        return NEED_DATA
                    rl, i = length
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
            if first == _PUBACK_FIRST and rl == 2:  # a PUBACK with neither reason code nor properties (QoS 1 path)
                packet_id = (buf[start] << 8) | buf[start + 1]
                if packet_id == 0:
                    raise ProtocolViolation("PUBACK with packet identifier 0")
                return Puback(packet_id, 0, NO_PROPERTIES)
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
                props = NO_PROPERTIES
                i += 1
            else:
                props, i = read_properties(b, i, end, _PUBLISH)
                if props.topic_alias == 0:
                    raise RemoteProtocolError("PUBLISH with Topic Alias 0", rc.TOPIC_ALIAS_INVALID)
                if self._server and props.subscription_identifiers:
                    raise ProtocolViolation("a client may not send a Subscription Identifier in PUBLISH")
                response_topic = props.response_topic
                if response_topic is not None and ("+" in response_topic or "#" in response_topic):
                    raise ProtocolViolation("a Response Topic may not contain wildcards [MQTT-3.3.2-14]")
        else:
            props = NO_PROPERTIES
        if "\x00" in topic:
            raise MalformedPacket("PUBLISH topic contains U+0000")
        if "+" in topic or "#" in topic:
            raise RemoteProtocolError(f"PUBLISH topic {topic!r} contains a wildcard", rc.TOPIC_NAME_INVALID)
        if not topic and props.topic_alias is None:
            raise ProtocolViolation("PUBLISH with an empty topic and no Topic Alias")
        return Publish(topic, b[i:end], qos, bool(first & 1), bool(first & 8), packet_id, props)

    def _connect(self, flags: int, b: bytes) -> Connect:
        n = len(b)
        name, i = read_str(b, 0, n, "protocol name")
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
        keep_alive = read_u16(b, i, n, "keep alive")
        i += 2
        if level == 5:
            props, i = read_properties(b, i, n, PacketType.CONNECT)
            if props.authentication_data is not None and props.authentication_method is None:
                raise ProtocolViolation("CONNECT Authentication Data without Authentication Method")
        else:
            props = Properties()
        client_id, i = read_str(b, i, n, "client identifier")
        will = None
        if cflags & 0x04:
            if level == 5:
                wprops, i = read_properties(b, i, n, WILL)
            else:
                wprops = Properties()
            wtopic, i = read_str(b, i, n, "will topic")
            wpayload, i = read_bin(b, i, n, "will payload")
            will = Will(wtopic, wpayload, will_qos, bool(cflags & 0x20), wprops)
        username = None
        password = None
        if cflags & 0x80:
            username, i = read_str(b, i, n, "user name")
        if cflags & 0x40:
            password, i = read_bin(b, i, n, "password")
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
            props, i = read_properties(b, 2, n, PacketType.CONNACK)
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
        packet_id = read_u16(b, 0, n, "packet identifier")
        if packet_id == 0:
            raise ProtocolViolation(f"{ptype.name} with packet identifier 0")
        if self.protocol_level != 5:
            if n != 2:
                raise MalformedPacket(f"{ptype.name} must have a remaining length of 2 before MQTT 5.0")
            return packet_id, 0, NO_PROPERTIES
        if n == 2:
            return packet_id, 0, NO_PROPERTIES
        reason = b[2]
        if n == 3:
            return packet_id, reason, NO_PROPERTIES
        props, i = read_properties(b, 3, n, ptype)
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
        packet_id = read_u16(b, 0, n, "packet identifier")
        if packet_id == 0:
            raise ProtocolViolation(f"{ptype.name} with packet identifier 0")
        if self.protocol_level == 5:
            props, i = read_properties(b, 2, len(b), ptype)
            return packet_id, props, i
        return packet_id, Properties(), 2

    def _subscribe(self, flags: int, b: bytes) -> Subscribe | LongSubscribe:
        packet_id, props, i = self._id_and_props(PacketType.SUBSCRIBE, b)
        if len(props.subscription_identifiers) > 1:
            raise ProtocolViolation("SUBSCRIBE with more than one Subscription Identifier")
        v5 = self.protocol_level == 5
        if self.long_subscribe and len(b) - i > self.long_subscribe:
            return LongSubscribe(packet_id, props, b, i, v5)
        subs: list[Subscription] = []
        read_filters(b, i, v5, len(b), subs)
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
            topic_filter, i = read_str(b, i, n, "topic filter")
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
        props, i = read_properties(b, 1, n, ptype)
        if i != n:
            raise MalformedPacket(f"unexpected bytes at the end of {ptype.name}")
        return b[0], props

    def _disconnect(self, flags: int, b: bytes) -> Disconnect:
        return Disconnect(*self._reason_and_props(PacketType.DISCONNECT, b))

    def _auth(self, flags: int, b: bytes) -> Auth:
        return Auth(*self._reason_and_props(PacketType.AUTH, b))

    def _reserved(self, flags: int, b: bytes) -> Packet:  # pragma: no cover - rejected by _check_first_byte
        raise MalformedPacket("reserved packet type")


_DISPATCH: Final[tuple[Callable[[Decoder, int, bytes], Packet | LongSubscribe], ...]] = (
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

