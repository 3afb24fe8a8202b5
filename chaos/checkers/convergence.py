"""Convergence: after the quiet period every node's metadata dump is identical."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from chaos.checkers.result import Check


def _key(row: Mapping[str, Any]) -> str:
    return json.dumps([row.get("Prefix"), row.get("Key")], sort_keys=True)


def check_convergence(dumps: Mapping[str, Sequence[Mapping[str, Any]]], members: Sequence[str]) -> Check:
    """`dumps`: node -> the rows of its `metadata dump`; `members`: every node that should have answered."""
    check = Check("convergence", None)
    missing = sorted(set(members) - set(dumps))
    for node in missing:
        check.problem(f"no dump from {node}")
    tables = {node: {_key(r): json.dumps(r, sort_keys=True) for r in rows} for node, rows in dumps.items()}
    keys = sorted(set().union(*[set(t) for t in tables.values()])) if tables else []
    divergent = 0
    for key in keys:
        versions = {node: table.get(key) for node, table in tables.items()}
        if len(set(versions.values())) > 1:
            divergent += 1
            holders = sorted(n for n, v in versions.items() if v is not None)
            check.problem(f"divergent {key}: held by {holders}, {len(set(versions.values()))} versions")
    check.figures = {"nodes": len(dumps), "keys": len(keys), "divergent_keys": divergent, "missing_nodes": missing}
    if dumps:
        check.safe = divergent == 0 and not missing
    check.summary = f"{len(keys)} keys on {len(dumps)} nodes, {divergent} divergent"
    return check
