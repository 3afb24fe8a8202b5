"""MQTT 5.0 topic aliases of one connection: the ones the node gives the topics it sends (`OutboundAliases`, least
recently used first to go) and the ones the client gives the topics it publishes (`inbound_topic`). Pure.
"""

from __future__ import annotations

from collections import OrderedDict

from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.errors import ProtocolViolation, RemoteProtocolError
from vmqpy.mqtt.packets import Properties

__all__ = ["OutboundAliases", "inbound_topic"]


class OutboundAliases:
    """Topic aliases the node assigns to the topics it sends to one client: at most `maximum`, the least recently
    used one given to a new topic when all are taken. `alias_for` answers (alias, the client knows it already)."""

    __slots__ = ("_by_topic", "_properties", "maximum")

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self._by_topic: OrderedDict[str, int] = OrderedDict()
        self._properties: dict[int, Properties] = {}

    def properties(self, alias: int) -> Properties:
        """The properties of a PUBLISH that carries nothing but topic alias `alias` (made once per alias)."""
        props = self._properties.get(alias)
        if props is None:
            props = self._properties[alias] = Properties(topic_alias=alias)
        return props

    def alias_for(self, topic: str) -> tuple[int, bool]:
        by_topic = self._by_topic
        alias = by_topic.get(topic)
        if alias is not None:
            by_topic.move_to_end(topic)
            return alias, True
        if len(by_topic) < self.maximum:
            alias = len(by_topic) + 1
        else:
            _old, alias = by_topic.popitem(last=False)
        by_topic[topic] = alias
        return alias, False

    def __len__(self) -> int:
        return len(self._by_topic)


def inbound_topic(aliases: dict[int, str], maximum: int, topic: str, alias: int | None) -> str:
    """The topic of a client's PUBLISH under its topic alias (MQTT 5.0 3.3.2.3.4), the alias table updated."""
    if alias is None:
        return topic
    if alias == 0 or alias > maximum:
        raise RemoteProtocolError(f"topic alias {alias} out of range", rc.TOPIC_ALIAS_INVALID)
    if topic:
        aliases[alias] = topic
        return topic
    known = aliases.get(alias)
    if known is None:
        raise ProtocolViolation(f"unknown topic alias {alias}")
    return known
