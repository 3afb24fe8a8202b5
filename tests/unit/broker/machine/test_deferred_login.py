"""A CONNECT whose password must be hashed is not decided on the event loop (vmqpy.broker.machine.protocol): the machine
hands the check out (`Authenticate`) and reads nothing until the driver reports the verdict (`authenticated`),
which decides the CONNECT as before; the driver's own verdicts (pool full, address throttled) refuse it at once."""

from __future__ import annotations

import pytest

from vmqpy.broker.access.auth import Authenticator, hash_password
from vmqpy.broker.core.ports import AlwaysServe
from vmqpy.broker.machine.decisions import Authenticate, RefuseConnect, Register
from vmqpy.broker.machine.protocol import ConnectionMachine, Phase
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.packets import Connect

NOW = 1_000.0
CONFIG = Config(failed_login_delay=0.25)
USERS = {"alice": hash_password("right", iterations=1000)}


def handed_out(username: str, password: bytes | None = b"right") -> tuple[ConnectionMachine, Authenticate]:
    machine = ConnectionMachine(CONFIG, Authenticator(False, USERS, deferred=True), AlwaysServe())
    [decision] = machine.receive(Connect("c1", protocol_level=5, username=username, password=password), NOW)
    assert isinstance(decision, Authenticate)
    assert machine.state.phase is Phase.AUTHENTICATING
    return machine, decision


@pytest.mark.parametrize("username", ["alice", "mallory"])
def test_a_password_check_is_handed_out_for_known_and_unknown_users(username: str) -> None:
    _machine, decision = handed_out(username)
    assert decision.check.known is (username == "alice")
    assert decision.check.run() is (username == "alice")


def test_the_verdict_decides_the_connect() -> None:
    machine, decision = handed_out("alice")
    [accepted] = machine.authenticated(decision.connect, None, NOW)
    assert isinstance(accepted, Register) and accepted.accepted.username == "alice"
    assert machine.state.phase is Phase.REGISTERING

    machine, decision = handed_out("alice")
    [refused] = machine.authenticated(decision.connect, rc.BAD_USER_NAME_OR_PASSWORD, NOW)
    assert isinstance(refused, RefuseConnect)
    assert (refused.reason_code, refused.failed_login, refused.delay) == (0x86, True, 0.25)


@pytest.mark.parametrize(("verdict", "words"), [(rc.SERVER_BUSY, "server busy"),
                                                (rc.CONNECTION_RATE_EXCEEDED, "too many failed logins")])
def test_a_login_not_checked_is_refused_at_once(verdict: int, words: str) -> None:
    machine, decision = handed_out("alice")
    [refused] = machine.authenticated(decision.connect, verdict, NOW)
    assert isinstance(refused, RefuseConnect)
    assert (refused.reason_code, refused.failed_login, refused.delay) == (verdict, False, 0.0)
    assert words in refused.why
    assert machine.state.phase is Phase.CLOSED


def test_nothing_to_hash_is_decided_at_once() -> None:
    machine = ConnectionMachine(CONFIG, Authenticator(False, USERS, deferred=True), AlwaysServe())
    [refused] = machine.receive(Connect("c1", username="alice"), NOW)  # no password
    assert isinstance(refused, RefuseConnect) and refused.reason_code == 0x86


def test_a_verdict_outside_the_authenticating_phase_is_a_usage_error() -> None:
    machine = ConnectionMachine(CONFIG, Authenticator(False, USERS, deferred=True), AlwaysServe())
    with pytest.raises(ValueError):
        machine.authenticated(Connect("c1"), None, NOW)
