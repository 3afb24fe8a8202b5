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
    """What one publish did: how many sessions got it, which are congested, whether disk writes are pending,
    and which other nodes must get it (with the shared-subscription groups each of them serves)."""

    matched: int = 0
    dropped: int = 0
    durable: bool = False
    congested: list[Session] = field(default_factory=list)
    remote: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    refused: bool = False  # a forward to another node could not even be buffered


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
        self._remote: SubscriptionTrie[Hashable, SubEntry] = SubscriptionTrie()

    def add(self, client_id: str, entry: SubEntry) -> None:
        self._trie.add(entry.match_filter, _trie_key(client_id, entry), entry)

    def remove(self, client_id: str, entry: SubEntry) -> None:
        self._trie.remove(entry.match_filter, _trie_key(client_id, entry))

    def add_remote(self, node: str, client_id: str, entry: SubEntry) -> None:
        """A subscription of a session on another node: publishes matching it are forwarded to that node."""
        self._remote.add(entry.match_filter, (node, client_id, entry.group), entry)

    def remove_remote(self, node: str, client_id: str, entry: SubEntry) -> None:
        self._remote.remove(entry.match_filter, (node, client_id, entry.group))

    def remote_targets(self, message: Message, served_groups: set[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
        """Nodes that must get `message`: every node with a plain matching subscription, and for each shared
        group not served here, one node of its members (prefer local: groups with a member here are served here).
        """
        nodes: dict[str, list[tuple[str, str]]] = {}
        groups: dict[tuple[str, str], list[str]] = {}
        for _filter, key, entry in self._remote.match(message.topic):
            node = key[0]  # type: ignore[index]
            if entry.group is None:
                nodes.setdefault(node, [])
                continue
            group = (entry.group, entry.match_filter)
            if group not in served_groups:
                groups.setdefault(group, []).append(node)
        for group, members in groups.items():
            nodes.setdefault(self._rng.choice(sorted(set(members))), []).append(group)
        return nodes

    def __len__(self) -> int:
        return len(self._trie)

    def route(self, message: Message, now: float, only_groups: list[tuple[str, str]] | None = None) -> RouteResult:
        """Deliver to the local sessions. For a message forwarded by another node, `only_groups` are the shared
        groups this node serves for it (the others were served elsewhere); for a local publish (None) every
        group with a member here is served here, and `result.remote` says which nodes must get it too."""
        result = RouteResult()
        matches = self._trie.match(message.topic)
        if not matches:
            if only_groups is None and self._remote:
                result.remote = self.remote_targets(message, set())
            return result
        if len(matches) == 1 and matches[0][2].group is None:  # the common case: one plain subscriber
            _filter, only, entry = matches[0]
            if not (entry.options.no_local and only == message.publisher):
                ids = [] if entry.subscription_id is None else [entry.subscription_id]
                opts = entry.options
                self._deliver(result, str(only), message, opts.qos, opts.retain_as_published, ids, now)
            if only_groups is None and self._remote:
                result.remote = self.remote_targets(message, set())
            return result
        targets: dict[str, _Target] = {}
        groups: dict[tuple[str, str], list[tuple[str, SubEntry]]] = {}
        for _filter, key, entry in matches:
            if entry.group is not None:
                groups.setdefault((entry.group, entry.match_filter), []).append((key[1], entry))  # type: ignore[index]
                continue
            if entry.options.no_local and key == message.publisher:
                continue
            _add_target(targets, str(key), entry)
        allowed = None if only_groups is None else {tuple(g) for g in only_groups}
        for group, members in groups.items():
            if allowed is not None and group not in allowed:
                continue
            client_id, entry = self._pick(members)
            _add_target(targets, client_id, entry)
        for client_id, target in targets.items():
            self._deliver(
                result, client_id, message, target.qos, target.retain_as_published, target.subscription_ids, now
            )
        if only_groups is None and self._remote:
            result.remote = self.remote_targets(message, set(groups))
        return result

    def _deliver(
        self, result: RouteResult, client_id: str, message: Message, sub_qos: int, retain_as_published: bool,
        subscription_ids: list[int], now: float,
    ) -> None:
        session = self._sessions.get(client_id)
        if session is None:
            return
        qos = min(message.qos, sub_qos)
        outcome = session.deliver(message, qos, message.retain and retain_as_published, subscription_ids, now)
        if outcome is Delivery.DROPPED:
            result.dropped += 1
            return
        result.matched += 1
        if qos > 0 and session.persistent:
            result.durable = True
        if session.congested:
            result.congested.append(session)

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
