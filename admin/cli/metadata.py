"""`vmq-admin metadata dump`: examples for the help; the command is in `admin.commands`."""

from __future__ import annotations

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("metadata", "dump"): ["vmq-admin metadata dump --json", "vmq-admin metadata dump prefix=subscriptions"],
}

NOTES: dict[tuple[str, ...], str] = {}
