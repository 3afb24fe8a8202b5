"""A blocking MQTT 5.0 client for the workloads, on paho-mqtt 2.x driven by hand from the calling thread (no
background thread, no automatic reconnect): every call waits for its acknowledgement with a deadline and says
`ok`, `fail` (the broker refused: a reason code >= 0x80, or a CONNACK failure) or `info` (unknown: timeout,
connection lost)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

Outcome = Literal["ok", "fail", "info"]


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    code: int | None = None
    detail: str = ""


def _code(rc: Any) -> int:
    value = getattr(rc, "value", rc)
    return int(value) if isinstance(value, int) else 0x80


class Client:
    def __init__(self, client_id: str, host: str, port: int, *, clean: bool = True,
                 session_expiry: int = 0, timeout: float = 5.0) -> None:
        self.client_id, self.host, self.port = client_id, host, port
        self.clean, self.session_expiry, self.timeout = clean, session_expiry, timeout
        self._paho = paho.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=client_id,
                                 protocol=paho.MQTTv5)
        self._paho.on_connect = self._on_connect
        self._paho.on_disconnect = self._on_disconnect
        self._paho.on_message = self._on_message
        self._paho.on_subscribe = self._on_subscribe
        self._paho.on_unsubscribe = self._on_unsubscribe
        self._paho.on_publish = self._on_publish
        self._connack: int | None = None
        self._acks: dict[int, int] = {}
        self.connected = False
        self.disconnect_code: int | None = None  # set when the connection ended (server DISCONNECT or lost)
        self.server_disconnected = False
        self.messages: list[tuple[str, bytes]] = []

    # paho callbacks (run inside our own loop() calls)
    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        self._connack = _code(rc)
        self.connected = self._connack < 0x80

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        if self.connected:
            self.disconnect_code = _code(rc)
            self.server_disconnected = True
        self.connected = False

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        self.messages.append((str(msg.topic), bytes(msg.payload)))

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, rcs: Any, props: Any) -> None:
        self._acks[mid] = max(_code(rc) for rc in rcs) if rcs else 0x80

    def _on_unsubscribe(self, client: Any, userdata: Any, mid: int, rcs: Any, props: Any) -> None:
        self._acks[mid] = max((_code(rc) for rc in rcs), default=0) if rcs else 0

    def _on_publish(self, client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        self._acks[mid] = _code(rc)

    # ---------------------------------------------------------------------------------------------------
    def connect(self) -> Result:
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = self.session_expiry
        try:
            self._paho.connect(self.host, self.port, keepalive=30, clean_start=self.clean, properties=props)
        except OSError as exc:
            return Result("fail", None, f"tcp: {exc}")
        deadline = time.monotonic() + self.timeout
        while self._connack is None and time.monotonic() < deadline:
            if self._paho.loop(0.05) not in (paho.MQTT_ERR_SUCCESS, paho.MQTT_ERR_AGAIN) and self._connack is None:
                return Result("info", None, "connection lost before CONNACK")
        if self._connack is None:
            self.close()
            return Result("info", None, "no CONNACK")
        if self._connack >= 0x80:
            self.close()
            return Result("fail", self._connack)
        return Result("ok", self._connack)

    def _wait_ack(self, rc: int, mid: int) -> Result:
        if rc != paho.MQTT_ERR_SUCCESS:
            return Result("info", None, f"not sent: {paho.error_string(rc)}")
        deadline = time.monotonic() + self.timeout
        while mid not in self._acks and time.monotonic() < deadline:
            self._paho.loop(0.05)
            if not self.connected and mid not in self._acks:
                return Result("info", None, "connection lost")
        code = self._acks.pop(mid, None)
        if code is None:
            return Result("info", None, "no acknowledgement")
        return Result("fail" if code >= 0x80 else "ok", code)

    def subscribe(self, topic_filter: str, qos: int = 1) -> Result:
        rc, mid = self._paho.subscribe(topic_filter, options=SubscribeOptions(qos=qos))
        return self._wait_ack(rc, mid or 0)

    def unsubscribe(self, topic_filter: str) -> Result:
        rc, mid = self._paho.unsubscribe(topic_filter)
        return self._wait_ack(rc, mid or 0)

    def publish(self, topic: str, payload: bytes, *, retain: bool = False) -> Result:
        info = self._paho.publish(topic, payload, qos=1, retain=retain)
        return self._wait_ack(info.rc, info.mid)

    def pump(self, seconds: float) -> None:
        """Read for `seconds` (messages, DISCONNECT, keepalive)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.connected:
            self._paho.loop(min(0.05, max(0.0, deadline - time.monotonic())))

    def collect(self, quiet: float, limit: float) -> list[tuple[str, bytes]]:
        """Pump until no message arrived for `quiet` seconds (at most `limit` seconds); the messages so far."""
        start = time.monotonic()
        seen = len(self.messages)
        last = start
        while self.connected and time.monotonic() - start < limit and time.monotonic() - last < quiet:
            self._paho.loop(0.05)
            if len(self.messages) != seen:
                seen = len(self.messages)
                last = time.monotonic()
        return list(self.messages)

    def disconnect(self) -> None:
        if self.connected:
            self.connected = False
            try:
                self._paho.disconnect()
                self._paho.loop(0.05)
            except (OSError, ValueError):
                pass
        self.close()

    def close(self) -> None:
        self.connected = False
        sock = self._paho.socket()
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
