"""Routing of one published message to the sessions whose subscriptions match it.

The subscription trie finds the matching filters (not a scan of all filters). Per client the message goes out
once, at the highest QoS of its matching subscriptions, with all their subscription identifiers; each shared
subscription group `$share/g/f` gets it once, for one member chosen by the shared subscription policy
(`pick_member`): the publishing node decides, for every group, whether a member here gets the message or which
other node serves the group, and a forward names the groups its node serves.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from vmqpy.broker.access.read_guard import ReadGuard
from vmqpy.broker.core.remote_ack import RemoteAck
from vmqpy.broker.core.session import Session
from vmqpy.mqtt.trie import SubscriptionTrie
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import Delivery, SubEntry

PREFER_LOCAL = "prefer_local"
LOCAL_ONLY = "local_only"
RANDOM = "random"
SHARED_POLICIES = (PREFER_LOCAL, LOCAL_ONLY, RANDOM)

Group = tuple[str, str]  # (share name, topic filter without the `$share/name/` prefix)


@dataclass(frozen=True, slots=True)
class GroupPick:
    """Where one shared group's copy of a message goes: to the member `client_id` on this node, or to `node`,
    which serves the group with one of its own members."""

    client_id: str | None = None
    node: str | None = None


def pick_member(
    policy: str, local: Sequence[str], ready: Collection[str], remote: Sequence[str], rng: random.Random
) -> GroupPick | None:
    """The member of one shared group that gets a message published on this node; None when the policy allows
    none.

    `local` are the group's members on this node, `ready` those of them that are online and keep up, and
    `remote` the node of each member elsewhere (a node once per member). prefer_local: a local member when there
    is one, else a remote one; local_only: a local member or nothing; random: any member of the cluster. Online
    members come first: a local member that is offline (a persistent session) or congested is chosen only when
    no eligible member is online. A remote member counts as online here; its node puts its online members
    first. Every choice among the candidates is uniform.
    """
    if policy not in SHARED_POLICIES:
        raise ValueError(f"unknown shared subscription policy {policy!r}")
    online_here = [client_id for client_id in local if client_id in ready]
    if policy == RANDOM:
        candidates = len(online_here) + len(remote)
        if candidates:
            index = rng.randrange(candidates)
            if index < len(online_here):
                return GroupPick(client_id=online_here[index])
            return GroupPick(node=remote[index - len(online_here)])
    elif policy == PREFER_LOCAL and not local and remote:
        return GroupPick(node=rng.choice(remote))
    if not local:
        return None
    return GroupPick(client_id=rng.choice(online_here or local))


REMOTE_ROUTES_CACHED = 4096  # topics whose routes to other nodes are remembered
ROUTES_CACHED = 4096  # topics whose matching local subscriptions are remembered


def outgoing_qos(message_qos: int, subscription_qos: int, upgrade: bool) -> int:
    """The QoS a message goes out with to a subscription: the lower of the two, or with `upgrade`
    (`upgrade_outgoing_qos`, VerneMQ's non-standard option) the subscription's even when the message's is lower."""
    return subscription_qos if upgrade else min(message_qos, subscription_qos)


@dataclass(slots=True)
class RouteResult:
    """What one publish did: how many sessions got it, which are congested, whether disk writes are pending,
    and which other nodes must get it (with the shared-subscription groups each of them serves)."""

    matched: int = 0
    dropped: int = 0
    durable: bool = False
    congested: list[Session] = field(default_factory=list)
    remote: dict[str, list[Group]] = field(default_factory=dict)
    refused: bool = False  # a forward to another node could not even be buffered
    congested_nodes: list[str] = field(default_factory=list)  # nodes that asked to slow down
    remote_ack: RemoteAck | None = None  # QoS 1/2: every node it was forwarded to acknowledged it
    retain_refused: bool = False  # a retained message over its client's quota (vmqpy.broker.access.retain_quota):
    # dropped

    def __init__(
            self, matched: int = 0, dropped: int = 0, durable: bool = False, congested: list[Session] | None = None,
            remote: dict[str, list[Group]] | None = None, refused: bool = False,
            congested_nodes: list[str] | None = None, remote_ack: RemoteAck | None = None,
            retain_refused: bool = False
    ) -> None:
        self.matched = matched
        self.dropped = dropped
        self.durable = durable
        self.congested = [] if congested is None else congested
        self.remote = {} if remote is None else remote
        self.refused = refused
        self.congested_nodes = [] if congested_nodes is None else congested_nodes
        self.remote_ack = remote_ack
        self.retain_refused = retain_refused


@dataclass(slots=True)
class _Target:
    qos: int
    retain_as_published: bool
    subscription_ids: list[int]

    def __init__(self, qos: int, retain_as_published: bool, subscription_ids: list[int]) -> None:
        self.qos = qos
        self.retain_as_published = retain_as_published
        self.subscription_ids = subscription_ids


class Router:
    def __init__(
        self, sessions: Mapping[str, Session], rng: random.Random | None = None, shared_policy: str = PREFER_LOCAL
    ) -> None:
        self._sessions = sessions
        self._trie: SubscriptionTrie[Hashable, SubEntry] = SubscriptionTrie()
        # topic -> the local subscriptions matching it: like the remote routes below, the subscriptions change far
        # less often than publishes arrive (every message is routed here, and a forwarded one once more on the
        # node it is forwarded to); emptied on every change. Read only: `route` never changes a cached list.
        self._local_matches: dict[str, list[tuple[str, Hashable, SubEntry]]] = {}
        self._rng = rng or random.Random()
        self._remote: SubscriptionTrie[Hashable, SubEntry] = SubscriptionTrie()
        self._any_remote = False  # whether `_remote` holds any (read for every message: no `__len__` call)
        # topic -> (nodes with a plain matching subscription, shared group -> the nodes of its members): the
        # remote subscriptions change far less often than publishes arrive; emptied on every change
        self._remote_routes: dict[str, tuple[tuple[str, ...], dict[Group, list[str]]]] = {}
        self._shared_policy = PREFER_LOCAL
        self.shared_policy = shared_policy
        self.upgrade_qos = False  # `upgrade_outgoing_qos`: deliver at the subscription's QoS (`outgoing_qos`)
        # the ACL's deny lines judging each delivery (vmqpy.broker.access.read_guard); None: no ACL to ask
        self.read_guard: ReadGuard | None = None
        # the client ids whose ended sessions' subscriptions the sweeper has not all removed yet (the broker sets
        # the sweeper's own mapping: vmqpy.broker.core.sweeper): their routes are checked against the session (`_stale`)
        self.sweeping: Mapping[str, object] = {}

    @property
    def shared_policy(self) -> str:
        """`shared_subscription_policy`: prefer_local, local_only or random (see `pick_member`)."""
        return self._shared_policy

    @shared_policy.setter
    def shared_policy(self, policy: str) -> None:
        if policy not in SHARED_POLICIES:
            raise ValueError(f"unknown shared subscription policy {policy!r}")
        self._shared_policy = policy

    def add(self, client_id: str, entry: SubEntry) -> None:
        self._trie.add(entry.match_filter, _trie_key(client_id, entry), entry)
        self._local_matches.clear()

    def remove(self, client_id: str, entry: SubEntry) -> None:
        self._trie.remove(entry.match_filter, _trie_key(client_id, entry))
        self._local_matches.clear()

    def add_remote(self, node: str, client_id: str, entry: SubEntry) -> None:
        """A subscription of a session on another node: publishes matching it are forwarded to that node."""
        self._remote.add(entry.match_filter, (node, client_id, entry.group), entry)
        self._any_remote = True
        self._remote_routes.clear()

    def remove_remote(self, node: str, client_id: str, entry: SubEntry) -> None:
        self._remote.remove(entry.match_filter, (node, client_id, entry.group))
        self._any_remote = len(self._remote) > 0
        self._remote_routes.clear()

    def _routes_elsewhere(self, topic: str) -> tuple[tuple[str, ...], dict[Group, list[str]]]:
        """The nodes with a plain subscription matching `topic`, and the nodes of each shared group's members
        there (a node once per member), from the cache when the remote subscriptions did not change."""
        routes = self._remote_routes.get(topic)
        if routes is None:
            plain: dict[str, None] = {}
            groups: dict[Group, list[str]] = {}
            for _filter, key, entry in self._remote.match(topic):
                node = key[0]  # type: ignore[index]
                if entry.group is None:
                    plain[node] = None
                else:
                    groups.setdefault((entry.group, entry.match_filter), []).append(node)
            routes = (tuple(plain), {group: sorted(nodes) for group, nodes in groups.items()})
            if len(self._remote_routes) >= REMOTE_ROUTES_CACHED:
                self._remote_routes.clear()
            self._remote_routes[topic] = routes
        return routes

    def __len__(self) -> int:
        return len(self._trie)

    def route(self, message: Message, now: float, only_groups: list[Group] | None = None,
              only_clients: set[str] | None = None, result: RouteResult | None = None) -> RouteResult:
        """Deliver to the local sessions. For a message forwarded by another node, `only_groups` are the shared
        groups this node serves for it (the publishing node chose them), and `only_clients`, when given, the
        only subscribers it is for; for a local publish (None) the shared subscription policy chooses, per
        group, a member here or another node, and `result.remote` says which nodes must get the message, with
        the groups each of them serves. `result`: add to this one (the forwards of one batch share one) rather
        than a new one."""
        if result is None:
            result = RouteResult()
        guard = self.read_guard
        if guard is not None:  # ReadGuard.armed(), inline (once per routed message)
            acl = guard.access.acl
            if acl is None or not acl.denies:
                guard = None  # no deny line in force: nothing to judge per delivery
        matches = self._local_matches.get(message.topic)
        if matches is None:
            matches = self._trie.match(message.topic)
            if len(self._local_matches) >= ROUTES_CACHED:
                self._local_matches.clear()
            self._local_matches[message.topic] = matches
        if only_clients is not None:
            matches = [m for m in matches if m[2].group is None and str(m[1]) in only_clients]
        if not matches or (len(matches) == 1 and matches[0][2].group is None):  # the common cases: none or one
            if matches:  # one plain subscriber here
                _filter, only, entry = matches[0]
                if not (entry.options.no_local and only == message.publisher) and not (
                        self.sweeping and self._stale(str(only), entry)):
                    ids = [] if entry.subscription_id is None else [entry.subscription_id]
                    opts = entry.options
                    # a plain subscription's trie key is its client id (`_trie_key`): a str, no `str()` call for it
                    if guard is None or not guard.withholds(str(only), message.topic):
                        self._deliver(result, only, message, opts.qos, opts.retain_as_published, ids,  # type: ignore[arg-type]
                                      now)
            if only_groups is None and self._any_remote:
                self._choose_remote(result, message, {})
            return result
        targets: dict[str, _Target] = {}
        groups: dict[Group, dict[str, SubEntry]] = {}
        sweeping = self.sweeping
        for _filter, key, entry in matches:
            if sweeping and self._stale(_client_of(key, entry), entry):
                continue
            if entry.group is not None:
                groups.setdefault((entry.group, entry.match_filter), {})[key[1]] = entry  # type: ignore[index]
                continue
            if entry.options.no_local and key == message.publisher:
                continue
            _add_target(targets, str(key), entry)
        if only_groups is None:
            for client_id, entry in self._choose_remote(result, message, groups):
                _add_target(targets, client_id, entry)
        else:
            for group in dict.fromkeys((str(g), str(f)) for g, f in only_groups):
                members = groups.get(group)
                if members:
                    chosen = self._rng.choice(self._ready(list(members)) or list(members))
                    _add_target(targets, chosen, members[chosen])
        for client_id, target in targets.items():
            if guard is not None and guard.withholds(client_id, message.topic):
                continue
            self._deliver(
                result, client_id, message, target.qos, target.retain_as_published, target.subscription_ids, now
            )
        return result

    def _choose_remote(
        self, result: RouteResult, message: Message, local_groups: dict[Group, dict[str, SubEntry]]
    ) -> list[tuple[str, SubEntry]]:
        """For a publish on this node: the nodes with a plain matching subscription go into `result.remote`, and
        each shared group (members here and elsewhere) gets one member by the policy. Returns the members here
        that were chosen; the groups served elsewhere are added to their node's forward."""
        plain, remote_groups = self._routes_elsewhere(message.topic) if self._any_remote else ((), {})
        for node in plain:
            result.remote.setdefault(node, [])
        if not local_groups and not remote_groups:
            return []
        chosen_here: list[tuple[str, SubEntry]] = []
        for group in dict.fromkeys([*local_groups, *remote_groups]):
            members = local_groups.get(group, {})
            local = sorted(members)
            pick = pick_member(self._shared_policy, local, self._ready(local), remote_groups.get(group, []),
                               self._rng)
            if pick is None:
                continue
            if pick.client_id is not None:
                chosen_here.append((pick.client_id, members[pick.client_id]))
            elif pick.node is not None:
                result.remote.setdefault(pick.node, []).append(group)
        return chosen_here

    def _stale(self, client_id: str, entry: SubEntry) -> bool:
        """Whether `entry` is a subscription of an ended session of `client_id` that the sweeper has not removed
        yet: true when the client id has some waiting and its session here (a clean start made it while they
        wait) does not hold this very entry. Such a route delivers nothing: a new session never receives what
        the session it replaced subscribed to."""
        if client_id not in self.sweeping:
            return False
        session = self._sessions.get(client_id)
        return session is None or session.subscriptions.get(entry.topic_filter) is not entry

    def _ready(self, client_ids: list[str]) -> list[str]:
        """The ones whose session is online and keeps up (shared-subscription members served first)."""
        return [c for c in client_ids if (s := self._sessions.get(c)) is not None and s.online and not s.congested]

    def _deliver(
        self, result: RouteResult, client_id: str, message: Message, sub_qos: int, retain_as_published: bool,
        subscription_ids: list[int], now: float,
    ) -> None:
        session = self._sessions.get(client_id)
        if session is None:
            return
        qos = message.qos  # outgoing_qos, inline (the hot path), without a call to min
        if self.upgrade_qos or sub_qos < qos:
            qos = sub_qos
        outcome = session.deliver(message, qos, message.retain and retain_as_published, subscription_ids, now)
        if outcome is _DROPPED:
            result.dropped += 1
            return
        if outcome is _DUPLICATE:
            return
        result.matched += 1
        if qos > 0 and session.persistent:
            result.durable = True
        if session.queue and session.congested:  # an empty queue never congests: one load on the hot path
            result.congested.append(session)


# read for every delivery (Router._deliver): module constants, not a descriptor call each (Python 3.11 enums)
_DROPPED, _DUPLICATE = Delivery.DROPPED, Delivery.DUPLICATE


def _trie_key(client_id: str, entry: SubEntry) -> Hashable:
    return client_id if entry.group is None else (entry.group, client_id)


def _client_of(key: Hashable, entry: SubEntry) -> str:
    """The client id of a route's trie key (`_trie_key`)."""
    return str(key) if entry.group is None else str(key[1])  # type: ignore[index]


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
