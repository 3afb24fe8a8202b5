"""The connection machine's outbound rules and its one deadline (a part of
vmqpy.broker.machine.protocol.ConnectionMachine,
kept in a module of its own): what the node sends a client that depend on its protocol level, and when.

- `taken_over`, `moved_away`, `keepalive_expired`, `protocol_error`: a `Close` whose `reason_code` makes the
  DISCONNECT of a 5.0 client (0x8E or 0x97, 0x9C with a Server Reference, 0x8D, the violation's code); a
  3.1.1 client's socket is just closed. A 5.0 CONNECT that was the bad packet gets a CONNACK carrying the code.
- `refusal` (the CONNACK refusing a CONNECT, a reason string for 5.0), `unsupported_protocol` (CONNACK 0x01 in
  the 3.1.1 layout), `redirect` (`persistent_session_placement`; a 3.1.1 client cannot be redirected: no
  decision, it is served here), `waits_for_disk` (a QoS 2 delivery to a persistent session waits for the disk).
- `next_deadline()` and `handle_timer(now)`: the CONNECT timeout, a refused login's CONNACK after
  `auth.failed_login_delay`, the resends to a 3.1.1 client (`retry_deadline`, `handle_retry`); the driver arms
  one timer for the deadline and calls back.

Pure, as the rest of the machine: `now` is an argument, the decisions are returned.
"""

from __future__ import annotations

from vmqpy.broker.machine.connection_state import ConnectionState, Phase
from vmqpy.broker.machine.decisions import Close, Decisions, RefuseConnect, Send
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.packets import Connack, Properties

__all__ = ["RETRY_RECHECK", "TAKEN_OVER_WHY", "OutboundRules"]

RETRY_RECHECK = 1.0  # seconds: the soonest a resend is looked at again (a connection that cannot take more)
TAKEN_OVER_WHY = {rc.SESSION_TAKEN_OVER: "session taken over",
                  rc.QUOTA_EXCEEDED: "disconnected: it held its publishers back for queue.max_stall (queue.overflow)"}


class OutboundRules:
    """The outbound rules and the deadline of `ConnectionMachine`, which holds the state they read."""

    # _due: the deadline of the phase (CONNECTING, the CONNECT's, `opened`; CLOSED, a refused login's CONNACK);
    # _refusal: a refused login, answered at `_due` (auth.failed_login_delay); _recheck_at: resends are looked at
    # no sooner than this again (`handle_retry`). Set by the machine's __init__.
    __slots__ = ("_due", "_recheck_at", "_refusal")
    _due: float | None
    _recheck_at: float
    _refusal: RefuseConnect | None
    state: ConnectionState  # the machine's
    config: Config
    connected_now: bool

    def _enter(self, phase: Phase) -> None:
        raise NotImplementedError  # the machine's: its table follows the phase

    def opened(self, now: float, waited: bool) -> None:
        """The socket is open at `now`: its CONNECT is due within `connect_timeout` unless a prelude `waited` for it
        already (then it came whole with the first bytes)."""
        self._due = None if waited else now + self.config.connect_timeout

    @property
    def resends(self) -> bool:
        """Whether what the client leaves unacknowledged is resent on this connection after `retry_interval`:
        3.1.1 (and 3.1) only, since MQTT 5.0 allows a resend only on a new connection (4.4), which the session
        does when it attaches."""
        return self.config.retry_interval > 0 and self.state.level < 5

    def next_deadline(self) -> float | None:
        """The one deadline of the connection: its CONNECT timeout while nothing but CONNECT is allowed, the
        CONNACK of a refused login after `auth.failed_login_delay`, then the next resend of an outgoing QoS 1/2
        PUBLISH or PUBREL the client has not acknowledged (3.1.1 with `retry_interval`, `resends`); None: nothing
        is due."""
        phase = self.state.phase
        if phase is Phase.CONNECTING or self._refusal is not None:
            return self._due
        deadline = self.retry_deadline()
        return None if deadline is None else max(deadline, self._recheck_at)

    def handle_timer(self, now: float) -> Decisions:
        """What is due at `now`: the close of a connection whose CONNECT did not come in time, a refused login's
        CONNACK, or the resends (with DUP) of what the client left unacknowledged (looked at again no sooner than
        RETRY_RECHECK later)."""
        phase = self.state.phase
        due = self._due
        if phase is Phase.CONNECTING or self._refusal is not None:
            if due is None or due > now:
                return ()
            self._due = None
            refusal, self._refusal = self._refusal, None
            if refusal is not None:
                return self.refusal(refusal.reason_code, refusal.why)
            self._enter(Phase.CLOSED)
            return (Close(None, "no CONNECT in time"),)
        self.handle_retry(now)
        return ()

    def retry_deadline(self) -> float | None:
        """When an outgoing QoS 1/2 PUBLISH or PUBREL the client has not acknowledged is next due for a resend;
        None: nothing is (or nothing is ever resent, `resends`)."""
        session = self.state.session
        if session is None or not self.connected_now or not self.resends:
            return None
        return session.next_resend(self.config.retry_interval)

    def handle_retry(self, now: float) -> float | None:
        """Resend, with DUP, what is due at `now`; the next deadline (at least RETRY_RECHECK away), or None."""
        deadline = self.retry_deadline()
        if deadline is not None and deadline <= now:
            assert self.state.session is not None
            self.state.session.resend_overdue(now, self.config.retry_interval)
            deadline = self.retry_deadline()
        self._recheck_at = now + RETRY_RECHECK
        return None if deadline is None else max(deadline, self._recheck_at)

    # ------------------------------------------------------------------------------------------ outbound rules

    def protocol_error(self, reason_code: int, connect_level: int | None) -> Decisions:
        """The client broke the protocol (or the node failed on its packet): a 5.0 client after CONNECT gets
        DISCONNECT with `reason_code`; a 5.0 CONNECT that was the bad packet (`connect_level`, the level its fixed
        header named) a CONNACK carrying it (MQTT 5.0 3.1.4, docs/mqtt-codec.md); a 3.1.1 client nothing. Then
        the socket closes."""
        state = self.state
        connected = state.session is not None
        self._enter(Phase.CLOSED)
        if connected:
            return (Close(reason_code if state.level == 5 else None, "protocol error"),)
        if connect_level == 5:
            state.level = 5
            return (Send(Connack(False, reason_code)), Close(None, "protocol error"))
        return (Close(None, "protocol error"),)

    def unsupported_protocol(self) -> Decisions:
        """A CONNECT of a protocol level the node does not speak: CONNACK 0x01 in the 3.1.1 layout, then close."""
        self._enter(Phase.CLOSED)
        return (Send(Connack(False, rc.V311_UNACCEPTABLE_PROTOCOL_VERSION)), Close(None, "unsupported protocol"))

    def refusal(self, reason_code: int, why: str) -> Decisions:
        """The CONNACK refusing a CONNECT with `reason_code` in the client's level (5.0 is told `why`: a reason
        string is allowed on a CONNACK whatever the client asked for), then close."""
        self._enter(Phase.CLOSED)
        level = self.state.level
        props = Properties(reason_string=why) if level == 5 else Properties()
        return (Send(Connack(False, rc.connack_code_for(level, reason_code), props)), Close(None, why))

    def redirect(self, reference: str, why: str) -> Decisions:
        """`persistent_session_placement = assigned` names another server for this CONNECT: a 5.0 client gets
        CONNACK 0x9C (Use another server) with that Server Reference and the connection closes; a 3.1.1 client
        cannot be told, and is served here (no decision)."""
        if self.state.level != 5:
            return ()
        self._enter(Phase.CLOSED)
        props = Properties(reason_string=why)
        props.server_reference = reference
        return (Send(Connack(False, rc.USE_ANOTHER_SERVER, props)), Close(None, why))

    def taken_over(self, reason_code: int) -> Close:
        """A newer connect of the client id (or an operator, or the stall bound) ends this connection: a 5.0 client
        gets DISCONNECT `reason_code`. The machine's state is left as it is (the driver lets go of the session)."""
        level = self.state.level
        why = TAKEN_OVER_WHY.get(reason_code, "disconnected by an operator")
        return Close(reason_code if level == 5 else None, why)

    def moved_away(self, reference: str | None) -> Close:
        """The node leaves the cluster: a connected 5.0 client gets DISCONNECT 0x9C (Use another server) naming
        `reference`; no will is published (the client is expected to reconnect elsewhere)."""
        connected_v5 = self.state.level == 5 and self.state.session is not None
        self._enter(Phase.CLOSED)
        return Close(rc.USE_ANOTHER_SERVER if connected_v5 else None, "disconnecting: this node leaves the cluster",
                     normal=True, server_reference=reference if connected_v5 else None)

    def keepalive_expired(self) -> Close:
        """The client was silent for 1.5 times its keep alive: 5.0 gets DISCONNECT 0x8D."""
        self._enter(Phase.CLOSED)
        return Close(rc.KEEP_ALIVE_TIMEOUT if self.state.level == 5 else None, "keepalive expired")

    @staticmethod
    def waits_for_disk(qos: int, persistent: bool) -> bool:
        """Whether a delivery leaves only once the disk writes queued before it are durable: a QoS 2 PUBLISH to a
        persistent session, whose packet id must be on disk first (exactly once across a failover)."""
        return qos == 2 and persistent
