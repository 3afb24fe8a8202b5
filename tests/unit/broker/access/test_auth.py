"""Password file and the authentication decision; `vmqpy passwd` run as an operator runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy.broker.access.auth import (
    Authenticator,
    PasswordCheck,
    PasswordFileError,
    add_user,
    hash_password,
    parse_password_file,
    parse_passwords,
    username_problem,
    verify_password,
)

REPO = Path(__file__).resolve().parents[4]


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


def test_a_password_is_compared_as_bytes() -> None:
    """An MQTT password is binary data: bytes that are not UTF-8 never match the password made of U+FFFD (which
    decoding them with replacement gives), and a binary password set as bytes matches those bytes only."""
    auth = Authenticator(False, {"text": hash_password("\ufffd", iterations=1000),
                                 "binary": hash_password(b"\xff\xfe", iterations=1000)})
    assert auth.check("text", b"\xff") == 0x86
    assert auth.check("text", "\ufffd".encode()) is None
    assert auth.check("binary", b"\xff\xfe") is None
    assert auth.check("binary", "\ufffd\ufffd".encode()) == 0x86


def test_an_unknown_user_costs_a_hash_like_a_known_one() -> None:
    """No timing oracle: a user the file does not have is checked against a dummy hash of the file's iteration
    count (deferred: the check is handed back to run in the login pool, as a known user's), and never accepted."""
    users = {"alice": hash_password("right", iterations=1234)}
    auth = Authenticator(False, users, deferred=True)
    known, unknown = auth.check("alice", b"right"), auth.check("mallory", b"right")
    assert isinstance(known, PasswordCheck) and isinstance(unknown, PasswordCheck)
    assert (known.known, unknown.known) == (True, False)
    assert unknown.iterations == 1234 and unknown.encoded is None
    assert known.run() and not unknown.run()
    # nothing to hash: answered at once either way
    assert auth.check("alice", None) == auth.check("mallory", None) == 0x86


@pytest.mark.parametrize("name", ["", "#root", " alice", "alice ", "al\nice", "al\rice", "a:b", "tab\there",
                                  "nul\x00", "\u2028sep", "nbsp\xa0", "lone\ud800"])
def test_names_that_cannot_round_trip_are_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "passwd"
    add_user(path, "alice", "a")
    before = path.read_bytes()
    assert username_problem(name) is not None
    with pytest.raises(PasswordFileError, match="user name"):
        add_user(path, name, "secret")
    assert path.read_bytes() == before


@pytest.mark.parametrize("name", ["alice", "j\u00fcrgen", "a b", "a#b", "user@example.com", "\u5f20\u4f1f"])
def test_names_that_round_trip_are_taken(name: str) -> None:
    assert username_problem(name) is None


@settings(max_examples=300)
@given(st.text(max_size=12))
def test_a_name_is_taken_only_if_it_reads_back_as_itself(name: str) -> None:
    encoded = hash_password(b"", iterations=1)
    try:
        text = f"{name}:{encoded}\n"
        text.encode("utf-8")
        round_trips = parse_passwords(text, "t") == {name: encoded}
    except (PasswordFileError, UnicodeEncodeError):
        round_trips = False
    if username_problem(name) is None:
        assert round_trips


def test_an_empty_password_is_refused_unless_allowed(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    with pytest.raises(PasswordFileError, match="empty"):
        add_user(path, "alice", "")
    assert not path.exists()
    add_user(path, "alice", b"", allow_empty=True)
    assert verify_password(b"", parse_password_file(path)["alice"])


def passwd(path: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "vmqpy", "passwd", str(path), *args], input=stdin,
                          capture_output=True, timeout=60, cwd=REPO)


def test_vmqpy_passwd_refuses_what_would_break_the_file(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    assert passwd(path, "alice", stdin=b"a-secret\n").returncode == 0
    before = path.read_bytes()
    for name in ("#root", " alice", "bob ", "car\nol", "da:ve"):
        done = passwd(path, name, stdin=b"secret\n")
        assert done.returncode == 2 and b"user name" in done.stderr, (name, done)
    done = passwd(path, "erin", stdin=b"\n")
    assert done.returncode == 2 and b"--allow-empty-password" in done.stderr
    assert path.read_bytes() == before
    assert passwd(path, "erin", "--allow-empty-password", stdin=b"\n").returncode == 0
    assert passwd(path, "frank", stdin=b"\xff\xfebinary\n").returncode == 0  # the bytes, as they are
    users = parse_password_file(path)
    assert sorted(users) == ["alice", "erin", "frank"]
    assert verify_password(b"\xff\xfebinary", users["frank"])
    assert not verify_password("\ufffd\ufffdbinary", users["frank"])
