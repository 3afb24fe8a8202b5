"""The cluster service of one node: membership, join and leave, link admission, reachability and the cluster
view, over the node links of `ClusterNetwork`. The forwarding of publishes between nodes is forward_driver.py's
(node.py builds its drivers and hands them over: the service sends what a peer did not acknowledge again when its
link comes back, and fails it when the peer leaves).

Frames reach the service through the node's control table (vmqpy.cluster.controls), which node.py fills: the
service takes REACHABILITY frames (`on_reports`) and the CONTROL ops of `control_ops` (join, join_ok, removed).
Other services follow the cluster through hooks that node.py registers with `add_hooks` (a peer's reachability,
a change of the members, the extra columns of `cluster show`).

The metadata store runs over the same links (METADATA frames, replica ids `name#incarnation`). Membership is
the `membership` prefix of the store (see membership.py); the view is computed from every member's
reachability reports (view.py).

Who may link to this node (`_admission`): a member (with the incarnation we know), a node that comes to join
(its HELLO says so), or one we admitted to join already. A node removed from the cluster is refused with
REMOVED, a node we do not know with NOT_A_MEMBER (a join that has not reached us yet: it tries again). A node
that is told REMOVED by a member, finds its own membership record deleted, or is sent `removed` by a member
that drops it, has left: it persists that (node.py writes `DATA_DIR/left`), links to no one, serves no client,
and comes back only through `cluster join`, as a new incarnation with an empty store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import structlog

from vmqpy.cluster import membership as ms
from vmqpy.cluster.errors import CommandRefused
from vmqpy.cluster.forward_driver import ForwardDriver
from vmqpy.cluster.framing import FrameType
from vmqpy.cluster.handshake import JOIN
from vmqpy.cluster.service_ports import Network
from vmqpy.cluster.view import View, compute
from vmqpy.metadata.service import MetadataService

log = structlog.get_logger("vmqpy.cluster")

JOIN_TIMEOUT = 5.0
CATCH_UP_TIMEOUT = 30.0  # a join: how long the node waits (taking no client) for the discovery node's records
JOINING_TTL = 30.0  # a node admitted to join whose membership record has not arrived is forgotten after this
HANDOFF_TIMEOUT = 10.0  # a live member that leaves: how long the remaining node waits to hold all its writes

# Refusals of a link handshake (the dialer logs them; REMOVED makes it stop: see the module doc).
REMOVED = "removed from the cluster"
NOT_A_MEMBER = "not a member of this cluster"
NODE_LEFT = "this node left its cluster"

#: ``hook(peer, reachable)``: a link to `peer` came up (True) or went down (False).
ReachabilityHook: TypeAlias = Callable[[str, bool], None]
#: ``hook()``: the members or their incarnations changed.
MembershipHook: TypeAlias = Callable[[], None]
#: ``columns(member)``: extra columns of `cluster show` for the row of `member`.
ShowColumns: TypeAlias = Callable[[str], dict[str, Any]]


async def poll(done: Callable[[], bool], timeout: float, give_up: Callable[[], bool] | None = None) -> bool:
    """Wait until `done()` (True), checking every 20 ms, at most `timeout` seconds or until `give_up()`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done():
        if loop.time() >= deadline or (give_up is not None and give_up()):
            return False
        await asyncio.sleep(0.02)
    return True


class ClusterService:
    def __init__(
        self,
        name: str,
        incarnation: int,
        address: tuple[str, int],
        network: Network,
        metadata: MetadataService,
        *,
        forwarding: ForwardDriver,
        replication: ForwardDriver,
        on_removed: Callable[[], None],
        on_view: Callable[[View], None] | None = None,
        gossip_interval: float = 0.25,
        left: str | None = None,
        reincarnate: Callable[[], Awaitable[int]] | None = None,
        joining: Callable[[bool], None] | None = None,
        incarnations: dict[str, int] | None = None,
    ) -> None:
        """`forwarding`: the publishes' forwarding driver (FORWARD frames, `fwd_ack`); `replication`: the queue
        replicas' (REPLICA frames, `rep_ack`; vmqpy.replicas). `left`: this node was removed from its cluster
        before, by that node (node.py read `DATA_DIR/left`); it starts alone and refuses every link until `join`.
        `on_removed()`: this node just learned it was removed (`removed_by` says from whom). `reincarnate()`:
        empty the store and make a new incarnation (returned), for a join after a removal. `joining(on)`: a join
        runs and this node does not hold the cluster's records yet (on), or it does now or gave up (off).
        `incarnations`: the members' incarnations, shared with the replica links (this node's is set here)."""
        self.name = name
        self.incarnation = incarnation
        self.address = address
        self.network = network
        self.metadata = metadata
        self._on_removed = on_removed
        self._on_view = on_view
        self._gossip_interval = gossip_interval
        self.members: dict[str, ms.Member] = {}
        # members, and discovery nodes during a join
        self.incarnations: dict[str, int] = {} if incarnations is None else incarnations
        self.incarnations[name] = incarnation
        self.reports: dict[str, set[str]] = {}
        self.view = compute(name, [name], {})
        self.counters = {"netsplit_detected": 0, "netsplit_resolved": 0}  # and the forwarding's (stats())
        self.forwarding = forwarding
        self.replication = replication
        self._drivers = (forwarding, replication)
        self._joins: dict[str, asyncio.Future[int]] = {}
        # node name -> (replica id, loop time it was admitted): peers before their membership record arrives
        self._joining: dict[str, tuple[str, float]] = {}
        self._announcing = False  # we joined, and no member is known to hold our record yet: dial with JOIN
        self._announcing_since = 0.0
        self._leaving_self = False  # `cluster leave` of this node: the removal is on its way to the others
        self._removing: set[str] = set()  # members this node removed whose links stay until the others know
        self._reincarnate = reincarnate
        self._set_joining = joining or (lambda _on: None)
        self._restarted = False  # a new incarnation after a leave that has not joined a cluster yet
        self._task: asyncio.Task[None] | None = None
        self.removed = left is not None
        self.removed_by: str | None = left
        self._reachability_hooks: list[ReachabilityHook] = []
        self._membership_hooks: list[MembershipHook] = []
        self._show_columns: list[ShowColumns] = []

    def add_hooks(self, *, reachability: ReachabilityHook | None = None, membership: MembershipHook | None = None,
                  show_columns: ShowColumns | None = None) -> None:
        """Another service follows the cluster (node.py registers them, in the order they are called): a peer's
        reachability, a change of the members, extra columns of `cluster show`."""
        if reachability is not None:
            self._reachability_hooks.append(reachability)
        if membership is not None:
            self._membership_hooks.append(membership)
        if show_columns is not None:
            self._show_columns.append(show_columns)

    def control_ops(self) -> dict[str, Callable[[str, dict[str, Any]], None]]:
        """The CONTROL ops the service takes (node.py registers them in the control table)."""
        return {"removed": self._on_removed_frame, "join": self._on_join, "join_ok": self._on_join_ok}

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.network.on_reachability(self._on_reachability)
        self.network.set_admission(self._admission)
        self.network.on_refused(self._on_refused)
        self.metadata.on_change(ms.MEMBERSHIP, self._on_membership)
        if self.removed:
            log.warning("this node left its cluster: it links to no one and serves no client until "
                        "`vmq-admin cluster join` makes it a new incarnation")
            self.metadata.freeze()
        else:
            self._put_own_record()
        self._refresh_members()
        self._task = asyncio.get_running_loop().create_task(self._gossip())

    async def stop(self) -> None:
        for driver in self._drivers:
            driver.flush()  # this turn's forwards still go to the links
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    # ------------------------------------------------------------------------------------------ membership

    def _put_own_record(self) -> None:
        own = ms.Member(self.name, self.incarnation, self.address[0], self.address[1])
        current = self.metadata.get(ms.MEMBERSHIP, (self.name,))
        if current is None or ms.member_of((self.name,), current) != own:
            self.metadata.put(ms.MEMBERSHIP, (self.name,), own.value(self.metadata.hlc_now()))

    def _on_membership(self, key: Any, old: Any, new: Any) -> None:
        if key == (self.name,) and not self.removed and not self._leaving_self:
            if new is None and old is not None:
                self._learn_removed(self.name)
                return
            if new is not None and ms.member_of(key, new).incarnation != self.incarnation:
                self._put_own_record()  # a record of a former incarnation came back as a sibling: ours wins
        self._refresh_members()

    def _learn_removed(self, by: str) -> None:
        """This node is no longer a member (see the module doc): stop linking, tell node.py (it persists it)."""
        if self.removed:
            return
        self.removed = True
        self.removed_by = by
        self._announcing = False
        log.warning("this node was removed from the cluster", told_by=by)
        self._refresh_members()
        self.metadata.freeze()  # nothing it writes from now on could reach anyone: it is wiped at the rejoin
        self._on_removed()

    def _refresh_members(self) -> None:
        members = ms.members(self.metadata.fold(ms.MEMBERSHIP))
        if self.removed:
            members = {self.name: members.get(self.name) or ms.Member(self.name, self.incarnation, *self.address)}
        before, self.members = self.members, members  # the new members first: closing links update the view
        for name in set(before) - set(members):
            if name != self.name and name not in self._removing:
                self._drop(name, before[name].incarnation)
        intent = JOIN if self._announcing else None
        for name, member in members.items():
            if name != self.name and before.get(name) != member:
                self.network.add_peer(name, member.host, member.port, intent)
        for name, member in members.items():
            self.incarnations[name] = member.incarnation
            if self._joining_id(name) == member.replica_id:
                del self._joining[name]
        self._set_replica_peers()
        self._update_view()
        if before != members:
            for hook in list(self._membership_hooks):
                hook()

    def _drop(self, name: str, incarnation: int) -> None:
        """Close the link of `name`, no longer a member, forget its reports, and fail what was forwarded to it."""
        if not self.removed and name in self.network.reachable():
            # It may miss the delete of its record (the link closes now): say it on the link first.
            self.network.send_frame(name, FrameType.CONTROL, {"op": "removed", "incarnation": incarnation},
                                    flush=True)
        self.network.remove_peer(name)
        self.reports.pop(name, None)
        for driver in self._drivers:
            driver.drop_peer(name)

    def _set_replica_peers(self) -> None:
        peers = set(ms.replica_ids(self.members.values(), self.name)) | {rid for rid, _since in self._joining.values()}
        peers -= {self.members[n].replica_id for n in self._removing if n in self.members}
        self.metadata.set_peers(sorted(peers))
        self.metadata.set_reachable(self._reachable_replicas())

    # ------------------------------------------------------------------------------------------ join / leave

    async def join(self, discovery: str) -> str:
        try:
            name, host, port = ms.parse_node(discovery)
        except ValueError as exc:
            raise CommandRefused(str(exc)) from None
        if name == self.name:
            raise CommandRefused(f"{name} is this node: a node cannot join itself")
        if name in self.members and len(self.members) > 1 and not self.removed:
            return f"already in a cluster with {name}"
        self._set_joining(True)
        fresh = not self.removed and not self._restarted
        try:
            joined = await self._join(name, host, port)
        except BaseException:
            # A node that left and failed to join again stays out of service (joining) until a join succeeds:
            # alone, with an empty store, it would acknowledge publishes for subscribers it does not know.
            if fresh:
                self._set_joining(False)
            raise
        self._restarted = False
        self._set_joining(False)
        return joined

    async def _join(self, name: str, host: str, port: int | None) -> str:
        if self.removed:
            await self._start_again()
        self._announcing = True
        self._announcing_since = asyncio.get_running_loop().time()
        self.network.add_peer(name, host, port or ms.DEFAULT_CLUSTER_PORT, JOIN)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + JOIN_TIMEOUT
        while name not in self.network.reachable():
            if loop.time() >= deadline:
                if name not in self.members:
                    self.network.remove_peer(name)
                refused = self.network.stats().get("handshakes_refused", 0)
                hint = " (handshakes were refused: check distributed_cookie on both nodes)" if refused else ""
                raise CommandRefused(f"discovery node {name} at {host}:{port or ms.DEFAULT_CLUSTER_PORT} is not "
                                   f"reachable{hint}", 503)
            await asyncio.sleep(0.02)
        incarnation = self.network.incarnation_of(name) or 0
        self._admit_joining(name, incarnation)
        future: asyncio.Future[int] = loop.create_future()
        self._joins[name] = future
        self.network.send_frame(name, FrameType.CONTROL, {"op": "join", "incarnation": self.incarnation})
        try:
            await asyncio.wait_for(future, max(0.1, deadline - loop.time()))
        except TimeoutError:
            raise CommandRefused(f"discovery node {name} did not answer the join request", 503) from None
        finally:
            self._joins.pop(name, None)
        rid = ms.replica_id(name, incarnation)
        seen = self.metadata.reports_from(rid)
        self.metadata.exchange_now(rid)
        # Take no client before the records of the cluster are here (policy.joining): a publish acknowledged
        # now would miss every subscriber this node does not know of yet.
        if not await poll(lambda: self.metadata.reports_from(rid) > seen and self.metadata.holds_all_of(rid),
                          CATCH_UP_TIMEOUT, give_up=lambda: name not in self.network.reachable()):
            log.warning("joined, but the cluster's records did not all arrive in time: serving anyway",
                        discovery=name, waited=CATCH_UP_TIMEOUT)
            return (f"Done: {self.name} joins the cluster of {name}\nwarning: the records of {name} did not all "
                    f"arrive within {CATCH_UP_TIMEOUT:g}s; they follow as the nodes exchange")
        log.info("joined", discovery=name)
        return f"Done: {self.name} joins the cluster of {name}"

    async def _start_again(self) -> None:
        """This node left its cluster and joins again: a new incarnation with an empty store (node.py)."""
        if self._reincarnate is None:
            raise CommandRefused("this node left its cluster and cannot start again as a new incarnation", 409)
        self._restarted = True
        incarnation = await self._reincarnate()
        self.incarnation = incarnation
        self.incarnations.clear()  # shared with the replica links (node.py)
        self.incarnations[self.name] = incarnation
        self.reports.clear()
        self._joining.clear()
        self.removed = False
        self.removed_by = None
        self.members = {}
        for driver in self._drivers:
            driver.new_run()  # nothing of the old run is pending (the peers were dropped)
        self._put_own_record()
        self._refresh_members()
        log.warning("this node joins again as a new incarnation", incarnation=incarnation)

    async def leave(self, node: str) -> str:
        """Remove `node` from the membership (its sessions stay where they are; `-k` is departure.py)."""
        name = self.check_leave(node)
        lines = await self.remove_member(name)
        return "\n".join([*lines, f"Done: {name} leaves the cluster"])

    def check_leave(self, node: str) -> str:
        """The name of the member `node` names, if it may leave now; else CommandRefused."""
        try:
            name, _host, _port = ms.parse_node(node)
        except ValueError as exc:
            raise CommandRefused(str(exc)) from None
        if self.removed:
            raise CommandRefused(NODE_LEFT, 409)
        if name not in self.members:
            raise CommandRefused(f"unknown node {name}: not a member of this cluster", 404)
        if len(self.members) == 1:
            raise CommandRefused(f"{name} is the only member", 409)
        if name == self.name and not any(m in self.network.reachable() for m in self.members if m != name):
            raise CommandRefused(f"{name} cannot leave now: no other member is reachable to keep the removal", 503)
        return name

    async def remove_member(self, name: str, witness: str | None = None) -> list[str]:
        """Delete `name`'s membership record and write its departed record (membership.py), so that it is
        refused with REMOVED wherever it dials; the lines to print.

        A live member first hands its writes over: we wait (at most HANDOFF_TIMEOUT) for one of its reports
        newer than the command and until we hold every dot it reported, so the records it wrote before it
        left stay in the cluster (it empties its store when it joins again). When `name` is this node, the
        removal must reach another member before we stop linking: we wait until one holds all our dots (the
        member `witness`, when it is one: the node that runs the command, which must learn of the removal
        from us in a netsplit)."""
        member = self.members[name]
        rid = member.replica_id
        lines: list[str] = []
        if name != self.name and name in self.network.reachable():
            seen = self.metadata.reports_from(rid)
            self.metadata.exchange_now(rid)
            if not await poll(lambda: self.metadata.reports_from(rid) > seen and self.metadata.holds_all_of(rid),
                              HANDOFF_TIMEOUT, give_up=lambda: name not in self.network.reachable()):
                lines.append(f"warning: {name}'s latest writes may not have reached this node")
        self._leaving_self = name == self.name
        if name != self.name:
            self._removing.add(name)
            self._set_replica_peers()  # not even the push of the delete: the others are told first
        self.metadata.put(ms.DEPARTED, ms.departed_key(name, member.incarnation), [self.metadata.hlc_now()])
        self.metadata.delete(ms.MEMBERSHIP, (name,))
        log.warning("member removed", member=name, incarnation=member.incarnation)
        if name != self.name:
            try:
                await self._tell_the_others_first(name)
            finally:
                self._removing.discard(name)
                if name not in self.members:
                    self._drop(name, member.incarnation)
        if name == self.name:
            others = [m.replica_id for n, m in self.members.items() if n != name]
            if witness in self.members and witness != name and witness in self.network.reachable():
                others = [self.members[witness].replica_id]
            self.metadata.exchange_now()
            if not await poll(lambda: self.removed or any(self.metadata.covered_by(o) for o in others),
                              HANDOFF_TIMEOUT):
                lines.append("warning: no other member confirmed the removal yet; it spreads when one links")
            self._leaving_self = False
            self._learn_removed(witness or self.name)
        return lines

    async def _tell_the_others_first(self, name: str) -> None:
        """Keep the link of `name` (removed by this node) open until every other member we reach holds the
        removal, at most HANDOFF_TIMEOUT. Told first, `name` would leave and drop its links while a member
        still counted it: that member would see a netsplit and refuse clients until the delete reached it."""
        if name not in self.network.reachable():
            return  # no link: it learns when it dials (REMOVED), after the others
        others = {n: m.replica_id for n, m in self.members.items() if n != self.name}
        if any(n in self.network.reachable() for n in others):
            self.metadata.exchange_now()
            await poll(lambda: all(self.metadata.covered_by(rid) for n, rid in others.items()
                                   if n in self.network.reachable()), HANDOFF_TIMEOUT,
                       give_up=lambda: self.removed)

    def replica_of(self, node: str) -> str | None:
        """The replica id of member `node` (None: not a member)."""
        member = self.members.get(node)
        return None if member is None else member.replica_id

    # ------------------------------------------------------------------------------------------ frames

    def on_reports(self, peer: str, body: Any) -> None:
        """A REACHABILITY frame: the peers `peer` reaches."""
        self.reports[peer] = {str(n) for n in body}
        self._update_view()

    def _admit_joining(self, name: str, incarnation: int) -> None:
        """Replicate with a node that is joining: its own membership record then arrives through the store
        (one writer per membership record: no siblings that a concurrent leave could lose to)."""
        self.incarnations[name] = incarnation
        self._joining[name] = (ms.replica_id(name, incarnation), asyncio.get_running_loop().time())
        self._set_replica_peers()

    def _joining_id(self, name: str) -> str | None:
        joining = self._joining.get(name)
        return None if joining is None else joining[0]

    def _admission(self, name: str, incarnation: int, intent: str | None) -> str | None:
        """Who may link to us (the module doc): None admits, a reason refuses (the dialer is told)."""
        if self.removed:
            return NODE_LEFT
        member = self.members.get(name)
        if member is not None and member.incarnation == incarnation:
            return None
        if self.metadata.get(ms.DEPARTED, ms.departed_key(name, incarnation)) is not None:
            log.warning("link refused: that node was removed from the cluster", peer=name, incarnation=incarnation)
            return REMOVED
        if self._joining_id(name) == ms.replica_id(name, incarnation):
            return None
        if intent == JOIN:
            log.info("node links to join", peer=name, incarnation=incarnation)
            self._admit_joining(name, incarnation)
            return None
        return NOT_A_MEMBER

    def _on_refused(self, peer: str, reason: str) -> None:
        """A node we dialed refused us, with a refusal signed with the cookie (handshake.py)."""
        if reason == REMOVED and peer in self.members and not self.removed:
            self._learn_removed(peer)

    def _expire(self) -> None:
        """Forget nodes admitted to join whose record never came, and stop announcing once we are known."""
        now = asyncio.get_running_loop().time()
        up = self.network.reachable()
        stale = [n for n, (_rid, since) in self._joining.items()
                 if now - since > JOINING_TTL and n not in up and n not in self.members]
        for name in stale:
            log.info("admitted node never joined: forgotten", peer=name)
            del self._joining[name]
            self.network.remove_peer(name)
        if stale:
            self._set_replica_peers()
        if self._announcing:
            others = [m.replica_id for n, m in self.members.items() if n != self.name]
            known = others and all(self.metadata.covered_by(o) for o in others)
            if known or now - self._announcing_since > JOINING_TTL:
                self._announcing = False
                self.network.set_intent(None)

    def _on_removed_frame(self, peer: str, body: dict[str, Any]) -> None:
        """`removed`: a member dropped this node (it may miss the delete of its record: see _refresh_members)."""
        if body.get("incarnation") == self.incarnation and peer in self.members:
            self._learn_removed(peer)

    def _on_join(self, peer: str, body: dict[str, Any]) -> None:
        incarnation = self.network.incarnation_of(peer)
        if incarnation is None:
            log.warning("join request from a node without a link", peer=peer)
            return
        log.info("member joins", member=peer)
        self._admit_joining(peer, incarnation)
        self.metadata.exchange_now(ms.replica_id(peer, incarnation))
        self.network.send_frame(peer, FrameType.CONTROL, {"op": "join_ok", "incarnation": self.incarnation})

    def _on_join_ok(self, peer: str, body: dict[str, Any]) -> None:
        future = self._joins.get(peer)
        if future is not None and not future.done():
            future.set_result(int(body.get("incarnation", 0)))

    def member_names(self) -> list[str]:
        return sorted(self.members)

    def is_reachable(self, node: str) -> bool:
        return node == self.name or node in self.network.reachable()

    def send_control(self, node: str, body: dict[str, Any]) -> bool:
        return self.network.send_frame(node, FrameType.CONTROL, body)

    # ------------------------------------------------------------------------------------------ reachability

    def _on_reachability(self, peer: str, reachable: bool) -> None:
        log.info("peer reachable" if reachable else "peer unreachable", peer=peer)
        self.metadata.set_reachable(self._reachable_replicas())
        if reachable:
            member = self.members.get(peer)
            if member is not None:
                self.metadata.exchange_now(member.replica_id)
            for driver in self._drivers:
                driver.resend(peer)
        self._send_reports()
        self._update_view()
        for hook in self._reachability_hooks:
            hook(peer, reachable)

    def _reachable_replicas(self) -> set[str]:
        up = self.network.reachable()
        members = {m.replica_id for m in self.members.values() if m.name in up and m.name != self.name}
        return members | {rid for name, (rid, _since) in self._joining.items() if name in up}

    def _send_reports(self) -> None:
        up = sorted(self.network.reachable())
        for peer in up:
            self.network.send_frame(peer, FrameType.REACHABILITY, up)

    async def _gossip(self) -> None:
        while True:
            await asyncio.sleep(self._gossip_interval)
            self._expire()
            self._send_reports()
            self._update_view()

    def _update_view(self) -> None:
        reports = dict(self.reports)
        reports[self.name] = set(self.network.reachable())
        view = compute(self.name, self.members, reports)
        old = self.view
        self.view = view
        if view == old:
            return
        if view.ready != old.ready:
            self.counters["netsplit_resolved" if view.ready else "netsplit_detected"] += 1
        if self._on_view is not None:
            self._on_view(view)

    # ------------------------------------------------------------------------------------------ admin

    def show(self) -> list[dict[str, Any]]:
        up = self.network.reachable() | {self.name}
        rows = []
        for name in sorted(self.members):
            member = self.members[name]
            report = self.reports.get(name, set()) | {name} if name != self.name else up
            rows.append({
                "Node": name,
                "Running": name in up,
                "Reachable": name in up,
                "Ready": name in up and set(self.members) <= report,
                "Address": f"{member.host}:{member.port}",
                "Incarnation": member.incarnation,
            })
            for columns in self._show_columns:
                rows[-1].update(columns(name))
        return rows

    def health(self) -> tuple[bool, str]:
        if self.removed:
            return False, "this node left the cluster"
        missing = sorted(set(self.members) - set(self.view.reachable))
        if missing:
            return False, "unreachable: " + ", ".join(missing)
        return True, f"all {len(self.members)} members reachable"

    def stats(self) -> dict[str, int]:
        out = {**self.counters, **self.forwarding.counters}
        out["members"] = len(self.members)
        out["forwards_unacknowledged"] = self.forwarding.sender.pending_count()
        out["reachable"] = len(self.view.reachable)
        out.update({f"links.{k}": v for k, v in self.network.stats().items()})
        return out
