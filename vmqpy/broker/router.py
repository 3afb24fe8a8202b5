"""Routing of one published message to the sessions whose subscriptions match it.

The subscription trie finds the matching filters (not a scan of all filters). Per client the message goes out
once, at the highest QoS of its matching subscriptions, with all their subscription identifiers; each shared
subscription group `$share/g/f` gets it once, for one member (online members first).
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from vmqpy.broker.message import Message
from vmqpy.broker.session import Delivery, Session, SubEntry
from vmqpy.broker.trie import SubscriptionTrie


@dataclass(slots=True)
class RouteResult:
    """What one publish did: how many sessions got it, which are congested, whether disk writes are pending."""

    matched: int = 0
    dropped: int = 0
    durable: bool = False
    congested: list[Session] = field(default_factory=list)


@dataclass(slots=True)
class _Target:
    qos: int
    retain_as_published: bool
    subscription_ids: list[int]


class Router:
    def __init__(self, sessions: Mapping[str, Session], rng: random.Random | None = None) -> None:
        self._sessions = sessions
        self._trie: SubscriptionTrie[Hashable, SubEntry] = SubscriptionTrie()
        self._rng = rng or random.Random()

    def add(self, client_id: str, entry: SubEntry) -> None:
        self._trie.add(entry.match_filter, _trie_key(client_id, entry), entry)

    def remove(self, client_id: str, entry: SubEntry) -> None:
        self._trie.remove(entry.match_filter, _trie_key(client_id, entry))

    def __len__(self) -> int:
        return len(self._trie)

    def route(self, message: Message, now: float) -> RouteResult:
        result = RouteResult()
        targets: dict[str, _Target] = {}
        groups: dict[tuple[str, str], list[tuple[str, SubEntry]]] = {}
        for _filter, key, entry in self._trie.match(message.topic):
            if entry.group is not None:
                groups.setdefault((entry.group, entry.match_filter), []).append((key[1], entry))  # type: ignore[index]
                continue
            client_id: str = key  # type: ignore[assignment]
            if entry.options.no_local and client_id == message.publisher:
                continue
            _add_target(targets, client_id, entry)
        for members in groups.values():
            client_id, entry = self._pick(members)
            _add_target(targets, client_id, entry)
        for client_id, target in targets.items():
            session = self._sessions.get(client_id)
            if session is None:
                continue
            qos = min(message.qos, target.qos)
            retain = message.retain and target.retain_as_published
            outcome = session.deliver(message, qos, retain, target.subscription_ids, now)
            if outcome is Delivery.DROPPED:
                result.dropped += 1
                continue
            result.matched += 1
            if qos > 0 and session.persistent:
                result.durable = True
            if session.congested:
                result.congested.append(session)
        return result

    def _pick(self, members: list[tuple[str, SubEntry]]) -> tuple[str, SubEntry]:
        online = [m for m in members if (s := self._sessions.get(m[0])) is not None and s.online and not s.congested]
        return self._rng.choice(online or members)


def _trie_key(client_id: str, entry: SubEntry) -> Hashable:
    return client_id if entry.group is None else (entry.group, client_id)


def _add_target(targets: dict[str, _Target], client_id: str, entry: SubEntry) -> None:
    opts = entry.options
    target = targets.get(client_id)
    if target is None:
        target = targets[client_id] = _Target(opts.qos, opts.retain_as_published, [])
    else:
        target.qos = max(target.qos, opts.qos)
        target.retain_as_published = target.retain_as_published or opts.retain_as_published
    if entry.subscription_id is not None:
        target.subscription_ids.append(entry.subscription_id)
