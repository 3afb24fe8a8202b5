"""Administration questions put to every member, so that `vmq-admin session show` and `session disconnect`
answer for the whole cluster from whichever node runs them.

A question is a CONTROL frame `{"op": "admin_ask", "id": N, "what": NAME, "args": {...}}`. The member runs
its local handler for NAME (a plain function of the args, registered by the node) and answers
`{"op": "admin_answer", "id": N, "ok": true, "result": ...}`, or `"ok": false` with the error's text. The
asking node runs its own handler directly, asks every other member it can reach, and waits at most `timeout`
seconds: members that are unreachable, or do not answer in time, are listed as missing in the `Answers`,
never waited on for ever. Frames travel on the authenticated cluster links only, so a question comes from a
node that holds the cluster's cookie.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

log = structlog.get_logger("vmqpy.admin_calls")

ASK = "admin_ask"
ANSWER = "admin_answer"
DEFAULT_TIMEOUT = 3.0

Handler = Callable[[dict[str, Any]], Any]


class Members(Protocol):
    """What this module needs of the cluster service."""

    name: str

    def member_names(self) -> list[str]: ...

    def is_reachable(self, node: str) -> bool: ...

    def send_control(self, node: str, body: dict[str, Any]) -> bool: ...


@dataclass
class Answers:
    """What each member answered (node -> result), which members failed (node -> error text) and which could
    not be asked or did not answer in time."""

    results: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def note(self) -> str | None:
        """A line for the operator when the answer is not the whole cluster's; None when it is."""
        parts = [f"{node}: {error}" for node, error in sorted(self.failed.items())]
        if self.missing:
            parts.append("no answer from " + ", ".join(sorted(self.missing)))
        return "; ".join(parts) or None


class AdminCalls:
    """Asks every member a question and answers theirs (see the module doc)."""

    #: the CONTROL ops of questions and answers (node.py registers `on_control` for them in the control table)
    CONTROL_OPS = (ASK, ANSWER)

    def __init__(self, members: Members, handlers: Mapping[str, Handler]) -> None:
        self.members = members
        self.handlers = dict(handlers)
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[asyncio.Future[None], Answers, set[str]]] = {}

    def _run(self, what: str, args: dict[str, Any]) -> Any:
        handler = self.handlers.get(what)
        if handler is None:
            raise LookupError(f"unknown question {what!r}")
        return handler(args)

    async def ask_all(self, what: str, args: dict[str, Any], timeout: float = DEFAULT_TIMEOUT) -> Answers:
        """Every member's answer to `what` (this node's first, run here); see the module doc."""
        answers = Answers()
        me = self.members.name
        try:
            answers.results[me] = self._run(what, args)
        except Exception as exc:  # one node's failure is reported, not raised: the others may still answer
            answers.failed[me] = f"{type(exc).__name__}: {exc}"
        others = [n for n in self.members.member_names() if n != me]
        query = next(self._ids)
        expected: set[str] = set()
        for node in others:
            frame = {"op": ASK, "id": query, "what": what, "args": args}
            if self.members.is_reachable(node) and self.members.send_control(node, frame):
                expected.add(node)
            else:
                answers.missing.append(node)
        if not expected:
            return answers
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[query] = (done, answers, expected)
        try:
            await asyncio.wait_for(done, timeout)
        except TimeoutError:
            answers.missing.extend(sorted(expected))
        finally:
            del self._waiting[query]
        return answers

    def on_control(self, peer: str, body: dict[str, Any]) -> None:
        """A question or an answer from `peer` (`CONTROL_OPS`)."""
        op = body.get("op")
        if op == ASK:
            self._answer(peer, body)
        elif op == ANSWER:
            self._collect(peer, body)

    def _answer(self, peer: str, body: dict[str, Any]) -> None:
        args = body.get("args")
        what = body.get("what")
        reply: dict[str, Any] = {"op": ANSWER, "id": body.get("id")}
        try:
            if not isinstance(args, dict) or not isinstance(what, str):
                raise ValueError("a malformed question")
            reply.update(ok=True, result=self._run(what, args))
        except Exception as exc:
            log.warning("admin question failed", peer=peer, what=what, error=str(exc))
            reply.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        self.members.send_control(peer, reply)

    def _collect(self, peer: str, body: dict[str, Any]) -> None:
        query = body.get("id")
        waiting = self._waiting.get(query) if isinstance(query, int) else None
        if waiting is None:
            return  # an answer that came after the deadline
        done, answers, expected = waiting
        if peer not in expected:
            return
        expected.discard(peer)
        if body.get("ok") is True:
            answers.results[peer] = body.get("result")
        else:
            answers.failed[peer] = str(body.get("error", "failed"))
        if not expected and not done.done():
            done.set_result(None)
