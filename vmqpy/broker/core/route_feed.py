"""The broker's view of the replicated metadata store: the routing trie, the local sessions' subscriptions and
the retained messages follow the store's change events, and are rebuilt from the store when the node starts.

`RouteFeed` is the broker's (vmqpy.broker.core.broker): `on_subscription_change` and `on_retain_change` are the
store's change callbacks; `load_retained` and `load_subscriptions` fold the store at start-up (the change
events only tell changes), removing what did not survive: expired retained messages, owner records and
subscriptions of the clean sessions of a node that crashed. A subscription that moved to another node with
its session is reported to `MovedRoutes` (vmqpy.broker.core.holdback), which passes on what peers still route here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vmqpy.broker.core.holdback import MovedRoutes
from vmqpy.broker.core.ports import MetadataPort
from vmqpy.broker.core.retained import Packed, RetainedStore
from vmqpy.broker.core.router import Router
from vmqpy.broker.core.session import Session
from vmqpy.bulk_load import bulk_load
from vmqpy.sessions import records
from vmqpy.sessions.message import Message, plain_record

__all__ = ["RouteFeed"]


class RouteFeed:
    """Keeps `router`, the subscriptions of `sessions` and `retained` in step with `metadata` on node `node`."""

    def __init__(
        self, node: str, metadata: MetadataPort, router: Router, sessions: Mapping[str, Session],
        retained: RetainedStore[Message], moved: MovedRoutes,
    ) -> None:
        self.node = node
        self.metadata = metadata
        self.router = router
        self.sessions = sessions
        self.retained = retained
        self._moved = moved

    def on_subscription_change(self, key: records.Key, old: Any, new: Any) -> None:
        """Feed the routing trie (and the local session's view) from the store."""
        if old is not None:
            client_id, node, entry = records.subscription_entry(key, old)
            if node != self.node:
                self.router.remove_remote(node, client_id, entry)
            else:
                self.router.remove(client_id, entry)
                session = self.sessions.get(client_id)
                moved_to = records.subscription_entry(key, new)[1] if new is not None else None
                moved = moved_to is not None and moved_to != self.node
                if (new is None or moved) and session is not None:
                    session.subscriptions.pop(entry.topic_filter, None)
                if moved_to is not None and moved:
                    # Other nodes may route to it here a while yet: pass such forwards on (deliver_forwarded).
                    self._moved.moved(client_id, entry, moved_to)
                elif new is None:
                    self._moved.removed(client_id, entry.topic_filter)
        if new is not None:
            client_id, node, entry = records.subscription_entry(key, new)
            if node != self.node:
                self.router.add_remote(node, client_id, entry)
                return
            self.router.add(client_id, entry)
            session = self.sessions.get(client_id)
            if session is not None:
                session.subscriptions[entry.topic_filter] = entry

    def on_retain_change(self, key: records.Key, old: Any, new: Any) -> None:
        topic = key[1]
        if new is None:
            self.retained.delete(topic)
        else:
            self.retained.set(topic, records.retained_message(new))

    def load_retained(self, now: float) -> None:
        """Take the retained messages of the store; expired ones are deleted. The record of a plain message (the
        common case; it cannot expire) goes into the tree as it is, unpacked when first delivered (a million
        fewer objects to build before the listener opens: vmqpy.broker.core.retained)."""
        with bulk_load() as load:
            live: list[tuple[str, Message | Packed]] = []
            for key, value in list(self.metadata.fold(records.RETAIN)):
                if type(value) is list and len(value) == 2 and plain_record(value[1]):
                    live.append((value[1][0], value[1]))
                    continue
                message = records.retained_message(value)
                if message.expired(now):
                    self.metadata.delete(records.RETAIN, key)
                else:
                    live.append((message.topic, message))
            self.retained.set_many(live)
            load.records = len(live)

    def load_subscriptions(self) -> None:
        """Route every subscription of the store, once the persistent sessions are back in `sessions`: the
        owner records and subscriptions of this node's sessions that are not (clean sessions of before a
        crash) are deleted."""
        with bulk_load() as load:
            self._load_subscriptions()
            load.records = len(self.sessions)

    def _load_subscriptions(self) -> None:
        for key, value in list(self.metadata.fold(records.SESSION)):
            if records.session_owner(value) == self.node and str(key[1]) not in self.sessions:
                self.metadata.delete(records.SESSION, key)  # a clean session of before a crash
        for key, value in list(self.metadata.fold(records.SUBSCRIPTION)):
            client_id, node, entry = records.subscription_entry(key, value)
            if node != self.node:
                self.router.add_remote(node, client_id, entry)  # the store's change events only tell changes
                continue
            owner = self.sessions.get(client_id)
            if owner is None:
                self.metadata.delete(records.SUBSCRIPTION, key)
                continue
            owner.subscriptions[entry.topic_filter] = entry
            self.router.add(client_id, entry)
