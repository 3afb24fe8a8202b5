"""`python -m chaos summary DIR...`: a Markdown table of the verdicts found under the given directories (one
row per run: experiment, mode, the safety result of every check and its main figures)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chaos.experiments import SUITE

COLUMNS = ("subscriptions", "retained", "queues", "registration", "convergence")


def _cell(check: dict[str, Any] | None) -> str:
    if check is None:
        return "-"
    f = check.get("figures", {})
    mark = {True: "ok", False: "**FAIL**", None: "n/a"}[check.get("safe")]
    name = check.get("name")
    if name == "subscriptions":
        detail = f"{f.get('acknowledged')} acked, lost {f.get('lost')}, unexpected {f.get('unexpected')}"
    elif name == "retained":
        bad = sum(int(f.get(k) or 0) for k in ("lost", "stale", "clear_undone", "not_winner", "unexpected"))
        detail = f"{f.get('acknowledged')} acked, disagree {f.get('disagreeing_topics')}, wrong {bad}"
    elif name == "queues":
        detail = (f"{f.get('acknowledged')} acked, lost {f.get('lost')} ({f.get('lost_in_detection_window')} in "
                  f"window), dup {f.get('duplicates')}")
    elif name == "registration":
        detail = f"{f.get('duplicate_moments')} dup moments, unresolved {f.get('unresolved')}"
    else:
        detail = f"{f.get('divergent_keys')} divergent of {f.get('keys')}"
    return f"{mark}: {detail}"


def verdicts(dirs: Iterable[Path]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for d in dirs:
        for path in sorted(d.glob("**/verdict.json")):
            found.append(json.loads(path.read_text()))
    return found


def markdown(rows: list[dict[str, Any]]) -> str:
    order = {name: i for i, name in enumerate(SUITE)}
    rows = sorted(rows, key=lambda v: (str(v.get("mode")), order.get(str(v.get("experiment")), len(order))))
    head = ["experiment", "mode", "commit", "verdict", *COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in rows:
        checks = v.get("checks", {})
        verdict = "valid" if v.get("valid") else "INVALID"
        if v.get("errors"):
            verdict += f" ({len(v['errors'])} errors)"
        build = v.get("build") or {}
        commit = str(build.get("commit") or "?")[:7] + ("+" if build.get("vmqpy_modified") else "")
        cells = [str(v.get("experiment")), str(v.get("mode")), commit, verdict,
                 *(_cell(checks.get(c)) for c in COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
