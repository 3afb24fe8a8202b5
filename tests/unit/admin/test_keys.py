"""API keys: node key file, hashed storage, file modes, create/verify/delete."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from admin.errors import CommandError
from admin.keys import KeyStore, ensure_node_key


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_node_key_created_once_with_mode_0600(data_dir: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        key = ensure_node_key(data_dir)
    finally:
        os.umask(old_umask)
    assert len(key) >= 40
    assert (data_dir / "api.key").read_text().strip() == key
    assert mode(data_dir / "api.key") == 0o600
    assert mode(data_dir / "api_keys") == 0o600
    assert ensure_node_key(data_dir) == key  # the second start keeps it
    assert KeyStore(data_dir).verify(key)
    assert len(KeyStore(data_dir).list()) == 1


def test_keys_are_stored_hashed(data_dir: Path, node_key: str, keys: KeyStore) -> None:
    extra = keys.create()
    text = (data_dir / "api_keys").read_text()
    assert node_key not in text and extra not in text
    hashes = {e["sha256"] for e in json.loads(text)["keys"]}
    assert hashes == {hashlib.sha256(k.encode()).hexdigest() for k in (node_key, extra)}
    assert mode(data_dir / "api_keys") == 0o600


def test_verify(keys: KeyStore, node_key: str) -> None:
    extra = keys.create()
    assert extra != node_key
    assert keys.verify(node_key) and keys.verify(extra)
    assert not keys.verify("")
    assert not keys.verify(extra[:-1])
    assert not keys.verify(extra + "x")
    assert not keys.verify(hashlib.sha256(extra.encode()).hexdigest())  # the stored hash is not a key


def test_list_shows_prefix_and_time_not_the_key(keys: KeyStore, node_key: str) -> None:
    extra = keys.create()
    rows = keys.list()
    assert [r["Node key"] for r in rows] == [True, False]
    assert rows[1]["Hash"] == hashlib.sha256(extra.encode()).hexdigest()[:12]
    assert all(len(r["Created"]) == 20 and r["Created"].endswith("Z") for r in rows)
    assert extra not in json.dumps(rows) and node_key not in json.dumps(rows)


def test_delete_by_key_and_by_prefix(keys: KeyStore, node_key: str) -> None:
    a, b = keys.create(), keys.create()
    assert keys.delete(a) == hashlib.sha256(a.encode()).hexdigest()[:12]
    assert not keys.verify(a) and keys.verify(b)
    prefix = hashlib.sha256(b.encode()).hexdigest()[:8]
    keys.delete(prefix.upper())
    assert not keys.verify(b) and keys.verify(node_key)


@pytest.mark.parametrize(
    ("arg", "status", "message"),
    [
        ("abc", 404, "at least 8 hex digits"),
        ("not-hex-at-all", 404, "at least 8 hex digits"),
        ("0000000000", 404, "no API key matches"),
    ],
)
def test_delete_errors(keys: KeyStore, arg: str, status: int, message: str) -> None:
    keys.create()
    with pytest.raises(CommandError) as info:
        keys.delete(arg)
    assert (info.value.status, arg in info.value.message) == (status, False)
    assert message in info.value.message
    assert len(keys.list()) == 2


def test_ambiguous_prefix(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    for _ in range(3):
        store.create()
    doc = json.loads(store.path.read_text())  # make two stored hashes share an 8-digit prefix
    for entry in doc["keys"][:2]:
        entry["sha256"] = "abcdef01" + entry["sha256"][8:]
    store.path.write_text(json.dumps(doc))
    with pytest.raises(CommandError) as info:
        store.delete("abcdef01")
    assert info.value.status == 400 and "matches 2 keys" in info.value.message
    assert len(store.list()) == 3


def test_last_key_is_not_deleted(keys: KeyStore, node_key: str) -> None:
    with pytest.raises(CommandError) as info:
        keys.delete(node_key)
    assert info.value.status == 409
    assert keys.verify(node_key)


def test_deleting_the_node_key_removes_api_key_and_next_start_makes_a_new_one(
    data_dir: Path, keys: KeyStore, node_key: str
) -> None:
    other = keys.create()
    keys.delete(node_key)
    assert not (data_dir / "api.key").exists()
    assert not keys.verify(node_key)
    fresh = ensure_node_key(data_dir)
    assert fresh != node_key
    assert keys.verify(fresh) and keys.verify(other) and not keys.verify(node_key)


def test_store_reloads_changes_made_by_another_instance(data_dir: Path, keys: KeyStore) -> None:
    other = KeyStore(data_dir)
    created = other.create()
    assert keys.verify(created)
    other.delete(created)
    assert not keys.verify(created)


def test_lost_store_reregisters_existing_node_key(data_dir: Path, node_key: str) -> None:
    (data_dir / "api_keys").unlink()
    assert not KeyStore(data_dir).verify(node_key)
    assert ensure_node_key(data_dir) == node_key
    assert KeyStore(data_dir).verify(node_key)


def test_loose_node_key_mode_is_tightened(data_dir: Path, node_key: str) -> None:
    os.chmod(data_dir / "api.key", 0o644)
    ensure_node_key(data_dir)
    assert mode(data_dir / "api.key") == 0o600


def test_corrupt_store_refuses_everyone(data_dir: Path, keys: KeyStore, node_key: str) -> None:
    (data_dir / "api_keys").write_text("{not json")
    assert not keys.verify(node_key)
    with pytest.raises(CommandError) as info:
        keys.list()
    assert info.value.status == 503 and "api_keys is unreadable" in info.value.message
