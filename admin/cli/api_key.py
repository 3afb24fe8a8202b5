"""`vmq-admin api-key create|add|show|delete` (HTTP `/api/v1/api-key/...`), as VerneMQ 2.x names them: the table
entries, their handlers, the examples for the help and the note printed after `create`. The keys themselves, their
scopes and expiry: `admin.keys`, `admin.scopes`."""

from __future__ import annotations

import time

from admin.command import Command, Context
from admin.errors import CommandError
from admin.keys import EXPIRES_FORMAT, MIN_KEY_LENGTH, parse_expires
from admin.params import TEXT, Args, Param
from admin.results import Result, Table, Text
from admin.scopes import Scope, parse_scope

_SCOPES = ", ".join(s.label for s in Scope)
SCOPE = Param("scope", TEXT, default="admin",
              help=f"what the key may do: {_SCOPES} (VerneMQ's mgmt = admin; see docs/admin.md)")
EXPIRES = Param("expires", TEXT, help=f"when the key stops working: {EXPIRES_FORMAT}; default: never")


def _scope_and_expiry(args: Args) -> tuple[Scope, float | None]:
    try:
        scope = parse_scope(args.text("scope"))
    except ValueError as exc:
        raise CommandError(str(exc), 400) from None
    expires = args.opt_text("expires")
    return scope, None if expires is None else parse_expires(expires, time.time())


async def _create(ctx: Context, args: Args) -> Result:
    scope, expires = _scope_and_expiry(args)
    return Text(ctx.keys.create(scope, expires))


async def _add(ctx: Context, args: Args) -> Result:
    scope, expires = _scope_and_expiry(args)
    return Text(f"added API key {ctx.keys.add(args.text('key'), scope, expires)} (scope {scope.label})")


async def _show(ctx: Context, args: Args) -> Result:
    return Table(ctx.keys.list())


async def _delete(ctx: Context, args: Args) -> Result:
    return Text(f"deleted API key {ctx.keys.delete(args.text('key'))}")


COMMANDS: tuple[Command, ...] = (
    Command(("api-key", "create"), "POST", "create a random API key for every node (shown once)", _create,
            params=(SCOPE, EXPIRES)),
    Command(("api-key", "add"), "POST", "add an API key of your choosing for every node", _add,
            params=(Param("key", TEXT, required=True, secret=True,
                          help=f"the key, at least {MIN_KEY_LENGTH} characters"), SCOPE, EXPIRES)),
    Command(("api-key", "show"), "GET", "the API keys (hash prefixes, scopes, expiry; never the keys)", _show),
    Command(("api-key", "delete"), "POST", "delete an API key on every node", _delete,
            params=(Param("key", TEXT, required=True, secret=True,
                          help="the key itself, or at least 8 hex digits of its hash (api-key show)"),)),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("api-key", "create"): ["vmq-admin api-key create", "vmq-admin api-key create scope=metrics",
                            "vmq-admin api-key create scope=status expires=2027-01-31T18:00:00"],
    ("api-key", "add"): ["vmq-admin api-key add key=prometheus-2027-01-6f3b2c scope=metrics"],
    ("api-key", "show"): ["vmq-admin api-key show"],
    ("api-key", "delete"): ["vmq-admin api-key delete key=3f1c9a0b27de"],
}

# printed on stderr after a successful run, so that stdout stays the bare answer
NOTES: dict[tuple[str, ...], str] = {
    ("api-key", "create"): "store this key now: the cluster keeps only its hash and cannot show it again",
}
