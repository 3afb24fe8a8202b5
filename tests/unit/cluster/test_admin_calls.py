"""Admin questions put to every member (vmqpy/cluster/admin_calls.py), over an in-memory wire: answers are
gathered, failures and silence are named, nothing is waited on past the deadline."""

from __future__ import annotations

import asyncio
from typing import Any

from vmqpy.cluster.admin_calls import ANSWER, ASK, AdminCalls


class Wire:
    """Members on one loop; `send_control` delivers on the next turn unless the member is down or mute."""

    def __init__(self) -> None:
        self.calls: dict[str, AdminCalls] = {}
        self.down: set[str] = set()
        self.mute: set[str] = set()  # receive questions, never answer
        self.sent: list[tuple[str, str, dict[str, Any]]] = []

    def member(self, name: str, handlers: dict[str, Any]) -> AdminCalls:
        wire = self

        class Members:
            def __init__(self) -> None:
                self.name = name

            def member_names(self) -> list[str]:
                return sorted(wire.calls)

            def is_reachable(self, node: str) -> bool:
                return node not in wire.down

            def send_control(self, node: str, body: dict[str, Any]) -> bool:
                wire.sent.append((name, node, body))
                if node in wire.down or (name in wire.mute and body["op"] == ANSWER):
                    return node not in wire.down
                asyncio.get_running_loop().call_soon(wire.calls[node].on_control, name, body)
                return True

        self.calls[name] = AdminCalls(Members(), handlers)
        return self.calls[name]


def sessions_of(node: str) -> dict[str, Any]:
    return {"sessions": lambda args: [f"{node}:{args['prefix']}"]}


async def test_every_member_answers() -> None:
    wire = Wire()
    a = wire.member("a", sessions_of("a"))
    wire.member("b", sessions_of("b"))
    wire.member("c", sessions_of("c"))
    answers = await a.ask_all("sessions", {"prefix": "x"}, timeout=1.0)
    assert answers.results == {"a": ["a:x"], "b": ["b:x"], "c": ["c:x"]}
    assert answers.note() is None


async def test_unreachable_and_silent_members_are_named_and_not_waited_for() -> None:
    wire = Wire()
    a = wire.member("a", sessions_of("a"))
    wire.member("b", sessions_of("b"))
    wire.member("c", sessions_of("c"))
    wire.member("d", sessions_of("d"))
    wire.down.add("c")
    wire.mute.add("d")
    loop = asyncio.get_running_loop()
    started = loop.time()
    answers = await a.ask_all("sessions", {"prefix": "x"}, timeout=0.2)
    assert loop.time() - started < 1.0
    assert answers.results == {"a": ["a:x"], "b": ["b:x"]}
    assert sorted(answers.missing) == ["c", "d"]
    assert answers.note() == "no answer from c, d"
    assert not a._waiting  # nothing left behind
    # d's late answer, and an answer to a question never asked, are ignored
    a.on_control("d", {"op": ANSWER, "id": 1, "ok": True, "result": ["late"]})
    a.on_control("b", {"op": ANSWER, "id": 999, "ok": True, "result": []})


async def test_a_failing_handler_is_reported_with_its_member() -> None:
    def broken(args: dict[str, Any]) -> Any:
        raise RuntimeError("table gone")

    wire = Wire()
    a = wire.member("a", sessions_of("a"))
    wire.member("b", {"sessions": broken})
    answers = await a.ask_all("sessions", {"prefix": "x"}, timeout=1.0)
    assert answers.results == {"a": ["a:x"]}
    assert answers.failed == {"b": "RuntimeError: table gone"}
    assert answers.note() == "b: RuntimeError: table gone"


async def test_a_failing_local_handler_does_not_stop_the_others() -> None:
    def broken(args: dict[str, Any]) -> Any:
        raise ValueError("bad")

    wire = Wire()
    a = wire.member("a", {"sessions": broken})
    wire.member("b", sessions_of("b"))
    answers = await a.ask_all("sessions", {"prefix": "x"}, timeout=1.0)
    assert answers.results == {"b": ["b:x"]} and answers.failed == {"a": "ValueError: bad"}


async def test_malformed_and_unknown_questions_are_answered_with_an_error() -> None:
    wire = Wire()
    wire.member("a", sessions_of("a"))
    b = wire.member("b", sessions_of("b"))
    b.on_control("a", {"op": ASK, "id": 7, "what": "sessions", "args": "not a dict"})
    b.on_control("a", {"op": ASK, "id": 8, "what": "no-such", "args": {}})
    answers = [body for sender, _to, body in wire.sent if sender == "b"]
    assert [(x["id"], x["ok"]) for x in answers] == [(7, False), (8, False)]
    assert "malformed" in answers[0]["error"] and "unknown question 'no-such'" in answers[1]["error"]
    await asyncio.sleep(0)  # the errors reach a, which asked nothing: ignored
