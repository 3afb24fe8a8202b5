"""Sessions belong to their user: who a session's owner is, and whether a CONNECT may have its client id.

A session remembers the user name that created it (the certificate identity when a listener uses it as the
user name; None for an anonymous client). Another user connecting with that client id is a *foreign user*:
by `session.foreign_user` the old session is discarded and the new client starts clean (`clean`, the default)
or the CONNECT is refused as not authorized (`refuse`); a live connection of the owner is kicked only in the
first case. A session stored before owners were recorded has an unknown owner (`UNKNOWN_USER`): the first
user to connect with its client id resumes it and becomes its owner.

`session.client_id_prefix` binds client ids to users: a CONNECT whose client id does not start with the
prefix (`%u` replaced by the user name) is refused (Client Identifier not valid), so that one user cannot
even reach another user's client ids. Pure functions; the broker and the CONNECT negotiation call them.
"""

from __future__ import annotations

__all__ = ["UNKNOWN_USER", "client_id_allowed", "is_foreign", "pack_user", "unpack_user"]

# MQTT strings cannot hold NUL: no user name is this one
UNKNOWN_USER = "\0unknown"


def is_foreign(owner: str | None, username: str | None) -> bool:
    """Whether `username` connecting with the client id of a session owned by `owner` is another user."""
    return owner != UNKNOWN_USER and owner != username


def client_id_allowed(prefix: str, client_id: str, username: str | None) -> bool:
    """Whether `client_id` is one `username` may use under `session.client_id_prefix = prefix` ("": any). A
    prefix naming the user (`%u`) allows no client id to an anonymous client."""
    if not prefix:
        return True
    if "%u" in prefix:
        if username is None:
            return False
        prefix = prefix.replace("%u", username)
    return client_id.startswith(prefix)


def pack_user(user: str | None) -> list[str | None] | None:
    """The owner as a record field: None when unknown, else a one-element list (its element None: anonymous)."""
    return None if user == UNKNOWN_USER else [user]


def unpack_user(field: object) -> str | None:
    """The owner in a record field written by `pack_user` (or absent: None), UNKNOWN_USER when not known."""
    if isinstance(field, list | tuple) and len(field) == 1 and (field[0] is None or isinstance(field[0], str)):
        return field[0]
    return UNKNOWN_USER
