"""The JSON of bench.bench_keys: its points by size and the slopes over them, and the merge of earlier runs
(`--from-json`). Pure: no cluster, no sockets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.curves_common import slope

__all__ = ["merged", "result_of"]


def result_of(points: list[dict[str, Any]], rest_s: float | None) -> dict[str, Any]:
    """The bench's JSON: the points by size and the slopes over them."""
    points = sorted(points, key=lambda p: p["keys"])
    xs = [p["keys"] for p in points]
    joined = [p for p in points if p["join_s"] is not None]
    return {"bench": "keys", "rest_s": rest_s, "points": points, "slopes": {
        "rest_cpu_pct_per_million": _scale(slope(xs, [p["rest_cpu_pct_max"] for p in points]), 1e6),
        "join_s_per_million": _scale(slope([p["keys"] for p in joined], [p["join_s"] for p in joined]), 1e6),
        "exchange_bytes_per_key": slope(xs, [p["exchange_bytes_received"] for p in points])}}


def merged(paths: list[Path]) -> dict[str, Any]:
    """The points of earlier runs' JSON files (a size measured in several: the later file's), with their slopes."""
    by_size: dict[int, dict[str, Any]] = {}
    for path in paths:
        for point in json.loads(path.read_text())["points"]:
            by_size[point["keys"]] = point
    return result_of(list(by_size.values()), None)


def _scale(v: float | None, k: float) -> float | None:
    return None if v is None else v * k
