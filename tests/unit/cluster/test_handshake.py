"""Handshake: the transition table, the MAC, and every refusal, seen from both sides."""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import Any

import pytest

from vmqpy.cluster import handshake as hs
from vmqpy.cluster.errors import ClusterUsageError
from vmqpy.cluster.framing import NEED_DATA, Frame, FrameDecoder, FrameType
from vmqpy.cluster.handshake import (
    TRANSITIONS,
    Established,
    Handshake,
    HandshakeInput,
    HandshakeState,
    LinkRefused,
    compute_mac,
)

from .helpers import COOKIE, NONCE_A, NONCE_B

S, In = HandshakeState, HandshakeInput


def frames_of(data: bytes) -> list[Frame]:
    decoder = FrameDecoder(1 << 16)
    decoder.receive_data(data)
    out: list[Frame] = []
    for _ in range(100):
        frame = decoder.next_frame()
        if frame is NEED_DATA:
            return out
        out.append(frame)
    raise AssertionError("too many frames")


def dialer(**kw: Any) -> Handshake:
    args: dict[str, Any] = {"own_name": "a", "own_incarnation": 1, "cookie": COOKIE, "nonce": NONCE_A}
    args.update(kw)
    return Handshake(args.pop("own_name"), args.pop("own_incarnation"), args.pop("cookie"), args.pop("nonce"),
                     args.pop("expected_peer", "b"), **args)


def acceptor(**kw: Any) -> Handshake:
    args: dict[str, Any] = {"own_name": "b", "own_incarnation": 2, "cookie": COOKIE, "nonce": NONCE_B}
    args.update(kw)
    return Handshake(args.pop("own_name"), args.pop("own_incarnation"), args.pop("cookie"), args.pop("nonce"),
                     None, **args)


def feed(side: Handshake, data: bytes) -> tuple[bytes, Established | LinkRefused | None]:
    """Give every frame of `data` to `side` (stopping when it finishes); return what it wrote and its result."""
    out = b""
    result = None
    for frame in frames_of(data):
        if side.state in (S.ESTABLISHED, S.REFUSED):
            break
        written, result = side.receive(frame)
        out += written
    return out, result


def run(d: Handshake, a: Handshake) -> tuple[Any, Any, bytes]:
    """Run a dialer against an acceptor; return both results and every byte that crossed the wire."""
    wire = b""
    to_a, to_d = d.start(), a.start()
    result_d = result_a = None
    for _ in range(10):
        if not to_a and not to_d:
            break
        wire += to_a + to_d
        (next_d, r_a), (next_a, r_d) = feed(a, to_a), feed(d, to_d)
        result_a = r_a or result_a
        result_d = r_d or result_d
        to_a, to_d = next_a, next_d
    return result_d, result_a, wire


# ------------------------------------------------------------------------------------------------ the table

EXPECTED_TABLE = {
    (S.START, In.START): S.AWAIT_HELLO,
    (S.AWAIT_HELLO, In.HELLO): S.AWAIT_RESPONSE,
    (S.AWAIT_HELLO, In.BAD_HELLO): S.REFUSED,
    (S.AWAIT_HELLO, In.SELF_HELLO): S.REFUSED,
    (S.AWAIT_HELLO, In.DUPLICATE_HELLO): S.REFUSED,
    (S.AWAIT_HELLO, In.WRONG_PEER): S.REFUSED,
    (S.AWAIT_HELLO, In.OTHER): S.REFUSED,
    (S.AWAIT_HELLO, In.BYE): S.REFUSED,
    (S.AWAIT_HELLO, In.TIMEOUT): S.REFUSED,
    (S.AWAIT_RESPONSE, In.RESPONSE): S.ESTABLISHED,
    (S.AWAIT_RESPONSE, In.BAD_RESPONSE): S.REFUSED,
    (S.AWAIT_RESPONSE, In.DENIED): S.REFUSED,
    (S.AWAIT_RESPONSE, In.OTHER): S.REFUSED,
    (S.AWAIT_RESPONSE, In.BYE): S.REFUSED,
    (S.AWAIT_RESPONSE, In.TIMEOUT): S.REFUSED,
}


def test_transition_table() -> None:
    assert TRANSITIONS == EXPECTED_TABLE


@pytest.mark.parametrize("state", list(S))
@pytest.mark.parametrize("event", list(In))
def test_pairs_outside_the_table_are_misuse(state: HandshakeState, event: HandshakeInput) -> None:
    h = dialer()
    h.state = state
    if (state, event) in EXPECTED_TABLE:
        assert h._step(event) is EXPECTED_TABLE[(state, event)]
    else:
        with pytest.raises(ClusterUsageError):
            h._step(event)


def test_finished_handshakes_take_no_more_frames() -> None:
    d, a = dialer(), acceptor()
    run(d, a)
    assert d.state is S.ESTABLISHED
    with pytest.raises(ClusterUsageError):
        d.receive(Frame(FrameType.HEARTBEAT, None))
    with pytest.raises(ClusterUsageError):
        d.start()


# ------------------------------------------------------------------------------------------------ success


def test_dialer_and_acceptor_establish() -> None:
    d = dialer(listen=("10.0.0.1", 1883))
    a = acceptor(listen=("10.0.0.2", 44053))
    result_d, result_a, wire = run(d, a)
    assert result_d == Established("b", 2, ("10.0.0.2", 44053))
    assert result_a == Established("a", 1, ("10.0.0.1", 1883))
    assert d.state is a.state is S.ESTABLISHED
    assert COOKIE.encode() not in wire


def test_message_sequence_and_the_acceptor_proves_itself_last() -> None:
    d, a = dialer(), acceptor()
    hello_d, hello_a = d.start(), a.start()
    assert [f.type for f in frames_of(hello_d)] == [FrameType.HELLO]
    # the acceptor learns the dialer's HELLO and says nothing yet
    assert a.receive(frames_of(hello_d)[0]) == (b"", None)
    # the dialer answers the acceptor's HELLO with its MAC
    response_d, result = d.receive(frames_of(hello_a)[0])
    assert result is None and d.state is S.AWAIT_RESPONSE
    # the acceptor verifies it, admits, and only then sends its own MAC
    response_a, result = a.receive(frames_of(response_d)[0])
    assert result == Established("a", 1, None)
    assert [f.type for f in frames_of(response_a)] == [FrameType.CHALLENGE_RESPONSE]
    assert d.receive(frames_of(response_a)[0]) == (b"", Established("b", 2, None))


def test_mac_is_the_documented_hmac() -> None:
    def lp(b: bytes) -> bytes:
        return struct.pack(">I", len(b)) + b

    message = (
        b"vmqpy-cluster-v1" + b"D" + lp(NONCE_B) + lp(NONCE_A) + lp(b"a") + lp(b"b")
        + struct.pack(">Q", 1) + struct.pack(">Q", 2)
    )
    # the key is the cookie stretched with scrypt (frame_auth.cookie_key), as docs/cluster-links.md says
    key = hashlib.scrypt(COOKIE.encode(), salt=b"vmqpy-cluster-v1 cookie", n=1 << 14, r=8, p=1, maxmem=1 << 26,
                         dklen=32)
    expected = hmac.new(key, message, hashlib.sha256).digest()
    assert compute_mac(COOKIE, b"D", "a", 1, NONCE_A, "b", 2, NONCE_B) == expected
    # the dialer of a real exchange sends exactly that
    d, a = dialer(), acceptor()
    d.start()
    response, _ = d.receive(frames_of(a.start())[0])
    assert frames_of(response)[0].body == expected


def test_macs_differ_by_role_and_direction() -> None:
    macs = {
        compute_mac(COOKIE, b"D", "a", 1, NONCE_A, "b", 2, NONCE_B),
        compute_mac(COOKIE, b"A", "a", 1, NONCE_A, "b", 2, NONCE_B),
        compute_mac(COOKIE, b"D", "b", 2, NONCE_B, "a", 1, NONCE_A),
        compute_mac(COOKIE, b"A", "b", 2, NONCE_B, "a", 1, NONCE_A),
        compute_mac(COOKIE, b"D", "a", 1, NONCE_A, "b", 3, NONCE_B),  # the incarnation is bound
        compute_mac(COOKIE, b"D", "ab", 1, NONCE_A, "", 2, NONCE_B),  # names are length-prefixed
    }
    assert len(macs) == 6


# ------------------------------------------------------------------------------------------------ refusals


def test_wrong_cookie_is_refused_on_both_sides() -> None:
    d, a = dialer(cookie="one"), acceptor(cookie="two")
    result_d, result_a, wire = run(d, a)
    assert result_a == LinkRefused(hs.WRONG_COOKIE, "the peer's MAC does not verify")
    assert isinstance(result_d, LinkRefused)
    assert result_d.reason == hs.WRONG_COOKIE and result_d.by_peer
    assert d.state is a.state is S.REFUSED
    assert b"one" not in wire and b"two" not in wire
    # the acceptor never produced a MAC for a dialer that did not prove the cookie
    assert [f.type for f in frames_of(wire) if f.type is FrameType.CHALLENGE_RESPONSE] == [
        FrameType.CHALLENGE_RESPONSE
    ]


def test_reflected_response_is_refused() -> None:
    """The dialer's own MAC sent back to it (a reflection) does not verify."""
    d, a = dialer(), acceptor()
    d.start()
    response, _ = d.receive(frames_of(a.start())[0])
    out, result = d.receive(frames_of(response)[0])
    assert result == LinkRefused(hs.WRONG_COOKIE, "the peer's MAC does not verify")
    assert frames_of(out) == [Frame(FrameType.BYE, hs.WRONG_COOKIE)]


def test_reflected_hello_is_a_self_connection() -> None:
    a = acceptor()
    hello = a.start()
    out, result = a.receive(frames_of(hello)[0])
    assert isinstance(result, LinkRefused) and result.reason == hs.SELF_CONNECTION
    assert frames_of(out) == [Frame(FrameType.BYE, hs.SELF_CONNECTION)]


def test_dialing_oneself_is_refused_on_both_sides() -> None:
    d = Handshake("a", 7, COOKIE, NONCE_A, "b")  # dialed "b" but the address is our own
    a = Handshake("a", 7, COOKIE, NONCE_B, None)
    result_d, result_a, _ = run(d, a)
    assert isinstance(result_d, LinkRefused) and result_d.reason == hs.SELF_CONNECTION
    assert isinstance(result_a, LinkRefused) and result_a.reason == hs.SELF_CONNECTION


def test_same_name_other_incarnation_is_a_duplicate_name() -> None:
    d = Handshake("a", 1, COOKIE, NONCE_A, "a")
    a = Handshake("a", 2, COOKIE, NONCE_B, None)
    result_d, result_a, _ = run(d, a)
    assert isinstance(result_d, LinkRefused) and result_d.reason == hs.DUPLICATE_NAME
    assert isinstance(result_a, LinkRefused) and result_a.reason == hs.DUPLICATE_NAME


def test_name_mismatch_is_refused_by_the_dialer_and_reported_to_the_acceptor() -> None:
    d = dialer(expected_peer="b")
    c = Handshake("c", 3, COOKIE, NONCE_B, None)
    result_d, result_c, _ = run(d, c)
    assert result_d == LinkRefused(hs.NAME_MISMATCH, "expected 'b', reached 'c'")
    assert result_c == LinkRefused(hs.NAME_MISMATCH, "refused by peer", by_peer=True)


@pytest.mark.parametrize(
    "frame",
    [
        Frame(FrameType.METADATA, b"x"),
        Frame(FrameType.HEARTBEAT, None),
        Frame(FrameType.CHALLENGE_RESPONSE, bytes(32)),  # a response before any HELLO
    ],
)
def test_unexpected_frame_before_the_hello(frame: Frame) -> None:
    a = acceptor()
    a.start()
    out, result = a.receive(frame)
    assert isinstance(result, LinkRefused) and result.reason == hs.UNEXPECTED_FRAME
    assert frames_of(out) == [Frame(FrameType.BYE, hs.UNEXPECTED_FRAME)]


def test_second_hello_instead_of_a_response() -> None:
    d, a = dialer(), acceptor()
    hello_d = d.start()
    a.start()
    a.receive(frames_of(hello_d)[0])
    _, result = a.receive(frames_of(hello_d)[0])
    assert isinstance(result, LinkRefused) and result.reason == hs.UNEXPECTED_FRAME


def good_hello(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "b", "incarnation": 2, "nonce": NONCE_B, "listen": ["h", 1]}
    body.update(changes)
    return {k: v for k, v in body.items() if v != "DROP"}


@pytest.mark.parametrize(
    "body",
    [
        good_hello(name="DROP"),
        good_hello(name=""),
        good_hello(name="x" * 256),
        good_hello(name=b"b"),
        good_hello(incarnation=-1),
        good_hello(incarnation=2**64),
        good_hello(incarnation="2"),
        good_hello(incarnation=True),
        good_hello(nonce=b"short"),
        good_hello(nonce=b"x" * 65),
        good_hello(nonce="DROP"),
        good_hello(listen=["h"]),
        good_hello(listen=["h", 70000]),
        good_hello(listen="h:1"),
    ],
)
def test_invalid_hello(body: dict[str, Any]) -> None:
    d = dialer()
    d.start()
    _, result = d.receive(Frame(FrameType.HELLO, body))
    assert isinstance(result, LinkRefused) and result.reason == hs.INVALID_HELLO


def test_hello_with_extra_fields_is_accepted() -> None:
    d = dialer()
    d.start()
    out, result = d.receive(Frame(FrameType.HELLO, good_hello(future="field")))
    assert result is None and d.state is S.AWAIT_RESPONSE
    assert frames_of(out)[0].type is FrameType.CHALLENGE_RESPONSE


def test_admit_can_refuse_and_the_dialer_is_never_established() -> None:
    asked: list[tuple[str, int, str | None]] = []

    def admit(name: str, incarnation: int, intent: str | None) -> str | None:
        asked.append((name, incarnation, intent))
        return "duplicate link"

    d, a = dialer(), acceptor(admit=admit)
    result_d, result_a, _ = run(d, a)
    assert asked == [("a", 1, None)]
    assert result_a == LinkRefused("duplicate link", "duplicate link")
    # the refusal carries a MAC: the dialer knows a node with the cookie said it
    assert result_d == LinkRefused("duplicate link", hs.VERIFIED, by_peer=True, verified=True)
    assert d.state is S.REFUSED


def test_the_join_intent_reaches_admit_and_is_covered_by_the_mac() -> None:
    asked: list[str | None] = []

    def admit(name: str, incarnation: int, intent: str | None) -> str | None:
        asked.append(intent)
        return None

    result_d, result_a, _ = run(dialer(intent=hs.JOIN), acceptor(admit=admit))
    assert asked == [hs.JOIN]
    assert isinstance(result_d, Established) and isinstance(result_a, Established)

    # A man in the middle who strips the intent from the HELLO breaks the dialer's MAC.
    d, a = dialer(intent=hs.JOIN), acceptor(admit=admit)
    hello = frames_of(d.start())[0]
    stripped = dict(hello.body)
    del stripped["intent"]
    hello_a = a.start()
    a.receive(Frame(FrameType.HELLO, stripped))
    out_d, _ = feed(d, hello_a)
    _, result = feed(a, out_d)
    assert result == LinkRefused(hs.WRONG_COOKIE, "the peer's MAC does not verify")
    assert asked == [hs.JOIN]


def test_a_refusal_without_a_valid_mac_is_not_verified() -> None:
    d = dialer()
    a = acceptor(admit=lambda n, i, intent: "removed from the cluster")
    out_d, out_a = d.start(), a.start()
    out_d2, _ = feed(d, out_a)  # the dialer sends its MAC
    out_a2, _ = feed(a, out_d + out_d2)  # the acceptor refuses, with a MAC over the reason
    bye = frames_of(out_a2)[-1]
    assert bye.type is FrameType.BYE
    forged = dict(bye.body, reason="something else")  # the MAC no longer matches the reason
    _, result = d.receive(Frame(FrameType.BYE, forged))
    assert isinstance(result, LinkRefused) and result.reason == "something else" and not result.verified
    d2 = dialer()
    d2.start()
    _, result2 = d2.receive(Frame(FrameType.BYE, {"reason": "removed from the cluster", "mac": b"x" * 32}))
    assert isinstance(result2, LinkRefused) and result2.by_peer and not result2.verified


@pytest.mark.parametrize("intent", ["", "x" * (hs.INTENT_MAX + 1), 7, b"join"])
def test_invalid_intent_is_an_invalid_hello(intent: Any) -> None:
    a = acceptor()
    a.start()
    _, result = a.receive(Frame(FrameType.HELLO, good_hello(intent=intent)))
    assert isinstance(result, LinkRefused) and result.reason == hs.INVALID_HELLO


def test_only_a_dialer_states_an_intent() -> None:
    with pytest.raises(ClusterUsageError):
        acceptor(intent=hs.JOIN)


def test_admit_is_not_asked_when_the_cookie_is_wrong() -> None:
    asked: list[str] = []
    d = dialer(cookie="wrong")

    def admit(name: str, incarnation: int, intent: str | None) -> str | None:
        asked.append(name)
        return None

    a = acceptor(admit=admit)
    run(d, a)
    assert asked == []


def test_timeout() -> None:
    d = dialer()
    d.start()
    out, result = d.timeout()
    assert result.reason == hs.HANDSHAKE_TIMEOUT
    assert frames_of(out) == [Frame(FrameType.BYE, hs.HANDSHAKE_TIMEOUT)]


def test_bye_reason_is_truncated() -> None:
    d = dialer()
    d.start()
    _, result = d.receive(Frame(FrameType.BYE, "x" * 10_000))
    assert isinstance(result, LinkRefused) and len(result.reason) == 200 and result.by_peer


@pytest.mark.parametrize(
    "kwargs",
    [
        {"own_name": ""},
        {"own_incarnation": -1},
        {"nonce": b"short"},
        {"nonce": "x" * 16},
        {"cookie": ""},
        {"expected_peer": ""},
        {"listen": ("h",)},
    ],
)
def test_constructor_refuses_bad_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ClusterUsageError):
        dialer(**kwargs)

