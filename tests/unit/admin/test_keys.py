"""API keys: the node's bootstrap key file, cluster keys kept hashed in the (fake) replicated store with scope and
expiry, create/add/show/delete, the record codec, `expires=` parsing and the migration of the old per-node file."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from admin.errors import CommandError
from admin.keys import (
    KeyRecord,
    KeyStore,
    decode_record,
    encode_record,
    ensure_node_key,
    migrate_file_keys,
    parse_expires,
)
from admin.scopes import Scope
from tests.unit.admin.fakes import FakeNode
from tests.unit.clocks import Clock


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_node_key_created_once_with_mode_0600(data_dir: Path, fake: FakeNode) -> None:
    old_umask = os.umask(0o022)
    try:
        key = ensure_node_key(data_dir)
    finally:
        os.umask(old_umask)
    assert len(key) >= 40
    assert (data_dir / "api.key").read_text().strip() == key
    assert mode(data_dir / "api.key") == 0o600
    assert ensure_node_key(data_dir) == key  # the second start keeps it
    store = KeyStore(data_dir, fake)
    assert store.authenticate(key) is Scope.ADMIN
    assert [r["Node key"] for r in store.list()] == [True]
    assert fake.api_keys == {}  # the bootstrap key is this node's own: never replicated
    assert not (data_dir / "api_keys").exists()


def test_cluster_keys_are_stored_hashed_with_their_record(keys: KeyStore, fake: FakeNode, node_key: str) -> None:
    extra = keys.create(Scope.METRICS)
    assert list(fake.api_keys) == [sha(extra)]
    stored = json.dumps(fake.api_keys)
    assert extra not in stored and node_key not in stored
    record = decode_record(fake.api_keys[sha(extra)])
    assert (record.scope, record.expires, record.origin) == (Scope.METRICS, None, fake.name)


def test_one_store_two_nodes(tmp_path: Path, fake: FakeNode) -> None:
    """Two nodes over one replicated store: a cluster key works on both, a deletion on one ends it on both; each
    bootstrap key works on its own node only."""
    n1_key, n2_key = ensure_node_key(tmp_path / "n1"), ensure_node_key(tmp_path / "n2")
    n1, n2 = KeyStore(tmp_path / "n1", fake), KeyStore(tmp_path / "n2", fake)
    shared = n1.create(Scope.READ)
    assert n1.authenticate(shared) is Scope.READ and n2.authenticate(shared) is Scope.READ
    assert n1.verify(n1_key) and not n2.verify(n1_key) and n2.verify(n2_key) and not n1.verify(n2_key)
    n2.delete(shared)
    assert not n1.verify(shared) and not n2.verify(shared)


def test_authenticate(keys: KeyStore, node_key: str) -> None:
    extra = keys.create(Scope.STATUS)
    assert keys.authenticate(node_key) is Scope.ADMIN and keys.authenticate(extra) is Scope.STATUS
    for wrong, message in [("", "missing API key"), (extra[:-1], "invalid API key"), (extra + "x", "invalid API key"),
                           (sha(extra), "invalid API key")]:  # the stored hash is not a key
        with pytest.raises(CommandError) as info:
            keys.authenticate(wrong)
        assert (info.value.status, info.value.message.startswith(message)) == (401, True)
        assert not wrong or wrong not in info.value.message


def test_expired_key_is_refused_and_shown_expired(data_dir: Path, node_key: str, fake: FakeNode) -> None:
    clock = Clock(1_800_000_000.0)
    keys = KeyStore(data_dir, fake, clock=clock)
    key = keys.create(Scope.READ, expires=clock.now + 60)
    assert keys.authenticate(key) is Scope.READ
    clock.now += 60
    with pytest.raises(CommandError) as info:
        keys.authenticate(key)
    assert info.value.status == 401 and "expired at" in info.value.message
    assert keys.list()[1]["Expires"].endswith("(expired)")


def test_unreadable_record_is_refused(keys: KeyStore, fake: FakeNode) -> None:
    key = keys.create()
    fake.api_keys[sha(key)] = {"v": 99, "scope": "admin"}  # a record of a version this node does not read
    assert not keys.verify(key)
    assert keys.list()[1]["Scope"] == "unreadable"


def test_show_never_reveals_a_key(keys: KeyStore, node_key: str) -> None:
    extra = keys.create(Scope.METRICS)
    rows = keys.list()
    assert [(r["Node key"], r["Scope"], r["Expires"]) for r in rows] == [(True, "admin", "never"),
                                                                        (False, "metrics", "never")]
    assert rows[1]["Hash"] == sha(extra)[:12] and rows[0]["Hash"] == sha(node_key)[:12]
    assert all(len(r["Created"]) == 20 and r["Created"].endswith("Z") for r in rows)
    assert extra not in json.dumps(rows) and node_key not in json.dumps(rows)


def test_add(keys: KeyStore, fake: FakeNode, node_key: str) -> None:
    chosen = "my-prometheus-key-2027"
    assert keys.add(chosen, Scope.METRICS) == sha(chosen)[:12]
    assert keys.authenticate(chosen) is Scope.METRICS
    for key, status, message in [("k3y-9", 400, "too short"), ("x" * 20 + " y", 400, "spaces"),
                                 (chosen, 409, "already stored"), (node_key, 409, "already stored")]:
        with pytest.raises(CommandError) as info:
            keys.add(key, Scope.ADMIN)
        assert (info.value.status, message in info.value.message, key in info.value.message) == (status, True, False)
    assert keys.authenticate(chosen) is Scope.METRICS  # a refused add changed nothing


def test_delete_by_key_and_by_prefix(keys: KeyStore, node_key: str) -> None:
    a, b = keys.create(), keys.create()
    assert keys.delete(a) == sha(a)[:12]
    assert not keys.verify(a) and keys.verify(b)
    keys.delete(sha(b)[:8].upper())
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


def test_ambiguous_prefix(keys: KeyStore, fake: FakeNode) -> None:
    record = encode_record(KeyRecord(Scope.READ, 1.0, None, fake.name))
    fake.api_keys = {"abcdef01" + "0" * 56: record, "abcdef01" + "1" * 56: record}
    with pytest.raises(CommandError) as info:
        keys.delete("abcdef01")
    assert info.value.status == 400 and "matches 2 keys" in info.value.message
    assert len(keys.list()) == 3


def test_last_admin_key_is_not_deleted(keys: KeyStore, node_key: str) -> None:
    status_key = keys.create(Scope.STATUS)
    with pytest.raises(CommandError) as info:
        keys.delete(node_key)  # a status key left cannot manage keys
    assert info.value.status == 409 and "scope=admin" in info.value.message
    assert keys.verify(node_key)
    keys.delete(status_key)  # any key but the last admin one goes


def test_deleting_the_node_key_removes_api_key_and_next_start_makes_a_new_one(
    data_dir: Path, keys: KeyStore, node_key: str
) -> None:
    other = keys.create()
    keys.delete(node_key)
    assert not (data_dir / "api.key").exists()
    assert not keys.verify(node_key) and keys.verify(other)
    fresh = ensure_node_key(data_dir)
    assert fresh != node_key
    assert keys.verify(fresh) and keys.verify(other) and not keys.verify(node_key)


def test_loose_node_key_mode_is_tightened(data_dir: Path, node_key: str) -> None:
    os.chmod(data_dir / "api.key", 0o644)
    ensure_node_key(data_dir)
    assert mode(data_dir / "api.key") == 0o600


# -- the record codec --------------------------------------------------------------------------------------------
@given(st.sampled_from(list(Scope)), st.floats(0, 4e9), st.none() | st.floats(0, 4e9), st.text(max_size=40))
def test_record_round_trip(scope: Scope, created: float, expires: float | None, origin: str) -> None:
    record = KeyRecord(scope, created, expires, origin)
    assert decode_record(encode_record(record)) == record


@pytest.mark.parametrize("doc", [
    None, [], "admin", {}, {"v": 2, "scope": "admin", "created": 1.0},
    {"v": 1, "scope": "root", "created": 1.0}, {"v": 1, "created": 1.0}, {"v": 1, "scope": "admin"},
    {"v": 1, "scope": "admin", "created": "yesterday"},
])
def test_decode_refuses_what_is_not_a_record(doc: object) -> None:
    with pytest.raises(ValueError):
        decode_record(doc)


# -- expires= ----------------------------------------------------------------------------------------------------
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC).timestamp()
PLUS2 = timezone(timedelta(hours=2))


@pytest.mark.parametrize(("text", "local", "expected"), [
    ("2027-02-15T08:00:00", UTC, datetime(2027, 2, 15, 8, tzinfo=UTC)),  # VerneMQ's form, the node's local time
    ("2027-02-15T08:00:00", PLUS2, datetime(2027, 2, 15, 6, tzinfo=UTC)),
    ("2027-02-15T08:00:00Z", PLUS2, datetime(2027, 2, 15, 8, tzinfo=UTC)),
    ("2027-02-15T08:00:00+01:00", UTC, datetime(2027, 2, 15, 7, tzinfo=UTC)),
    ("2027-02-15", UTC, datetime(2027, 2, 15, tzinfo=UTC)),
    (" 2026-11-30T12:00:01 ", UTC, datetime(2026, 11, 30, 12, 0, 1, tzinfo=UTC)),
])
def test_parse_expires(text: str, local: timezone, expected: datetime) -> None:
    assert parse_expires(text, NOW, local) == expected.timestamp()


@pytest.mark.parametrize(("text", "message"), [
    ("2026-11-30T12:00:00", "not in the future"),
    ("2020-01-01T00:00:00", "not in the future"),
    ("tomorrow", "not a date-time"),
    ("2027-13-01T00:00:00", "not a date-time"),
    ("2027-02-15 8am", "not a date-time"),
    ("", "not a date-time"),
])
def test_parse_expires_refuses(text: str, message: str) -> None:
    with pytest.raises(CommandError) as info:
        parse_expires(text, NOW, UTC)
    assert info.value.status == 400 and message in info.value.message


# -- the per-node file of earlier versions ---------------------------------------------------------------------
def legacy_file(data_dir: Path, entries: list[dict[str, object]]) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "api_keys"
    path.write_text(json.dumps({"version": 1, "keys": entries}))
    return path


def test_migration_moves_old_keys_as_admin_and_renames_the_file(data_dir: Path, fake: FakeNode,
                                                                node_key: str) -> None:
    old = "an-old-per-node-key-made-by-api-key-create"
    path = legacy_file(data_dir, [{"sha256": sha(node_key), "created": 1.0, "node_key": True},
                                  {"sha256": sha(old), "created": 1_700_000_000.0, "node_key": False}])
    assert migrate_file_keys(data_dir, fake) == 1
    assert not path.exists() and (data_dir / "api_keys.migrated").exists()
    assert list(fake.api_keys) == [sha(old)]  # the node key stays the node's own
    keys = KeyStore(data_dir, fake)
    assert keys.authenticate(old) is Scope.ADMIN
    assert keys.list()[1]["Created"] == "2023-11-14T22:13:20Z"
    assert migrate_file_keys(data_dir, fake) == 0  # once


def test_unreadable_old_file_is_kept(data_dir: Path, fake: FakeNode) -> None:
    data_dir.mkdir(parents=True)
    (data_dir / "api_keys").write_text("{not json")
    with pytest.raises(CommandError) as info:
        migrate_file_keys(data_dir, fake)
    assert info.value.status == 503 and "api_keys is unreadable" in info.value.message
    assert (data_dir / "api_keys").exists() and fake.api_keys == {}
