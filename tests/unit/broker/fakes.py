"""Fakes of what the broker talks through, for its unit tests: the metadata store of one node
(`MemoryMetadata`), a connection as the session writes to it (`RecordingSink`, `TakenOverSink`), an
authenticator (`Auth_`) and the netsplit policy (`Policy`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from vmqpy.mqtt.packets import Packet, Publish
from vmqpy.sessions import records
from vmqpy.sessions.message import Message

Handler = Callable[[records.Key, Any, Any], None]


class MemoryMetadata:
    """A metadata store of one node with nobody to replicate to: change events come at once."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, records.Key], Any] = {}
        self.handlers: dict[str, list[Handler]] = defaultdict(list)
        self.clock = 0

    def get(self, prefix: str, key: records.Key) -> Any | None:
        return self.data.get((prefix, key))

    def put(self, prefix: str, key: records.Key, value: Any, confirm: Any = None) -> None:
        old = self.data.get((prefix, key))
        self.data[(prefix, key)] = value
        for handler in self.handlers[prefix]:
            handler(key, old, value)

    def confirmation(self) -> None:
        """Nobody to confirm writes: nothing is waited for (a SUBACK leaves at once)."""

    def seal(self, confirm: Any) -> None:
        return None

    def delete(self, prefix: str, key: records.Key, confirm: Any = None) -> None:
        old = self.data.pop((prefix, key), None)
        for handler in self.handlers[prefix]:
            handler(key, old, None)

    def fold(self, prefix: str) -> Iterator[tuple[records.Key, Any]]:
        return iter([(key, value) for (p, key), value in self.data.items() if p == prefix])

    def on_change(self, prefix: str, handler: Handler) -> None:
        self.handlers[prefix].append(handler)

    def hlc_now(self) -> list[Any]:
        self.clock += 1
        return [self.clock, 0, "b"]

    def witness(self, stamp: Any) -> None:
        self.clock = max(self.clock, stamp[0]) if stamp else self.clock

    def known_to(self, peer: str, prefix: str, key: records.Key) -> bool:
        return False


class RecordingSink:
    """A connection that records what the session writes; `writable` can be switched off."""

    def __init__(self) -> None:
        self.packets: list[Packet] = []
        self.writable = True

    def write_packet(self, packet: Packet) -> None:
        self.packets.append(packet)

    def write_publish(
        self, message: Message, qos: int, retain: bool, packet_id: int | None, subscription_ids: list[int],
        now: float, dup: bool = False,
    ) -> None:
        publish = message.to_publish(qos, retain, packet_id, now, subscription_ids)
        publish.dup = dup
        self.packets.append(publish)

    def can_write(self) -> bool:
        return self.writable

    def take_over(self, reason_code: int = 0x8E) -> tuple[Message | None, float]:
        return None, 0.0

    def publishes(self) -> list[Publish]:
        return [p for p in self.packets if isinstance(p, Publish)]


class TakenOverSink(RecordingSink):
    """A connection that remembers being taken over for a connect elsewhere."""

    taken_over = False

    def take_over(self, reason_code: int = 0x8E) -> tuple[Message | None, float]:
        self.taken_over = True
        return super().take_over()


class Auth_:
    """An authenticator that gives every client the same answer: accepted, or `refusal` (a CONNACK code)."""

    def __init__(self, refusal: int | None = None) -> None:
        self.refusal = refusal

    def check(self, username: str | None, password: bytes | None) -> int | None:
        return self.refusal


class Policy:
    """The netsplit policy as the machine asks it: every operation may, but those `refused`."""

    def __init__(self, *refused: str) -> None:
        self.refused = set(refused)

    def may(self, operation: str) -> bool:
        return operation not in self.refused

    def reason(self) -> str:
        return "not ready: test"
