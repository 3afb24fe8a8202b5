"""What a checker found."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MAX_EXAMPLES = 10


@dataclass
class Check:
    """`safe` is False when a safety property failed, None when there was nothing to check."""

    name: str
    safe: bool | None
    figures: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    summary: str = ""

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_EXAMPLES:
            self.problems.append(text)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "safe": self.safe, "summary": self.summary, "figures": self.figures,
                "problems": self.problems}


def quantiles(values: list[float]) -> dict[str, float | None]:
    """p50, p99 and max of a list (nearest rank), None when empty."""
    if not values:
        return {"p50": None, "p99": None, "max": None}
    ordered = sorted(values)

    def rank(q: float) -> float:
        index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
        return round(ordered[index], 3)

    return {"p50": rank(0.50), "p99": rank(0.99), "max": round(ordered[-1], 3)}
