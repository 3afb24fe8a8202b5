"""Client authentication against a password file (VerneMQ's vmq_passwd, with our own hash format).

A password file holds `username:$pbkdf2-sha256$ITERATIONS$SALT$HASH` lines (salt and hash in base64);
`vmqpy passwd FILE USERNAME` adds or replaces a line. Without a file only `allow_anonymous` decides.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
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
    users: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PasswordFileError(f"{path}: cannot read the password file: {exc.strerror}") from None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        user, sep, encoded = stripped.partition(":")
        if not sep or not user or not encoded.startswith(f"${SCHEME}$") or encoded.count("$") != 4:
            raise PasswordFileError(f"{path}:{number}: expected 'username:${SCHEME}$...' (use vmqpy passwd)")
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
