"""Sans-I/O challenge-response handshake of a node link (HMAC-SHA256 over the shared cookie).

The cookie never crosses the wire; each side proves it knows it by a MAC over both fresh nonces, both
names, both incarnations and its role, so no answer can be replayed on another connection or reflected
back to its author. The acceptor proves itself last, after it has checked the dialer and after the driver
has admitted the link (`admit`), so the dialer never counts as established on a link that is then refused::

    dialer (expected_peer known)                     acceptor (expected_peer None)
    HELLO {name, incarnation, nonce, listen}  --->
                                              <---   HELLO {name, incarnation, nonce, listen}
    (check the acceptor's HELLO)
    CHALLENGE_RESPONSE mac("D", dialer)       --->
                                                     (check the dialer's HELLO, verify its MAC, admit?)
                                              <---   CHALLENGE_RESPONSE mac("A", acceptor)
    (verify the acceptor's MAC) established          established

Both sides send their HELLO at once. The MAC a side sends is::

    HMAC-SHA256(key = cookie key (frame_auth.cookie_key: the cookie stretched with scrypt),
                msg = b"vmqpy-cluster-v1" || role
                      || lp(receiver nonce) || lp(sender nonce)
                      || lp(sender name as UTF-8) || lp(receiver name as UTF-8)
                      || u64(sender incarnation) || u64(receiver incarnation))

where role is b"D" for the dialer and b"A" for the acceptor, lp(x) is x preceded by its length as a 4-byte
big-endian unsigned integer, and u64 is an 8-byte big-endian unsigned integer.

A dialer that comes to join the acceptor's cluster (it is not a member yet) says so in its HELLO with
`intent: "join"`; the intent is then also covered by its MAC (`|| lp(intent)` appended to the message above),
so no one without the cookie can turn a reconnect into a join or back.

A refusing side sends BYE(reason) (unless the refusal is the peer's own BYE), so both sides log the reason.
When the acceptor refuses a dialer that proved the cookie (`admit` said no: "removed from the cluster", "not a
member", ...), the BYE body is `{reason, mac}` with mac = HMAC over the same fields in role b"R" followed by
lp(reason): the dialer can tell a refusal by a node that knows the cookie (`LinkRefused.verified`), and act on it
(a node told "removed from the cluster" stops linking), from a BYE anyone could forge.
The transitions are the table `TRANSITIONS`; what is sent on a transition depends on the role.

Once established, `session_keys()` gives the two keys of the connection (frame_auth.py), derived from the cookie,
both nonces, names and incarnations: every frame after the handshake is sealed and checked with them.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from vmqpy.cluster.errors import ClusterUsageError
from vmqpy.cluster.frame_auth import SessionKeys, cookie_key, derive_keys
from vmqpy.cluster.framing import Frame, FrameType, encode_frame

__all__ = [
    "DUPLICATE_NAME",
    "HANDSHAKE_TIMEOUT",
    "INVALID_HELLO",
    "JOIN",
    "MAC_CONTEXT",
    "NAME_MISMATCH",
    "NONCE_MAX",
    "NONCE_MIN",
    "SELF_CONNECTION",
    "TRANSITIONS",
    "UNEXPECTED_FRAME",
    "WRONG_COOKIE",
    "Admit",
    "Established",
    "Handshake",
    "HandshakeInput",
    "HandshakeState",
    "LinkRefused",
    "compute_mac",
]

MAC_CONTEXT: Final = b"vmqpy-cluster-v1"
NONCE_MIN: Final = 16
NONCE_MAX: Final = 64
NAME_MAX: Final = 255
INCARNATION_LIMIT: Final = 1 << 64
BYE_REASON_MAX: Final = 200

# Refusal reasons (stable strings: tests, metrics and operators match on them).
WRONG_COOKIE: Final = "wrong cookie"
UNEXPECTED_FRAME: Final = "unexpected frame before handshake"
NAME_MISMATCH: Final = "name mismatch"
SELF_CONNECTION: Final = "self connection"
DUPLICATE_NAME: Final = "duplicate node name"
INVALID_HELLO: Final = "invalid hello"
HANDSHAKE_TIMEOUT: Final = "handshake timeout"
INTENT_MAX: Final = 32

#: The dialer's intent when it is not a member of the acceptor's cluster yet and comes to join it.
JOIN: Final = "join"

#: ``admit(peer_name, peer_incarnation, intent)`` on the acceptor, after the dialer proved the cookie: None to
#: accept the link, or the reason to refuse it (e.g. "duplicate link"). `intent` is the dialer's (None or JOIN).
Admit = Callable[[str, int, str | None], str | None]


class HandshakeState(enum.Enum):
    START = "start"
    AWAIT_HELLO = "await hello"
    AWAIT_RESPONSE = "await response"
    ESTABLISHED = "established"
    REFUSED = "refused"


class HandshakeInput(enum.Enum):
    """What happened, as the transition table sees it (a received frame is classified into one of these)."""

    START = "start"  # we send our HELLO
    HELLO = "hello"  # an acceptable HELLO
    BAD_HELLO = "bad hello"  # a HELLO with missing or malformed fields
    SELF_HELLO = "self hello"  # our own name and incarnation: we reached ourselves
    DUPLICATE_HELLO = "duplicate hello"  # our own name with another incarnation
    WRONG_PEER = "wrong peer"  # the dialer reached a node other than the one it wanted
    RESPONSE = "response"  # a valid MAC (on the acceptor: and admitted)
    BAD_RESPONSE = "bad response"  # a MAC that does not verify: the cookies differ
    DENIED = "denied"  # acceptor: a valid MAC, but admit() refused the link
    OTHER = "other"  # any other frame, or a handshake frame out of order
    BYE = "bye"  # the peer gave up
    TIMEOUT = "timeout"  # the handshake deadline passed


_S, _I = HandshakeState, HandshakeInput
_ABORTS: Final = (_I.OTHER, _I.BYE, _I.TIMEOUT)

#: ``(state, input) -> next state``. A pair that is missing is a misuse of the API (ClusterUsageError).
TRANSITIONS: Final[dict[tuple[HandshakeState, HandshakeInput], HandshakeState]] = {
    (_S.START, _I.START): _S.AWAIT_HELLO,
    (_S.AWAIT_HELLO, _I.HELLO): _S.AWAIT_RESPONSE,
    **{
        (_S.AWAIT_HELLO, event): _S.REFUSED
        for event in (_I.BAD_HELLO, _I.SELF_HELLO, _I.DUPLICATE_HELLO, _I.WRONG_PEER, *_ABORTS)
    },
    (_S.AWAIT_RESPONSE, _I.RESPONSE): _S.ESTABLISHED,
    **{(_S.AWAIT_RESPONSE, event): _S.REFUSED for event in (_I.BAD_RESPONSE, _I.DENIED, *_ABORTS)},
}

_REASONS: Final = {
    HandshakeInput.BAD_HELLO: INVALID_HELLO,
    HandshakeInput.SELF_HELLO: SELF_CONNECTION,
    HandshakeInput.DUPLICATE_HELLO: DUPLICATE_NAME,
    HandshakeInput.WRONG_PEER: NAME_MISMATCH,
    HandshakeInput.BAD_RESPONSE: WRONG_COOKIE,
    HandshakeInput.OTHER: UNEXPECTED_FRAME,
    HandshakeInput.TIMEOUT: HANDSHAKE_TIMEOUT,
}

VERIFIED: Final = "refused by peer (verified)"  # the detail of a refusal whose MAC verified

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


@dataclass(frozen=True, slots=True)
class Established:
    """The peer proved the cookie. `peer_listen` is the listener address it advertised (or None)."""

    peer_name: str
    peer_incarnation: int
    peer_listen: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class LinkRefused:
    """The handshake failed. `reason` is one of the module's reason strings, or the peer's BYE reason
    when `by_peer`; `detail` is free text for the log."""

    reason: str
    detail: str = ""
    by_peer: bool = False
    verified: bool = False  # by_peer, and the refusal carried a MAC that proves the peer knows the cookie


def _lp(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def compute_mac(
    cookie: str,
    role: bytes,
    sender_name: str,
    sender_incarnation: int,
    sender_nonce: bytes,
    receiver_name: str,
    receiver_incarnation: int,
    receiver_nonce: bytes,
    suffix: bytes = b"",
) -> bytes:
    """The CHALLENGE_RESPONSE a sender in `role` (b"D" dialer, b"A" acceptor) sends (see the module docstring);
    `suffix` (a dialer's lp(intent), a refusal's lp(reason)) is appended to the message when not empty."""
    message = b"".join(
        (
            MAC_CONTEXT,
            role,
            _lp(receiver_nonce),
            _lp(sender_nonce),
            _lp(sender_name.encode()),
            _lp(receiver_name.encode()),
            _U64.pack(sender_incarnation),
            _U64.pack(receiver_incarnation),
            suffix,
        )
    )
    return hmac.new(cookie_key(cookie), message, hashlib.sha256).digest()


def _valid_name(name: Any) -> bool:
    return type(name) is str and 0 < len(name) <= NAME_MAX


def _valid_incarnation(incarnation: Any) -> bool:
    return type(incarnation) is int and 0 <= incarnation < INCARNATION_LIMIT


def _valid_intent(intent: Any) -> bool:
    return type(intent) is str and 0 < len(intent) <= INTENT_MAX


def _valid_listen(listen: Any) -> bool:
    if listen is None:
        return True
    return (
        isinstance(listen, (list, tuple))
        and len(listen) == 2
        and type(listen[0]) is str
        and 0 < len(listen[0]) <= NAME_MAX
        and type(listen[1]) is int
        and 0 <= listen[1] <= 65535
    )


class Handshake:
    """One side of the handshake of one connection.

    `expected_peer` is the name the dialer wants to reach; None makes this side the acceptor. `nonce` must
    be fresh random bytes (NONCE_MIN..NONCE_MAX) chosen by the caller. `admit` is asked on the acceptor only.
    Call `start()` once, then `receive(frame)` for each frame until the state is ESTABLISHED or REFUSED.
    """

    def __init__(
        self,
        own_name: str,
        own_incarnation: int,
        cookie: str,
        nonce: bytes,
        expected_peer: str | None = None,
        *,
        listen: tuple[str, int] | None = None,
        admit: Admit | None = None,
        intent: str | None = None,
    ) -> None:
        if not _valid_name(own_name):
            raise ClusterUsageError(f"node name must be 1..{NAME_MAX} characters")
        if expected_peer is not None and not _valid_name(expected_peer):
            raise ClusterUsageError(f"expected peer name must be 1..{NAME_MAX} characters")
        if not _valid_incarnation(own_incarnation):
            raise ClusterUsageError("incarnation must be an int in [0, 2**64)")
        if type(nonce) is not bytes or not NONCE_MIN <= len(nonce) <= NONCE_MAX:
            raise ClusterUsageError(f"nonce must be {NONCE_MIN}..{NONCE_MAX} bytes")
        if not isinstance(cookie, str) or not cookie:
            raise ClusterUsageError("cookie must be a non-empty string")
        if not _valid_listen(listen):
            raise ClusterUsageError("listen must be (host, port) or None")
        if intent is not None and (expected_peer is None or not _valid_intent(intent)):
            raise ClusterUsageError(f"only a dialer states an intent (1..{INTENT_MAX} characters)")
        self.own_name = own_name
        self.own_incarnation = own_incarnation
        self.expected_peer = expected_peer
        self.is_dialer = expected_peer is not None
        self._cookie = cookie
        self._nonce = nonce
        self._listen = listen
        self._admit = admit
        self.intent = intent  # ours on the dialer; the dialer's on the acceptor once its HELLO arrived
        self.state = HandshakeState.START
        self.peer_name: str | None = None
        self.peer_incarnation: int | None = None
        self.peer_listen: tuple[str, int] | None = None
        self._peer_nonce = b""
        self.result: Established | LinkRefused | None = None

    @property
    def role(self) -> bytes:
        return b"D" if self.is_dialer else b"A"

    def _step(self, event: HandshakeInput) -> HandshakeState:
        try:
            self.state = TRANSITIONS[(self.state, event)]
        except KeyError:
            raise ClusterUsageError(f"handshake in state {self.state.value!r} cannot take {event.value!r}") from None
        return self.state

    def start(self) -> bytes:
        """Our HELLO, to be written first."""
        self._step(HandshakeInput.START)
        body: dict[str, Any] = {
            "name": self.own_name,
            "incarnation": self.own_incarnation,
            "nonce": self._nonce,
            "listen": list(self._listen) if self._listen is not None else None,
        }
        if self.intent is not None:
            body["intent"] = self.intent
        return encode_frame(FrameType.HELLO, body)

    def receive(self, frame: Frame) -> tuple[bytes, Established | LinkRefused | None]:
        """Take one frame: returns (bytes to write, the result if the handshake just finished)."""
        event, detail, bye_reason = self._classify(frame)
        state = self._step(event)
        if state is HandshakeState.REFUSED:
            return self._refuse(event, detail, bye_reason)
        out = b""
        if event is HandshakeInput.HELLO and self.is_dialer:
            out = encode_frame(FrameType.CHALLENGE_RESPONSE, self._mac())
        elif state is HandshakeState.ESTABLISHED:
            if not self.is_dialer:
                out = encode_frame(FrameType.CHALLENGE_RESPONSE, self._mac())
            assert self.peer_name is not None and self.peer_incarnation is not None
            self.result = Established(self.peer_name, self.peer_incarnation, self.peer_listen)
        return out, self.result

    def session_keys(self) -> SessionKeys:
        """The keys that seal and check the frames after the handshake (frame_auth.py). Only once established."""
        if self.state is not HandshakeState.ESTABLISHED:
            raise ClusterUsageError(f"no session keys in state {self.state.value!r}")
        assert self.peer_name is not None and self.peer_incarnation is not None
        ours = (self.own_name, self.own_incarnation, self._nonce)
        theirs = (self.peer_name, self.peer_incarnation, self._peer_nonce)
        (d_name, d_incarnation, d_nonce), (a_name, a_incarnation, a_nonce) = (
            (ours, theirs) if self.is_dialer else (theirs, ours)
        )
        return derive_keys(
            self._cookie,
            dialer=self.is_dialer,
            dialer_name=d_name,
            dialer_incarnation=d_incarnation,
            dialer_nonce=d_nonce,
            acceptor_name=a_name,
            acceptor_incarnation=a_incarnation,
            acceptor_nonce=a_nonce,
        )

    def timeout(self) -> tuple[bytes, LinkRefused]:
        """The handshake deadline passed: refuse (and say so with a BYE)."""
        self._step(HandshakeInput.TIMEOUT)
        data, result = self._refuse(HandshakeInput.TIMEOUT, "", None)
        assert isinstance(result, LinkRefused)
        return data, result

    # -------------------------------------------------------------------------------------------------- inside

    def _refuse(self, event: HandshakeInput, detail: str, bye_reason: str | None) -> tuple[bytes, LinkRefused]:
        if event is HandshakeInput.BYE:
            verified = detail == VERIFIED
            result = LinkRefused(bye_reason or "closed by peer", detail or "refused by peer", by_peer=True,
                             verified=verified)
            self.result = result
            return b"", result
        if event is HandshakeInput.DENIED:
            result = LinkRefused(detail, detail)
            self.result = result
            return encode_frame(FrameType.BYE, {"reason": detail, "mac": self._denial_mac(detail)}), result
        reason = _REASONS[event]
        result = LinkRefused(reason, detail)
        self.result = result
        return encode_frame(FrameType.BYE, reason), result

    def _denial_mac(self, reason: str) -> bytes:
        assert self.peer_name is not None and self.peer_incarnation is not None
        return compute_mac(self._cookie, b"R", self.own_name, self.own_incarnation, self._nonce, self.peer_name,
                           self.peer_incarnation, self._peer_nonce, _lp(reason.encode()))

    def _intent_suffix(self) -> bytes:
        return b"" if self.intent is None else _lp(self.intent.encode())

    def _mac(self) -> bytes:
        assert self.peer_name is not None and self.peer_incarnation is not None
        return compute_mac(
            self._cookie,
            self.role,
            self.own_name,
            self.own_incarnation,
            self._nonce,
            self.peer_name,
            self.peer_incarnation,
            self._peer_nonce,
            self._intent_suffix() if self.is_dialer else b"",
        )

    def _expected_mac(self) -> bytes:
        assert self.peer_name is not None and self.peer_incarnation is not None
        return compute_mac(
            self._cookie,
            b"A" if self.is_dialer else b"D",
            self.peer_name,
            self.peer_incarnation,
            self._peer_nonce,
            self.own_name,
            self.own_incarnation,
            self._nonce,
            b"" if self.is_dialer else self._intent_suffix(),
        )

    def _classify(self, frame: Frame) -> tuple[HandshakeInput, str, str | None]:
        """(input, detail for the log, the peer's BYE reason)."""
        if frame.type is FrameType.BYE:
            return self._classify_bye(frame.body)
        if self.state is HandshakeState.AWAIT_HELLO and frame.type is FrameType.HELLO:
            return self._classify_hello(frame.body)
        if self.state is HandshakeState.AWAIT_RESPONSE and frame.type is FrameType.CHALLENGE_RESPONSE:
            if not hmac.compare_digest(frame.body, self._expected_mac()):
                return HandshakeInput.BAD_RESPONSE, "the peer's MAC does not verify", None
            if not self.is_dialer and self._admit is not None:
                assert self.peer_name is not None and self.peer_incarnation is not None
                denial = self._admit(self.peer_name, self.peer_incarnation, self.intent)
                if denial is not None:
                    return HandshakeInput.DENIED, denial, None
            return HandshakeInput.RESPONSE, "", None
        return HandshakeInput.OTHER, f"{frame.type.name} while {self.state.value}", None

    def _classify_bye(self, body: Any) -> tuple[HandshakeInput, str, str | None]:
        """A BYE: a plain reason, or (an acceptor's refusal after our MAC) a reason with its own MAC."""
        if not isinstance(body, dict):
            return HandshakeInput.BYE, "", str(body)[:BYE_REASON_MAX]
        reason = str(body.get("reason", ""))[:BYE_REASON_MAX]
        mac = body.get("mac")
        if (self.is_dialer and self.state is HandshakeState.AWAIT_RESPONSE and type(mac) is bytes
                and self.peer_name is not None and self.peer_incarnation is not None):
            expected = compute_mac(self._cookie, b"R", self.peer_name, self.peer_incarnation, self._peer_nonce,
                                   self.own_name, self.own_incarnation, self._nonce, _lp(reason.encode()))
            if hmac.compare_digest(mac, expected):
                return HandshakeInput.BYE, VERIFIED, reason
        return HandshakeInput.BYE, "", reason

    def _classify_hello(self, body: dict[Any, Any]) -> tuple[HandshakeInput, str, str | None]:
        name = body.get("name")
        incarnation = body.get("incarnation")
        nonce = body.get("nonce")
        listen = body.get("listen")
        if not _valid_name(name):
            return HandshakeInput.BAD_HELLO, "name missing or invalid", None
        if not _valid_incarnation(incarnation):
            return HandshakeInput.BAD_HELLO, "incarnation missing or invalid", None
        if type(nonce) is not bytes or not NONCE_MIN <= len(nonce) <= NONCE_MAX:
            return HandshakeInput.BAD_HELLO, "nonce missing or invalid", None
        if not _valid_listen(listen):
            return HandshakeInput.BAD_HELLO, "listen address invalid", None
        intent = body.get("intent")
        if intent is not None and not _valid_intent(intent):
            return HandshakeInput.BAD_HELLO, "intent invalid", None
        if nonce == self._nonce:
            return HandshakeInput.SELF_HELLO, "our own nonce came back", None
        if name == self.own_name:
            if incarnation == self.own_incarnation:
                return HandshakeInput.SELF_HELLO, "the peer has our name and incarnation", None
            return HandshakeInput.DUPLICATE_HELLO, f"another node is named {name!r} (incarnation {incarnation})", None
        if self.expected_peer is not None and name != self.expected_peer:
            return HandshakeInput.WRONG_PEER, f"expected {self.expected_peer!r}, reached {name!r}", None
        self.peer_name = name
        self.peer_incarnation = incarnation
        self.peer_listen = (listen[0], listen[1]) if listen is not None else None
        self._peer_nonce = nonce
        if not self.is_dialer:
            self.intent = intent
        return HandshakeInput.HELLO, "", None
