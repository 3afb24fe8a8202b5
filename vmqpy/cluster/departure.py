"""`vmq-admin cluster leave node=N -k`: a node leaves without losing the messages queued on it.

The node that runs the command asks N to drain (or drains itself when it is N). N stops accepting
connections, disconnects its clients (5.0: DISCONNECT 0x9C Use another server, with a Server Reference naming
another member), and hands every persistent session with its queue over to the member that owns the client
id next (the first other member in the client id's rendezvous ranking), through the same acknowledged
handover as a takeover. The commanding node asks N for its progress every `-i` seconds and prints it, until
nothing is left or `-t` runs out; only then is N removed from the membership.

A node that is already dead cannot hand anything over. Its persistent sessions are recreated from the
replicated store on the member that owns each client id next, with their subscriptions: the owner record is
rewritten to name that member (with the dead node as the origin), and that member adopts the session. With
queue replicas (vmqpy.replicas) that member also adopts the messages the replicas hold, and the output says
how many (`recoverable`); without, the messages that were queued only on the dead node are lost, and the output
says so.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from vmqpy.cluster.errors import CommandRefused
from vmqpy.cluster.leader import ranking
from vmqpy.cluster.ports import BrokerPort
from vmqpy.cluster.registration import RegistrationService
from vmqpy.cluster.service import ClusterService

log = structlog.get_logger("vmqpy.departure")

DISCONNECT_GRACE = 2.0


class Departure:
    def __init__(self, cluster: ClusterService, registration: RegistrationService, broker: BrokerPort,
                 stop_serving: Callable[[str | None], None]) -> None:
        """`stop_serving(reference)`: close the MQTT listeners and disconnect every client, telling 5.0
        clients to use the server named `reference`."""
        self.cluster = cluster
        self.name = cluster.name
        self.registration = registration
        self.broker = broker
        self.stop_serving = stop_serving
        self.draining = False
        self.moving_total = 0
        self.settled = False  # every persistent session was given a new owner
        self._drain_task: asyncio.Task[None] | None = None
        self._queries = itertools.count(1)
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        # queue replicas: how many messages of a node's sessions they hold (node.py sets it)
        self.recoverable: Callable[[str], Awaitable[int]] | None = None

    # ------------------------------------------------------------------------------------------ the command

    async def leave(self, node: str, interval: float, timeout: float) -> str:
        """Drain `node` (see the module doc) and remove it from the membership; the progress lines."""
        name = self.cluster.check_leave(node)
        if name != self.name and not self.cluster.is_reachable(name):
            return await self._leave_dead(name)
        loop = asyncio.get_running_loop()
        started = loop.time()
        lines: list[str] = []
        if name == self.name:
            await self.drain()
        else:
            self.cluster.send_control(name, {"op": "leave_drain"})
        last: dict[str, Any] | None = None
        done = False
        while True:
            progress = await self._progress(name, min(5.0, max(0.5, interval)))
            elapsed = loop.time() - started
            if progress is not None:
                last = progress
                done = bool(progress["settled"]) and progress["sessions"] == 0
                lines.append(f"{elapsed:5.1f}s: {progress['sessions']} sessions with {progress['messages']} "
                             f"messages still on {name}")
            else:
                lines.append(f"{elapsed:5.1f}s: {name} did not answer")
            if done or elapsed >= timeout:
                break
            await asyncio.sleep(max(0.0, min(interval, timeout - elapsed)))
        if not done:
            raise CommandRefused("\n".join([*lines, f"{name} still holds sessions after {timeout:g}s: it stays a "
                                          "member; run the command again to go on"]), 503)
        lines += await self.cluster.remove_member(name)
        moved = last["moving_total"] if last else 0
        lines.append(f"Done: {name} handed {moved} persistent sessions over and leaves the cluster")
        return "\n".join(lines)

    async def _leave_dead(self, name: str) -> str:
        remaining = [m for m in self.cluster.member_names() if m != name]
        recovered = None if self.recoverable is None else await self.recoverable(name)
        adopted = self.broker.reassign_sessions(name, lambda client_id: ranking(client_id, remaining)[0])
        unaccounted = self.cluster.metadata.unaccounted_dots(self.cluster.members[name].replica_id)
        lines = await self.cluster.remove_member(name)
        log.warning("dead node removed; its sessions recreated elsewhere", node=name, sessions=adopted,
                    unaccounted_writes=unaccounted, messages_recovered=recovered)
        lost = f"; {unaccounted} of its metadata writes (dots) are unaccounted for: no remaining member holds them"
        messages = f"the messages queued on {name} cannot be recovered"
        if recovered == 0:
            messages += " (the queue replicas hold none)"
        elif recovered is not None:
            messages = f"{recovered} messages queued on {name} are recovered from the queue replicas"
        return "\n".join([*lines, f"{name} is unreachable: {adopted} of its persistent sessions are recreated on "
                           f"the remaining members with their subscriptions; {messages}{lost}.",
                           f"Done: {name} leaves the cluster"])

    async def _progress(self, name: str, wait: float) -> dict[str, Any] | None:
        if name == self.name:
            return self.progress()
        query = next(self._queries)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[query] = future
        try:
            self.cluster.send_control(name, {"op": "leave_status", "query": query})
            return await asyncio.wait_for(future, wait)
        except TimeoutError:
            return None
        finally:
            self._answers.pop(query, None)

    def reset(self) -> None:
        """This node joins again after it left: a later `leave -k` drains it again."""
        self.draining = False
        self.settled = False
        self.moving_total = 0
        self._drain_task = None

    # ------------------------------------------------------------------------------------------ the leaving node

    async def drain(self) -> None:
        if self.draining:
            return
        self.draining = True
        others = [m for m in self.cluster.member_names() if m != self.name]
        if not others:
            self.settled = True
            return
        log.warning("leaving the cluster: disconnecting clients and handing sessions over")
        self.stop_serving(others[0])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DISCONNECT_GRACE
        while any(s.online for s in self.broker.local_sessions()) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        self.moving_total = 0
        for session in self.broker.local_sessions():
            if session.moving_to is not None or not session.persistent:
                continue
            client_id = session.client_id
            target = ranking(client_id, others)[0]
            if self.broker.move_session(client_id, target):
                self.moving_total += 1
        self.settled = True

    def progress(self) -> dict[str, Any]:
        moving = [s for s in self.broker.local_sessions() if s.moving_to is not None or (
            self.draining and s.persistent)]
        return {"draining": self.draining, "settled": self.settled, "sessions": len(moving),
                "messages": sum(len(s.queue) + len(s.inflight) for s in moving),
                "moving_total": self.moving_total}

    def on_control(self, peer: str, body: dict[str, Any]) -> None:
        """A leave_drain, leave_status or leave_progress frame (node.py hands the cluster's CONTROL frames here)."""
        op = body.get("op")
        if op == "leave_drain":
            if self._drain_task is None:
                self._drain_task = asyncio.get_running_loop().create_task(self.drain())
        elif op == "leave_status":
            self.cluster.send_control(peer, {"op": "leave_progress", "query": body.get("query"),
                                             **self.progress()})
        elif op == "leave_progress":
            future = self._answers.get(int(body.get("query") or 0))
            if future is not None and not future.done():
                future.set_result(body)


__all__ = ["Departure"]
