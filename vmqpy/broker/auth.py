"""Client authentication against a password file (VerneMQ's vmq_passwd, with our own hash format).

A password file holds `username:$pbkdf2-sha256$ITERATIONS$SALT$HASH` lines (salt and hash in base64);
`vmqpy passwd FILE USERNAME` adds or replaces a line. Without a file only `allow_anonymous` decides.
`FailedLogins` counts the refused logins of each peer address (the node slows every refusal down,
`auth.failed_login_delay`). Nothing here logs, and no password is kept but as its hash.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

SCHEME = "pbkdf2-sha256"
ITERATIONS = 20_000


class PasswordFileError(Exception):
    """A password file line that cannot be used; the message names file and line."""


def hash_password(password: str, *, salt: bytes | None = None, iterations: int = ITERATIONS) -> str:
    salt = os.urandom(16) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"${SCHEME}${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def verify_password(password: str, encoded: str) -> bool:
    try:
        _, scheme, iterations, salt, digest = encoded.split("$")
        if scheme != SCHEME:
            return False
        expected = base64.b64decode(digest)
        actual = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
    except ValueError:
        return False
    return hmac.compare_digest(expected, actual)


def parse_password_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PasswordFileError(f"{path}: cannot read the password file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise PasswordFileError(f"{path}: the password file is not UTF-8 (byte {exc.start})") from None
    return parse_passwords(text, str(path))


def parse_passwords(text: str, source: str) -> dict[str, str]:
    """User name -> encoded hash, from a password file's text; `source` names it in errors (`source:line:`)."""
    users: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        user, sep, encoded = stripped.partition(":")
        if not sep or not user or not encoded.startswith(f"${SCHEME}$") or encoded.count("$") != 4:
            raise PasswordFileError(f"{source}:{number}: expected 'username:${SCHEME}$...' (use vmqpy passwd)")
        users[user] = encoded
    return users


def add_user(path: Path, username: str, password: str) -> None:
    """Add or replace `username` in the password file (created if missing)."""
    if not username or ":" in username:
        raise PasswordFileError("a user name must be non-empty and must not contain ':'")
    users = parse_password_file(path) if path.exists() else {}
    users[username] = hash_password(password)
    path.write_text("".join(f"{user}:{encoded}\n" for user, encoded in sorted(users.items())), encoding="utf-8")
    path.chmod(0o600)


@dataclass(slots=True)
class Authenticator:
    """Decides a CONNECT's credentials: None when accepted, else the 5.0 reason code to refuse with."""

    allow_anonymous: bool
    users: dict[str, str]

    def check(self, username: str | None, password: bytes | None) -> int | None:
        if username is None:
            return None if self.allow_anonymous else 0x87  # not authorized
        encoded = self.users.get(username)
        if encoded is None:
            return None if self.allow_anonymous and not self.users else 0x86
        if password is None or not verify_password(password.decode("utf-8", "replace"), encoded):
            return 0x86  # bad user name or password
        return None


class FailedLogins:
    """Refused logins counted per peer address, for the most recent `capacity` addresses (the oldest is
    forgotten first, so a flood of addresses cannot grow it without bound)."""

    __slots__ = ("_counts", "capacity", "total")

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self.total = 0
        self._counts: OrderedDict[str, int] = OrderedDict()

    def record(self, address: str) -> int:
        """Count one refused login from `address`; how many it has had (this one included)."""
        self.total += 1
        count = self._counts.pop(address, 0) + 1
        self._counts[address] = count
        if len(self._counts) > self.capacity:
            self._counts.popitem(last=False)
        return count

    def count(self, address: str) -> int:
        return self._counts.get(address, 0)

    def __len__(self) -> int:
        return len(self._counts)
