"""Building synthetic histories for the checker tests: operations with explicit times (ms)."""

from __future__ import annotations

from typing import Any

from chaos.history import Event, Operation, pair

MS = 1_000_000


class H:
    """A history written by hand: `h.op(process, f, value, node, start_ms, end_ms, outcome)`."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def op(self, process: str, f: str, value: Any, node: str, start: int, end: int | None, outcome: str = "ok",
           result: Any = None) -> H:
        self.events.append(Event("invoke", process, f, value, node, start * MS))
        if end is not None:
            kind = outcome
            self.events.append(Event(kind, process, f, value if result is None else result, node,  # type: ignore[arg-type]
                                     end * MS))
        return self

    def sub(self, client: str, flt: str, start: int, end: int | None, outcome: str = "ok") -> H:
        return self.op(f"p-{client}", "subscribe", {"client": client, "filter": flt}, "n1", start, end, outcome)

    def unsub(self, client: str, flt: str, start: int, end: int | None, outcome: str = "ok") -> H:
        return self.op(f"p-{client}", "unsubscribe", {"client": client, "filter": flt}, "n1", start, end, outcome)

    def retain(self, topic: str, msg: str | None, start: int, end: int | None, outcome: str = "ok",
               process: str = "w") -> H:
        value: dict[str, object] = {"topic": topic, "msg": msg, "retain": True, "expect": []}
        return self.op(process, "publish", value, "n1", start, end, outcome)

    def publish(self, msg: str, to: str, start: int, end: int | None, outcome: str = "ok", process: str = "pub") -> H:
        value = {"topic": "t", "msg": msg, "retain": False, "expect": [to]}
        return self.op(process, "publish", value, "n2", start, end, outcome)

    def drain(self, client: str, msgs: list[str], start: int, end: int) -> H:
        return self.op("drainer", "drain", {"client": client}, "n1", start, end, "ok",
                       {"client": client, "msgs": msgs})

    def ops(self) -> list[Operation]:
        return pair(sorted(self.events, key=lambda e: e.time))
