"""`vmq-admin subscription show`: examples for the help; the command is in `admin.commands`."""

from __future__ import annotations

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("subscription", "show"): ["vmq-admin subscription show", "vmq-admin subscription show client-id=sensor-17"],
}

NOTES: dict[tuple[str, ...], str] = {}
