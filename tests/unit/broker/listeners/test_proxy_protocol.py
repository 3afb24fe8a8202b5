"""The PROXY protocol parser: spec layouts written out by hand, lying and truncated headers, and properties
(round trips through `encode_v1`/`encode_v2`, random bytes, any split of header + MQTT bytes)."""

from __future__ import annotations

import ipaddress
import struct
from typing import Literal

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vmqpy.broker.listeners.proxy_protocol import (
    NEED_DATA,
    PP2_CLIENT_CERT_CONN,
    PP2_CLIENT_SSL,
    PP2_SUBTYPE_SSL_CIPHER,
    PP2_SUBTYPE_SSL_CN,
    PP2_SUBTYPE_SSL_VERSION,
    PP2_TYPE_ALPN,
    PP2_TYPE_AUTHORITY,
    PP2_TYPE_CRC32C,
    PP2_TYPE_NOOP,
    PP2_TYPE_SSL,
    PP2_TYPE_UNIQUE_ID,
    V1_MAX_LENGTH,
    V1_SIGNATURE,
    V2_SIGNATURE,
    Address,
    Command,
    Family,
    ProxyHeader,
    ProxyHeaderError,
    SslInfo,
    crc32c,
    encode_v1,
    encode_v2,
    looks_like_proxy,
    parse,
)

MQTT_CONNECT = b"\x10\x10\x00\x04MQTT\x04\x02\x00\x3c\x00\x04abcd"


def v2(ver_cmd: int, fam: int, body: bytes, length: int | None = None) -> bytes:
    """A v2 header laid out as in the spec, independently of encode_v2."""
    return V2_SIGNATURE + bytes([ver_cmd, fam]) + struct.pack("!H", len(body) if length is None else length) + body


def tlv(kind: int, value: bytes) -> bytes:
    return struct.pack("!BH", kind, len(value)) + value


IPV4_BLOCK = bytes([192, 168, 0, 1, 10, 0, 0, 2]) + struct.pack("!HH", 56324, 1883)
IPV6_BLOCK = (
    ipaddress.IPv6Address("2001:db8::1").packed + ipaddress.IPv6Address("2001:db8::2").packed + struct.pack("!HH", 1, 2)
)
SSL_VALUE = (
    bytes([PP2_CLIENT_SSL | PP2_CLIENT_CERT_CONN])
    + struct.pack("!I", 0)
    + tlv(PP2_SUBTYPE_SSL_VERSION, b"TLSv1.3")
    + tlv(PP2_SUBTYPE_SSL_CN, b"device-17")
    + tlv(PP2_SUBTYPE_SSL_CIPHER, b"TLS_AES_128_GCM_SHA256")
)
FULL_IPV6_V1 = (
    b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"
)
WORST_V1 = FULL_IPV6_V1.replace(b"TCP6", b"UNKNOWN")

TCP4 = Family.TCP4
# (name, bytes, version, command, family, source, destination)
VALID: list[tuple[str, bytes, int, Command, Family, Address | None, Address | None]] = [
    (
        "v1 tcp4",
        b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n",
        1,
        Command.PROXY,
        TCP4,
        Address("192.168.0.1", 56324),
        Address("192.168.0.11", 443),
    ),
    (
        "v1 tcp4 zeros",
        b"PROXY TCP4 0.0.0.0 255.255.255.255 0 65535\r\n",
        1,
        Command.PROXY,
        TCP4,
        Address("0.0.0.0", 0),
        Address("255.255.255.255", 65535),
    ),
    (
        "v1 tcp6",
        b"PROXY TCP6 2001:DB8::1 ::ffff:10.0.0.1 1 2\r\n",
        1,
        Command.PROXY,
        Family.TCP6,
        Address("2001:db8::1", 1),
        Address(str(ipaddress.IPv6Address("::ffff:10.0.0.1")), 2),
    ),
    (
        "v1 tcp6 longest line",
        FULL_IPV6_V1,
        1,
        Command.PROXY,
        Family.TCP6,
        Address("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535),
        Address("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535),
    ),
    ("v1 unknown", b"PROXY UNKNOWN\r\n", 1, Command.PROXY, Family.UNSPEC, None, None),
    ("v1 unknown worst case", WORST_V1, 1, Command.PROXY, Family.UNSPEC, None, None),
    ("v1 unknown rest ignored", b"PROXY UNKNOWN \x00\xff whatever\r\n", 1, Command.PROXY, Family.UNSPEC, None, None),
    (
        "v2 tcp4",
        v2(0x21, 0x11, IPV4_BLOCK),
        2,
        Command.PROXY,
        TCP4,
        Address("192.168.0.1", 56324),
        Address("10.0.0.2", 1883),
    ),
    (
        "v2 udp4",
        v2(0x21, 0x12, IPV4_BLOCK),
        2,
        Command.PROXY,
        Family.UDP4,
        Address("192.168.0.1", 56324),
        Address("10.0.0.2", 1883),
    ),
    (
        "v2 tcp6",
        v2(0x21, 0x21, IPV6_BLOCK),
        2,
        Command.PROXY,
        Family.TCP6,
        Address("2001:db8::1", 1),
        Address("2001:db8::2", 2),
    ),
    ("v2 local", v2(0x20, 0x00, b""), 2, Command.LOCAL, Family.UNSPEC, None, None),
    (
        "v2 local, block and family ignored",
        v2(0x20, 0xFF, b"\x01\x02\x03"),
        2,
        Command.LOCAL,
        Family.UNSPEC,
        None,
        None,
    ),
    ("v2 local with tcp4 block", v2(0x20, 0x11, IPV4_BLOCK), 2, Command.LOCAL, Family.UNSPEC, None, None),
    ("v2 unspec", v2(0x21, 0x00, b"\x01\x02"), 2, Command.PROXY, Family.UNSPEC, None, None),
    ("v2 inet, unspec transport", v2(0x21, 0x10, IPV4_BLOCK), 2, Command.PROXY, Family.UNSPEC, None, None),
    ("v2 unix stream", v2(0x21, 0x31, bytes(216)), 2, Command.PROXY, Family.UNIX, None, None),
    ("v2 unix dgram", v2(0x21, 0x32, bytes(216)), 2, Command.PROXY, Family.UNIX, None, None),
]
VALID_IDS = [case[0] for case in VALID]


@pytest.mark.parametrize(
    ("name", "data", "version", "command", "family", "source", "destination"), VALID, ids=VALID_IDS
)
def test_valid_headers(
    name: str,
    data: bytes,
    version: int,
    command: Command,
    family: Family,
    source: Address | None,
    destination: Address | None,
) -> None:
    header = parse(data + MQTT_CONNECT)
    assert isinstance(header, ProxyHeader)
    assert (header.version, header.command, header.family) == (version, command, family)
    assert (header.source, header.destination) == (source, destination)
    assert header.length == len(data)
    assert (data + MQTT_CONNECT)[header.length :] == MQTT_CONNECT
    assert parse(data) == header


@pytest.mark.parametrize("data", [case[1] for case in VALID], ids=VALID_IDS)
def test_every_prefix_needs_data(data: bytes) -> None:
    for k in range(len(data)):
        assert parse(data[:k]) is NEED_DATA, k


def test_v1_line_limits() -> None:
    assert len(FULL_IPV6_V1) == 104 and len(WORST_V1) == V1_MAX_LENGTH
    assert parse(b"PROXY UNKNOWN " + b"x" * 90) is NEED_DATA  # 104 bytes: the CRLF may still come
    with pytest.raises(ProxyHeaderError, match="no CRLF in the first 107 bytes"):
        parse(b"PROXY UNKNOWN " + b"x" * 93)
    with pytest.raises(ProxyHeaderError, match="no CRLF in the first 107 bytes"):
        parse(WORST_V1.replace(b"ffff ", b"fffff ", 1))  # the CRLF ends at byte 108


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"PROXY TCP4 ::1 ::1 1 2\r\n", "not an IPv4 address"),
        (b"PROXY TCP4 1.2.3.4 ::1 1 2\r\n", "not an IPv4 address"),
        (b"PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n", "not an IPv6 address"),
        (b"PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n", "not an IPv6 address"),
        (b"PROXY TCP6 1::2::3 ::1 1 2\r\n", "not an IPv6 address"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 70000 2\r\n", "not a port"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n", "not a port"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n", "not a port"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", "not a port"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n", "not a port"),
        (b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", "not an IPv4 address"),
        (b"PROXY TCP4 256.2.3.4 5.6.7.8 1 2\r\n", "not an IPv4 address"),
        (b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", "not an IPv4 address"),
        (b"PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n", "not an IPv4 address"),
        (b"PROXY TCP4 1.2.3.\xd9\xa4 5.6.7.8 1 2\r\n", "not an IPv4 address"),
        (b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", "6 fields"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "6 fields"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", "6 fields"),
        (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "unknown protocol family"),
        (b"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n", "unknown protocol family"),
        (b"PROXY UNKNOWNX\r\n", "unknown protocol family"),
        (b"PROXY \r\n", "unknown protocol family"),
        (b"PROXY\r\n", "expected 'PROXY '"),
        (b"PROXYTCP4", "expected 'PROXY '"),
        (b"PROXY UNKNOWN\n", "lone CR or LF"),
        (b"PROXY UNKNOWN\rx", "lone CR or LF"),
        (b"PROXY UNKNOWN\r\r\n", "lone CR or LF"),
    ],
)
def test_bad_v1(data: bytes, message: str) -> None:
    with pytest.raises(ProxyHeaderError, match=message):
        parse(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (v2(0x11, 0x11, IPV4_BLOCK), "version nibble 1"),
        (v2(0x31, 0x11, IPV4_BLOCK)[:13], "version nibble 3"),
        (v2(0x22, 0x11, IPV4_BLOCK)[:13], "command nibble 2"),
        (v2(0x2F, 0x11, IPV4_BLOCK), "command nibble 15"),
        (v2(0x21, 0x41, IPV4_BLOCK)[:14], "unknown address family"),
        (v2(0x21, 0x13, IPV4_BLOCK)[:14], "unknown address family"),
        (v2(0x21, 0x11, IPV4_BLOCK[:11]), "address block of 11 bytes, TCP4 needs 12"),
        (v2(0x21, 0x11, b"", length=11)[:16], "address block of 11 bytes, TCP4 needs 12"),
        (v2(0x21, 0x21, IPV4_BLOCK), "address block of 12 bytes, TCP6 needs 36"),
        (v2(0x21, 0x31, bytes(215)), "UNIX needs 216"),
        (v2(0x21, 0x11, IPV4_BLOCK + b"\x01\x00"), "2 bytes left after the last TLV"),
        (v2(0x21, 0x11, IPV4_BLOCK + b"\x01\x00\x05abcd"), "declares 5 bytes, only 4 remain"),
        (v2(0x21, 0x11, IPV4_BLOCK + tlv(0xE0, b"a") + tlv(0xE0, b"b")), "TLV type 0xe0 appears twice"),
        (v2(0x21, 0x11, IPV4_BLOCK + tlv(PP2_TYPE_CRC32C, b"\x00\x00\x00\x00")), "checksum mismatch"),
        (v2(0x21, 0x11, IPV4_BLOCK + tlv(PP2_TYPE_CRC32C, b"\x00\x00")), "CRC32C TLV of 2 bytes"),
        (v2(0x21, 0x11, IPV4_BLOCK + tlv(PP2_TYPE_CRC32C, bytes(5))), "CRC32C TLV of 5 bytes"),
        (v2(0x21, 0x11, IPV4_BLOCK + tlv(PP2_TYPE_SSL, b"\x01\x00\x00\x00")), "SSL TLV of 4 bytes"),
        (v2(0x21, 0x11, IPV4_BLOCK + tlv(PP2_TYPE_SSL, SSL_VALUE + b"\x22")), "1 bytes left after the last SSL"),
        (v2(0x21, 0x11, IPV4_BLOCK + tlv(PP2_TYPE_SSL, SSL_VALUE + tlv(0x22, b"x"))), "sub-TLV type 0x22 appears"),
        (v2(0x21, 0x11, IPV4_BLOCK + tlv(PP2_TYPE_AUTHORITY, b"\xff")), "authority TLV is not UTF-8"),
        (v2(0x21, 0x11, IPV4_BLOCK + tlv(PP2_TYPE_SSL, b"\x01" + bytes(4) + tlv(0x22, b"\xc3"))), "CN sub-TLV"),
    ],
)
def test_bad_v2(data: bytes, message: str) -> None:
    with pytest.raises(ProxyHeaderError, match=message):
        parse(data)


def test_v2_announcing_more_than_sent_needs_data() -> None:
    lying = v2(0x21, 0x11, IPV4_BLOCK, length=100)
    assert parse(lying) is NEED_DATA
    assert parse(lying + MQTT_CONNECT) is NEED_DATA  # the MQTT bytes would be read as TLVs, once enough came
    assert parse(v2(0x21, 0x11, b"", length=0xFFFF)) is NEED_DATA


def test_v2_max_length() -> None:
    data = v2(0x21, 0x11, IPV4_BLOCK + tlv(PP2_TYPE_NOOP, bytes(100)))
    assert isinstance(parse(data, max_length=len(data)), ProxyHeader)
    with pytest.raises(ProxyHeaderError, match=f"{len(data)} bytes long, more than the {len(data) - 1} allowed"):
        parse(data[:16], max_length=len(data) - 1)  # known from the fixed header alone


def test_v2_longest_header() -> None:
    body = IPV4_BLOCK + tlv(0xE0, bytes(0xFFFF - len(IPV4_BLOCK) - 3))
    data = v2(0x21, 0x11, body)
    header = parse(data + MQTT_CONNECT)
    assert isinstance(header, ProxyHeader)
    assert header.length == 16 + 0xFFFF == len(data)
    assert len(header.tlvs[0xE0]) == 0xFFFF - 15


def test_v2_tlvs() -> None:
    body = (
        IPV4_BLOCK
        + tlv(PP2_TYPE_ALPN, b"mqtt")
        + tlv(PP2_TYPE_AUTHORITY, "brökér.example".encode())
        + tlv(PP2_TYPE_NOOP, b"pad")
        + tlv(PP2_TYPE_UNIQUE_ID, b"\x00\x01\x02")
        + tlv(PP2_TYPE_NOOP, b"")
        + tlv(PP2_TYPE_SSL, SSL_VALUE)
        + tlv(0xE0, b"")
    )
    data = v2(0x21, 0x11, body)
    header = parse(data + MQTT_CONNECT)
    assert isinstance(header, ProxyHeader)
    assert header.length == len(data)
    assert dict(header.tlvs) == {
        PP2_TYPE_ALPN: b"mqtt",
        PP2_TYPE_AUTHORITY: "brökér.example".encode(),
        PP2_TYPE_UNIQUE_ID: b"\x00\x01\x02",
        PP2_TYPE_SSL: SSL_VALUE,
        0xE0: b"",
    }
    assert header.authority == "brökér.example"
    assert header.ssl == SslInfo(
        client=PP2_CLIENT_SSL | PP2_CLIENT_CERT_CONN,
        verify=0,
        version="TLSv1.3",
        common_name="device-17",
        tlvs={
            PP2_SUBTYPE_SSL_VERSION: b"TLSv1.3",
            PP2_SUBTYPE_SSL_CN: b"device-17",
            PP2_SUBTYPE_SSL_CIPHER: b"TLS_AES_128_GCM_SHA256",
        },
    )
    assert header.ssl.tls and header.ssl.certificate_verified


@pytest.mark.parametrize(
    ("client", "verify", "verified"),
    [(PP2_CLIENT_SSL, 0, False), (PP2_CLIENT_SSL | PP2_CLIENT_CERT_CONN, 1, False), (PP2_CLIENT_CERT_CONN, 0, True)],
)
def test_ssl_certificate_verified(client: int, verify: int, verified: bool) -> None:
    header = parse(v2(0x21, 0x11, IPV4_BLOCK + tlv(PP2_TYPE_SSL, bytes([client]) + struct.pack("!I", verify))))
    assert isinstance(header, ProxyHeader) and header.ssl is not None
    assert header.ssl.certificate_verified is verified
    assert header.ssl.version is None and header.ssl.common_name is None


def test_crc32c() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C
    assert crc32c(b"") == 0
    body = IPV4_BLOCK + tlv(PP2_TYPE_AUTHORITY, b"a") + tlv(PP2_TYPE_CRC32C, bytes(4))
    zeroed = v2(0x21, 0x11, body)
    good = zeroed[:-4] + struct.pack("!I", crc32c(zeroed))
    header = parse(good)
    assert isinstance(header, ProxyHeader) and header.authority == "a"
    flipped = good[:-8] + b"b" + good[-7:]  # the authority value, before the 7-byte CRC32C TLV
    with pytest.raises(ProxyHeaderError, match="checksum mismatch"):
        parse(flipped)


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        (b"", None),
        (b"P", None),
        (b"PROX", None),
        (b"PROXY", True),
        (b"PROXY TCP4", True),
        (b"\r", None),
        (V2_SIGNATURE[:11], None),
        (V2_SIGNATURE, True),
        (V2_SIGNATURE + b"\x21", True),
        (b"\x10", False),  # an MQTT CONNECT
        (b"\x16\x03\x01", False),  # a TLS ClientHello
        (b"PRX", False),
        (b"proxy", False),
        (b"\r\n\r\n\x01", False),
        (b"GET / HTTP/1.1\r\n", False),
    ],
)
def test_looks_like_proxy(prefix: bytes, expected: bool | None) -> None:
    assert looks_like_proxy(prefix) is expected


@pytest.mark.parametrize("data", [MQTT_CONNECT, b"\x10", b"GET / HTTP/1.1\r\n", b"PRX", b"\r\n\r\n\x00\r\nQUIT\r"])
def test_no_proxy_header(data: bytes) -> None:
    with pytest.raises(ProxyHeaderError, match="no PROXY protocol header"):
        parse(data)


def test_signatures() -> None:
    assert V1_SIGNATURE == b"\x50\x52\x4f\x58\x59"
    assert V2_SIGNATURE == bytes([0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A])


def test_encoders() -> None:
    assert encode_v1() == b"PROXY UNKNOWN\r\n"
    assert encode_v1(Address("1.2.3.4", 5), Address("6.7.8.9", 10)) == b"PROXY TCP4 1.2.3.4 6.7.8.9 5 10\r\n"
    assert encode_v2(source=Address("192.168.0.1", 56324), destination=Address("10.0.0.2", 1883)) == v2(
        0x21, 0x11, IPV4_BLOCK
    )
    assert encode_v2(Command.LOCAL, Family.UNSPEC) == v2(0x20, 0x00, b"")
    with pytest.raises(ValueError, match="both addresses"):
        encode_v1(Address("1.2.3.4", 5))
    with pytest.raises(ValueError, match="different IP versions"):
        encode_v1(Address("1.2.3.4", 5), Address("::1", 5))
    with pytest.raises(ValueError, match="needs both addresses"):
        encode_v2(family=Family.TCP6)
    with pytest.raises(ValueError, match="at most 65535 fit"):
        encode_v2(Command.LOCAL, Family.UNSPEC, tlvs=[(0xE0, bytes(0xFFFF - 3)), (0xE1, b"")])


# -- properties ---------------------------------------------------------------------------------------------

PORTS = st.integers(0, 0xFFFF)
# TLV types without a meaning for the parser: NOOP is dropped, CRC32C, SSL and AUTHORITY are checked.
PLAIN_TLV_TYPES = st.integers(0, 0xFF).filter(
    lambda t: t not in (PP2_TYPE_NOOP, PP2_TYPE_CRC32C, PP2_TYPE_SSL, PP2_TYPE_AUTHORITY)
)


def addresses(version: Literal[4, 6]) -> st.SearchStrategy[Address]:
    return st.builds(lambda ip, port: Address(str(ip), port), st.ip_addresses(v=version), PORTS)


@st.composite
def v2_headers(draw: st.DrawFn) -> tuple[bytes, ProxyHeader]:
    """A v2 header from encode_v2 and what parse must make of it (length left 0)."""
    command = draw(st.sampled_from(Command))
    family = draw(st.sampled_from(Family))
    ip_version: Literal[4, 6] = 4 if family in (Family.TCP4, Family.UDP4) else 6
    has_ips = family in (Family.TCP4, Family.UDP4, Family.TCP6, Family.UDP6)
    source = draw(addresses(ip_version)) if has_ips else None
    destination = draw(addresses(ip_version)) if has_ips else None
    tlvs = draw(st.dictionaries(PLAIN_TLV_TYPES, st.binary(max_size=40), max_size=4))
    authority = draw(st.none() | st.text(max_size=20))
    if authority is not None:
        tlvs[PP2_TYPE_AUTHORITY] = authority.encode()
    noops = draw(st.lists(st.binary(max_size=5), max_size=2))
    checksum = draw(st.booleans())
    written = list(tlvs.items()) + [(PP2_TYPE_NOOP, pad) for pad in noops]
    data = encode_v2(command, family, source, destination, draw(st.permutations(written)), checksum=checksum)
    if command is Command.LOCAL or family is Family.UNSPEC:
        return data, ProxyHeader(2, command, Family.UNSPEC, None, None, 0)
    if checksum:
        tlvs[PP2_TYPE_CRC32C] = data[-4:]
    return data, ProxyHeader(2, command, family, source, destination, 0, tlvs, authority)


@st.composite
def v1_headers(draw: st.DrawFn) -> tuple[bytes, ProxyHeader]:
    family = draw(st.sampled_from([Family.TCP4, Family.TCP6, Family.UNSPEC]))
    if family is Family.UNSPEC:
        return encode_v1(), ProxyHeader(1, Command.PROXY, Family.UNSPEC, None, None, 0)
    version: Literal[4, 6] = 4 if family is Family.TCP4 else 6
    source, destination = draw(addresses(version)), draw(addresses(version))
    return encode_v1(source, destination), ProxyHeader(1, Command.PROXY, family, source, destination, 0)


HEADERS = v1_headers() | v2_headers()


def same_apart_from_length(parsed: ProxyHeader | object, expected: ProxyHeader, length: int) -> bool:
    return isinstance(parsed, ProxyHeader) and parsed == ProxyHeader(
        expected.version,
        expected.command,
        expected.family,
        expected.source,
        expected.destination,
        length,
        expected.tlvs,
        expected.authority,
        expected.ssl,
    )


@settings(max_examples=300)
@given(HEADERS, st.binary(max_size=50))
def test_encode_then_parse_round_trips(case: tuple[bytes, ProxyHeader], payload: bytes) -> None:
    data, expected = case
    assert same_apart_from_length(parse(data + payload), expected, len(data))


@settings(max_examples=100, deadline=None)
@given(HEADERS, st.binary(max_size=20))
def test_any_split_needs_data_then_gives_the_same_header(case: tuple[bytes, ProxyHeader], payload: bytes) -> None:
    data, _ = case
    stream = data + payload
    whole = parse(stream)
    assert isinstance(whole, ProxyHeader) and stream[whole.length :] == payload
    for k in range(len(stream) + 1):
        first = parse(stream[:k])  # what a receiver holds after the first read of a split stream
        if k < len(data):
            assert first is NEED_DATA, k
        else:
            assert first == whole, k


def stable_under_extension(data: bytes, more: bytes) -> None:
    """parse(data) is NEED_DATA, a header or ProxyHeaderError; a header or an error stays once more bytes
    come (a header's bytes do not change with what follows; an impossible start stays impossible)."""
    try:
        result = parse(data)
    except ProxyHeaderError:
        with pytest.raises(ProxyHeaderError):
            parse(data + more)
        return
    if isinstance(result, ProxyHeader):
        assert 0 < result.length <= len(data)
        assert parse(data + more) == result
    else:
        assert result is NEED_DATA


@settings(max_examples=500)
@given(st.binary(max_size=300), st.binary(max_size=30))
def test_random_bytes(data: bytes, more: bytes) -> None:
    stable_under_extension(data, more)


@settings(max_examples=500)
@given(
    st.sampled_from([V1_SIGNATURE + b" ", b"PROXY TCP4 ", b"PROXY TCP6 ", b"PROXY UNKNOWN", V2_SIGNATURE]),
    st.binary(max_size=300),
    st.binary(max_size=30),
)
def test_random_bytes_after_a_signature(signature: bytes, data: bytes, more: bytes) -> None:
    stable_under_extension(signature + data, more)


@settings(max_examples=500)
@given(st.integers(0x00, 0xFF), st.integers(0x00, 0xFF), st.binary(max_size=300), st.binary(max_size=30))
def test_random_v2_body(ver_cmd: int, fam: int, body: bytes, more: bytes) -> None:
    stable_under_extension(v2(ver_cmd, fam, body), more)


@settings(max_examples=300)
@given(st.lists(st.tuples(st.integers(0, 0xFF), st.binary(max_size=8)), max_size=6), st.integers(0, 40))
def test_random_tlv_sequences(tlvs: list[tuple[int, bytes]], cut: int) -> None:
    body = IPV4_BLOCK + b"".join(tlv(kind, value) for kind, value in tlvs)
    assume(cut <= len(body))
    stable_under_extension(v2(0x21, 0x11, body[: len(body) - cut]), MQTT_CONNECT)


@settings(max_examples=300)
@given(st.text(alphabet="PROXYTCP46UNKW0123456789abcdef.: \r\n", max_size=110), st.binary(max_size=10))
def test_random_v1_text(text: str, more: bytes) -> None:
    stable_under_extension(b"PROXY " + text.encode(), more)
