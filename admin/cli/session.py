"""`vmq-admin session show`: examples for the help; the command is in `admin.commands`."""

from __future__ import annotations

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("session", "show"): ["vmq-admin session show", "vmq-admin session show client-id=sensor-17 --json"],
}

NOTES: dict[tuple[str, ...], str] = {}
