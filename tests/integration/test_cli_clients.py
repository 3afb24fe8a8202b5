"""Round trips with the mosquitto_pub / mosquitto_sub command-line clients, alone and with paho."""

from __future__ import annotations

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.integration.clients import CliSub, cli_pub, paho_props, prop, unique

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(shared_broker):
    """Tests in this module share one broker per module (unique client ids and topics); see conftest."""
    return shared_broker

VERSIONS = [pytest.param(4, id="v311"), pytest.param(5, id="v5")]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_cli_pub_to_cli_sub(broker, version, qos):
    topic = unique("cli/rt/")
    sub = CliSub(broker.port, topic, version, ["-v", "-q", str(qos)])
    try:
        sub.wait_subscribed()
        cli_pub(broker.port, topic, f"hello-{qos}", version, ["-q", str(qos)])
        rc, lines = sub.finish()
    finally:
        sub.kill()
    assert rc == 0, lines
    assert f"{topic} hello-{qos}" in lines, lines


@pytest.mark.parametrize("version", VERSIONS)
def test_paho_pub_to_cli_sub(broker, clients, version):
    topic = unique("cli/p2c/")
    sub = CliSub(broker.port, topic, version, ["-v", "-q", "1"])
    try:
        sub.wait_subscribed()
        pub = clients.paho(broker, version)
        pub.publish(topic, b"from-paho", qos=1)
        rc, lines = sub.finish()
    finally:
        sub.kill()
    assert rc == 0, lines
    assert f"{topic} from-paho" in lines, lines


@pytest.mark.parametrize("version", VERSIONS)
def test_cli_pub_to_paho_sub(broker, clients, version):
    topic = unique("cli/c2p/")
    sub = clients.paho(broker, version)
    sub.subscribe(topic, qos=1)
    cli_pub(broker.port, topic, "from-cli", version, ["-q", "1"])
    m = sub.get()
    assert (m.topic, m.payload, m.qos) == (topic, b"from-cli", 1)


def test_cli_retained_message_to_late_cli_sub(broker):
    topic = unique("cli/ret/")
    cli_pub(broker.port, topic, "kept", 5, ["-q", "1", "-r"])
    sub = CliSub(broker.port, topic, 5, ["-v", "-F", "%r %t %p"])
    try:
        rc, lines = sub.finish()
    finally:
        sub.kill()
    assert rc == 0, lines
    assert f"1 {topic} kept" in lines, lines


def test_cli_v5_user_property_to_paho(broker, clients):
    topic = unique("cli/up/")
    sub = clients.paho(broker, 5)
    sub.subscribe(topic, qos=1)
    cli_pub(broker.port, topic, "props", 5, ["-q", "1", "-D", "publish", "user-property", "color", "blue",
                                              "-D", "publish", "content-type", "text/plain"])
    m = sub.get()
    assert m.payload == b"props"
    assert prop(m, "UserProperty") == [("color", "blue")]
    assert prop(m, "ContentType") == "text/plain"


def test_paho_v5_user_property_to_cli_sub(broker, clients):
    topic = unique("cli/up2/")
    sub = CliSub(broker.port, topic, 5, ["-F", "%P|%p"])
    try:
        sub.wait_subscribed()
        pub = clients.paho(broker, 5)
        pub.publish(topic, b"pp", qos=1, props=paho_props(PacketTypes.PUBLISH, UserProperty=[("k", "v")]))
        rc, lines = sub.finish()
    finally:
        sub.kill()
    assert rc == 0, lines
    assert "k:v|pp" in lines, lines
