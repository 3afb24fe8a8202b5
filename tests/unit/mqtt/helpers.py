"""Small helpers shared by the codec tests."""

from __future__ import annotations

from vmqpy.mqtt.codec import NEED_DATA, Decoder, NeedData
from vmqpy.mqtt.decoder import LongSubscribe
from vmqpy.mqtt.packets import Packet


def decode_all(decoder: Decoder, data: bytes, buffered: int = 0) -> list[Packet]:
    """Feed `data` and drain every complete packet. Bounded: each packet consumes at least 2 bytes of `data`
    or of the `buffered` bytes fed earlier."""
    decoder.receive_data(data)
    out: list[Packet] = []
    for _ in range(len(data) + buffered + 2):
        packet = decoder.next_packet()
        if packet is NEED_DATA:
            return out
        assert not isinstance(packet, NeedData | LongSubscribe)  # long_subscribe is off: decoded whole
        out.append(packet)
    raise AssertionError("decoder did not return NEED_DATA after consuming all input")


def decode_one(decoder: Decoder, data: bytes) -> Packet:
    """Exactly one packet in `data`, consuming all of it."""
    packets = decode_all(decoder, data)
    assert len(packets) == 1, packets
    return packets[0]


def server(level: int | None = None) -> Decoder:
    """A broker-side decoder; with a level it behaves as if the CONNECT had been decoded."""
    return Decoder(server=True, protocol_level=level)


def client(level: int) -> Decoder:
    return Decoder(server=False, protocol_level=level)
