"""The one table of administration commands, shared by the HTTP API (`admin.http`) and `vmq-admin` (`admin.cli`).

A command is a path of words (`cluster show`), an HTTP method (GET for commands that only read, POST for those
that change something), parameters and a handler. Parameters are written as VerneMQ writes them:

    vmq-admin cluster leave node=vmq2@127.0.0.1 -k --interval=5 -t 60
    vmq-admin set allow_publish_during_netsplit=on

* `name=value` words, for every parameter;
* `--name`, `--name=value`, `--name value` and, where declared, `-x`, `-x=value`, `-x value`; a boolean option
  written alone means true;
* bare words (`show KEY ...`) and free `KEY=VALUE` pairs (`set KEY=VALUE ...`) for the settings commands.

The HTTP API turns the query string into the same list of words (`?node=vmq2@127.0.0.1&--kill-sessions`), so both
sides parse with `parse_args`; an unknown command or a bad parameter is a `CommandError` naming it.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, unquote

from admin.errors import CommandError

if TYPE_CHECKING:
    from admin.facade import NodeFacade
    from admin.keys import KeyStore

Row = dict[str, Any]


# -- results -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Table:
    rows: list[Row]


@dataclass(frozen=True, slots=True)
class Text:
    text: str


Result = Table | Text


def result_to_json(result: Result) -> dict[str, Any]:
    """VerneMQ's shape: {"type": "table", "table": [rows]} or {"type": "text", "text": "..."}."""
    if isinstance(result, Table):
        return {"type": "table", "table": result.rows}
    return {"type": "text", "text": result.text}


def result_from_json(doc: Any) -> Result:
    """The inverse of `result_to_json`; ValueError when `doc` is not of that shape."""
    if isinstance(doc, dict):
        if doc.get("type") == "table" and isinstance(doc.get("table"), list):
            rows = doc["table"]
            if all(isinstance(r, dict) for r in rows):
                return Table(rows)
        if doc.get("type") == "text" and isinstance(doc.get("text"), str):
            return Text(doc["text"])
    raise ValueError("not a table or text answer")


# -- parameter types ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ParamType:
    """How a parameter's text becomes a value: `parse` raises ValueError with the expectation."""

    metavar: str
    parse: Callable[[str], object]


def _parse_text(text: str) -> str:
    if not text:
        raise ValueError("expected a non-empty value")
    return text


_NODE_PART = re.compile(r"^[A-Za-z0-9_.-]+$")


def _parse_port(text: str) -> None:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError("the port must be a number from 1 to 65535")


def _parse_node(text: str) -> str:
    """NAME@HOST[:PORT]; HOST is a name, an IPv4 address, an IPv6 address in brackets ([::1]:44053) or a bare IPv6
    address without port."""
    value = text.strip()
    name, at, host = value.partition("@")
    expected = "expected NAME@HOST[:PORT] such as vmq2@127.0.0.1 or vmq2@127.0.0.1:44053"
    if not at or not _NODE_PART.match(name) or not host:
        raise ValueError(expected)
    if host.startswith("["):
        inner, bracket, rest = host[1:].partition("]")
        try:
            ipaddress.IPv6Address(inner)
        except ValueError:
            raise ValueError(f"{expected}; '[{inner}]' is not an IPv6 address") from None
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(expected)
        if rest:
            _parse_port(rest[1:])
    elif host.count(":") >= 2:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{expected}; write an IPv6 address with a port as [ADDRESS]:PORT") from None
    else:
        hostname, colon, port = host.partition(":")
        if not _NODE_PART.match(hostname):
            raise ValueError(expected)
        if colon:
            _parse_port(port)
    return value


def _parse_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError("expected a whole number of at least 1") from None
    if value < 1:
        raise ValueError("expected a whole number of at least 1")
    return value


def _parse_seconds(text: str) -> float:
    body, scale = text.strip().lower(), 1.0
    if body.endswith("ms"):
        body, scale = body[:-2], 0.001
    elif body.endswith("s"):
        body = body[:-1]
    try:
        value = float(body) * scale
    except ValueError:
        raise ValueError("expected seconds such as 5, 2.5, 5s or 250ms") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError("expected a finite number of seconds, 0 or more")
    return value


_TRUE = {"on", "true", "yes", "1"}
_FALSE = {"off", "false", "no", "0"}


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError("expected on/off (true/false, yes/no, 1/0)")


def _parse_topic_filter(text: str) -> str:
    if not text:
        raise ValueError("expected an MQTT topic filter such as a/+/c or a/#")
    if "\x00" in text or len(text.encode("utf-8")) > 65535:
        raise ValueError("a topic filter has no NUL character and at most 65535 bytes")
    levels = text.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise ValueError("'#' must be a whole level and the last one")
        if "+" in level and level != "+":
            raise ValueError("'+' must be a whole level")
    return text


TEXT = ParamType("TEXT", _parse_text)
NODE = ParamType("NAME@HOST[:PORT]", _parse_node)
COUNT = ParamType("N", _parse_count)
SECONDS = ParamType("SECONDS", _parse_seconds)
BOOL = ParamType("on|off", _parse_bool)
TOPIC_FILTER = ParamType("FILTER", _parse_topic_filter)

_SETTING_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


# -- commands ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Param:
    """One parameter. `flag`: shown as `--name` (and `-short`) in the usage instead of `name=value`. `secret`: its
    value is never repeated in error messages (API keys)."""

    name: str
    type: ParamType
    required: bool = False
    default: object = None
    help: str = ""
    flag: bool = False
    short: str | None = None
    secret: bool = False

    def usage(self) -> str:
        if self.flag:
            long = f"--{self.name}" if self.type is BOOL else f"--{self.name}={self.type.metavar}"
            text = f"-{self.short}|{long}" if self.short else long
        else:
            text = f"{self.name}={self.type.metavar}"
        return text if self.required else f"[{text}]"


@dataclass(frozen=True, slots=True)
class Context:
    """What a handler works with: the node, and the node's API keys."""

    facade: NodeFacade
    keys: KeyStore


class Args:
    """Parsed parameters of one invocation: typed values (defaults filled in), the raw text of the parameters that
    were given, and the free words (`show KEY ...`) or pairs (`set KEY=VALUE ...`)."""

    def __init__(
        self,
        values: dict[str, object],
        raw: dict[str, str],
        names: Sequence[str] = (),
        pairs: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.values = values
        self.raw = raw
        self.names = tuple(names)
        self.pairs = tuple(pairs)

    def __repr__(self) -> str:
        return f"Args({self.values!r}, names={self.names!r}, pairs={self.pairs!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Args):
            return NotImplemented
        return (self.values, self.names, self.pairs) == (other.values, other.names, other.pairs)

    __hash__ = None  # type: ignore[assignment]

    def _get(self, name: str, kind: type[Any]) -> Any:
        value = self.values[name]
        if not isinstance(value, kind) or (kind is float and isinstance(value, bool)):
            raise TypeError(f"parameter {name} is {type(value).__name__}, not {kind.__name__}")
        return value

    def text(self, name: str) -> str:
        return str(self._get(name, str))

    def opt_text(self, name: str) -> str | None:
        return None if self.values.get(name) is None else self.text(name)

    def integer(self, name: str) -> int:
        return int(self._get(name, int))

    def number(self, name: str) -> float:
        return float(self._get(name, (int, float)))  # type: ignore[arg-type]

    def flag(self, name: str) -> bool:
        return bool(self._get(name, bool))


Handler = Callable[[Context, Args], Awaitable[Result]]
Method = Literal["GET", "POST"]


def _default_wait(args: Args) -> float:
    return 30.0


@dataclass(frozen=True, slots=True)
class Command:
    """One entry of the table. `free`: "names" takes bare words (setting names), "pairs" takes KEY=VALUE words
    besides the declared parameters. `wait`: how long a client should wait for the answer, given the arguments."""

    path: tuple[str, ...]
    method: Method
    summary: str
    handler: Handler
    params: tuple[Param, ...] = ()
    aliases: tuple[tuple[str, ...], ...] = ()
    free: Literal["", "names", "pairs"] = ""
    free_metavar: str = ""
    wait: Callable[[Args], float] = _default_wait
    _by_name: dict[str, Param] = field(init=False, repr=False, compare=False)
    _by_short: dict[str, Param] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {p.name: p for p in self.params})
        object.__setattr__(self, "_by_short", {p.short: p for p in self.params if p.short})

    @property
    def name(self) -> str:
        return " ".join(self.path)

    def param(self, name: str) -> Param | None:
        return self._by_name.get(name)

    def short(self, letter: str) -> Param | None:
        return self._by_short.get(letter)

    def usage(self) -> str:
        parts = [self.name, *(p.usage() for p in self.params)]
        if self.free:
            parts.append(f"{self.free_metavar} [{self.free_metavar} ...]")
        return " ".join(parts)


# -- handlers ----------------------------------------------------------------------------------------------------
async def _cluster_show(ctx: Context, args: Args) -> Result:
    return Table(ctx.facade.cluster_show())


async def _cluster_join(ctx: Context, args: Args) -> Result:
    return Text(await ctx.facade.cluster_join(args.text("discovery-node")))


async def _cluster_leave(ctx: Context, args: Args) -> Result:
    text = await ctx.facade.cluster_leave(
        args.text("node"), args.flag("kill-sessions"), args.number("interval"), args.number("timeout")
    )
    return Text(text)


async def _node_status(ctx: Context, args: Args) -> Result:
    ready, reason = ctx.facade.health()
    return Table([{"Node": ctx.facade.node_name(), "Ready": ready, "Reason": reason}])


async def _session_show(ctx: Context, args: Args) -> Result:
    return Table(ctx.facade.session_show(args.opt_text("client-id"), args.integer("limit")))


async def _subscription_show(ctx: Context, args: Args) -> Result:
    return Table(ctx.facade.subscription_show(args.opt_text("client-id"), args.integer("limit")))


async def _retain_show(ctx: Context, args: Args) -> Result:
    return Table(ctx.facade.retain_show(args.opt_text("topic"), args.integer("limit")))


async def _metrics_show(ctx: Context, args: Args) -> Result:
    metrics = ctx.facade.metrics()
    return Table([{"Metric": name, "Value": metrics[name]} for name in sorted(metrics)])


async def _metadata_dump(ctx: Context, args: Args) -> Result:
    return Table(ctx.facade.metadata_dump(args.opt_text("prefix")))


async def _show(ctx: Context, args: Args) -> Result:
    return Table([{"Setting": key, "Value": ctx.facade.get_setting(key)} for key in args.names])


async def _set(ctx: Context, args: Args) -> Result:
    for key, _ in args.pairs:  # every key must exist before anything changes
        ctx.facade.get_setting(key)
    lines = [f"{key} = {ctx.facade.set_setting(key, value)}" for key, value in args.pairs]
    return Text("\n".join(lines))


async def _log_level(ctx: Context, args: Args) -> Result:
    """Show the log level, or set it (`level=debug`): the same setting as `set log.console.level`."""
    wanted = args.opt_text("level")
    if wanted is not None:
        ctx.facade.set_setting("log.console.level", wanted)
    return Text(f"log.console.level = {ctx.facade.get_setting('log.console.level')}")


async def _api_key_create(ctx: Context, args: Args) -> Result:
    return Text(ctx.keys.create())


async def _api_key_show(ctx: Context, args: Args) -> Result:
    return Table(ctx.keys.list())


async def _api_key_delete(ctx: Context, args: Args) -> Result:
    return Text(f"deleted API key {ctx.keys.delete(args.text('key'))}")


def _leave_wait(args: Args) -> float:
    return args.number("timeout") + 30.0


_CLIENT_ID = Param("client-id", TEXT, help="only the session(s) of this client id")
_LIMIT = Param("limit", COUNT, default=100, help="at most this many rows")

COMMANDS: tuple[Command, ...] = (
    Command(("cluster", "show"), "GET", "the cluster's members and their state", _cluster_show,
            aliases=(("cluster", "status"),)),
    Command(("cluster", "join"), "POST", "join the cluster of a running node", _cluster_join,
            params=(Param("discovery-node", NODE, required=True, help="a member of the cluster to join"),),
            wait=lambda args: 90.0),
    Command(("cluster", "leave"), "POST", "make a node leave the cluster (it stops serving clients)", _cluster_leave,
            params=(
                Param("node", NODE, required=True, help="the node that leaves"),
                Param("kill-sessions", BOOL, default=False, flag=True, short="k",
                      help="disconnect its clients instead of waiting for them to move"),
                Param("interval", SECONDS, default=5.0, flag=True, short="i",
                      help="seconds between checks of its remaining sessions"),
                Param("timeout", SECONDS, default=60.0, flag=True, short="t",
                      help="seconds to wait in total before giving up"),
            ),
            wait=_leave_wait),
    Command(("node", "status"), "GET", "this node's name and whether it is ready", _node_status),
    Command(("session", "show"), "GET", "client sessions", _session_show, params=(_CLIENT_ID, _LIMIT)),
    Command(("subscription", "show"), "GET", "subscriptions", _subscription_show,
            params=(Param("client-id", TEXT, help="only the subscriptions of this client id"), _LIMIT)),
    Command(("retain", "show"), "GET", "retained messages", _retain_show,
            params=(Param("topic", TOPIC_FILTER, help="only the topics matching this MQTT filter"), _LIMIT)),
    Command(("metrics", "show"), "GET", "the node's metrics", _metrics_show),
    Command(("metadata", "dump"), "GET", "the replicated metadata held by this node", _metadata_dump,
            params=(Param("prefix", TEXT, help="only the keys under this prefix"),)),
    Command(("show",), "GET", "the current value of run-time settings", _show,
            free="names", free_metavar="KEY"),
    Command(("set",), "POST", "change run-time settings", _set, free="pairs", free_metavar="KEY=VALUE"),
    Command(("log", "level"), "POST", "show or change the log level at once (level=debug|info|warning|error)",
            _log_level, params=(Param("level", TEXT, help="the new level; without it, the current one"),)),
    Command(("api-key", "create"), "POST", "create an API key (shown once)", _api_key_create),
    Command(("api-key", "show"), "GET", "the registered API keys (hash prefixes)", _api_key_show),
    Command(("api-key", "delete"), "POST", "delete an API key", _api_key_delete,
            params=(Param("key", TEXT, required=True, secret=True,
                          help="the key itself, or at least 8 hex digits of its hash (api-key show)"),)),
)  # fmt: skip


def _index(commands: Iterable[Command]) -> dict[tuple[str, ...], Command]:
    index: dict[tuple[str, ...], Command] = {}
    for cmd in commands:
        for path in (cmd.path, *cmd.aliases):
            if path in index:
                raise ValueError(f"command path {' '.join(path)!r} defined twice")
            index[path] = cmd
    return index


BY_PATH: dict[tuple[str, ...], Command] = _index(COMMANDS)


# -- parsing -----------------------------------------------------------------------------------------------------
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
    if cmd.free and not (names or pairs):
        raise CommandError(f"'{cmd.name}' needs at least one {cmd.free_metavar}{_options_hint(cmd)}")
    return Args(values, raw, names, pairs)


def parse_command(words: Sequence[str]) -> tuple[Command, Args]:
    """`["cluster", "leave", "node=a@h", "-k"]` -> (the command, its arguments)."""
    cmd, rest = resolve(words)
    return cmd, parse_args(cmd, rest)


def canonical_words(cmd: Command, args: Args) -> list[str]:
    """The parameters that were given, as `name=value` words (then the free names or pairs): what a client sends."""
    words = [f"{p.name}={args.raw[p.name]}" for p in cmd.params if p.name in args.raw]
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


async def execute(cmd: Command, args: Args, ctx: Context) -> Result:
    """Run a parsed command. CommandError from the facade passes through; a handler that answers something else
    than a Table or Text is a bug (TypeError)."""
    result = await cmd.handler(ctx, args)
    if not isinstance(result, Table | Text):
        raise TypeError(f"handler of '{cmd.name}' answered {type(result).__name__}")
    if isinstance(result, Table) and not (
        isinstance(result.rows, list) and all(isinstance(r, dict) for r in result.rows)
    ):
        raise TypeError(f"handler of '{cmd.name}' answered a table that is not a list of dicts")
    return result
