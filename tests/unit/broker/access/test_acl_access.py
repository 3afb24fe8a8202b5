"""The access rules in force (vmqpy/broker/access/control.py): loading the ACL and password files at start, reloading
them when they change (modification time and size, confirmed by a hash), a bad file keeping the previous rules
with its file:line, and the failed-login counter per address."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vmqpy.broker.access.acl import AclError
from vmqpy.broker.access.auth import PasswordFileError, hash_password, parse_passwords
from vmqpy.broker.access.control import AccessControl, Reloaded, WatchedFile
from vmqpy.broker.access.login_throttle import LoginThrottle

ALICE = f"alice:{hash_password('wonderland', iterations=1000)}\n"
BOB = f"bob:{hash_password('builder', iterations=1000)}\n"


def rewrite(path: Path, text: str) -> None:
    """Write `text` and move the modification time on, as a later edit would (coarse clocks: same second)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    stat = path.stat()
    if stat.st_mtime_ns <= before:
        os.utime(path, ns=(stat.st_atime_ns, before + 1_000_000))


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    acl, passwd = tmp_path / "vmq.acl", tmp_path / "vmq.passwd"
    acl.write_text("topic read public/#\nuser alice\ntopic alice/#\n")
    passwd.write_text(ALICE)
    return acl, passwd


def loaded(files: tuple[Path, Path], allow_anonymous: bool = False) -> AccessControl:
    access = AccessControl(allow_anonymous)
    access.load(*files)
    return access


def test_nothing_loaded_allows_every_topic() -> None:
    access = AccessControl(True)
    assert not access.loaded
    assert access.may_publish("c", None, "any/topic") and access.may_subscribe("c", None, "#")
    assert access.check(None, None) is None
    assert AccessControl(False).check(None, None) == 0x87


def test_load_takes_both_files(files: tuple[Path, Path]) -> None:
    access = loaded(files)
    assert access.loaded and access.generation == 1
    assert access.check("alice", b"wonderland") is None
    assert access.check("alice", b"guess") == 0x86
    assert access.check(None, None) == 0x87
    assert access.may_subscribe("c", "alice", "alice/x") and not access.may_subscribe("c", "bob", "alice/x")
    assert access.may_read("c", None, "public/a") and not access.may_publish("c", None, "public/a")


def test_load_refuses_a_bad_file_with_its_line(tmp_path: Path, files: tuple[Path, Path]) -> None:
    acl, passwd = files
    acl.write_text("topic read a\ntopic raed b\n")
    with pytest.raises(AclError, match=rf"^{acl}:2: expected read, write"):
        AccessControl(False).load(acl, passwd)
    passwd.write_text("alice:plain\n")
    with pytest.raises(PasswordFileError, match=rf"^{passwd}:1: expected 'username:\$pbkdf2"):
        AccessControl(False).load(None, passwd)
    with pytest.raises(AclError, match="cannot read the ACL file"):
        AccessControl(False).load(tmp_path / "missing.acl", None)


def test_an_unchanged_file_is_not_taken_again(files: tuple[Path, Path]) -> None:
    access = loaded(files)
    acl_before = access.acl
    assert access.reload_acl() == Reloaded("ACL", files[0], False, rules=2)
    assert access.reload_passwords() == Reloaded("password file", files[1], False, rules=1)
    assert access.acl is acl_before and access.generation == 1


def test_a_rewrite_with_the_same_content_is_not_a_change(files: tuple[Path, Path]) -> None:
    access = loaded(files)
    rewrite(files[0], files[0].read_text())
    assert not access.reload_acl().changed
    assert access.generation == 1


def test_a_changed_acl_replaces_the_rules(files: tuple[Path, Path]) -> None:
    access = loaded(files)
    rewrite(files[0], "topic read public/#\ntopic read news/#\n")
    answer = access.reload_acl()
    assert answer == Reloaded("ACL", files[0], True, rules=2)
    assert answer.describe() == f"ACL {files[0]} reloaded (2 rules)"
    assert access.generation == 2
    assert access.may_subscribe("c", None, "news/x") and not access.may_subscribe("c", "alice", "alice/x")


def test_a_bad_line_keeps_the_previous_acl(files: tuple[Path, Path]) -> None:
    access = loaded(files)
    rewrite(files[0], "topic read news/#\ntopic read a/#/b\n")
    answer = access.reload_acl()
    assert not answer.changed and answer.error is not None
    assert answer.error.startswith(f"{files[0]}:2: 'a/#/b' is not a valid topic filter")
    assert "the previous one stays in force" in answer.describe()
    assert access.generation == 1
    assert access.may_subscribe("c", "alice", "alice/x") and not access.may_subscribe("c", None, "news/x")
    assert access.metrics["access_reload_failed"] == 1
    # not reported again until the file changes; a forced reload says it again
    assert access.reload_acl().error is None
    assert access.reload_acl(force=True).error == answer.error
    rewrite(files[0], "topic read news/#\n")
    assert access.reload_acl().changed and access.may_subscribe("c", None, "news/x")


def test_a_vanished_file_keeps_the_rules(files: tuple[Path, Path]) -> None:
    access = loaded(files)
    files[0].unlink()
    answer = access.reload_acl()
    assert answer.error is not None and "cannot read the ACL file" in answer.error
    assert access.may_subscribe("c", "alice", "alice/x")


def test_a_changed_password_file_replaces_the_users(files: tuple[Path, Path]) -> None:
    access = loaded(files)
    rewrite(files[1], BOB)
    assert access.reload_passwords() == Reloaded("password file", files[1], True, rules=1)
    assert access.check("bob", b"builder") is None and access.check("alice", b"wonderland") == 0x86
    rewrite(files[1], BOB + "carol\n")
    answer = access.reload_passwords()
    assert answer.error is not None and answer.error.startswith(f"{files[1]}:2:")
    assert access.check("bob", b"builder") is None


def test_no_file_means_nothing_to_reload() -> None:
    access = AccessControl(True)
    access.load(None, None)
    assert access.reload_acl(force=True).describe() == "no ACL in force: nothing to reload"
    assert access.acl is None


def test_watched_file_looks_at_the_stamp_first(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one")
    watched = WatchedFile(path)
    assert watched.changed_content() == b"one"
    watched.taken(b"one")
    assert watched.changed_content() is None
    rewrite(path, "two")
    assert watched.changed_content() == b"two"
    assert watched.changed_content() is None  # looked at: the stamp is known now, even before `taken`
    assert watched.changed_content(force=True) == b"two"  # read again: not the content taken
    watched.taken(b"two")
    assert watched.changed_content(force=True) is None


def test_parse_passwords_names_the_source() -> None:
    assert parse_passwords("# c\n\n" + ALICE, "mem")["alice"].startswith("$pbkdf2-sha256$1000$")
    with pytest.raises(PasswordFileError, match=r"^mem:1:"):
        parse_passwords("nobody\n", "mem")


def test_failed_logins_are_counted_per_address_and_bounded() -> None:
    failed = LoginThrottle(capacity=2)  # (the failed-login table: vmqpy.broker.access.login_throttle)
    assert [failed.failed("10.0.0.1", 0), failed.failed("10.0.0.1", 0), failed.failed("10.0.0.2", 0)] == [1, 2, 1]
    assert failed.failed("10.0.0.3", 0) == 1  # the oldest address is forgotten
    assert (failed.count("10.0.0.1"), failed.count("10.0.0.2"), len(failed), failed.total) == (0, 1, 2, 4)
    assert failed.failed("10.0.0.2", 0) == 2
