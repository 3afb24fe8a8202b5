"""Sessions belong to their user (vmqpy.sessions.owners): who is a foreign user, which client ids a user may take
under `session.client_id_prefix`, and the owner as it travels in the session record on disk and in the replicated
owner record (records written before owners were kept still load, with an unknown owner)."""

from __future__ import annotations

from typing import Any

import pytest

from vmqpy.broker.core.persistence import session_record, stored_session
from vmqpy.broker.core.session import Session
from vmqpy.sessions import records
from vmqpy.sessions.message import decode_record, encode_record
from vmqpy.sessions.owners import UNKNOWN_USER, client_id_allowed, is_foreign, pack_user, unpack_user


@pytest.mark.parametrize(("owner", "username", "foreign"), [
    ("alice", "alice", False),
    ("alice", "eve", True),
    ("alice", None, True),  # an anonymous client is another user than alice
    (None, "eve", True),  # and alice is another user than the anonymous owner
    (None, None, False),
    (UNKNOWN_USER, "eve", False),  # a session stored before owners were kept: the first to come takes it
    (UNKNOWN_USER, None, False),
])
def test_is_foreign(owner: str | None, username: str | None, foreign: bool) -> None:
    assert is_foreign(owner, username) is foreign


@pytest.mark.parametrize(("prefix", "client_id", "username", "allowed"), [
    ("", "alice-phone", "eve", True),  # off: any client id
    ("%u/", "alice/phone", "alice", True),
    ("%u/", "alice/phone", "eve", False),
    ("%u/", "alice/phone", None, False),  # an anonymous client has no name to start with
    ("%u/", "al/phone", "al", True),
    ("%u/", "alice/phone", "al", False),  # the separator keeps user `al` off alice's ids
    ("dev-", "dev-1", None, True),
    ("dev-", "x-1", "alice", False),
])
def test_client_id_allowed(prefix: str, client_id: str, username: str | None, allowed: bool) -> None:
    assert client_id_allowed(prefix, client_id, username) is allowed


@pytest.mark.parametrize("user", ["alice", None, UNKNOWN_USER])
def test_pack_user_round_trips_through_msgpack(user: str | None) -> None:
    assert unpack_user(decode_record(encode_record([pack_user(user)]))[0]) == user


def session_of(user: str | None) -> Session:
    session = Session("c1", protocol_level=4, expiry_interval=None, max_inflight=10, max_online=10, max_offline=10)
    session.user = user
    return session


@pytest.mark.parametrize("user", ["alice", None, UNKNOWN_USER])
def test_the_stored_session_record_keeps_its_owner(user: str | None) -> None:
    stored = stored_session("c1", decode_record(encode_record(session_record(session_of(user), None))))
    assert stored.user == user and stored.will is None


@pytest.mark.parametrize("fields", [[4, None, 10.0], [4, None, 10.0, None]])
def test_a_session_record_written_before_owners_loads_with_an_unknown_owner(fields: list[Any]) -> None:
    stored = stored_session("c1", fields)
    assert stored.user == UNKNOWN_USER and stored.protocol_level == 4 and stored.disconnected_at == 10.0


@pytest.mark.parametrize(("value", "user"), [
    ([[1, 0, "n"], "n", False, None], UNKNOWN_USER),  # written before owners were kept
    ([[1, 0, "n"], "n", False, None, "dead"], UNKNOWN_USER),  # moved by an operator, no owner
    (records.session_value([1, 0, "n"], "n", False, None, user="alice"), "alice"),
    (records.session_value([1, 0, "n"], "n", False, None, user=None), None),
    (records.session_value([1, 0, "n"], "n", False, None, origin="dead", user="alice"), "alice"),
])
def test_the_owner_record_names_the_user(value: Any, user: str | None) -> None:
    assert records.session_user(value) == user
    assert records.session_owner(value) == "n"


def test_an_owner_record_with_a_user_keeps_its_origin_readable() -> None:
    assert records.session_origin(records.session_value([1, 0, "n"], "n", False, None, user="alice")) is None
    assert records.session_origin(records.session_value([1, 0, "n"], "n", False, None, "dead", "alice")) == "dead"


@pytest.mark.parametrize(("value", "same"), [
    (records.session_value([1, 0, "n"], "n", False, None, user="alice"), True),
    (records.session_value([1, 0, "n"], "n", False, None, user="eve"), False),
    (records.session_value([1, 0, "n"], "n", False, None), False),  # the owner is to be written
    (records.session_value([1, 0, "n"], "n", False, None, origin="dead", user="alice"), False),
])
def test_same_owner_compares_the_user(value: Any, same: bool) -> None:
    assert records.same_owner(value, "n", False, None, "alice") is same
