"""Reading the nodes' replication logs (docs/replication-log.md) for the checkers: subscription key changes
(for stable latency) and retain writes (for the deterministic winner). Pure: lines in, records out.

A log can be truncated or damaged (a node killed mid-line, a disk error, a hand-edited file): a line the
checkers need that does not have the documented shape is skipped, and said so in `skipped` ("skipped line N:
why", N counted from 1 over the lines given), never an exception. Lines of other events and prefixes, and lines
that are not JSON objects of schema 1, are not the checkers' business and are passed over silently.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator
from typing import Any

import msgpack

from chaos.checkers.retained import RetainWrite
from chaos.checkers.subscriptions import KeyChange


class _Malformed(ValueError):
    """A needed field of a line does not have its documented shape (the message says which)."""


def _lines(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(lines, 1):
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if isinstance(raw, dict) and raw.get("schema") == 1:
            yield number, raw


def _int(raw: dict[str, Any], name: str) -> int:
    value = raw.get(name)
    if type(value) is not int:
        raise _Malformed(f"{name} is not an integer: {value!r}"[:120])
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _Malformed(f"{what} is not a string: {value!r}"[:120])
    return value


def _key(raw: dict[str, Any], length: int) -> list[Any]:
    key = raw.get("key")
    if not isinstance(key, list) or len(key) != length:
        raise _Malformed(f"key is not a list of {length}: {key!r}"[:120])
    return key


def _dot(raw: dict[str, Any]) -> tuple[str, int]:
    dot = raw.get("dot")
    if not (isinstance(dot, list) and len(dot) == 2 and isinstance(dot[0], str) and type(dot[1]) is int):
        raise _Malformed(f"dot is not [replica, counter]: {dot!r}"[:120])
    return dot[0], dot[1]


def _hlc(raw: dict[str, Any]) -> tuple[int, int, str]:
    hlc = raw.get("hlc")
    if not (isinstance(hlc, list) and len(hlc) == 3 and type(hlc[0]) is int and type(hlc[1]) is int
            and isinstance(hlc[2], str)):
        raise _Malformed(f"hlc is not [wall, logical, node]: {hlc!r}"[:120])
    return hlc[0], hlc[1], hlc[2]


def _context(raw: dict[str, Any]) -> dict[str, int]:
    context = raw.get("context")
    if context is None:
        return {}
    if not isinstance(context, dict) or not all(type(v) is int for v in context.values()):
        raise _Malformed(f"context is not a map of counters: {context!r}"[:120])
    return {str(k): v for k, v in context.items()}


def subscription_changes(lines: Iterable[str], skipped: list[str] | None = None) -> list[KeyChange]:
    """Every change of a subscription key on a node; malformed lines are reported in `skipped`."""
    out: list[KeyChange] = []
    for number, raw in _lines(lines):
        if raw.get("prefix") != "subscription" or raw.get("event") not in ("md_write", "md_apply"):
            continue
        try:
            key = _key(raw, 3)
            if raw["event"] == "md_write":
                present = raw.get("op") == "put"
            else:
                present = _int(raw, "siblings") > 0
            out.append(KeyChange(_str(raw.get("node"), "node"), _int(raw, "ts"), _str(key[1], "client id"),
                                 _str(key[2], "topic filter"), present))
        except _Malformed as exc:
            if skipped is not None:
                skipped.append(f"skipped line {number}: {exc}")
    return out


def _payload(raw: dict[str, Any]) -> str | None:
    """The payload of a retain value ([stamp, [topic, payload, ...]]) as text."""
    value = raw.get("value")
    if value is None and "value_sha256" in raw:
        raise _Malformed("value not logged (metadata.replication_log.values = off): the payload is unknown")
    if not isinstance(value, str):
        raise _Malformed(f"value is not base64 text: {value!r}"[:120])
    try:
        decoded = msgpack.unpackb(base64.b64decode(value, validate=True), raw=False, strict_map_key=False)
    except (ValueError, TypeError, binascii.Error, msgpack.ExtraData, msgpack.FormatError,
            msgpack.StackError) as exc:
        raise _Malformed(f"value does not decode: {exc}"[:120]) from None
    if not (isinstance(decoded, list) and len(decoded) >= 2 and isinstance(decoded[1], list)
            and len(decoded[1]) >= 2):
        raise _Malformed(f"value is not [stamp, [topic, payload, ...]]: {decoded!r}"[:120])
    payload = decoded[1][1]
    if isinstance(payload, bytes):
        return payload.decode("utf-8", errors="replace") or None
    if isinstance(payload, str):
        return payload or None
    raise _Malformed(f"value has a payload that is not bytes: {payload!r}"[:120])


def retain_writes(lines: Iterable[str], skipped: list[str] | None = None) -> list[RetainWrite]:
    """Every local write of a retain key; malformed lines are reported in `skipped`."""
    out: list[RetainWrite] = []
    for number, raw in _lines(lines):
        if raw.get("event") != "md_write" or raw.get("prefix") != "retain":
            continue
        try:
            key = _key(raw, 2)
            msg = _payload(raw) if raw.get("op") == "put" else None
            out.append(RetainWrite(_str(key[1], "topic"), _dot(raw), _context(raw), _hlc(raw), msg))
        except _Malformed as exc:
            if skipped is not None:
                skipped.append(f"skipped line {number}: {exc}")
    return out
