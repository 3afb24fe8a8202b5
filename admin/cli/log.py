"""`vmq-admin log level`: examples for the help; the command is in `admin.commands`."""

from __future__ import annotations

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("log", "level"): ["vmq-admin log level", "vmq-admin log level level=debug"],
}

NOTES: dict[tuple[str, ...], str] = {}
