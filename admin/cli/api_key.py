"""`vmq-admin api-key create|show|delete`: examples and notes for the help; the commands are in
`admin.commands`."""

from __future__ import annotations

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("api-key", "create"): ["vmq-admin api-key create"],
    ("api-key", "show"): ["vmq-admin api-key show"],
    ("api-key", "delete"): ["vmq-admin api-key delete key=3f1c9a0b27de"],
}

# printed on stderr after a successful run, so that stdout stays the bare answer
NOTES: dict[tuple[str, ...], str] = {
    ("api-key", "create"): "store this key now: the node keeps only its hash and cannot show it again",
}
