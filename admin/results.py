"""What an administration command answers: a table of rows or a text, and their JSON form (VerneMQ's shape)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Table:
    """Rows; `note`: a line for the operator beside the table (e.g. a cluster-wide answer that lacks a node)."""

    rows: list[Row]
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Lines:
    """Lines written while the command runs (`trace client`): the HTTP API streams them as they come, one JSON
    object per line (`{"type": "line", "line": "..."}`, then `{"type": "end"}`), and `vmq-admin` prints each at
    once. The iterator's cleanup runs when the client goes away."""

    lines: AsyncIterator[str]


Result = Table | Text | Lines
Answer = Table | Text  # a result that has a JSON document
STREAM_CONTENT_TYPE = "application/x-ndjson"


def result_to_json(result: Result) -> dict[str, Any]:
    """VerneMQ's shape: {"type": "table", "table": [rows]} or {"type": "text", "text": "..."}. Lines have no
    JSON document of their own: they are streamed (`admin.http`)."""
    if isinstance(result, Lines):
        raise TypeError("streamed lines have no single JSON answer")
    if isinstance(result, Table):
        doc: dict[str, Any] = {"type": "table", "table": result.rows}
        if result.note:
            doc["note"] = result.note
        return doc
    return {"type": "text", "text": result.text}


def result_from_json(doc: Any) -> Answer:
    """The inverse of `result_to_json`; ValueError when `doc` is not of that shape."""
    if isinstance(doc, dict):
        if doc.get("type") == "table" and isinstance(doc.get("table"), list):
            rows = doc["table"]
            note = doc.get("note")
            if all(isinstance(r, dict) for r in rows):
                return Table(rows, note if isinstance(note, str) else None)
        if doc.get("type") == "text" and isinstance(doc.get("text"), str):
            return Text(doc["text"])
    raise ValueError("not a table or text answer")
