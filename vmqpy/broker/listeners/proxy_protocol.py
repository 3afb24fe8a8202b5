"""The PROXY protocol header (HAProxy, versions 1 and 2) that a load balancer sends before the MQTT bytes.

Sans-I/O. `parse(data)` is given every byte received so far on a connection and either returns `NEED_DATA`
(call again once more bytes arrived) or a `ProxyHeader`, whose `length` says how many leading bytes the
header took: `data[header.length:]` is the start of the MQTT stream, to be handed on untouched. Nothing is
consumed or remembered between calls, so a header split across reads needs no special case.

Guarantees:

* `ProxyHeaderError` (a `ValueError`) is the only exception, and its message says what was wrong.
* Every proper prefix of a valid header gives `NEED_DATA`, never an error; an error is raised as soon as the
  bytes cannot be the beginning of a valid header (first byte not a signature byte, bad v2 version, command
  or family nibble, v2 address block shorter than its family needs, v1 line without CRLF in 107 bytes).
  A v2 header announcing more bytes than were sent is `NEED_DATA`: the caller's deadline ends the wait.
* A call reads only header bytes: until a v2 header is complete it looks at its first 16 bytes, and at most
  the first 107 of a v1 line, so calling it again after every read costs nothing quadratic.
* v1 `PROXY UNKNOWN` and v2 `LOCAL` (balancer health checks), and v2 families whose addresses we do not use
  (AF_UNSPEC, AF_UNIX, an UNSPEC transport), give `source = destination = None`: the socket's own addresses
  stand. Only TCP/UDP over IPv4/IPv6 carry addresses. The v2 address block of LOCAL and UNSPEC headers is
  skipped without being read, as the spec asks, TLVs included.
* v2 TLVs are kept as `type -> value` (`PP2_TYPE_NOOP` dropped, any other type twice is an error);
  `PP2_TYPE_AUTHORITY` is decoded to `authority`, `PP2_TYPE_SSL` to `ssl` (`SslInfo`), and a
  `PP2_TYPE_CRC32C` checksum is verified.

The module never decides whether a listener expects the header: per the spec that is configuration, never a
guess. `looks_like_proxy(prefix)` lets a listener *without* the PROXY protocol refuse one early.
`encode_v1` / `encode_v2` build headers for tests, benchmarks and test clients; the broker never sends one.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from vmqpy.mqtt.wire import NEED_DATA, NeedData

__all__ = [
    "NEED_DATA",
    "V1_MAX_LENGTH",
    "V1_SIGNATURE",
    "V2_MAX_LENGTH",
    "V2_SIGNATURE",
    "Address",
    "Command",
    "Family",
    "NeedData",
    "ProxyHeader",
    "ProxyHeaderError",
    "SslInfo",
    "crc32c",
    "encode_v1",
    "encode_v2",
    "looks_like_proxy",
    "parse",
]

V1_SIGNATURE: Final = b"PROXY"
V2_SIGNATURE: Final = b"\r\n\r\n\x00\r\nQUIT\n"
V1_MAX_LENGTH: Final = 107  # the longest v1 line, CRLF included ("PROXY UNKNOWN" with two full IPv6 addresses)
V2_FIXED_LENGTH: Final = 16  # signature, version/command, family/transport, 2-byte length
V2_MAX_LENGTH: Final = V2_FIXED_LENGTH + 0xFFFF

PP2_TYPE_ALPN: Final = 0x01
PP2_TYPE_AUTHORITY: Final = 0x02
PP2_TYPE_CRC32C: Final = 0x03
PP2_TYPE_NOOP: Final = 0x04
PP2_TYPE_UNIQUE_ID: Final = 0x05
PP2_TYPE_SSL: Final = 0x20
PP2_SUBTYPE_SSL_VERSION: Final = 0x21
PP2_SUBTYPE_SSL_CN: Final = 0x22
PP2_SUBTYPE_SSL_CIPHER: Final = 0x23
PP2_TYPE_NETNS: Final = 0x30

PP2_CLIENT_SSL: Final = 0x01
PP2_CLIENT_CERT_CONN: Final = 0x02
PP2_CLIENT_CERT_SESS: Final = 0x04


class ProxyHeaderError(ValueError):
    """The bytes are not a valid PROXY protocol header; the connection must be closed."""


class Command(enum.Enum):
    LOCAL = 0x0  # made by the balancer itself (health check): use the socket's own addresses
    PROXY = 0x1  # relayed on behalf of a client: the header's addresses are the client's


class Family(enum.Enum):
    """What the header says the relayed connection is. UNSPEC: v1 UNKNOWN, v2 AF_UNSPEC or UNSPEC transport,
    and every v2 LOCAL header (its family is ignored)."""

    UNSPEC = "UNSPEC"
    TCP4 = "TCP4"
    TCP6 = "TCP6"
    UDP4 = "UDP4"
    UDP6 = "UDP6"
    UNIX = "UNIX"  # AF_UNIX stream or datagram: well-formed, but the paths are not reported


class Address(NamedTuple):
    host: str  # as `str(ipaddress.ip_address(...))` prints it: IPv6 compressed, lower case
    port: int


@dataclass(frozen=True, slots=True)
class SslInfo:
    """The PP2_TYPE_SSL TLV: how the client reached the balancer's TLS endpoint."""

    client: int  # PP2_CLIENT_* bits
    verify: int  # 0 when the client's certificate was verified
    version: str | None  # PP2_SUBTYPE_SSL_VERSION, e.g. "TLSv1.3"
    common_name: str | None  # PP2_SUBTYPE_SSL_CN of the client certificate
    tlvs: Mapping[int, bytes]  # every sub-TLV, the two above included

    @property
    def tls(self) -> bool:
        return bool(self.client & PP2_CLIENT_SSL)

    @property
    def certificate_verified(self) -> bool:
        """A client certificate was presented (on this connection or session) and verified."""
        return bool(self.client & (PP2_CLIENT_CERT_CONN | PP2_CLIENT_CERT_SESS)) and self.verify == 0


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    version: int  # 1 or 2
    command: Command  # v1 is always PROXY
    family: Family
    source: Address | None  # None: keep the socket's peer address
    destination: Address | None  # None: keep the socket's local address
    length: int  # bytes the header took; data[length:] belongs to MQTT
    tlvs: Mapping[int, bytes] = field(default_factory=dict)
    authority: str | None = None  # PP2_TYPE_AUTHORITY (the TLS SNI, usually)
    ssl: SslInfo | None = None


def looks_like_proxy(prefix: bytes) -> bool | None:
    """Whether a connection starting with `prefix` starts with a PROXY header signature; None while `prefix`
    is too short to tell. One byte is enough for an MQTT client, whose first byte is 0x10."""
    for signature in (V1_SIGNATURE, V2_SIGNATURE):
        n = min(len(prefix), len(signature))
        if prefix[:n] == signature[:n]:
            return True if n == len(signature) else None
    return False


def parse(data: bytes, *, max_length: int = V2_MAX_LENGTH) -> ProxyHeader | NeedData:
    """The header at the start of `data`, or NEED_DATA. `max_length` bounds a v2 header (default: any length
    the 16-bit length field allows); a v1 line is at most 107 bytes. Raises ProxyHeaderError."""
    known = looks_like_proxy(data)
    if known is None:
        return NEED_DATA
    if not known:
        raise ProxyHeaderError(f"no PROXY protocol header: the connection starts with {_show(data)}")
    if data[0] == V2_SIGNATURE[0]:
        return _parse_v2(data, max_length)
    return _parse_v1(data)


_V1_IPV4: Final = re.compile(rb"(?:0|[1-9][0-9]{0,2})(?:\.(?:0|[1-9][0-9]{0,2})){3}")
_V1_IPV6: Final = re.compile(rb"[0-9A-Fa-f:.]{2,45}")
_V1_PORT: Final = re.compile(rb"0|[1-9][0-9]{0,4}")


def _parse_v1(data: bytes) -> ProxyHeader | NeedData:
    if len(data) > len(V1_SIGNATURE) and data[len(V1_SIGNATURE)] != 0x20:
        raise ProxyHeaderError(f"v1 header: expected 'PROXY ', got {_show(data[:6])}")
    end = data.find(b"\r\n", 0, V1_MAX_LENGTH)
    if end < 0:
        _check_v1_unfinished(data[:V1_MAX_LENGTH])
        return NEED_DATA
    line = data[:end]
    if b"\r" in line or b"\n" in line:
        raise ProxyHeaderError("v1 header: a lone CR or LF before the CRLF")
    fields = line.split(b" ")
    if fields[0] != V1_SIGNATURE:
        raise ProxyHeaderError(f"v1 header: expected 'PROXY ', got {_show(line[:6])}")
    family = fields[1] if len(fields) > 1 else b""
    length = end + 2
    if family == b"UNKNOWN":  # the rest of the line, if any, must be ignored
        return ProxyHeader(1, Command.PROXY, Family.UNSPEC, None, None, length)
    if family not in (b"TCP4", b"TCP6"):
        raise ProxyHeaderError(f"v1 header: unknown protocol family {_show(family)} (TCP4, TCP6 or UNKNOWN)")
    if len(fields) != 6:
        raise ProxyHeaderError(f"v1 header: expected 6 fields separated by single spaces, got {len(fields)}")
    ipv4 = family == b"TCP4"
    source = Address(_v1_address(fields[2], ipv4), _v1_port(fields[4]))
    destination = Address(_v1_address(fields[3], ipv4), _v1_port(fields[5]))
    return ProxyHeader(1, Command.PROXY, Family.TCP4 if ipv4 else Family.TCP6, source, destination, length)


def _check_v1_unfinished(window: bytes) -> None:
    """Raise if a v1 line without CRLF so far can no longer become valid."""
    if len(window) >= V1_MAX_LENGTH:
        raise ProxyHeaderError(f"v1 header: no CRLF in the first {V1_MAX_LENGTH} bytes")
    if b"\n" in window or b"\r" in window[:-1]:
        raise ProxyHeaderError("v1 header: a lone CR or LF before the CRLF")


def _v1_address(text: bytes, ipv4: bool) -> str:
    if ipv4:
        if _V1_IPV4.fullmatch(text) and all(int(part) <= 255 for part in text.split(b".")):
            return text.decode("ascii")
        raise ProxyHeaderError(f"v1 header: {_show(text)} is not an IPv4 address in canonical form")
    if _V1_IPV6.fullmatch(text):
        try:
            return str(ipaddress.IPv6Address(text.decode("ascii")))
        except ValueError:
            pass
    raise ProxyHeaderError(f"v1 header: {_show(text)} is not an IPv6 address")


def _v1_port(text: bytes) -> int:
    if _V1_PORT.fullmatch(text) and int(text) <= 0xFFFF:
        return int(text)
    raise ProxyHeaderError(f"v1 header: {_show(text)} is not a port (0..65535, no leading zeros)")


# (family/transport byte) -> (Family, bytes of one address, whether ports follow)
_V2_FAMILIES: Final[Mapping[int, tuple[Family, int, bool]]] = {
    0x11: (Family.TCP4, 4, True),
    0x12: (Family.UDP4, 4, True),
    0x21: (Family.TCP6, 16, True),
    0x22: (Family.UDP6, 16, True),
    0x31: (Family.UNIX, 108, False),
    0x32: (Family.UNIX, 108, False),
}


def _parse_v2(data: bytes, max_length: int) -> ProxyHeader | NeedData:
    if len(data) < 13:
        return NEED_DATA
    version, command_nibble = data[12] >> 4, data[12] & 0x0F
    if version != 2:
        raise ProxyHeaderError(f"v2 header: version nibble {version}, only 2 is defined")
    if command_nibble not in (Command.LOCAL.value, Command.PROXY.value):
        raise ProxyHeaderError(f"v2 header: command nibble {command_nibble}, expected 0 (LOCAL) or 1 (PROXY)")
    command = Command(command_nibble)
    if len(data) < 14:
        return NEED_DATA
    fam = data[13]
    if command is Command.PROXY and (fam >> 4 > 3 or fam & 0x0F > 2):
        raise ProxyHeaderError(f"v2 header: unknown address family/transport byte 0x{fam:02x}")
    if len(data) < V2_FIXED_LENGTH:
        return NEED_DATA
    total = V2_FIXED_LENGTH + int.from_bytes(data[14:16], "big")
    if total > max_length:
        raise ProxyHeaderError(f"v2 header: {total} bytes long, more than the {max_length} allowed")
    known = _V2_FAMILIES.get(fam) if command is Command.PROXY else None
    needed = 0 if known is None else 2 * known[1] + (4 if known[2] else 0)
    if known is not None and total - V2_FIXED_LENGTH < needed:
        raise ProxyHeaderError(
            f"v2 header: address block of {total - V2_FIXED_LENGTH} bytes, {known[0].value} needs {needed}"
        )
    if len(data) < total:
        return NEED_DATA
    if known is None:  # LOCAL, or an unspecified family or transport: the block is skipped unread
        return ProxyHeader(2, command, Family.UNSPEC, None, None, total)
    return _v2_proxy(data[:total], known, needed)


def _v2_proxy(header: bytes, known: tuple[Family, int, bool], needed: int) -> ProxyHeader:
    family, size, has_ports = known
    source = destination = None
    if has_ports:
        block = header[V2_FIXED_LENGTH : V2_FIXED_LENGTH + needed]
        make = ipaddress.IPv4Address if size == 4 else ipaddress.IPv6Address
        ports = block[2 * size :]
        source = Address(str(make(block[:size])), int.from_bytes(ports[:2], "big"))
        destination = Address(str(make(block[size : 2 * size])), int.from_bytes(ports[2:], "big"))
    tlvs = _v2_tlvs(header, V2_FIXED_LENGTH + needed)
    authority = tlvs.get(PP2_TYPE_AUTHORITY)
    ssl = tlvs.get(PP2_TYPE_SSL)
    return ProxyHeader(
        version=2,
        command=Command.PROXY,
        family=family,
        source=source,
        destination=destination,
        length=len(header),
        tlvs=tlvs,
        authority=None if authority is None else _text(authority, "the authority TLV"),
        ssl=None if ssl is None else _ssl_info(ssl),
    )


def _v2_tlvs(header: bytes, start: int) -> dict[int, bytes]:
    """The TLVs from `start` to the end of the header, checksum verified."""
    tlvs: dict[int, bytes] = {}
    for kind, value, offset in _split_tlvs(header, start, "TLV"):
        if kind == PP2_TYPE_NOOP:
            continue
        if kind in tlvs:
            raise ProxyHeaderError(f"v2 header: TLV type 0x{kind:02x} appears twice")
        if kind == PP2_TYPE_CRC32C:
            _verify_checksum(header, value, offset)
        tlvs[kind] = value
    return tlvs


def _split_tlvs(raw: bytes, start: int, what: str) -> list[tuple[int, bytes, int]]:
    """(type, value, offset of the value) for each TLV of raw[start:], which they must fill exactly."""
    found: list[tuple[int, bytes, int]] = []
    pos, end = start, len(raw)
    while pos < end:
        if end - pos < 3:
            raise ProxyHeaderError(f"v2 header: {end - pos} bytes left after the last {what}, a {what} needs 3")
        kind, size = raw[pos], int.from_bytes(raw[pos + 1 : pos + 3], "big")
        if pos + 3 + size > end:
            raise ProxyHeaderError(
                f"v2 header: {what} type 0x{kind:02x} declares {size} bytes, only {end - pos - 3} remain"
            )
        found.append((kind, raw[pos + 3 : pos + 3 + size], pos + 3))
        pos += 3 + size
    return found


def _ssl_info(value: bytes) -> SslInfo:
    if len(value) < 5:
        raise ProxyHeaderError(f"v2 header: SSL TLV of {len(value)} bytes, at least 5 expected")
    subs: dict[int, bytes] = {}
    for kind, sub, _ in _split_tlvs(value, 5, "SSL sub-TLV"):
        if kind in subs:
            raise ProxyHeaderError(f"v2 header: SSL sub-TLV type 0x{kind:02x} appears twice")
        subs[kind] = sub
    version, cn = subs.get(PP2_SUBTYPE_SSL_VERSION), subs.get(PP2_SUBTYPE_SSL_CN)
    return SslInfo(
        client=value[0],
        verify=int.from_bytes(value[1:5], "big"),
        version=None if version is None else _text(version, "the SSL version sub-TLV"),
        common_name=None if cn is None else _text(cn, "the SSL CN sub-TLV"),
        tlvs=subs,
    )


def _verify_checksum(header: bytes, value: bytes, offset: int) -> None:
    if len(value) != 4:
        raise ProxyHeaderError(f"v2 header: CRC32C TLV of {len(value)} bytes, 4 expected")
    zeroed = header[:offset] + b"\x00\x00\x00\x00" + header[offset + 4 :]
    if crc32c(zeroed) != int.from_bytes(value, "big"):
        raise ProxyHeaderError("v2 header: CRC32C checksum mismatch")


def _text(value: bytes, what: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ProxyHeaderError(f"v2 header: {what} is not UTF-8") from None


def _show(data: bytes) -> str:
    """A short printable form of untrusted bytes for an error message."""
    return repr(bytes(data[:16])) + ("..." if len(data) > 16 else "")


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE: Final = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC32C of `data` (crc32c(b"123456789") == 0xE3069283)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def encode_v1(source: Address | None = None, destination: Address | None = None) -> bytes:
    """A v1 line: TCP4 or TCP6 from the addresses' version, or `PROXY UNKNOWN` without addresses.
    Raises ValueError for a single address or addresses of two IP versions."""
    if source is None and destination is None:
        return b"PROXY UNKNOWN\r\n"
    if source is None or destination is None:
        raise ValueError("encode_v1 needs both addresses or neither")
    src, dst = ipaddress.ip_address(source.host), ipaddress.ip_address(destination.host)
    if src.version != dst.version:
        raise ValueError("encode_v1: source and destination of different IP versions")
    family = "TCP4" if src.version == 4 else "TCP6"
    return f"PROXY {family} {src} {dst} {source.port} {destination.port}\r\n".encode("ascii")


_V2_FAMILY_BYTES: Final[Mapping[Family, int]] = {
    Family.UNSPEC: 0x00,
    Family.TCP4: 0x11,
    Family.UDP4: 0x12,
    Family.TCP6: 0x21,
    Family.UDP6: 0x22,
    Family.UNIX: 0x31,
}


def encode_v2(
    command: Command = Command.PROXY,
    family: Family = Family.TCP4,
    source: Address | None = None,
    destination: Address | None = None,
    tlvs: Iterable[tuple[int, bytes]] = (),
    *,
    checksum: bool = False,
) -> bytes:
    """A v2 header. IP families need both addresses; UNIX writes two empty 108-byte paths; UNSPEC writes no
    address block. TLVs are written in order; `checksum` appends a PP2_TYPE_CRC32C TLV. Raises ValueError."""
    block = _v2_address_block(family, source, destination)
    for kind, value in tlvs:
        block += _tlv(kind, value)
    if checksum:
        block += _tlv(PP2_TYPE_CRC32C, b"\x00\x00\x00\x00")
    if len(block) > 0xFFFF:
        raise ValueError(f"encode_v2: {len(block)} bytes after the fixed header, at most 65535 fit")
    header = V2_SIGNATURE + bytes([0x20 | command.value, _V2_FAMILY_BYTES[family]]) + len(block).to_bytes(2, "big")
    header += block
    if checksum:
        header = header[:-4] + crc32c(header).to_bytes(4, "big")
    return header


def _v2_address_block(family: Family, source: Address | None, destination: Address | None) -> bytes:
    if family is Family.UNSPEC:
        return b""
    if family is Family.UNIX:
        return bytes(216)
    if source is None or destination is None:
        raise ValueError(f"encode_v2: {family.value} needs both addresses")
    make = ipaddress.IPv4Address if family in (Family.TCP4, Family.UDP4) else ipaddress.IPv6Address
    return (
        make(source.host).packed
        + make(destination.host).packed
        + source.port.to_bytes(2, "big")
        + destination.port.to_bytes(2, "big")
    )


def _tlv(kind: int, value: bytes) -> bytes:
    if not 0 <= kind <= 0xFF or len(value) > 0xFFFF:
        raise ValueError(f"encode_v2: TLV type {kind} with {len(value)} bytes cannot be encoded")
    return bytes([kind]) + len(value).to_bytes(2, "big") + value
