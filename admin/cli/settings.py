"""`vmq-admin show KEY ...` and `vmq-admin set KEY=VALUE ...`: examples for the help; the commands are in
`admin.commands`."""

from __future__ import annotations

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("show",): ["vmq-admin show allow_publish_during_netsplit max_inflight_messages"],
    ("set",): ["vmq-admin set allow_publish_during_netsplit=on"],
}

NOTES: dict[tuple[str, ...], str] = {}
