"""Sans-I/O MQTT 3.1 / 3.1.1 / 5.0 codec: bytes in, packets out (`Decoder`), packets in, bytes out (`encode`).

The decoder is incremental: feed it any split of the byte stream with `receive_data` and call `next_packet`
until it returns `NEED_DATA`. It validates strictly and raises a `RemoteProtocolError` subclass carrying the
MQTT 5.0 reason code to answer with; after an error it is dead (it raises the same error again).
`encode` raises `LocalProtocolError` when asked for something the peer would have to reject.

This is the public module of the codec. The code lives in `decoder` (Decoder), `encoder` (encode),
`properties` (the 5.0 properties and their wire form) and `wire` (the data types all of them read and write).
"""

from __future__ import annotations

from vmqpy.mqtt.decoder import Decoder
from vmqpy.mqtt.encoder import encode, encode_plain_publish
from vmqpy.mqtt.wire import MAX_PACKET_SIZE, MAX_REMAINING_LENGTH, NEED_DATA, NeedData

__all__ = [
    "MAX_PACKET_SIZE", "MAX_REMAINING_LENGTH", "NEED_DATA", "Decoder", "NeedData", "encode", "encode_plain_publish",
]
