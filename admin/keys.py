"""API keys of the HTTP administration API: one set for the whole cluster, each key with a scope
(`admin.scopes`) and an optional expiry, plus each node's own bootstrap key.

Cluster keys are kept in the replicated metadata store, which the node hands over through its facade
(`admin.facade.ApiKeyRecords`): a key made or deleted on one node is made or deleted on every member, on a node
that joins later, and stays so across restarts. The store holds only a key's SHA-256 (its record's key) and a
record (`KeyRecord`: scope, when it was made, when it expires, on which node). Keys made by `create` are random
(`secrets.token_urlsafe(32)`, 256 bits), so an unsalted SHA-256 is enough: there is nothing to guess from a hash.
A key given to `add` is the operator's choice and must be at least MIN_KEY_LENGTH characters long.

The node's bootstrap key lives in clear in `DATA_DIR/api.key` (mode 0600), so that `vmq-admin` on the node's
host can read it before any cluster exists. It has the `admin` scope, works on its own node only and is never
replicated. `ensure_node_key` creates it at the first start. Deleting it (`api-key delete`) removes `api.key`; a
new one is made at the next start.

Before keys were replicated, each node kept its own in `DATA_DIR/api_keys` (JSON). `migrate_file_keys` moves
those (all of them all-powerful: scope `admin`) into the replicated store at start and renames the file to
`api_keys.migrated`.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

from admin.errors import CommandError
from admin.scopes import Scope, parse_scope

if TYPE_CHECKING:
    from admin.facade import ApiKeyRecords

KEY_FILE = "api.key"
LEGACY_STORE_FILE = "api_keys"  # the per-node keys of earlier versions (migrate_file_keys)
MIGRATED_SUFFIX = ".migrated"
PREFIX_LEN = 12  # hash prefix shown by `show`
MIN_PREFIX_LEN = 8  # shortest hash prefix `delete` accepts
MIN_KEY_LENGTH = 16  # shortest key `add` takes (VerneMQ: min_apikey_length, default 0; 32 for its own keys)
RECORD_VERSION = 1
#: what `expires=` takes (VerneMQ: "yyyy-mm-ddThh:mm:ss", the node's local time)
EXPIRES_FORMAT = "YYYY-MM-DDTHH:MM:SS (the node's local time), or with Z or a UTC offset such as +02:00"


def digest(key: str) -> str:
    """The SHA-256 of a key, as the store keeps it (hex)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


# -- the record ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KeyRecord:
    """What the store keeps of a cluster key besides its hash."""

    scope: Scope
    created: float  # unix seconds
    expires: float | None  # unix seconds; None: never
    origin: str  # the node it was made on

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires


def encode_record(record: KeyRecord) -> dict[str, Any]:
    """The record as the replicated store keeps it (msgpack-friendly, versioned)."""
    return {"v": RECORD_VERSION, "scope": record.scope.label, "created": record.created,
            "expires": record.expires, "origin": record.origin}


def decode_record(doc: Any) -> KeyRecord:
    """The KeyRecord of a stored value; ValueError when it is not one of a version this node reads."""
    if not isinstance(doc, dict) or doc.get("v") != RECORD_VERSION:
        raise ValueError(f"not an API key record of version {RECORD_VERSION}")
    try:
        created = float(doc["created"])
        expires = None if doc.get("expires") is None else float(doc["expires"])
        return KeyRecord(parse_scope(str(doc["scope"])), created, expires, str(doc.get("origin", "")))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"bad API key record: {exc}") from exc


def parse_expires(text: str, now: float, local: tzinfo | None = None) -> float:
    """`expires=` -> unix seconds. An ISO 8601 date-time; without an offset it is in `local` (default: the node's
    local time zone), as VerneMQ reads it. A time that is not in the future, or not a date-time, is CommandError
    400 naming the format."""
    value = text.strip()
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"expires={value[:40]!r} is not a date-time: expected {EXPIRES_FORMAT}", 400) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=local) if local is not None else when.astimezone()
    stamp = when.timestamp()
    if stamp <= now:
        raise CommandError(f"expires={value!r} is not in the future (now: {_iso(now)})", 400)
    return stamp


# -- the store ----------------------------------------------------------------------------------------------------
class KeyStore:
    """The API keys one node accepts: the cluster's (`records`) and its own bootstrap key (`data_dir/api.key`)."""

    def __init__(self, data_dir: Path, records: ApiKeyRecords, *, clock: Callable[[], float] = time.time) -> None:
        self.data_dir = Path(data_dir)
        self.node_key_path = self.data_dir / KEY_FILE
        self._records = records
        self._clock = clock
        self._node: tuple[tuple[int, int, int], str] | None = None  # (file stamp, digest) of api.key

    # -- the bootstrap key ----------------------------------------------------------------------------------------
    def _node_digest(self) -> str | None:
        """The digest of `api.key` as it is now on disk (read again only when the file changed)."""
        try:
            st = self.node_key_path.stat()
        except OSError:
            self._node = None
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._node is None or self._node[0] != stamp:
            try:
                key = self.node_key_path.read_text(encoding="utf-8").strip()
            except OSError:
                return None
            self._node = (stamp, digest(key)) if key else None
        return None if self._node is None else self._node[1]

    # -- reading --------------------------------------------------------------------------------------------------
    def _cluster_records(self) -> list[tuple[str, KeyRecord | None]]:
        out: list[tuple[str, KeyRecord | None]] = []
        for hashed, doc in self._records.api_key_fold():
            try:
                out.append((hashed, decode_record(doc)))
            except ValueError:
                out.append((hashed, None))
        return out

    def authenticate(self, key: str) -> Scope:
        """The scope of `key`; CommandError 401 when it is missing, unknown or expired (the message never
        repeats the key)."""
        if not key:
            raise CommandError("missing API key: send it as 'Authorization: Bearer KEY' or in the x-api-key header",
                               401)
        hashed = digest(key)
        node = self._node_digest()
        if node is not None and hmac.compare_digest(node, hashed):
            return Scope.ADMIN
        doc = self._records.api_key_get(hashed)
        if doc is None:
            raise CommandError("invalid API key", 401)
        try:
            record = decode_record(doc)
        except ValueError:
            raise CommandError("invalid API key (its record cannot be read by this node)", 401) from None
        if record.expired(self._clock()):
            assert record.expires is not None
            raise CommandError(f"API key expired at {_iso(record.expires)}", 401)
        return record.scope

    def verify(self, key: str) -> bool:
        """Whether `key` is accepted now (any scope)."""
        try:
            self.authenticate(key)
        except CommandError:
            return False
        return True

    def list(self) -> list[dict[str, Any]]:
        """One row per key: its hash prefix (never the key), scope, creation and expiry time (UTC), whether it is
        this node's bootstrap key; the bootstrap key first."""
        now = self._clock()
        rows: list[dict[str, Any]] = []
        node = self._node_digest()
        if node is not None:
            with contextlib.suppress(OSError):
                created = self.node_key_path.stat().st_mtime
                rows.append({"Hash": node[:PREFIX_LEN], "Scope": Scope.ADMIN.label, "Created": _iso(created),
                             "Expires": "never", "Node key": True})
        for hashed, record in sorted(self._cluster_records(), key=lambda r: (r[1].created if r[1] else 0.0, r[0])):
            if record is None:
                rows.append({"Hash": hashed[:PREFIX_LEN], "Scope": "unreadable", "Created": "", "Expires": "",
                             "Node key": False})
                continue
            expires = "never" if record.expires is None else _iso(record.expires)
            if record.expired(now):
                expires += " (expired)"
            rows.append({"Hash": hashed[:PREFIX_LEN], "Scope": record.scope.label, "Created": _iso(record.created),
                         "Expires": expires, "Node key": False})
        return rows

    # -- changing -------------------------------------------------------------------------------------------------
    def _put(self, hashed: str, scope: Scope, expires: float | None) -> None:
        origin = self._records.node_name()
        self._records.api_key_put(hashed, encode_record(KeyRecord(scope, self._clock(), expires, origin)))

    def create(self, scope: Scope = Scope.ADMIN, expires: float | None = None) -> str:
        """A new random key of `scope`, stored for the whole cluster; the only time it is shown."""
        key = secrets.token_urlsafe(32)
        self._put(digest(key), scope, expires)
        return key

    def add(self, key: str, scope: Scope = Scope.ADMIN, expires: float | None = None) -> str:
        """Store a key the operator chose (VerneMQ's `api-key add`); its hash prefix. Too short -> 400; already
        stored (or this node's bootstrap key) -> 409."""
        if len(key) < MIN_KEY_LENGTH:
            raise CommandError(f"the key is too short: at least {MIN_KEY_LENGTH} characters", 400)
        if any(c.isspace() or not c.isprintable() for c in key):
            raise CommandError("the key must not hold spaces or control characters", 400)
        hashed = digest(key)
        if hashed == self._node_digest() or self._records.api_key_get(hashed) is not None:
            raise CommandError("this key is already stored; delete it first to change its scope or expiry", 409)
        self._put(hashed, scope, expires)
        return hashed[:PREFIX_LEN]

    def delete(self, key_or_prefix: str) -> str:
        """Delete the key given in full, or the one whose hash starts with the given prefix (at least 8 hex
        digits, as shown by `show`), on every node (this node's bootstrap key: here). Returns the deleted key's
        hash prefix. Refuses to delete the last `admin` key this node accepts (409); a prefix that matches
        nothing -> 404, several -> 400. Messages never repeat the argument."""
        node = self._node_digest()
        stored = self._cluster_records()
        hashes = ([node] if node else []) + [h for h, _ in stored]
        full = digest(key_or_prefix)
        matches = [h for h in hashes if hmac.compare_digest(h, full)]
        if not matches:
            prefix = key_or_prefix.strip().lower()
            if len(prefix) < MIN_PREFIX_LEN or any(c not in "0123456789abcdef" for c in prefix):
                raise CommandError(
                    f"no API key matches; give the whole key or at least {MIN_PREFIX_LEN} hex digits of its hash "
                    "as shown by 'api-key show'",
                    404,
                )
            matches = [h for h in hashes if h.startswith(prefix)]
            if not matches:
                raise CommandError("no API key matches the given key or hash prefix", 404)
            if len(matches) > 1:
                raise CommandError(f"the hash prefix matches {len(matches)} keys; give more digits", 400)
        victim = matches[0]
        now = self._clock()
        admins = ([node] if node else []) + [
            h for h, r in stored if r is not None and r.scope is Scope.ADMIN and not r.expired(now)
        ]
        if admins == [victim]:
            raise CommandError("refusing to delete the last admin API key; create another one first "
                               "(api-key create scope=admin)", 409)
        if victim == node:
            with contextlib.suppress(FileNotFoundError):
                self.node_key_path.unlink()
            self._node = None
        else:
            self._records.api_key_delete(victim)
        return victim[:PREFIX_LEN]


# -- start-up -----------------------------------------------------------------------------------------------------
def _write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically with mode 0600 (a temporary file in the same directory, then rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)  # in case the umask or the file system changed it
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def ensure_node_key(data_dir: Path) -> str:
    """The node's bootstrap key from `data_dir/api.key`, created (random, mode 0600) at the first start."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / KEY_FILE
    try:
        key = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        key = ""
    if not key:
        key = secrets.token_urlsafe(32)
        _write_private(path, (key + "\n").encode("utf-8"))
    elif path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)
    return key


def migrate_file_keys(data_dir: Path, records: ApiKeyRecords) -> int:
    """Move the keys of an earlier version's `data_dir/api_keys` into the replicated store, with scope `admin`
    (they could do everything) and their creation time, then rename the file to `api_keys.migrated`. The node
    key's entry is left out (api.key stays the node's own). Returns how many keys were moved; a file that
    cannot be read is CommandError 503 naming it, and is left in place."""
    path = Path(data_dir) / LEGACY_STORE_FILE
    try:
        doc: Any = json.loads(path.read_text(encoding="utf-8"))
        entries = [(str(e["sha256"]), float(e["created"]), bool(e.get("node_key", False))) for e in doc["keys"]]
    except FileNotFoundError:
        return 0
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"API key file {path} is unreadable, its keys are not migrated: {exc}", 503) from exc
    moved = 0
    origin = records.node_name()
    for hashed, created, node_key in entries:
        if node_key or records.api_key_get(hashed) is not None:
            continue
        records.api_key_put(hashed, encode_record(KeyRecord(Scope.ADMIN, created, None, origin)))
        moved += 1
    os.replace(path, path.with_name(path.name + MIGRATED_SUFFIX))
    return moved

