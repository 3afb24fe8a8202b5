"""Link: every frame after the handshake is sealed; an altered, injected or replayed one closes the link."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy.cluster.errors import ClusterUsageError
from vmqpy.cluster.frame_auth import TAG_SIZE
from vmqpy.cluster.framing import FrameType, encode_frame
from vmqpy.cluster.link import CloseCause, Closed, DataFrame, LinkState

from .helpers import NONCE_B, Pair, established_pair, frames_of, make_link


def auth_failed(events: Sequence[object]) -> bool:
    return (len(events) == 1 and isinstance(events[0], Closed) and events[0].cause is CloseCause.UNAUTHENTICATED
            and "frame authentication failed" in events[0].reason)


def test_frames_after_the_handshake_carry_a_tag_and_the_handshake_frames_do_not() -> None:
    pair = Pair()
    pair.pump()
    handshake_bytes = len(pair.wire_a_to_b)
    assert frames_of(bytes(pair.wire_a_to_b))  # plain frames, no tags: the plain decoder reads them all
    sealed = pair.a.send(FrameType.METADATA, b"m")
    assert len(sealed) == len(encode_frame(FrameType.METADATA, b"m")) + TAG_SIZE
    pair.pump(extra_a=sealed)
    assert pair.events_b[-1] == DataFrame(FrameType.METADATA, b"m")
    assert len(pair.wire_a_to_b) == handshake_bytes + len(sealed)


def test_an_injected_plain_frame_closes_the_link_and_the_bye_is_sealed() -> None:
    pair = established_pair()
    events = pair.b.receive_data(encode_frame(FrameType.FORWARD, b"injected") + bytes(TAG_SIZE), 0.1)
    assert auth_failed(events)
    assert pair.b.state is LinkState.CLOSED
    bye = pair.b.data_to_send()
    # the real peer reads the BYE (it is sealed with b's key) and learns why
    assert pair.a.receive_data(bye, 0.2) == [Closed(CloseCause.PEER_BYE, events[0].reason)]  # type: ignore[union-attr]


def test_a_replayed_frame_closes_the_link() -> None:
    pair = established_pair()
    frame = pair.a.send(FrameType.FORWARD, b"pay me once")
    assert pair.b.receive_data(frame, 0.1) == [DataFrame(FrameType.FORWARD, b"pay me once")]
    assert auth_failed(pair.b.receive_data(frame, 0.2))


def test_a_frame_from_another_connection_of_the_same_nodes_is_refused() -> None:
    """Fresh nonces give every connection its own keys: a frame recorded on one link fails on the next."""
    old = established_pair()
    recorded = old.a.send(FrameType.FORWARD, b"recorded")
    new = Pair(
        make_link("a", "b", incarnation=1, nonce=bytes(range(50, 66))),
        make_link("b", None, incarnation=2, nonce=NONCE_B),
    )
    new.pump()
    assert new.b.state is LinkState.ESTABLISHED
    assert auth_failed(new.b.receive_data(recorded, 0.1))


def test_a_frame_reflected_back_to_its_sender_is_refused() -> None:
    pair = established_pair()
    assert auth_failed(pair.a.receive_data(pair.a.send(FrameType.FORWARD, b"mirror"), 0.1))


def test_seal_before_the_handshake_is_misuse() -> None:
    with pytest.raises(ClusterUsageError):
        make_link("a", "b").seal(encode_frame(FrameType.METADATA, b"x"))
    with pytest.raises(ClusterUsageError):
        make_link("a", "b").seal_all([encode_frame(FrameType.METADATA, b"x")])


def test_seal_all_counts_and_orders_like_seal() -> None:
    pair = established_pair()
    frames = [encode_frame(FrameType.METADATA, bytes([i])) for i in range(3)]
    wire = pair.a.seal_all(frames) + pair.a.seal(encode_frame(FrameType.CONTROL, {"k": 1}))
    assert pair.a.frames_sent == 4
    events = pair.b.receive_data(wire, 0.1)
    assert events == [DataFrame(FrameType.METADATA, bytes([i])) for i in range(3)] + [
        DataFrame(FrameType.CONTROL, {"k": 1})
    ]


@given(st.lists(st.binary(max_size=60), min_size=1, max_size=6), st.data())
@settings(max_examples=200)
def test_any_flipped_byte_after_the_handshake_closes_the_link(bodies: list[bytes], data: st.DataObject) -> None:
    """Whatever byte of the sealed stream a man in the middle changes, the frames before it are delivered and
    the link closes at it (as unauthenticated, or as malformed when the length prefix grows past the maximum);
    nothing altered is ever delivered."""
    pair = established_pair()
    wire = bytearray(b"".join(pair.a.send(FrameType.FORWARD, body) for body in bodies))
    position = data.draw(st.integers(0, len(wire) - 1))
    wire[position] ^= data.draw(st.integers(1, 255))
    events = pair.b.receive_data(bytes(wire), 0.1) + pair.b.receive_data(b"", 0.2)
    delivered = [e for e in events if isinstance(e, DataFrame)]
    assert delivered == [DataFrame(FrameType.FORWARD, body) for body in bodies][: len(delivered)]
    closed = [e for e in events if isinstance(e, Closed)]
    assert len(closed) == 1 and len(delivered) < len(bodies)
    assert closed[0].cause in (CloseCause.UNAUTHENTICATED, CloseCause.PROTOCOL_ERROR)
