"""`vmq-admin retain show`: examples for the help; the command is in `admin.commands`."""

from __future__ import annotations

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("retain", "show"): ["vmq-admin retain show", "vmq-admin retain show topic=sensors/+/temp limit=10"],
}

NOTES: dict[tuple[str, ...], str] = {}
