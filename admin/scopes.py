"""What an API key may do: its scope, and the one rule that says which scope a request needs.

Scopes nest, from the least to the most power: a key of a scope may do everything the scopes below it may.

| scope     | may                                                                                     |
|-----------|-----------------------------------------------------------------------------------------|
| `metrics` | GET /metrics (the Prometheus scrape)                                                    |
| `status`  | the above, and GET /status.json (the status page's data)                                |
| `read`    | the above, and every command that only reads (GET: `cluster show`, `session show`, ...) |
| `admin`   | everything, also the commands that change the node or the cluster (POST)               |

The rule (`needed_scope`): /metrics needs `metrics`, /status.json `status`, a command needs `read` when it only
reads (its table entry's method is GET) and `admin` when it changes something (POST); any other path under /api/
needs `read` to be read and `admin` otherwise. /health and the HTML of /status need no key at all.

VerneMQ 2.x has flat scopes, one per HTTP module (`vmq_auth_apikey:scopes/0`: status, mgmt, metrics, health,
api2, httppub), and creates `mgmt` keys by default. Its names are taken where they mean something here: `mgmt`
is `admin`, `health` is `metrics` (vmqpy's /health needs no key, so a health key gets the least power there is).
`api2` and `httppub` name HTTP modules vmqpy does not have and are refused.
"""

from __future__ import annotations

import enum

__all__ = ["ALIASES", "PATH_SCOPES", "Scope", "allows", "method_scope", "needed_scope", "parse_scope"]


class Scope(enum.IntEnum):
    """A key's scope; a greater scope includes the smaller ones."""

    METRICS = 1
    STATUS = 2
    READ = 3
    ADMIN = 4

    @property
    def label(self) -> str:
        """The scope's name as commands take and show it (`metrics`, `status`, `read`, `admin`)."""
        return self.name.lower()


#: VerneMQ's scope names that mean one of ours
ALIASES: dict[str, Scope] = {"mgmt": Scope.ADMIN, "health": Scope.METRICS}
#: VerneMQ's scope names for HTTP modules vmqpy has not, and why they are refused
UNSUPPORTED: dict[str, str] = {
    "api2": "vmqpy has no second HTTP API: its one API is /api/v1 (scope read or admin)",
    "httppub": "vmqpy has no HTTP publish module",
}
#: the paths outside /api/ that need a key, and the scope each needs
PATH_SCOPES: dict[str, Scope] = {"/metrics": Scope.METRICS, "/status.json": Scope.STATUS}
#: methods that only read
READING_METHODS = frozenset({"GET", "HEAD"})


def parse_scope(text: str) -> Scope:
    """`metrics`, `status`, `read`, `admin` or a VerneMQ alias (`mgmt`, `health`) -> the Scope; ValueError with a
    message naming the accepted names otherwise."""
    name = text.strip().lower()
    for scope in Scope:
        if scope.label == name:
            return scope
    if name in ALIASES:
        return ALIASES[name]
    names = ", ".join(s.label for s in Scope)
    if name in UNSUPPORTED:
        raise ValueError(f"scope {name!r} is not supported: {UNSUPPORTED[name]}; scopes: {names}")
    raise ValueError(f"unknown scope {text.strip()[:40]!r}; scopes: {names} (VerneMQ's mgmt = admin)")


def method_scope(method: str) -> Scope:
    """The scope a command (or another /api/ path) needs for an HTTP method: `read` to read, `admin` to change."""
    return Scope.READ if method.upper() in READING_METHODS else Scope.ADMIN


def needed_scope(path: str, method: str, command_method: str | None) -> Scope:
    """The scope a request of `method` to `path` needs; `command_method`: the table's method of the command at
    `path` (None when no command is there). A command's own method decides, not the request's: a GET sent to a
    command that changes something needs `admin` like its POST."""
    if path in PATH_SCOPES:
        return PATH_SCOPES[path]
    return method_scope(command_method or method)


def allows(granted: Scope, needed: Scope) -> bool:
    """Whether a key of scope `granted` may do what needs `needed`."""
    return granted >= needed
