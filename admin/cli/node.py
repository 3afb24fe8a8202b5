"""`vmq-admin node status`: examples for the help; the command is in `admin.commands`."""

from __future__ import annotations

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("node", "status"): ["vmq-admin node status"],
}

NOTES: dict[tuple[str, ...], str] = {}
