"""Failover: a session recreated here without its previous owner's messages fetches their copies from the
queue replicas and adopts them (docs/replication.md, "Failover").

Three paths recreate a session from the metadata store alone (`SessionMigration.image_from_store`): a CONNECT
whose previous owner is unreachable, a handover that timed out, and the recreate of a dead node's sessions
after `vmq-admin cluster leave node=DEAD`. Each calls `recover(client_id)`: the copies kept on this node and
those of every reachable member (CONTROL `rep_fetch`, answered by `rep_copy` frames, the last one `done`) of
owners that are neither this node nor reachable are merged and adopted into the session (in-flight messages keep
their packet id and are sent again with DUP; the incoming QoS 2 packet ids are restored, so a PUBREL is still
answered). Adopting writes them to this node's journal, which replicates them to the session's new replicas;
once that is durable the old copies are forgotten (`rep_forget`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from vmqpy.broker.core.lineage import entries_of
from vmqpy.broker.core.persistence import stored_session
from vmqpy.broker.core.session import Session
from vmqpy.broker.core.stored_will import StoredWill
from vmqpy.replicas.copies import Copy, ReplicaCopies
from vmqpy.sessions.handover import SessionImage, outgoing_from_record
from vmqpy.sessions.message import decode_record
from vmqpy.sessions.names import Entry
from vmqpy.sessions.parts import Outgoing

__all__ = ["Failover", "FetchLinks", "merge_copies"]

log = structlog.get_logger("vmqpy.replicas")

FETCH_TIMEOUT = 5.0  # seconds to wait for the members' copies
CHUNK = 200  # messages per rep_copy frame


class FetchLinks(Protocol):
    def member_names(self) -> list[str]: ...

    def is_reachable(self, node: str) -> bool: ...

    def send_control(self, node: str, body: dict[str, Any]) -> bool: ...


class Adopter(Protocol):
    """What failover needs of the broker (vmqpy.broker.core.broker.Broker)."""

    def adopt_offline(self, image: SessionImage, now: float) -> Session: ...

    def adopt_will(self, client_id: str, will: StoredWill, now: float) -> None: ...

    def adopt_messages(self, client_id: str, outs: list[Outgoing], now: float, origin: str | None = None) -> bool:
        """`origin`: the old owner whose replica copies `outs` are (their seqs are its numbers)."""

    def inherit_lineage(self, client_id: str, entries: list[Entry], sender: str) -> None:
        """The lineage found in the copies of the lost owner `sender` (vmqpy.broker.core.lineage)."""

    def owner_of(self, client_id: str) -> str | None: ...


@dataclass(slots=True)
class _Fetch:
    client_id: str
    waiting: set[str]  # members that have not sent `done` yet
    copies: dict[str, Copy] = field(default_factory=dict)  # owner -> merged copy
    holders: set[str] = field(default_factory=set)  # members that sent a copy
    done: asyncio.Event = field(default_factory=asyncio.Event)


def recovered_will(client_id: str, copies: dict[str, Copy]) -> StoredWill | None:
    """The will in the session records of the lost owners' copies (vmqpy.broker.core.stored_will); of two owners (a
    session that moved between them), one kept while its client was connected first, else the one due last."""
    found: list[tuple[bool, float, str, StoredWill]] = []
    for owner, copy in copies.items():
        if copy.session is None:
            continue
        try:
            record = stored_session(client_id, decode_record(copy.session))
        except Exception as exc:  # a record this build cannot read: said, not fatal
            log.error("unreadable replica session record skipped", client_id=client_id, owner=owner, error=str(exc))
            continue
        if record.will is not None:
            found.append((record.will.due is None, record.will.due or 0.0, owner, record.will))
    return max(found, key=lambda f: f[:3])[3] if found else None


def merge_copies(into: dict[str, Copy], owner: str, copy: Copy) -> None:
    """Merge one node's copy of `owner`'s session into `into` (copies of one owner on two replicas: the union)."""
    merged = into.setdefault(owner, Copy())
    merged.session = merged.session or copy.session
    for seq, record in copy.messages.items():
        merged.messages.setdefault(seq, record)
    merged.incoming |= copy.incoming
    for names in copy.lineage.values():
        if names not in merged.lineage.values():
            merged.lineage[len(merged.lineage) + 1] = names


def lineage_in(client_id: str, owner: str, copy: Copy) -> list[Entry]:
    """The lineage names kept in `owner`'s copy (its `lin` operations); an unreadable batch is said and skipped."""
    entries: list[Entry] = []
    for names in copy.lineage.values():
        try:
            entries += entries_of(names)
        except Exception as exc:  # written by a build this one cannot read: said, not fatal
            log.error("unreadable replica lineage skipped", client_id=client_id, owner=owner, error=str(exc))
    return entries


class Failover:
    def __init__(self, node: str, copies: ReplicaCopies, links: FetchLinks, broker: Adopter,
                 barrier: Callable[[], Future[None]], failover_timeout: float = 0.0) -> None:
        """`failover_timeout`: an old owner that is still a member must have been unreachable this long before
        its copies are taken (a shorter partition heals with the old owner's own handover)."""
        self.node = node
        self.failover_timeout = failover_timeout
        self._down_since: dict[str, float] = {}
        self._released: set[str] = set()  # dead owners an operator removed (`cluster leave`): no timeout
        self._started = time.monotonic()
        self.copies = copies
        self.links = links
        self.broker = broker
        self.barrier = barrier
        self.counters = {"recoveries": 0, "messages_recovered": 0, "fetches_answered": 0}
        self._ids = itertools.count(1)
        self._fetches: dict[int, _Fetch] = {}
        self._counts: dict[int, tuple[set[str], dict[str, int], asyncio.Event]] = {}  # ref -> waiting, counts
        self._tasks: set[asyncio.Task[None]] = set()
        self._adopted: dict[str, asyncio.Future[None]] = {}  # client id -> its recovery adopted what it found

    def recover(self, client_id: str, released: str | None = None) -> None:
        """`client_id`'s session is recreated here without its messages: fetch and adopt their copies.
        `released`: its old owner, a dead node an operator removed (`cluster leave`), whose copies are taken
        at once even while this node has not yet learnt that it left the membership."""
        if released is not None and released != self.node:
            self._released.add(released)
        loop = asyncio.get_running_loop()
        adopted = self._adopted.get(client_id)
        if adopted is None or adopted.done():
            adopted = self._adopted[client_id] = loop.create_future()
        task = loop.create_task(self._recover(client_id, adopted))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait(self, client_id: str) -> None:
        """Until the recovery of `client_id` (if one runs) adopted what it found (FETCH_TIMEOUT at most more)."""
        adopted = self._adopted.get(client_id)
        if adopted is not None:
            try:
                await asyncio.wait_for(asyncio.shield(adopted), FETCH_TIMEOUT + 1)
            except TimeoutError:
                log.warning("recovery from the queue replicas still running", client_id=client_id)

    def _lost_owner(self, owner: str) -> bool:
        return owner != self.node and not self.links.is_reachable(owner)

    def on_reachability(self, peer: str, reachable: bool) -> None:
        if reachable:
            self._down_since.pop(peer, None)
            self._released.discard(peer)  # back as a new incarnation
        else:
            self._down_since.setdefault(peer, time.monotonic())

    def _remaining(self, owner: str) -> float:
        """Seconds before `owner`'s copies may be taken (0: now; an owner that left the cluster at once)."""
        if owner in self._released or owner not in self.links.member_names():
            return 0.0
        down = time.monotonic() - self._down_since.get(owner, self._started)
        return max(0.0, self.failover_timeout - down)

    async def _recover(self, client_id: str, adopted: asyncio.Future[None]) -> None:
        wait = 0.0
        try:
            copies, holders = await self._fetch(client_id)
            wait = max((self._remaining(owner) for owner in copies), default=0.0)
            taken = bool(copies) and not wait and self._adopt(client_id, copies, create=True) >= 0
        finally:
            if not adopted.done():
                adopted.set_result(None)
            if self._adopted.get(client_id) is adopted:
                del self._adopted[client_id]
        if wait:  # the old owner may come back and hand its queue over itself: wait for the failover timeout
            log.info("queue replicas hold messages of an unreachable owner: taken after queue.failover_timeout",
                     client_id=client_id, owners=sorted(copies), seconds=round(wait, 1))
            await asyncio.sleep(wait)
            copies, holders = await self._fetch(client_id)
            copies = {owner: copy for owner, copy in copies.items() if self._remaining(owner) <= 0}
            taken = bool(copies) and self._adopt(client_id, copies, create=False) >= 0
            if copies and not taken:
                self._pass_on(client_id)
        if not taken:
            return
        await asyncio.wrap_future(self.barrier())  # adopted, and on the session's replicas: forget the old copies
        for owner in copies:
            self.copies.forget(owner, client_id)
            for member in holders:
                self.links.send_control(member, {"op": "rep_forget", "client_id": client_id, "owner": owner})

    def _pass_on(self, client_id: str) -> None:
        """The session left this node while its recovery waited for the failover timeout (its client connected
        elsewhere): the member that holds it now recovers it, or the copies would wait for ever."""
        owner = self.broker.owner_of(client_id)
        if owner is not None and owner != self.node and self.links.is_reachable(owner):
            log.info("session moved while its recovery waited: its new node recovers it", client_id=client_id,
                     to=owner)
            self.links.send_control(owner, {"op": "rep_recover", "client_id": client_id})

    async def _fetch(self, client_id: str) -> tuple[dict[str, Copy], set[str]]:
        """The copies of `client_id` of lost owners, here and on the reachable members; who sent some."""
        ref = next(self._ids)
        asked = {m for m in self.links.member_names() if m != self.node and self.links.is_reachable(m)}
        fetch = self._fetches[ref] = _Fetch(client_id, set())
        for member in asked:
            if self.links.send_control(member, {"op": "rep_fetch", "client_id": client_id, "ref": ref}):
                fetch.waiting.add(member)
        for owner, copy in self.copies.copies_of(client_id).items():
            if self._lost_owner(owner):
                merge_copies(fetch.copies, owner, copy)
        try:
            if fetch.waiting:
                await asyncio.wait_for(fetch.done.wait(), FETCH_TIMEOUT)
        except TimeoutError:
            log.warning("queue replicas did not answer in time", client_id=client_id, missing=sorted(fetch.waiting))
        finally:
            del self._fetches[ref]
        return {o: c for o, c in fetch.copies.items() if self._lost_owner(o)}, fetch.holders

    def _adopt(self, client_id: str, copies: dict[str, Copy], create: bool) -> int:
        """Adopt the copies into the session here (`create`: made offline when there is none; else only into
        a session that is still here). How many messages; -1 when there is no session to take them."""
        by_owner: dict[str, list[Outgoing]] = {}  # each owner's apart: its seqs name them (divergent copies)
        incoming: set[int] = set()
        for owner, copy in copies.items():
            incoming |= copy.incoming
            outs = by_owner.setdefault(owner, [])
            for seq in sorted(copy.messages):
                try:
                    outs.append(outgoing_from_record(seq, decode_record(copy.messages[seq])))
                except Exception as exc:  # a record this build cannot read: said, not fatal
                    log.error("unreadable replica message skipped", client_id=client_id, seq=seq, error=str(exc))
        now = time.time()
        image = SessionImage(client_id, True, awaiting_release=sorted(incoming))
        present = self.broker.adopt_messages(client_id, [], now)
        if not present and not create:
            return -1
        if incoming or not present:
            self.broker.adopt_offline(image, now)  # merged into the session here, or one kept offline
        for owner, copy in copies.items():  # what the lost owner had taken from older owners (divergent copies)
            names = lineage_in(client_id, owner, copy)
            if names:
                self.broker.inherit_lineage(client_id, names, owner)
        for owner, outs in by_owner.items():
            self.broker.adopt_messages(client_id, outs, now, origin=owner)
        will = recovered_will(client_id, copies)
        if will is not None:
            self.broker.adopt_will(client_id, will, now)
        recovered = sum(len(outs) for outs in by_owner.values())
        self.counters["recoveries"] += 1
        self.counters["messages_recovered"] += recovered
        log.info("session messages recovered from queue replicas", client_id=client_id, messages=recovered,
                 owners=sorted(copies))
        return recovered

    async def held_for(self, owner: str) -> int:
        """How many messages of `owner`'s sessions the reachable replicas hold (`cluster leave` of a dead node
        reports it): the largest count of each session's copies, summed."""
        counts = dict(self.copies.counts_for(owner))
        ref = next(self._ids)
        waiting = {m for m in self.links.member_names() if m != self.node and self.links.is_reachable(m)
                   and self.links.send_control(m, {"op": "rep_count", "owner": owner, "ref": ref})}
        event = asyncio.Event()
        self._counts[ref] = (waiting, counts, event)
        try:
            if waiting:
                await asyncio.wait_for(event.wait(), FETCH_TIMEOUT)
        except TimeoutError:
            log.warning("queue replicas did not count in time", owner=owner, missing=sorted(waiting))
        finally:
            del self._counts[ref]
        return sum(counts.values())

    def _on_counted(self, peer: str, body: dict[str, Any]) -> None:
        entry = self._counts.get(body.get("ref", -1))
        counts = body.get("counts")
        if entry is None or type(counts) is not dict:
            return
        waiting, merged, event = entry
        for client_id, n in counts.items():
            if type(client_id) is str and type(n) is int:
                merged[client_id] = max(merged.get(client_id, 0), n)
        waiting.discard(peer)
        if not waiting:
            event.set()

    # ------------------------------------------------------------------------------------------ control frames

    #: the CONTROL ops `on_control` takes (node.py registers them in the cluster's control table)
    CONTROL_OPS = ("rep_fetch", "rep_copy", "rep_count", "rep_counted", "rep_recover", "rep_forget")

    def on_control(self, peer: str, body: dict[str, Any]) -> None:
        op = body.get("op")
        if op == "rep_fetch":
            self._answer(peer, body)
        elif op == "rep_copy":
            self._on_copy(peer, body)
        elif op == "rep_count":
            owner, ref = body.get("owner"), body.get("ref")
            if type(owner) is str and type(ref) is int:
                self.links.send_control(peer, {"op": "rep_counted", "ref": ref,
                                               "counts": self.copies.counts_for(owner)})
        elif op == "rep_counted":
            self._on_counted(peer, body)
        elif op == "rep_recover":
            client_id = body.get("client_id")
            if type(client_id) is str and self.broker.adopt_messages(client_id, [], time.time()):
                self.recover(client_id)  # the session is here: fetch its copies (`_pass_on`)
        elif op == "rep_forget":
            client_id, owner = body.get("client_id"), body.get("owner")
            if type(client_id) is str and type(owner) is str:
                self.copies.forget(owner, client_id)

    def _answer(self, peer: str, body: dict[str, Any]) -> None:
        client_id, ref = body.get("client_id"), body.get("ref")
        if type(client_id) is not str or type(ref) is not int:
            log.warning("malformed rep_fetch", peer=peer)
            return
        self.counters["fetches_answered"] += 1
        for owner, copy in self.copies.copies_of(client_id).items():
            if owner == peer:
                continue
            items = sorted(copy.messages.items())
            for start in range(0, max(len(items), 1), CHUNK):
                self.links.send_control(peer, {
                    "op": "rep_copy", "ref": ref, "owner": owner, "session": copy.session,
                    "messages": [[seq, record] for seq, record in items[start:start + CHUNK]],
                    "incoming": sorted(copy.incoming),
                    "lineage": list(copy.lineage.values()) if start == 0 else [],
                })
        self.links.send_control(peer, {"op": "rep_copy", "ref": ref, "done": True})

    def _on_copy(self, peer: str, body: dict[str, Any]) -> None:
        fetch = self._fetches.get(body.get("ref", -1))
        if fetch is None:
            return
        if body.get("done"):
            fetch.waiting.discard(peer)
            if not fetch.waiting:
                fetch.done.set()
            return
        owner, messages, incoming = body.get("owner"), body.get("messages"), body.get("incoming")
        if type(owner) is not str or type(messages) is not list or type(incoming) is not list:
            log.warning("malformed rep_copy", peer=peer)
            return
        copy = Copy(body.get("session") if type(body.get("session")) is bytes else None)
        for entry in messages:
            if type(entry) is list and len(entry) == 2 and type(entry[0]) is int and type(entry[1]) is bytes:
                copy.messages[entry[0]] = entry[1]
        copy.incoming = {p for p in incoming if type(p) is int and 0 < p < 65536}
        lineage = body.get("lineage")
        if type(lineage) is list:
            copy.lineage = {i: names for i, names in enumerate(lineage, 1) if type(names) is bytes}
        merge_copies(fetch.copies, owner, copy)
        fetch.holders.add(peer)
