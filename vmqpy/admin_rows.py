"""The node's data as the admin layer shows it (vmqpy.facade): payloads as text and the metadata replica's dump
as rows, JSON-friendly (bytes as base64, tuples as lists). Pure.
"""

from __future__ import annotations

import base64
from typing import Any

Row = dict[str, Any]

__all__ = ["dump_rows", "payload_text"]


def payload_text(payload: bytes) -> str:
    """A payload as text: UTF-8 when it is, else `base64:` and its base64."""
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(payload).decode("ascii")


def dump_rows(dump: dict[str, Any]) -> list[Row]:
    """The replica's data as rows: Prefix, Key, Values ([node, counter, value], sorted), Context (filled)."""
    rows: list[Row] = []
    for prefix, keys in dump["data"].items():
        for key, entry in keys.items():
            rows.append({
                "Prefix": prefix,
                "Key": _plain(list(key)),
                "Values": _plain(sorted(entry["values"], key=lambda v: (v[0], v[1]))),
                "Context": dict(sorted(entry["filled"].items())),
            })
    return rows


def _plain(value: Any) -> Any:
    """JSON-friendly: bytes as base64 text, tuples as lists."""
    if isinstance(value, bytes | bytearray):
        return "base64:" + base64.b64encode(value).decode("ascii")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
