"""`vmq-admin cluster leave node=N -k`: a node leaves without losing the messages queued on it.

The node that runs the command asks N to drain (or drains itself when it is N). N stops accepting
connections, disconnects its clients (5.0: DISCONNECT 0x9C Use another server, with a Server Reference naming
another member), and hands every persistent session with its queue over to the member that owns the client
id next (the first other member in the client id's rendezvous ranking), through the same acknowledged
handover as a takeover. Once nothing is left on it, N removes itself from the membership. The commanding node
asks N for its progress every `-i` seconds and prints it until N left.

A leave that cannot finish within `-t` (a netsplit that holds the handovers up, a target that does not answer)
is given up on N, by N's own deadline or the commanding node's `leave_abort`: N opens its listeners again and
serves as a full member; the sessions already handed over stay with their new owners, and the command answers
503. A `cluster join` run on N while it drains gives the leave up the same way. The states and their
transitions are vmqpy.cluster.leaving.

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
from vmqpy.cluster.leaving import Action, LeaveInput, LeaveState, step
from vmqpy.cluster.ports import BrokerPort
from vmqpy.cluster.registration import RegistrationService
from vmqpy.cluster.service import HANDOFF_TIMEOUT, ClusterService

log = structlog.get_logger("vmqpy.departure")

DISCONNECT_GRACE = 2.0
SETTLE_POLL = 0.1  # how often a draining node looks whether every session was handed over
DEFAULT_TIMEOUT = 60.0  # a leave_drain that names no -t (a commanding node of an earlier version)
REMOVAL_GRACE = HANDOFF_TIMEOUT + 5.0  # the commanding node waits this much longer than -t for the removal


class Departure:
    #: the CONTROL ops of a leave (node.py registers `on_control` for them in the control table)
    CONTROL_OPS = ("leave_drain", "leave_abort", "leave_status", "leave_progress")

    def __init__(self, cluster: ClusterService, registration: RegistrationService, broker: BrokerPort,
                 stop_serving: Callable[[str | None], None], serve_again: Callable[[], None],
                 recoverable: Callable[[str], Awaitable[int]] | None = None) -> None:
        """`broker`: the broker's session mover. `stop_serving(reference)`: close the MQTT listeners and
        disconnect every client, telling 5.0 clients to use the server named `reference`; `serve_again()`: open
        the listeners again. `recoverable(node)`: with queue replicas, how many messages of `node`'s sessions
        they hold (vmqpy.replicas)."""
        self.cluster = cluster
        self.name = cluster.name
        self.registration = registration
        self.broker = broker
        self.stop_serving = stop_serving
        self.serve_again = serve_again
        self.state = LeaveState.SERVING
        self.moving_total = 0
        self.settled = False  # every persistent session was given a new owner
        self.outcome = ""  # why the last leave was given up (the command's answer)
        self.notes: list[str] = []  # what the removal warned of (the command's answer)
        self._by = self.name  # the node that runs the command
        self._task: asyncio.Task[None] | None = None
        self._queries = itertools.count(1)
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._settled_reports: dict[str, dict[str, Any]] = {}  # what a leaving node reported as it settled
        self.recoverable = recoverable

    # ------------------------------------------------------------------------------------------ the command

    async def leave(self, node: str, interval: float, timeout: float) -> str:
        """Drain `node` (see the module doc) until it removed itself from the membership; the progress lines."""
        name = self.cluster.check_leave(node)
        if name != self.name and not self.cluster.is_reachable(name):
            return await self._leave_dead(name)
        loop = asyncio.get_running_loop()
        started = loop.time()
        self._settled_reports.pop(name, None)
        if name == self.name:
            self.begin(timeout, self.name)
        elif not self.cluster.send_control(name, {"op": "leave_drain", "timeout": timeout}):
            raise CommandRefused(f"{name} could not be asked to leave: its link is down; it stays a member", 503)
        lines: list[str] = []
        last: dict[str, Any] | None = None
        while True:
            progress = await self._progress(name, min(5.0, max(0.5, interval)))
            elapsed = loop.time() - started
            if progress is not None:
                last = progress
                lines.append(self._progress_line(name, elapsed, progress))
                state = progress.get("state")
                if state is None and progress["settled"] and progress["sessions"] == 0:
                    lines += await self.cluster.remove_member(name)  # a node of an earlier version: we remove it
                    break
                if state == LeaveState.LEFT.value:
                    lines += [str(n) for n in progress.get("notes") or ()]
                    break
                if state == LeaveState.SERVING.value:
                    raise CommandRefused("\n".join([*lines, f"{name} gave the leave up: {progress.get('outcome')}; it "
                                                     "stays a member and serves; run the command again to go on"]),
                                         503)
            elif name != self.name and name not in self.cluster.members:
                last = self._settled_reports.pop(name, last)
                break  # it removed itself, and the removal reached this node
            else:
                lines.append(f"{elapsed:5.1f}s: {name} did not answer")
            if elapsed >= timeout + REMOVAL_GRACE:
                self.cluster.send_control(name, {"op": "leave_abort"})
                raise CommandRefused("\n".join([*lines, f"{name} did not finish leaving in {elapsed:.0f}s: it was "
                                                 "told to give the leave up and serve again; `vmq-admin cluster show` "
                                                 "says whether it is still a member"]), 503)
            await asyncio.sleep(max(0.0, interval))
        moved = last["moving_total"] if last else 0
        lines.append(f"Done: {name} handed {moved} persistent sessions over and leaves the cluster")
        return "\n".join(lines)

    @staticmethod
    def _progress_line(name: str, elapsed: float, progress: dict[str, Any]) -> str:
        if progress.get("state") == LeaveState.REMOVING.value:
            return f"{elapsed:5.1f}s: nothing is left on {name}: it removes itself from the membership"
        if progress.get("state") == LeaveState.LEFT.value:
            return f"{elapsed:5.1f}s: {name} left the membership"
        return f"{elapsed:5.1f}s: {progress['sessions']} sessions with {progress['messages']} messages still on {name}"

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

    def leaving(self) -> str | None:
        """Why this node takes no client while it leaves (its /health), or None."""
        if self.state is LeaveState.DRAINING:
            return "leaving the cluster (cluster leave -k): handing its sessions over"
        if self.state is LeaveState.REMOVING:
            return "leaving the cluster (cluster leave -k): removing itself from the membership"
        return None

    def removed(self) -> None:
        """This node is no longer a member (node.py: `_on_removed`)."""
        self._apply(LeaveInput.REMOVED)

    def reset(self) -> None:
        """This node joins again as a new incarnation after it left: a later `leave -k` drains it again."""
        self._apply(LeaveInput.REJOINED)
        self.settled = False
        self.moving_total = 0
        self.notes = []
        self._task = None

    async def before_join(self) -> str | None:
        """`cluster join` run on this node: a leave that drains it is given up (the join ends with a node that
        serves); a removal under way is waited for (the join then makes a new incarnation). A line for the
        join's answer, or None."""
        if self.state is LeaveState.DRAINING:
            self._give_up(LeaveInput.ABORTED, "a cluster join was run on it")
            return f"the leave of {self.name} under way was given up: it serves again"
        task = self._task
        if self.state is LeaveState.REMOVING and task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), REMOVAL_GRACE)
            except TimeoutError:
                raise CommandRefused(f"{self.name} is still removing itself from its cluster after "
                                     f"{REMOVAL_GRACE:g}s; run the join again once it has left", 503) from None
        return None

    # ------------------------------------------------------------------------------------------ the leaving node

    def begin(self, timeout: float, by: str) -> None:
        """Leave (leave_drain, or the command run here): drain, then remove this node once nothing is left;
        give the leave up if the drain has not settled after `timeout` seconds."""
        if self._apply(LeaveInput.ASKED) is Action.DRAIN:
            self._by = by
            self.outcome = ""
            self.notes = []
            others = [m for m in self.cluster.member_names() if m != self.name]
            if others:  # no client is taken from now on
                log.warning("leaving the cluster: disconnecting clients and handing sessions over")
                self.stop_serving(others[0])
            self._task = asyncio.get_running_loop().create_task(self._leave(timeout))

    async def _leave(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self.drain()
        while self.state is LeaveState.DRAINING:
            if self.settled and self.progress()["sessions"] == 0:
                self._apply(LeaveInput.SETTLED)
                break
            if loop.time() >= deadline:
                left = self.progress()
                self._give_up(LeaveInput.DEADLINE, f"{left['sessions']} sessions with {left['messages']} messages "
                              f"were still on it after {timeout:g}s")
                return
            await asyncio.sleep(SETTLE_POLL)
        if self.state is not LeaveState.REMOVING:
            return
        try:
            self.cluster.check_leave(self.name)
        except CommandRefused as exc:
            self._give_up(LeaveInput.REMOVAL_REFUSED, str(exc))
            return
        if self._by != self.name:  # before the removal, on the same link: the command's final count
            self.cluster.send_control(self._by, {"op": "leave_progress", "query": 0, **self.progress()})
        try:
            self.notes = await self.cluster.remove_member(self.name, witness=self._by)
        except Exception as exc:  # every path of a leave ends serving or left, never in between
            log.exception("the removal of this node failed")
            self._give_up(LeaveInput.REMOVAL_REFUSED, f"its removal failed: {exc!r}")

    def _apply(self, given: LeaveInput) -> Action:
        action, state = step(self.state, given)
        if state is not self.state:
            log.info("leave", transition=f"{self.state.value} -> {state.value}", input=given.value)
        self.state = state
        return action

    def _give_up(self, given: LeaveInput, why: str) -> None:
        if self._apply(given) is not Action.SERVE_AGAIN:
            return
        self.outcome = why
        self.settled = False
        log.warning("the leave was given up: serving again as a member", reason=why,
                    sessions_handed_over=self.moving_total)
        self.serve_again()

    async def drain(self) -> None:
        """Once the listeners are closed (`begin`): wait for the clients to go, then start handing every
        persistent session over."""
        others = [m for m in self.cluster.member_names() if m != self.name]
        if not others:
            self.settled = True
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DISCONNECT_GRACE
        while any(s.online for s in self.broker.local_sessions()) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if self.state is not LeaveState.DRAINING:
            return  # given up meanwhile: the sessions not moved yet stay here
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
        draining = self.state is LeaveState.DRAINING
        moving = [s for s in self.broker.local_sessions() if s.moving_to is not None or (draining and s.persistent)]
        return {"state": self.state.value, "draining": draining, "settled": self.settled, "sessions": len(moving),
                "messages": sum(len(s.queue) + len(s.inflight) for s in moving), "moving_total": self.moving_total,
                "outcome": self.outcome, "notes": self.notes}

    def on_control(self, peer: str, body: dict[str, Any]) -> None:
        """A leave_drain, leave_abort, leave_status or leave_progress frame (`CONTROL_OPS`: node.py registers
        them in the control table)."""
        op = body.get("op")
        if op == "leave_drain":
            timeout = body.get("timeout")
            self.begin(float(timeout) if isinstance(timeout, (int, float)) else DEFAULT_TIMEOUT, peer)
        elif op == "leave_abort":
            self._give_up(LeaveInput.ABORTED, f"{peer} gave the command up")
        elif op == "leave_status":
            self.cluster.send_control(peer, {"op": "leave_progress", "query": body.get("query"),
                                             **self.progress()})
        elif op == "leave_progress":
            if not body.get("query"):
                self._settled_reports[peer] = body
                return
            future = self._answers.get(int(body.get("query") or 0))
            if future is not None and not future.done():
                future.set_result(body)


__all__ = ["Departure"]
