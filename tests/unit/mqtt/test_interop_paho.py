"""Interop: a real paho-mqtt client (3.1.1 and 5.0) talks to a tiny loopback fake broker built on our codec.

paho writes CONNECT / SUBSCRIBE / PUBLISH / UNSUBSCRIBE / PINGREQ / DISCONNECT that our Decoder must accept,
and must accept the CONNACK / SUBACK / PUBLISH / PUBACK / UNSUBACK we encode.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from vmqpy.mqtt.codec import NEED_DATA, Decoder, NeedData, encode
from vmqpy.mqtt.decoder import LongSubscribe
from vmqpy.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Publish,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)

TIMEOUT = 15.0


def _fake_broker(listener: socket.socket, received: list[Packet], errors: list[BaseException]) -> None:
    try:
        conn, _ = listener.accept()
        conn.settimeout(TIMEOUT)
        decoder = Decoder()
        level = 4
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                decoder.receive_data(data)
                while (packet := decoder.next_packet()) is not NEED_DATA:
                    assert not isinstance(packet, NeedData | LongSubscribe)
                    received.append(packet)
                    out: list[Packet] = []
                    if isinstance(packet, Connect):
                        level = packet.protocol_level
                        out.append(Connack(False, 0, Properties(topic_alias_maximum=5) if level == 5
                                           else Properties()))
                    elif isinstance(packet, Subscribe):
                        out.append(Suback(packet.packet_id, [s.options.qos for s in packet.subscriptions]))
                        out.append(Publish("greet/you", b"hello", qos=1, packet_id=77,
                                           properties=Properties(user_properties=[("k", "v")])
                                           if level == 5 else Properties()))
                    elif isinstance(packet, Publish) and packet.qos == 1:
                        assert packet.packet_id is not None
                        out.append(Puback(packet.packet_id))
                    elif isinstance(packet, Unsubscribe):
                        out.append(Unsuback(packet.packet_id, [0] * len(packet.topic_filters) if level == 5 else []))
                    elif isinstance(packet, Pingreq):
                        out.append(Pingresp())
                    elif isinstance(packet, Disconnect):
                        return
                    for p in out:
                        conn.sendall(encode(p, level))
    except BaseException as e:  # reported by the test
        errors.append(e)


@pytest.mark.parametrize("protocol", [paho.MQTTv311, paho.MQTTv5], ids=["3.1.1", "5.0"])
def test_paho_client_against_our_codec(protocol: Any) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(TIMEOUT)
    port = listener.getsockname()[1]
    received: list[Packet] = []
    errors: list[BaseException] = []
    broker = threading.Thread(target=_fake_broker, args=(listener, received, errors), daemon=True)
    broker.start()

    got_message = threading.Event()
    published = threading.Event()
    unsubscribed = threading.Event()
    messages: list[Any] = []

    c = paho.Client(paho.CallbackAPIVersion.VERSION2,  # type: ignore[attr-defined]
                    client_id="paho-interop", protocol=protocol)
    c.username_pw_set("user", "secret")
    c.will_set("will/topic", b"gone", qos=1, retain=True)
    def on_message(client: Any, userdata: Any, msg: Any) -> None:
        messages.append(msg)
        got_message.set()

    c.on_message = on_message
    c.on_publish = lambda client, userdata, mid, rc, props: published.set()
    c.on_unsubscribe = lambda client, userdata, mid, rcs, props: unsubscribed.set()
    c.on_subscribe = lambda *args: None
    try:
        if protocol == paho.MQTTv5:
            props = PahoProperties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            props.SessionExpiryInterval = 30
            c.connect("127.0.0.1", port, keepalive=30, properties=props)
        else:
            c.connect("127.0.0.1", port, keepalive=30)
        c.loop_start()
        c.subscribe([("greet/#", 1), ("other/+", 0)])
        assert got_message.wait(TIMEOUT), errors
        if protocol == paho.MQTTv5:
            pub_props = PahoProperties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            pub_props.MessageExpiryInterval = 60
            pub_props.UserProperty = ("a", "b")
            c.publish("sensor/1", b"\x00\x01", qos=1, properties=pub_props)
        else:
            c.publish("sensor/1", b"\x00\x01", qos=1)
        assert published.wait(TIMEOUT), errors
        c.unsubscribe("other/+")
        assert unsubscribed.wait(TIMEOUT), errors
        c.disconnect()
        broker.join(TIMEOUT)
    finally:
        c.loop_stop()
        listener.close()
    assert not errors, errors
    assert not broker.is_alive()

    assert messages[0].topic == "greet/you" and messages[0].payload == b"hello" and messages[0].qos == 1
    level = 5 if protocol == paho.MQTTv5 else 4
    connect = received[0]
    assert isinstance(connect, Connect)
    assert (connect.client_id, connect.protocol_level, connect.username, connect.password) == (
        "paho-interop", level, "user", b"secret")
    assert connect.will is not None
    assert (connect.will.topic, connect.will.payload, connect.will.qos, connect.will.retain) == (
        "will/topic", b"gone", 1, True)
    if level == 5:
        assert connect.properties.session_expiry_interval == 30
    subscribe = next(p for p in received if isinstance(p, Subscribe))
    assert [(s.topic_filter, s.options.qos) for s in subscribe.subscriptions] == [("greet/#", 1), ("other/+", 0)]
    publish = next(p for p in received if isinstance(p, Publish))
    assert (publish.topic, publish.payload, publish.qos) == ("sensor/1", b"\x00\x01", 1)
    if level == 5:
        assert publish.properties.message_expiry_interval == 60
        assert publish.properties.user_properties == [("a", "b")]
    assert any(isinstance(p, Puback) and p.packet_id == 77 for p in received)  # paho acked our PUBLISH
    assert any(isinstance(p, Unsubscribe) and p.topic_filters == ["other/+"] for p in received)
    assert isinstance(received[-1], Disconnect)
