"""The verdict of a run: every check, whether a safety property failed, and the short table printed at the end."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chaos.checkers.result import Check


def unsafe(checks: Sequence[Check]) -> list[str]:
    return [c.name for c in checks if c.safe is False]


def verdict(meta: dict[str, Any], checks: Sequence[Check], errors: Sequence[str]) -> dict[str, Any]:
    failed = unsafe(checks)
    unchecked = [c.name for c in checks if c.safe is None]
    return {**meta, "valid": not failed and not errors, "failed": failed, "not_checked": unchecked,
            "errors": list(errors),
            "checks": {c.name: c.to_dict() for c in checks}}


def table(checks: Sequence[Check]) -> str:
    rows = [("check", "result", "figures")]
    for c in checks:
        result = {True: "ok", False: "FAIL", None: "n/a"}[c.safe]
        rows.append((c.name, result, c.summary))
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = [f"{r[0]:<{width[0]}}  {r[1]:<{width[1]}}  {r[2]}" for r in rows]
    lines.insert(1, "-" * min(120, max(len(line) for line in lines)))
    return "\n".join(lines)
