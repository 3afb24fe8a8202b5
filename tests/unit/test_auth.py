"""Password file and the authentication decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmqpy.broker.auth import (
    Authenticator,
    PasswordFileError,
    add_user,
    hash_password,
    parse_password_file,
    verify_password,
)


def test_hash_and_verify() -> None:
    encoded = hash_password("s3cret", salt=b"0123456789abcdef", iterations=1000)
    assert encoded.startswith("$pbkdf2-sha256$1000$")
    assert verify_password("s3cret", encoded)
    assert not verify_password("s3cret ", encoded)
    assert not verify_password("s3cret", "$md5$1$x$y")
    assert not verify_password("s3cret", "garbage")


def test_add_user_and_parse(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    add_user(path, "alice", "a")
    add_user(path, "bob", "b")
    add_user(path, "alice", "a2")
    users = parse_password_file(path)
    assert sorted(users) == ["alice", "bob"]
    assert verify_password("a2", users["alice"]) and not verify_password("a", users["alice"])
    assert path.stat().st_mode & 0o777 == 0o600


def test_bad_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    path.write_text("# users\nalice:plaintext\n")
    with pytest.raises(PasswordFileError, match=r"passwd:2: expected"):
        parse_password_file(path)


@pytest.mark.parametrize(
    ("anonymous", "username", "password", "expected"),
    [
        (True, None, None, None),
        (False, None, None, 0x87),
        (False, "alice", b"right", None),
        (False, "alice", b"wrong", 0x86),
        (False, "alice", None, 0x86),
        (False, "mallory", b"right", 0x86),
        (True, "mallory", b"x", 0x86),
    ],
)
def test_decisions(anonymous: bool, username: str | None, password: bytes | None, expected: int | None) -> None:
    auth = Authenticator(anonymous, {"alice": hash_password("right", iterations=1000)})
    assert auth.check(username, password) == expected


def test_anonymous_without_password_file_accepts_any_user() -> None:
    assert Authenticator(True, {}).check("anyone", b"x") is None
