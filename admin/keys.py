"""API keys of the HTTP administration API.

Keys are random (`secrets.token_urlsafe(32)`, 256 bits) and stored only as their SHA-256 in
`DATA_DIR/api_keys` (JSON, mode 0600, replaced atomically). A key is shown once, when it is created. Because keys
are random rather than chosen by people, an unsalted SHA-256 is enough: there is nothing to guess from a hash.

The node's own key lives in clear in `DATA_DIR/api.key` (mode 0600) so that `vmq-admin` on the same machine can
read it. `ensure_node_key` creates it at the first start and makes sure it is registered. Deleting the node's
key (`api-key delete`) also removes `api.key`; a new one is made at the next start.

Keys are per node: they are not replicated to the other cluster members.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from admin.errors import CommandError

KEY_FILE = "api.key"
STORE_FILE = "api_keys"
PREFIX_LEN = 12  # hash prefix shown by `list`
MIN_PREFIX_LEN = 8  # shortest hash prefix `delete` accepts


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


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


@dataclass(frozen=True, slots=True)
class _Entry:
    sha256: str
    created: float
    node_key: bool


class KeyStore:
    """The registered API keys of one node (`data_dir/api_keys`). Reloads the file when it changed on disk."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / STORE_FILE
        self._entries: list[_Entry] = []
        self._stamp: tuple[int, int, int] | None = None
        self._reload()

    # -- file ---------------------------------------------------------------------------------------------------
    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _reload(self) -> None:
        stamp = self._file_stamp()
        if stamp is not None and stamp == self._stamp:
            return
        if stamp is None:
            self._entries, self._stamp = [], None
            return
        try:
            doc: Any = json.loads(self.path.read_text(encoding="utf-8"))
            entries = [
                _Entry(str(e["sha256"]), float(e["created"]), bool(e.get("node_key", False))) for e in doc["keys"]
            ]
        except (ValueError, KeyError, TypeError) as exc:
            raise CommandError(f"API key store {self.path} is unreadable: {exc}", 503) from exc
        self._entries, self._stamp = entries, stamp

    def _save(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        doc = {
            "version": 1,
            "keys": [{"sha256": e.sha256, "created": e.created, "node_key": e.node_key} for e in self._entries],
        }
        _write_private(self.path, (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
        self._stamp = self._file_stamp()

    # -- operations ---------------------------------------------------------------------------------------------
    def _register(self, key: str, node_key: bool) -> None:
        self._reload()
        digest = _digest(key)
        if any(e.sha256 == digest for e in self._entries):
            return
        self._entries.append(_Entry(digest, time.time(), node_key))
        self._save()

    def create(self) -> str:
        """A new random key, registered; the only time it is shown."""
        key = secrets.token_urlsafe(32)
        self._register(key, node_key=False)
        return key

    def list(self) -> list[dict[str, Any]]:
        """Rows {"Hash": first 12 hex digits of the key's SHA-256, "Created": ISO time UTC, "Node key": bool}."""
        self._reload()
        return [
            {
                "Hash": e.sha256[:PREFIX_LEN],
                "Created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(e.created)),
                "Node key": e.node_key,
            }
            for e in self._entries
        ]

    def delete(self, key_or_prefix: str) -> str:
        """Delete the key given in full, or the one whose hash starts with the given prefix (at least 8 hex
        digits, as shown by `list`). Returns the deleted key's hash prefix. Refuses to delete the last key
        (409); a prefix that matches nothing -> 404, several -> 400. Messages never repeat the argument."""
        self._reload()
        digest = _digest(key_or_prefix)
        matches = [e for e in self._entries if hmac.compare_digest(e.sha256, digest)]
        if not matches:
            prefix = key_or_prefix.strip().lower()
            if len(prefix) < MIN_PREFIX_LEN or any(c not in "0123456789abcdef" for c in prefix):
                raise CommandError(
                    f"no API key matches; give the whole key or at least {MIN_PREFIX_LEN} hex digits of its hash "
                    "as shown by 'api-key show'",
                    404,
                )
            matches = [e for e in self._entries if e.sha256.startswith(prefix)]
            if not matches:
                raise CommandError("no API key matches the given key or hash prefix", 404)
            if len(matches) > 1:
                raise CommandError(f"the hash prefix matches {len(matches)} keys; give more digits", 400)
        victim = matches[0]
        if len(self._entries) == 1:
            raise CommandError("refusing to delete the last API key; create another one first", 409)
        self._entries = [e for e in self._entries if e is not victim]
        self._save()
        if victim.node_key:
            node_file = self.data_dir / KEY_FILE
            with contextlib.suppress(FileNotFoundError):
                if _digest(node_file.read_text(encoding="utf-8").strip()) == victim.sha256:
                    node_file.unlink()
        return victim.sha256[:PREFIX_LEN]

    def verify(self, key: str) -> bool:
        """Whether `key` is registered. Compares the digest with every stored one in constant time."""
        if not key:
            return False
        try:
            self._reload()
        except CommandError:
            return False
        digest = _digest(key)
        found = False
        for e in self._entries:
            found |= hmac.compare_digest(e.sha256, digest)
        return found


def ensure_node_key(data_dir: Path) -> str:
    """The node's own key from `data_dir/api.key`, created (random, mode 0600) at the first start; always
    registered in `data_dir/api_keys` when this returns."""
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
    KeyStore(data_dir)._register(key, node_key=True)
    return key
