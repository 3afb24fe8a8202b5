"""The words after a command's path, as `vmq-admin` takes them and the HTTP query string carries them: parsed
into `Args`, and written back as words and as a query string.

Parameters are written as VerneMQ writes them:

    vmq-admin cluster leave node=vmq2@127.0.0.1 -k --interval=5 -t 60
    vmq-admin set allow_publish_during_netsplit=on

* `name=value` words, for every parameter;
* `--name`, `--name=value`, `--name value` and, where declared, `-x`, `-x=value`, `-x value`; a boolean option
  written alone means true, a column (`session show --client_id`) written alone means "show this column";
* bare words (`show KEY ...`, none: every setting) and free `KEY=VALUE` pairs (`set KEY=VALUE ...`, at least
  one) for the settings commands.

The HTTP API turns the query string into the same list of words (`?node=vmq2@127.0.0.1&--kill-sessions`), so both
sides parse with `parse_args`; a bad parameter is a `CommandError` naming it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from urllib.parse import quote, unquote

from admin.command import Command
from admin.errors import CommandError
from admin.params import BOOL, SHOW_COLUMN, Args, Param

_SETTING_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def _options_hint(cmd: Command) -> str:
    return f"; usage: {cmd.usage()}"


def parse_args(cmd: Command, words: Sequence[str]) -> Args:
    """Parse the words after the command path. Raises CommandError(400) naming the word or parameter at fault."""
    values: dict[str, object] = {}
    raw: dict[str, str] = {}
    names: list[str] = []
    pairs: list[tuple[str, str]] = []

    def store(param: Param, text: str) -> None:
        if param.name in raw:
            raise CommandError(f"parameter '{param.name}' given twice for '{cmd.name}'")
        try:
            values[param.name] = param.type.parse(text)
        except ValueError as exc:
            shown = "" if param.secret else f" {text!r}"
            raise CommandError(f"bad value{shown} for '{param.name}' of '{cmd.name}': {exc}") from None
        raw[param.name] = text

    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("-") and len(word) > 1:
            long = word.startswith("--")
            name, eq, text = word[2 if long else 1:].partition("=")
            param = cmd.param(name) if long else cmd.short(name)
            if param is None:
                raise CommandError(f"unknown option '{word.partition('=')[0]}' for '{cmd.name}'{_options_hint(cmd)}")
            if not eq and param.type.column:
                if param.name in raw:
                    raise CommandError(f"parameter '{param.name}' given twice for '{cmd.name}'")
                values[param.name] = SHOW_COLUMN
                raw[param.name] = SHOW_COLUMN
                continue
            if not eq:
                if param.type is BOOL:
                    text = "true"
                elif i < len(words):
                    text = words[i]
                    i += 1
                else:
                    raise CommandError(f"option '{word}' of '{cmd.name}' needs a value ({param.type.metavar})")
            store(param, text)
        elif "=" in word:
            name, _, text = word.partition("=")
            param = cmd.param(name)
            if param is not None:
                store(param, text)
            elif cmd.free == "pairs" and _SETTING_NAME.match(name):
                if any(key == name for key, _ in pairs):
                    raise CommandError(f"setting '{name}' given twice")
                pairs.append((name, text))
            else:
                raise CommandError(f"unknown parameter '{name}' for '{cmd.name}'{_options_hint(cmd)}")
        elif cmd.free == "names" and _SETTING_NAME.match(word):
            if word not in names:
                names.append(word)
        else:
            raise CommandError(f"unexpected word {word!r} for '{cmd.name}'{_options_hint(cmd)}")
    for param in cmd.params:
        if param.name not in values:
            if param.required:
                raise CommandError(f"missing parameter '{param.name}' for '{cmd.name}'{_options_hint(cmd)}")
            values[param.name] = param.default
    if cmd.free == "pairs" and not pairs:  # `show` without names lists every setting
        raise CommandError(f"'{cmd.name}' needs at least one {cmd.free_metavar}{_options_hint(cmd)}")
    return Args(values, raw, names, pairs)


def canonical_words(cmd: Command, args: Args) -> list[str]:
    """The parameters that were given, as `name=value` words (then the free names or pairs): what a client sends."""
    words = [
        f"--{p.name}" if p.type.column and args.raw[p.name] == SHOW_COLUMN else f"{p.name}={args.raw[p.name]}"
        for p in cmd.params
        if p.name in args.raw
    ]
    words += list(args.names)
    words += [f"{key}={value}" for key, value in args.pairs]
    return words


def words_to_query(words: Iterable[str]) -> str:
    """Percent-encode words into a query string: `name=value` stays a pair, a bare word stays bare."""
    parts = []
    for word in words:
        name, eq, value = word.partition("=")
        parts.append(f"{quote(name, safe='')}={quote(value, safe='')}" if eq else quote(word, safe=""))
    return "&".join(parts)


def query_to_words(raw_query: str) -> list[str]:
    """The inverse of `words_to_query` on a raw (still encoded) query string. `+` is kept as `+` (an MQTT
    wildcard), not read as a space: write a space as %20."""
    words = []
    for part in raw_query.split("&"):
        if not part:
            continue
        name, eq, value = part.partition("=")
        words.append(f"{unquote(name)}={unquote(value)}" if eq else unquote(part))
    return words
