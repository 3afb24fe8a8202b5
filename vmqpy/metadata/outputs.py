"""What a :class:`~vmqpy.metadata.replica.Replica` hands back to its driver: each call returns a list of these.

:class:`SendTo` (a message to one peer), :class:`Changed` (a key's resolved value changed), :class:`Persist` (a
storage write; the driver applies them in the order given), :class:`Logged` (a replication-log event) and
:class:`Acked` (a peer applied writes of this node: it answers the pushes of the acknowledged prefixes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:  # annotations only: messages imports the row codecs, which build Persist outputs
    from vmqpy.metadata.fields import Key
    from vmqpy.metadata.messages import StoreMessage

__all__ = ["Acked", "Changed", "Logged", "Output", "Persist", "SendTo"]


@dataclass(slots=True)
class SendTo:
    """Send ``message`` to ``peer``."""

    peer: str
    message: StoreMessage


@dataclass(slots=True)
class Changed:
    """The resolved value of ``prefix``/``key`` changed (None = absent), by a local or a remote write."""

    prefix: str
    key: Key
    old: Any
    new: Any


@dataclass(slots=True)
class Persist:
    """A storage write in ``table`` (all start with ``md_``); ``value`` None deletes the row."""

    table: str
    key: bytes
    value: bytes | None


@dataclass(slots=True)
class Logged:
    """A replication-log event: ``md_write``, ``md_apply``, ``md_exchange`` or ``md_gc``."""

    event: str
    fields: dict[str, Any]


@dataclass(slots=True)
class Acked:
    """``peer`` applied this node's writes ``counters`` (their pushes: ``messages.PushAck``)."""

    peer: str
    counters: tuple[int, ...]


Output: TypeAlias = SendTo | Changed | Persist | Logged | Acked
