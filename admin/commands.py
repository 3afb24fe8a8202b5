"""The one table of administration commands, shared by the HTTP API (`admin.http`) and `vmq-admin` (`admin.cli`),
and the lookup of a command by its words.

A command is a path of words (`cluster show`), an HTTP method (GET for commands that only read, POST for those
that change something), parameters and a handler (`admin.command`). Each group of the command tree has its own
module, holding its table entries, their handlers and the examples of the help: `vmq-admin cluster leave` is in
`admin/cli/cluster.py`, `vmq-admin show` and `vmq-admin set` in `admin/cli/settings.py`. This table is their
concatenation, in the order of `GROUPS`.

The words after the path are parsed by `admin.argv` into typed parameters (`admin.params`); an unknown command or
a bad parameter is a `CommandError` naming it. The names other modules import from here are re-exported.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from admin.argv import canonical_words, parse_args, query_to_words, words_to_query
from admin.cli import (
    acl,
    api_key,
    cluster,
    listener,
    log,
    metadata,
    metrics,
    node,
    retain,
    session,
    settings,
    subscription,
    trace,
)
from admin.command import Command, CommandGroup, Context, Handler, Method, execute
from admin.errors import CommandError
from admin.params import BOOL, COUNT, NODE, SECONDS, TEXT, TOPIC_FILTER, Args, Param, ParamType
from admin.results import Result, Row, Table, Text, result_from_json, result_to_json

__all__ = [
    "BOOL",
    "BY_PATH",
    "COMMANDS",
    "COUNT",
    "GROUPS",
    "NODE",
    "SECONDS",
    "TEXT",
    "TOPIC_FILTER",
    "Args",
    "Command",
    "CommandGroup",
    "Context",
    "Handler",
    "Method",
    "Param",
    "ParamType",
    "Result",
    "Row",
    "Table",
    "Text",
    "canonical_words",
    "execute",
    "parse_args",
    "parse_command",
    "query_to_words",
    "resolve",
    "result_from_json",
    "result_to_json",
    "words_to_query",
]

#: the command groups, in the order `vmq-admin --help` lists their commands
GROUPS: tuple[CommandGroup, ...] = (cluster, node, listener, session, subscription, retain, acl, metrics, metadata,
                                  settings, log, trace, api_key)  # fmt: skip

COMMANDS: tuple[Command, ...] = tuple(cmd for group in GROUPS for cmd in group.COMMANDS)


def _index(commands: Iterable[Command]) -> dict[tuple[str, ...], Command]:
    index: dict[tuple[str, ...], Command] = {}
    for cmd in commands:
        for path in (cmd.path, *cmd.aliases):
            if path in index:
                raise ValueError(f"command path {' '.join(path)!r} defined twice")
            index[path] = cmd
    return index


BY_PATH: dict[tuple[str, ...], Command] = _index(COMMANDS)


def _is_word_of_path(word: str) -> bool:
    return bool(word) and "=" not in word and not word.startswith("-")


def resolve(words: Sequence[str]) -> tuple[Command, list[str]]:
    """The command named by the longest matching prefix of `words` (paths and aliases), and the words left."""
    best: tuple[str, ...] | None = None
    for path in BY_PATH:
        if tuple(words[: len(path)]) == path and (best is None or len(path) > len(best)):
            best = path
    if best is not None:
        return BY_PATH[best], list(words[len(best):])
    head = []
    for word in words[:2]:
        if not _is_word_of_path(word):
            break
        head.append(word)
    groups = sorted({path[0] for path in BY_PATH})
    if not head:
        raise CommandError(f"no command given; commands: {', '.join(groups)}", 404)
    subs = sorted(path[1] for path in BY_PATH if path[0] == head[0] and len(path) > 1)
    if subs:
        raise CommandError(f"unknown command '{' '.join(head)}'; '{head[0]}' has: {', '.join(subs)}", 404)
    raise CommandError(f"unknown command '{' '.join(head)}'; commands: {', '.join(groups)}", 404)


def parse_command(words: Sequence[str]) -> tuple[Command, Args]:
    """`["cluster", "leave", "node=a@h", "-k"]` -> (the command, its arguments)."""
    cmd, rest = resolve(words)
    return cmd, parse_args(cmd, rest)
