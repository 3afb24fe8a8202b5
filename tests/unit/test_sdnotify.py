"""vmqpy.sdnotify: systemd's notification datagrams, sent to a real AF_UNIX datagram socket (a path, and a name in
the abstract namespace as systemd's `@` addresses)."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from vmqpy import sdnotify


@pytest.mark.parametrize(("value", "address"), [
    ("/run/systemd/notify", "/run/systemd/notify"),
    ("@/org/freedesktop/systemd1/notify/123", "\0/org/freedesktop/systemd1/notify/123"),
    ("@x", "\0x"),
    ("@", None),
    ("", None),
    ("vsock:2:1234", None),
    ("relative/path", None),
])
def test_address_of(value: str, address: str | None) -> None:
    assert sdnotify.address_of(value) == address


@pytest.mark.parametrize(("assignments", "payload"), [
    ({"READY": "1"}, b"READY=1"),
    ({"READY": "1", "STATUS": "n1 started; MQTT on 127.0.0.1:1883"},
     b"READY=1\nSTATUS=n1 started; MQTT on 127.0.0.1:1883"),
    ({"STOPPING": "1"}, b"STOPPING=1"),
    ({"STATUS": "caf\u00e9"}, "STATUS=caf\u00e9".encode()),
])
def test_datagram(assignments: dict[str, str], payload: bytes) -> None:
    assert sdnotify.datagram(assignments) == payload


@pytest.mark.parametrize("assignments", [{"A=B": "1"}, {"": "1"}, {"STATUS": "two\nlines"}, {"A\nB": "1"}])
def test_an_assignment_that_would_read_as_another_is_refused(assignments: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        sdnotify.datagram(assignments)


names = st.text(st.characters(exclude_characters="=\n", exclude_categories=["Cs"]), min_size=1, max_size=20)
values = st.text(st.characters(exclude_characters="\n", exclude_categories=["Cs"]), max_size=40)


@given(st.dictionaries(names, values, min_size=1, max_size=5))
def test_a_datagram_parses_back_to_its_assignments(assignments: dict[str, str]) -> None:
    lines = sdnotify.datagram(assignments).decode("utf-8").split("\n")
    assert dict(line.split("=", 1) for line in lines) == assignments


@pytest.fixture
def receiver() -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket at a path, as systemd's /run/systemd/notify."""
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "notify")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(path)
            sock.settimeout(5)
            yield sock, path


def test_notify_sends_one_datagram_to_a_path(receiver: tuple[socket.socket, str]) -> None:
    sock, path = receiver
    assert sdnotify.notify({"READY": "1", "STATUS": "serving"}, {"NOTIFY_SOCKET": path})
    assert sock.recv(4096) == b"READY=1\nSTATUS=serving"
    assert sdnotify.notify({"STOPPING": "1"}, {"NOTIFY_SOCKET": path})
    assert sock.recv(4096) == b"STOPPING=1"


def test_notify_reaches_an_abstract_socket() -> None:
    name = f"vmqpy-test-notify-{os.getpid()}-{id(object())}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert sdnotify.notify({"READY": "1"}, {"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(4096) == b"READY=1"


def test_without_notify_socket_nothing_is_sent() -> None:
    assert sdnotify.notify({"READY": "1"}, {}) is False
    assert sdnotify.notify({"READY": "1"}, {"NOTIFY_SOCKET": ""}) is False


def test_a_socket_nobody_listens_on_is_a_warning_not_an_error(tmp_path: Path) -> None:
    with capture_logs() as logs:
        assert sdnotify.notify({"READY": "1"}, {"NOTIFY_SOCKET": str(tmp_path / "gone")}) is False
        assert sdnotify.notify({"READY": "1"}, {"NOTIFY_SOCKET": "vsock:2:1"}) is False
    assert [entry["log_level"] for entry in logs] == ["warning", "warning"]
