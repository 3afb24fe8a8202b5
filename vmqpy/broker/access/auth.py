"""Client authentication against a password file (VerneMQ's vmq_passwd, with our own hash format).

A password file holds `username:$pbkdf2-sha256$ITERATIONS$SALT$HASH` lines (salt and hash in base64);
`vmqpy passwd FILE USERNAME` adds or replaces a line (refusing a user name that would not read back as itself,
and an empty password unless forced). Without a file only `allow_anonymous` decides. A password is binary data:
it is hashed and compared as bytes. A user the file does not have is checked against a dummy hash, so that
refusing them costs what a wrong password costs. The hashing itself runs in the node's login pool
(vmqpy.broker.access.login_pool) when `Authenticator.deferred`. Nothing here logs, and no password is kept but as its
hash.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEME = "pbkdf2-sha256"
ITERATIONS = 20_000


class PasswordFileError(Exception):
    """A password file line that cannot be used; the message names file and line."""


def hash_password(password: bytes | str, *, salt: bytes | None = None, iterations: int = ITERATIONS) -> str:
    """The file's form of `password` (a str is taken as its UTF-8 bytes: an MQTT password is binary data)."""
    secret = password.encode() if isinstance(password, str) else password
    salt = os.urandom(16) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha256", secret, salt, iterations)
    return f"${SCHEME}${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def verify_password(password: bytes | str, encoded: str) -> bool:
    """Whether `password`, as bytes (a str as its UTF-8 bytes), hashes to `encoded`."""
    secret = password.encode() if isinstance(password, str) else password
    try:
        _, scheme, iterations, salt, digest = encoded.split("$")
        if scheme != SCHEME:
            return False
        expected = base64.b64decode(digest)
        actual = hashlib.pbkdf2_hmac("sha256", secret, base64.b64decode(salt), int(iterations))
    except ValueError:
        return False
    return hmac.compare_digest(expected, actual)


@functools.cache
def dummy_hash(iterations: int = ITERATIONS) -> str:
    """A hash no password is known for, checked for a user the file does not have with the iteration count of the
    file's users, so that such a login costs what a wrong password costs (made once per count and process)."""
    return hash_password(os.urandom(32), iterations=iterations)


def _iterations(encoded: str) -> int:
    """The iteration count of an encoded hash (ITERATIONS when it has none that can be read)."""
    parts = encoded.split("$")
    return int(parts[2]) if len(parts) == 5 and parts[2].isdigit() else ITERATIONS


@dataclass(frozen=True, slots=True)
class PasswordCheck:
    """A password to check against a hash: the costly part of a login, run in the node's login pool
    (vmqpy.broker.access.login_pool). `encoded` None: the user is not in the file; the password is then checked against
    the dummy hash of `iterations` (made in the pool too, the first time) and the check fails whatever it is."""

    password: bytes
    encoded: str | None
    iterations: int = ITERATIONS

    @property
    def known(self) -> bool:
        return self.encoded is not None

    def run(self) -> bool:
        """Whether the login is accepted (hashes once: call it off the event loop)."""
        encoded = self.encoded
        matches = verify_password(self.password, dummy_hash(self.iterations) if encoded is None else encoded)
        return matches and encoded is not None


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


MAX_USERNAME_BYTES = 65535  # an MQTT string's limit


def username_problem(username: str) -> str | None:
    """Why `username` cannot be a line of the password file and be read back as itself; None when it can."""
    if not username:
        return "a user name must not be empty"
    if ":" in username:
        return "a user name must not contain ':' (it ends the name in the file)"
    if username.startswith("#"):
        return "a user name must not start with '#' (the line would be a comment)"
    if username != username.strip():
        return "a user name must not start or end with white space (the file's lines are stripped)"
    if not username.isprintable():
        return "a user name must not contain control characters or line breaks"
    if len(username.encode("utf-8", "surrogatepass")) > MAX_USERNAME_BYTES:
        return f"a user name must be at most {MAX_USERNAME_BYTES} bytes of UTF-8"
    try:
        username.encode("utf-8")
    except UnicodeEncodeError:
        return "a user name must be valid Unicode text (no lone surrogates)"
    encoded = hash_password(b"", iterations=1)
    if parse_passwords(f"{username}:{encoded}\n", "check") != {username: encoded}:  # pragma: no cover - belt
        return "a user name must read back as itself from the password file"
    return None


def add_user(path: Path, username: str, password: bytes | str, *, allow_empty: bool = False) -> None:
    """Add or replace `username` in the password file (created if missing). An empty password is refused unless
    `allow_empty`; so is a user name that would not read back as itself (`username_problem`)."""
    problem = username_problem(username)
    if problem is not None:
        raise PasswordFileError(f"{problem}: {username!r}")
    if not password and not allow_empty:
        raise PasswordFileError("the password is empty (give --allow-empty-password to set an empty one)")
    users = parse_password_file(path) if path.exists() else {}
    users[username] = hash_password(password)
    path.write_text("".join(f"{user}:{encoded}\n" for user, encoded in sorted(users.items())), encoding="utf-8")
    path.chmod(0o600)


@dataclass(slots=True)
class Authenticator:
    """Decides a CONNECT's credentials: None when accepted, else the 5.0 reason code to refuse with. `deferred`
    (the node sets it): a password to hash is handed back as a `PasswordCheck` for the login pool instead of being
    hashed here, on the event loop."""

    allow_anonymous: bool
    users: dict[str, str]
    deferred: bool = False

    def check(self, username: str | None, password: bytes | None) -> int | PasswordCheck | None:
        if username is None:
            return None if self.allow_anonymous else 0x87  # not authorized
        users = self.users
        encoded = users.get(username)
        if encoded is None and self.allow_anonymous and not users:
            return None
        if password is None:
            return 0x86  # bad user name or password
        # An unknown user costs a hash as well, with the file's iteration count: no timing tells who exists.
        iterations = _iterations(next(iter(users.values()), "")) if encoded is None else ITERATIONS
        pending = PasswordCheck(password, encoded, iterations)
        if self.deferred:
            return pending
        return None if pending.run() else 0x86


def certificate_identity(peercert: Mapping[str, Any] | None) -> str | None:
    """The common name (CN) of a verified client certificate as `SSLObject.getpeercert()` gives it; None when
    there is no certificate or it has no CN. With several CNs, the most specific (last) one."""
    if not peercert:
        return None
    names = [value for rdn in peercert.get("subject", ()) for key, value in rdn if key == "commonName"]
    return str(names[-1]) if names else None
