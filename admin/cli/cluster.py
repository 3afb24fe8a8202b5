"""`vmq-admin cluster show|status|join|leave`: examples for the help; the commands are in `admin.commands`."""

from __future__ import annotations

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("cluster", "show"): ["vmq-admin cluster show", "vmq-admin cluster status --json"],
    ("cluster", "join"): ["vmq-admin cluster join discovery-node=vmq1@127.0.0.1"],
    ("cluster", "leave"): [
        "vmq-admin cluster leave node=vmq2@127.0.0.1",
        "vmq-admin cluster leave node=vmq2@127.0.0.1 -k -i 2 -t 30",
    ],
}

NOTES: dict[tuple[str, ...], str] = {}
