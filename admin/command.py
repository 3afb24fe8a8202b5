"""What one administration command is: its path of words, HTTP method, parameters and handler, the context a
handler works with, what a module of one command group provides, and `execute`, which runs a handler and checks
the shape of its answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from admin.params import Args, Param
from admin.results import Lines, Result, Table, Text
from admin.scopes import Scope, method_scope

if TYPE_CHECKING:
    from admin.facade import AdminNode
    from admin.keys import KeyStore


@dataclass(frozen=True, slots=True)
class Context:
    """What a handler works with: the node, and the node's API keys."""

    facade: AdminNode
    keys: KeyStore


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

    @property
    def scope(self) -> Scope:
        """The API key scope the command needs: `read` when it only reads (GET), `admin` when it changes
        something (POST); the one rule of `admin.scopes.method_scope`."""
        return method_scope(self.method)

    def param(self, name: str) -> Param | None:
        """The parameter called `name`; VerneMQ's spelling with underscores (`client_id`, `kill_sessions`) names
        the same parameter as ours with hyphens (`client-id`, `kill-sessions`)."""
        return self._by_name.get(name) or self._by_name.get(name.replace("_", "-"))

    def short(self, letter: str) -> Param | None:
        return self._by_short.get(letter)

    def usage(self) -> str:
        parts = [self.name, *(p.usage() for p in self.params)]
        if self.free:
            parts.append(f"{self.free_metavar} [{self.free_metavar} ...]")
        return " ".join(parts)


class CommandGroup(Protocol):
    """A module of `admin.cli` for one group of the command tree (`cluster`, `session`, ...): its table entries,
    the examples of each command's help, and notes printed on stderr after a successful run."""

    COMMANDS: tuple[Command, ...]
    EXAMPLES: dict[tuple[str, ...], list[str]]
    NOTES: dict[tuple[str, ...], str]


async def execute(cmd: Command, args: Args, ctx: Context) -> Result:
    """Run a parsed command. CommandError from the facade passes through; a handler that answers something else
    than a Table, Text or Lines is a bug (TypeError)."""
    result = await cmd.handler(ctx, args)
    if not isinstance(result, Table | Text | Lines):
        raise TypeError(f"handler of '{cmd.name}' answered {type(result).__name__}")
    if isinstance(result, Table) and not (
        isinstance(result.rows, list) and all(isinstance(r, dict) for r in result.rows)
    ):
        raise TypeError(f"handler of '{cmd.name}' answered a table that is not a list of dicts")
    return result
