"""Reading the nodes' replication logs (docs/replication-log.md) for the checkers: subscription key changes
(for stable latency) and retain writes (for the deterministic winner). Pure: lines in, records out."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any

import msgpack

from chaos.checkers.retained import RetainWrite
from chaos.checkers.subscriptions import KeyChange


def _lines(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    for line in lines:
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if isinstance(raw, dict) and raw.get("schema") == 1:
            yield raw


def subscription_changes(lines: Iterable[str]) -> list[KeyChange]:
    out: list[KeyChange] = []
    for raw in _lines(lines):
        if raw.get("prefix") != "subscription" or raw.get("event") not in ("md_write", "md_apply"):
            continue
        key = raw.get("key")
        if not isinstance(key, list) or len(key) != 3:
            continue
        if raw["event"] == "md_write":
            present = raw.get("op") == "put"
        else:
            present = int(raw.get("siblings", 0)) > 0
        out.append(KeyChange(str(raw["node"]), int(raw["ts"]), str(key[1]), str(key[2]), present))
    return out


def _payload(value: Any) -> str | None:
    """The payload of a retain value ([stamp, [topic, payload, ...]]) as text."""
    if not isinstance(value, str):
        return None
    decoded = msgpack.unpackb(base64.b64decode(value), raw=False, strict_map_key=False)
    payload = decoded[1][1]
    if isinstance(payload, bytes):
        return payload.decode("utf-8", errors="replace") or None
    return str(payload) or None


def retain_writes(lines: Iterable[str]) -> list[RetainWrite]:
    out: list[RetainWrite] = []
    for raw in _lines(lines):
        if raw.get("event") != "md_write" or raw.get("prefix") != "retain":
            continue
        key = raw.get("key")
        dot = raw.get("dot")
        hlc = raw.get("hlc")
        if not (isinstance(key, list) and len(key) == 2 and isinstance(dot, list) and isinstance(hlc, list)):
            continue
        try:
            msg = _payload(raw.get("value")) if raw.get("op") == "put" else None
        except (ValueError, TypeError, IndexError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            continue
        context = {str(k): int(v) for k, v in (raw.get("context") or {}).items()}
        out.append(RetainWrite(str(key[1]), (str(dot[0]), int(dot[1])), context,
                               (int(hlc[0]), int(hlc[1]), str(hlc[2])), msg))
    return out
