"""Hypothesis strategies for valid MQTT packets, per protocol level and direction.

Valid means: what a compliant peer may send, so decode(encode(p)) == p must hold. For levels 3 and 4 all
5.0-only fields keep their defaults. The property values are generated from an independent, hand-written
table (below), not from vmqpy.mqtt.properties, so a wrong entry there cannot hide itself.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

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
    SubOptions,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)

# Any Unicode scalar except U+0000 and surrogates (which UTF-8 cannot carry).
mqtt_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)
topic_levels = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00/+#"), max_size=5)
topic_names = st.lists(topic_levels, min_size=1, max_size=4).map("/".join).filter(bool)
_plain_filters = st.one_of(
    topic_names,
    st.lists(st.one_of(topic_levels, st.just("+")), min_size=1, max_size=4).map("/".join).filter(bool),
    topic_names.map(lambda t: t + "/#"),
    st.just("#"),
)
share_names = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00/+#"), min_size=1,
                      max_size=4)
topic_filters = st.one_of(
    _plain_filters,
    st.builds(lambda g, f: f"$share/{g}/{f}", share_names, _plain_filters),
)
payloads = st.binary(max_size=40)
packet_ids = st.integers(1, 0xFFFF)
reason_codes = st.integers(0, 0xFF)

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFF_FFFF)
bit = st.integers(0, 1)
user_props = st.lists(st.tuples(mqtt_text, mqtt_text), max_size=3)

# Which properties each packet may carry (spec 2.2.2.2, written out independently) and their value strategies.
_PUBLISH_PROPS: dict[str, st.SearchStrategy[Any]] = {
    "payload_format_indicator": bit,
    "message_expiry_interval": u32,
    "content_type": mqtt_text,
    "response_topic": topic_names,
    "correlation_data": st.binary(max_size=8),
    "topic_alias": st.integers(1, 0xFFFF),
    "user_properties": user_props,
}
_WILL_PROPS = {k: v for k, v in _PUBLISH_PROPS.items() if k != "topic_alias"} | {"will_delay_interval": u32}
_REASON = {"reason_string": mqtt_text, "user_properties": user_props}
ALLOWED: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "CONNECT": {
        "session_expiry_interval": u32,
        "authentication_method": mqtt_text,
        "request_problem_information": bit,
        "request_response_information": bit,
        "receive_maximum": st.integers(1, 0xFFFF),
        "topic_alias_maximum": u16,
        "user_properties": user_props,
        "maximum_packet_size": st.integers(1, 0xFFFF_FFFF),
    },
    "WILL": _WILL_PROPS,
    "CONNACK": {
        "session_expiry_interval": u32,
        "assigned_client_identifier": mqtt_text,
        "server_keep_alive": u16,
        "authentication_method": mqtt_text,
        "authentication_data": st.binary(max_size=8),
        "response_information": mqtt_text,
        "server_reference": mqtt_text,
        "reason_string": mqtt_text,
        "receive_maximum": st.integers(1, 0xFFFF),
        "topic_alias_maximum": u16,
        "maximum_qos": bit,
        "retain_available": bit,
        "user_properties": user_props,
        "maximum_packet_size": st.integers(1, 0xFFFF_FFFF),
        "wildcard_subscription_available": bit,
        "subscription_identifier_available": bit,
        "shared_subscription_available": bit,
    },
    "PUBLISH_C2S": _PUBLISH_PROPS,
    "PUBLISH_S2C": _PUBLISH_PROPS
    | {"subscription_identifiers": st.lists(st.integers(1, 268_435_455), max_size=3)},
    "ACK": _REASON,
    "SUBSCRIBE": {
        "subscription_identifiers": st.lists(st.integers(1, 268_435_455), max_size=1),
        "user_properties": user_props,
    },
    "SUBACK": _REASON,
    "UNSUBSCRIBE": {"user_properties": user_props},
    "UNSUBACK": _REASON,
    "DISCONNECT": _REASON | {"session_expiry_interval": u32, "server_reference": mqtt_text},
    "AUTH": _REASON | {"authentication_method": mqtt_text, "authentication_data": st.binary(max_size=8)},
}


def properties(where: str) -> st.SearchStrategy[Properties]:
    allowed = ALLOWED[where]
    return st.fixed_dictionaries({}, optional=allowed).map(lambda kw: Properties(**kw))


def _props(level: int, where: str) -> st.SearchStrategy[Properties]:
    return properties(where) if level == 5 else st.builds(Properties)


@st.composite
def connects(draw: st.DrawFn, level: int) -> Connect:
    props = draw(_props(level, "CONNECT"))
    if level == 5 and props.authentication_method is not None:
        props.authentication_data = draw(st.none() | st.binary(max_size=8))
    will = None
    if draw(st.booleans()):
        will = Will(draw(topic_names), draw(payloads), draw(st.integers(0, 2)), draw(st.booleans()),
                    draw(_props(level, "WILL")))
    username = draw(st.none() | mqtt_text)
    password = draw(st.none() | st.binary(max_size=8))
    if level < 5 and username is None:
        password = None
    return Connect(
        client_id=draw(mqtt_text),
        protocol_level=level,
        protocol_name="MQIsdp" if level == 3 else "MQTT",
        clean_start=draw(st.booleans()),
        keep_alive=draw(u16),
        will=will,
        username=username,
        password=password,
        properties=props,
    )


def connacks(level: int) -> st.SearchStrategy[Connack]:
    if level == 5:
        return st.builds(Connack, st.booleans(), reason_codes, properties("CONNACK"))
    return st.builds(Connack, st.booleans() if level == 4 else st.just(False), st.integers(0, 5))


@st.composite
def publishes(draw: st.DrawFn, level: int, to_server: bool = True) -> Publish:
    qos = draw(st.integers(0, 2))
    props = draw(_props(level, "PUBLISH_C2S" if to_server else "PUBLISH_S2C"))
    topic = draw(topic_names)
    if props.topic_alias is not None and draw(st.booleans()):
        topic = ""
    return Publish(
        topic=topic,
        payload=draw(payloads),
        qos=qos,
        retain=draw(st.booleans()),
        dup=draw(st.booleans()) if qos else False,
        packet_id=draw(packet_ids) if qos else None,
        properties=props,
    )


def acks(cls: type[Puback | Pubrec | Pubrel | Pubcomp], level: int) -> st.SearchStrategy[Packet]:
    if level == 5:
        return st.builds(cls, packet_ids, reason_codes, properties("ACK"))
    return st.builds(cls, packet_ids)


def sub_options(level: int) -> st.SearchStrategy[SubOptions]:
    if level == 5:
        return st.builds(SubOptions, st.integers(0, 2), st.booleans(), st.booleans(), st.integers(0, 2))
    return st.builds(SubOptions, st.integers(0, 2))


@st.composite
def subscribes(draw: st.DrawFn, level: int) -> Subscribe:
    subs = []
    for topic_filter in draw(st.lists(topic_filters, min_size=1, max_size=4)):
        options = draw(sub_options(level))
        if topic_filter.startswith("$share/") and options.no_local:
            options = SubOptions(options.qos, False, options.retain_as_published, options.retain_handling)
        subs.append(Subscription(topic_filter, options))
    return Subscribe(draw(packet_ids), subs, draw(_props(level, "SUBSCRIBE")))


def subacks(level: int) -> st.SearchStrategy[Suback]:
    if level == 5:
        return st.builds(Suback, packet_ids, st.lists(reason_codes, min_size=1, max_size=5),
                         properties("SUBACK"))
    return st.builds(Suback, packet_ids, st.lists(st.sampled_from([0, 1, 2, 0x80]), min_size=1, max_size=5))


def unsubscribes(level: int) -> st.SearchStrategy[Unsubscribe]:
    return st.builds(Unsubscribe, packet_ids, st.lists(topic_filters, min_size=1, max_size=4),
                     _props(level, "UNSUBSCRIBE"))


def unsubacks(level: int) -> st.SearchStrategy[Unsuback]:
    if level == 5:
        return st.builds(Unsuback, packet_ids, st.lists(reason_codes, min_size=1, max_size=5),
                         properties("UNSUBACK"))
    return st.builds(Unsuback, packet_ids)


def disconnects(level: int) -> st.SearchStrategy[Disconnect]:
    if level == 5:
        return st.builds(Disconnect, reason_codes, properties("DISCONNECT"))
    return st.just(Disconnect())


def auths() -> st.SearchStrategy[Auth]:
    return st.builds(Auth, reason_codes, properties("AUTH"))


def client_packets(level: int) -> st.SearchStrategy[Packet]:
    """Packets a client sends after its CONNECT."""
    options: list[st.SearchStrategy[Packet]] = [
        publishes(level, to_server=True),
        acks(Puback, level),
        acks(Pubrec, level),
        acks(Pubrel, level),
        acks(Pubcomp, level),
        subscribes(level),
        unsubscribes(level),
        st.just(Pingreq()),
        disconnects(level),
    ]
    if level == 5:
        options.append(auths())
    return st.one_of(options)


def server_packets(level: int) -> st.SearchStrategy[Packet]:
    """Packets a server sends."""
    options: list[st.SearchStrategy[Packet]] = [
        connacks(level),
        publishes(level, to_server=False),
        acks(Puback, level),
        acks(Pubrec, level),
        acks(Pubrel, level),
        acks(Pubcomp, level),
        subacks(level),
        unsubacks(level),
        st.just(Pingresp()),
    ]
    if level == 5:
        options += [disconnects(level), auths()]
    return st.one_of(options)


levels = st.sampled_from([3, 4, 5])
