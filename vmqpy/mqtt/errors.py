"""The one error root of vmqpy.mqtt, with the blame in the type.

`RemoteProtocolError`: the peer broke the protocol; it carries the MQTT 5.0 reason code the spec prescribes
for the answer (CONNACK or DISCONNECT) and the connection is closed after it.
`LocalProtocolError`: we misused the API (for instance encoding a packet that cannot be encoded).
"""

from __future__ import annotations

from vmqpy.mqtt import reason_codes as rc


class MQTTError(Exception):
    """Root of every error raised by vmqpy.mqtt."""


class RemoteProtocolError(MQTTError):
    """The peer sent something the spec forbids. `reason_code` is the 5.0 reason code to answer with."""

    def __init__(self, message: str, reason_code: int = rc.MALFORMED_PACKET) -> None:
        super().__init__(message)
        self.reason_code = reason_code


class MalformedPacket(RemoteProtocolError):
    """The bytes cannot be decoded (0x81)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, rc.MALFORMED_PACKET)


class ProtocolViolation(RemoteProtocolError):
    """Well-formed bytes that break a rule of the protocol (0x82), e.g. a second CONNECT."""

    def __init__(self, message: str) -> None:
        super().__init__(message, rc.PROTOCOL_ERROR)


class PacketTooLarge(RemoteProtocolError):
    """A packet larger than the maximum packet size we announced (0x95)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, rc.PACKET_TOO_LARGE)


class UnsupportedProtocolVersion(RemoteProtocolError):
    """CONNECT with a protocol name or level we do not speak (0x84; 3.1.1 return code 1)."""

    def __init__(self, message: str, level: int) -> None:
        super().__init__(message, rc.UNSUPPORTED_PROTOCOL_VERSION)
        self.level = level


class LocalProtocolError(MQTTError):
    """We were misused: e.g. asked to encode a packet that the chosen protocol version cannot carry."""
