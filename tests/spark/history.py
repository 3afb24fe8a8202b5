"""Hand-made chaos histories (docs/analytics.md, "The history") for the Spark tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class History:
    """Operations appended in time order; each `op` is an invoke and its completion one tick later unless
    `overlap` keeps it open (complete it with `complete`)."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.time = 1_000_000_000

    def _add(self, kind: str, process: str, f: str, value: Any, node: str = "n1") -> None:
        self.time += 1_000_000
        self.lines.append({"type": kind, "process": process, "f": f, "value": value, "node": node,
                           "time": self.time})

    def op(self, process: str, f: str, value: Any, status: str = "ok", result: Any = None) -> None:
        self._add("invoke", process, f, value)
        if status != "none":
            self._add(status, process, f, value if result is None else result)

    def invoke(self, process: str, f: str, value: Any) -> None:
        self._add("invoke", process, f, value)

    def complete(self, process: str, f: str, status: str, value: Any) -> None:
        self._add(status, process, f, value)

    def publish(self, process: str, topic: str, msg: str | None, status: str = "ok", *, retain: bool = False,
                expect: list[str] | None = None) -> None:
        value: dict[str, Any] = {"topic": topic, "msg": msg, "retain": retain}
        if expect is not None:
            value["expect"] = expect
        self.op(process, "publish", value, status)

    def drain(self, client: str, msgs: list[str]) -> None:
        self.op("drainer", "drain", {"client": client}, result={"client": client, "msgs": msgs})

    def read(self, retained: dict[str, str | None], subscriptions: dict[str, list[str]]) -> None:
        self.op("reader", "read", None, result={"retained": retained, "subscriptions": subscriptions})

    def write(self, path: Path, extra: list[str] = ()) -> Path:  # type: ignore[assignment]
        path.write_text("\n".join([json.dumps(x) for x in self.lines] + list(extra)) + "\n", encoding="utf-8")
        return path
