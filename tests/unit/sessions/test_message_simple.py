"""`Message.simple` (the hot paths' constructor, slots set directly) builds what `Message(...)` builds: every
field, including any field added to Message later (it would be left unset and fail here)."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from vmqpy.mqtt.packets import NO_PROPERTIES, Publish
from vmqpy.sessions.message import Message


@given(st.text(max_size=5), st.binary(max_size=5), st.integers(0, 2), st.booleans(), st.text(max_size=5),
       st.none() | st.integers(0, 2**63), st.integers(0, 2**63))
def test_simple_sets_every_field_as_init_does(
        topic: str, payload: bytes, qos: int, retain: bool, publisher: str, forward_id: int | None, arrived: int
) -> None:
    built = Message.simple(topic, payload, qos, retain, publisher, forward_id, arrived)
    expected = Message(topic, payload, qos, retain, publisher, forward_id=forward_id, arrived_ns=arrived)
    for field in dataclasses.fields(Message):
        assert getattr(built, field.name) == getattr(expected, field.name), field.name
    assert built.plain and built.user_properties is not Message.simple("t", b"", 0, False, "p").user_properties


def test_a_publish_without_properties_becomes_a_simple_message() -> None:
    message = Message.from_publish(Publish("t/1", b"x", 1, True, False, 7, NO_PROPERTIES), "c1", 0.0)
    assert message == Message("t/1", b"x", 1, True, "c1") and message.forward_id is None and message.arrived_ns == 0
