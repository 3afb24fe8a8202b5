"""`vmq-admin metrics show`: examples for the help; the command is in `admin.commands`."""

from __future__ import annotations

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("metrics", "show"): ["vmq-admin metrics show", "vmq-admin metrics show --json"],
}

NOTES: dict[tuple[str, ...], str] = {}
