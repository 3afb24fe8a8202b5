"""The access rules in force on a node: who may connect (the password file and `allow_anonymous`) and what each
client may read and write (the ACL file), and how they are reloaded when their files change.

`AccessControl` is the one object the connection machine and the broker ask: `check` at CONNECT (it is the
machine's `CredentialCheck`), `may_publish` at PUBLISH and for a will, `may_subscribe` at SUBSCRIBE and when
an ACL change re-checks the subscriptions kept, `may_read` before a retained message is delivered, `withholds`
before a routed message is delivered while the ACL has deny lines (vmqpy.broker.access.read_guard). With no ACL
in force (no `acl_file`, or `plugins.vmq_acl = off`) every topic is allowed to every client that connected.
Topics are judged without a mountpoint (vmqpy has none).

Reloading (`reload_acl`, `reload_passwords`): the file is looked at (`stat`); when its modification time or
size differ from the last look, or when the reload is forced (`vmq-admin acl reload`), it is read and hashed;
when the content differs from the content in force, it is parsed and the new rules replace the old ones at
once. A file that cannot be read or parsed leaves the rules in force as they were, and the answer
(`Reloaded.error`) names the file and line. `generation` counts ACL changes: a cache of decisions (each
connection keeps one of PUBLISH topics) is valid for one generation only. The only I/O is reading the two files
when asked.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from vmqpy.broker.access.acl import Acl, AclError, parse_acl
from vmqpy.broker.access.auth import Authenticator, PasswordCheck, PasswordFileError, parse_passwords
from vmqpy.broker.access.login_throttle import LoginThrottle

__all__ = ["LOGIN_COUNTERS", "AccessControl", "Reloaded", "WatchedFile"]

# the login counters (admin/prometheus.py exports them): refused credentials, CONNECTs refused at once for an address
# over the failed-login limit, CONNECTs refused because the login pool was full, password hashes computed
LOGIN_COUNTERS = ("login_failed", "login_throttled", "login_busy", "login_password_checks")
MOUNTPOINT = ""  # vmqpy has no mountpoints (listener.mountpoint = off): %m is always empty


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a reload did: `changed` when new rules are in force; `error` (naming file:line) when the file could
    not be used and the previous rules stay."""

    what: str  # "ACL" or "password file"
    path: Path | None
    changed: bool
    error: str | None = None
    rules: int = 0  # entries of the ACL, or users of the password file, in force now

    def describe(self) -> str:
        """One line for the operator."""
        if self.path is None:
            return f"no {self.what} in force: nothing to reload"
        if self.error is not None:
            return f"{self.what} {self.path} not reloaded, the previous one stays in force: {self.error}"
        state = "reloaded" if self.changed else "unchanged"
        unit = "rules" if self.what == "ACL" else "users"
        return f"{self.what} {self.path} {state} ({self.rules} {unit})"


class WatchedFile:
    """A file whose changes are noticed by modification time and size, and confirmed by a hash of its content."""

    __slots__ = ("_digest", "_seen", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) at the last look
        self._digest: bytes | None = None  # of the content last taken

    def changed_content(self, force: bool = False) -> bytes | None:
        """The file's content when it differs from the content taken last, else None. The file is read only when
        its stamp changed since the last look, or when `force`. Raises OSError when it cannot be read."""
        stat = self.path.stat()
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen == self._seen and not force:
            return None
        # Looked at before reading: a change made while reading shows a new stamp at the next look.
        self._seen = seen
        data = self.path.read_bytes()
        if hashlib.sha256(data).digest() == self._digest:
            return None
        return data

    def taken(self, data: bytes) -> None:
        """`data` is the content in force now."""
        self._digest = hashlib.sha256(data).digest()


class AccessControl:
    """The password check and the ACL in force, each replaced whole on a successful reload."""

    def __init__(self, allow_anonymous: bool, metrics: Counter[str] | None = None,
                 throttle: LoginThrottle | None = None) -> None:
        self.authenticator = Authenticator(allow_anonymous, {})
        self.acl: Acl | None = None
        self.generation = 0
        self.metrics: Counter[str] = Counter() if metrics is None else metrics
        for name in LOGIN_COUNTERS:  # exported from the start, at 0
            self.metrics[name] += 0
        self.throttle = LoginThrottle() if throttle is None else throttle  # failed logins per peer address
        self.loaded = False  # the node loaded the files (`load`): connections check credentials here
        self._acl_file: WatchedFile | None = None
        self._password_file: WatchedFile | None = None

    # ------------------------------------------------------------------------------------------ files

    def load(self, acl_path: Path | None, password_path: Path | None) -> None:
        """Take the files at start (None: that file is not in force). Raises AclError or PasswordFileError."""
        self._acl_file = None if acl_path is None else WatchedFile(acl_path)
        self._password_file = None if password_path is None else WatchedFile(password_path)
        for answer in (self.reload_acl(force=True), self.reload_passwords(force=True)):
            if answer.error is not None:
                raise (AclError if answer.what == "ACL" else PasswordFileError)(answer.error)
        self.loaded = True

    def reload_acl(self, force: bool = False) -> Reloaded:
        """Take the ACL file again when it changed (always when `force`)."""
        watched = self._acl_file
        if watched is None:
            return Reloaded("ACL", None, False)
        try:
            data = watched.changed_content(force)
        except OSError as exc:
            return self._refused("ACL", watched.path, f"{watched.path}: cannot read the ACL file: {exc.strerror}")
        if data is None:
            return Reloaded("ACL", watched.path, False, rules=self._acl_rules())
        try:
            acl = parse_acl(data.decode("utf-8"), str(watched.path))
        except UnicodeDecodeError as exc:
            return self._refused("ACL", watched.path, f"{watched.path}: the ACL file is not UTF-8 (byte {exc.start})")
        except AclError as exc:
            return self._refused("ACL", watched.path, str(exc))
        watched.taken(data)
        self.acl = acl
        self.generation += 1
        self.metrics["acl_reloaded"] += 1
        return Reloaded("ACL", watched.path, True, rules=len(acl.entries))

    def reload_passwords(self, force: bool = False) -> Reloaded:
        """Take the password file again when it changed (always when `force`)."""
        watched = self._password_file
        if watched is None:
            return Reloaded("password file", None, False)
        try:
            data = watched.changed_content(force)
        except OSError as exc:
            return self._refused("password file", watched.path,
                                 f"{watched.path}: cannot read the password file: {exc.strerror}")
        if data is None:
            return Reloaded("password file", watched.path, False, rules=len(self.authenticator.users))
        try:
            users = parse_passwords(data.decode("utf-8"), str(watched.path))
        except UnicodeDecodeError as exc:
            return self._refused("password file", watched.path,
                                 f"{watched.path}: the password file is not UTF-8 (byte {exc.start})")
        except PasswordFileError as exc:
            return self._refused("password file", watched.path, str(exc))
        watched.taken(data)
        self.authenticator.users = users
        self.metrics["password_file_reloaded"] += 1
        return Reloaded("password file", watched.path, True, rules=len(users))

    def _refused(self, what: str, path: Path, error: str) -> Reloaded:
        self.metrics["access_reload_failed"] += 1
        return Reloaded(what, path, False, error)

    def _acl_rules(self) -> int:
        return 0 if self.acl is None else len(self.acl.entries)

    # ------------------------------------------------------------------------------------------ decisions

    def check(self, username: str | None, password: bytes | None) -> int | PasswordCheck | None:
        """CONNECT: None when the credentials are accepted, else the 5.0 reason code of the refusal; or the password
        check to run in the login pool (`Authenticator.deferred`)."""
        return self.authenticator.check(username, password)

    def may_publish(self, client_id: str, username: str | None, topic: str) -> bool:
        acl = self.acl
        return acl is None or acl.may_publish(client_id, username, MOUNTPOINT, topic)

    def may_subscribe(self, client_id: str, username: str | None, topic_filter: str) -> bool:
        acl = self.acl
        return acl is None or acl.may_subscribe(client_id, username, MOUNTPOINT, topic_filter)

    def may_read(self, client_id: str, username: str | None, topic: str) -> bool:
        acl = self.acl
        return acl is None or acl.may_read(client_id, username, MOUNTPOINT, topic)

    def withholds(self, client_id: str, username: str | None, topic: str) -> bool:
        """Whether a deny line of the ACL in force keeps a delivered message of `topic` from this client."""
        acl = self.acl
        return acl is not None and acl.withholds(client_id, username, MOUNTPOINT, topic)

    def login_failed(self, address: str, now: float) -> int:
        """Count a refused login from `address` at `now` (monotonic seconds); how many it has had in the throttle's
        window (the limit-th blocks it, vmqpy.broker.access.login_throttle)."""
        self.metrics["login_failed"] += 1
        return self.throttle.failed(address, now)

    def login_throttled(self, address: str, now: float) -> bool:
        """Whether a login from `address` is refused at once, without a password check (counted when it is)."""
        if self.throttle.blocked(address, now):
            self.metrics["login_throttled"] += 1
            return True
        return False
