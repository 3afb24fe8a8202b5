"""Sibling resolvers: pick one value out of concurrent versions, the same on every node.

A key's container may hold several *siblings* (values written concurrently: no write saw the
others).  Reads resolve them with the prefix's :data:`Resolver`, a pure function of the *set* of
sibling values: every node, given the same siblings in any order, must pick the same winner.  The
replica then writes the winner back (see ``docs/replication.md``, "write-back") so siblings do not
pile up.

Values that carry a hybrid-logical-clock stamp (:class:`~vmqpy.metadata.hlc.Stamp`) are *stamped*:
a ``dict`` with an ``"hlc"`` entry, or a ``list``/``tuple`` whose first item is the stamp, in either
case as ``Stamp`` or ``[wall_ms, logical, node]``.  :func:`latest_stamp` keeps the value with the
greatest stamp (the node id inside the stamp breaks ties); unstamped values lose to stamped ones and
are ordered among themselves by their msgpack encoding, so the choice is total and deterministic.

Subscriptions (one key per subscription filter) use :func:`subscription`, which is
:func:`latest_stamp`: a concurrent subscribe and unsubscribe keep the subscription because an
unsubscribe is a delete, and a delete only removes the versions it saw (the concurrent subscribe's
version is not in its context, so it survives the merge: add-wins falls out of the per-key causal
container, no resolver is involved); two concurrent subscribes (e.g. with different QoS) keep the
one with the later stamp.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack

from vmqpy.metadata.hlc import Stamp

__all__ = ["DEFAULT_RESOLVER", "Resolver", "latest_stamp", "stamp_list", "stamp_of", "subscription", "value_order"]

Resolver = Callable[[list[Any]], Any]

_UNSTAMPED = (0, 0, 0, "")


def stamp_list(value: Any) -> list[Any] | None:
    """The stamp a value carries as ``[wall_ms, logical, node]`` (fast path of :func:`stamp_of`)."""
    if type(value) is dict:
        raw = value.get("hlc")
    elif type(value) is list and value:
        raw = value[0]
    else:
        return None
    if type(raw) is list and len(raw) == 3:
        wall_ms, logical, node = raw
        if type(wall_ms) is int and type(logical) is int and type(node) is str and wall_ms >= 0 and logical >= 0:
            return raw
        return None
    stamp = stamp_of(value)
    return None if stamp is None else stamp.to_list()


def stamp_of(value: Any) -> Stamp | None:
    """The HLC stamp a value carries (``value["hlc"]`` or ``value[0]``), or None."""
    if isinstance(value, dict):
        return Stamp.parse(value.get("hlc"))
    if isinstance(value, list | tuple) and value:
        return Stamp.parse(value[0])
    return None


def value_order(value: Any) -> bytes:
    """A deterministic byte string for ordering otherwise equal-ranked values."""
    try:
        packed: bytes = msgpack.packb(value, use_bin_type=True, default=_default)
        return packed
    except (TypeError, ValueError, OverflowError):
        return repr(value).encode()


def _default(obj: Any) -> Any:
    if isinstance(obj, Stamp):
        return obj.to_list()
    raise TypeError(f"cannot order {type(obj).__name__}")


def _rank(value: Any) -> tuple[tuple[int, int, int, str], bytes]:
    stamp = stamp_of(value)
    key = _UNSTAMPED if stamp is None else (1, stamp.wall_ms, stamp.logical, stamp.node)
    return key, value_order(value)


def latest_stamp(values: list[Any]) -> Any:
    """The value with the greatest HLC stamp (None for no values); see the module docstring."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return max(values, key=_rank)


subscription: Resolver = latest_stamp
"""The resolver for subscription prefixes (see the module docstring for add-wins)."""

DEFAULT_RESOLVER: Resolver = latest_stamp
"""Used for every prefix without a resolver of its own."""
