"""The ACL on the subscriptions a node holds: when the ACL in force changes, the subscriptions of the local
sessions are judged again and those it no longer allows are removed, so that the read lines need no check per
delivered message (the broker checks a SUBSCRIBE, a PUBLISH, a will and a retained message as they come; the
deny lines, when there are any, are checked per delivery: vmqpy.broker.access.read_guard).

`AclEnforcer` belongs to the broker (vmqpy.broker.core.broker): it keeps the user name each client id last
connected with (the name the ACL judges), reloads the ACL and password files (`reload`), and removes what the
ACL in force forbids from all sessions (`enforce`), from one connecting session (`judge`) or from one client
on an operator's word (`reauthorize`, `vmq-admin session reauthorize`). Removal goes through the broker's
unsubscribe, so the metadata store forgets the subscriptions cluster-wide.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

import structlog

from vmqpy.broker.access.control import AccessControl, Reloaded
from vmqpy.broker.core.session import Session

log = structlog.get_logger("vmqpy.broker")

__all__ = ["AclEnforcer"]


class AclEnforcer:
    """The ACL's hold on the local sessions' subscriptions (`sessions`, by client id)."""

    def __init__(
        self, access: AccessControl, sessions: Mapping[str, Session],
        unsubscribe: Callable[[Session, list[str]], object], metrics: Counter[str],
    ) -> None:
        self.access = access
        self.sessions = sessions
        self.usernames: dict[str, str | None] = {}  # client id -> the user name it last connected with
        self._unsubscribe = unsubscribe
        self._metrics = metrics

    def connected(self, session: Session, username: str | None) -> None:
        """`session`'s client connected as `username`: remember the name and remove what the ACL forbids it."""
        self.usernames[session.client_id] = username
        if session.subscriptions and self.access.acl is not None:
            self._revoke_forbidden(session, username)

    def reload(self, force: bool = False, acl: bool = True, passwords: bool = True) -> list[Reloaded]:
        """Take the ACL file (`acl`) and the password file (`passwords`) again when they changed (always when
        `force`); after a new ACL, the subscriptions it no longer allows are removed. What each reload did (a
        file that cannot be used keeps the previous rules in force, and is logged)."""
        answers = []
        if acl:
            answer = self.access.reload_acl(force)
            if answer.changed:
                removed = self.enforce()
                log.info("ACL reloaded", path=str(answer.path), rules=answer.rules, subscriptions_removed=removed)
            answers.append(answer)
        if passwords:
            answer = self.access.reload_passwords(force)
            if answer.changed:
                log.info("password file reloaded", path=str(answer.path), users=answer.rules)
            answers.append(answer)
        for answer in answers:
            if answer.error is not None:
                log.error("access file not reloaded: the previous rules stay in force", error=answer.error)
        return answers

    def enforce(self) -> int:
        """Remove the subscriptions of the local sessions that the ACL in force does not allow (for the user
        name each last connected with; a session restored from disk is judged when its client connects again).
        How many were removed."""
        if self.access.acl is None:
            return 0
        removed = 0
        for client_id, session in list(self.sessions.items()):
            if session.subscriptions and client_id in self.usernames:
                removed += self._revoke_forbidden(session, self.usernames[client_id])
        return removed

    def reauthorize(self, client_id: str, username: str | None) -> tuple[int, int] | None:
        """`vmq-admin session reauthorize`: check the subscriptions of `client_id`'s session against the ACL
        in force for `username`, and remove those it does not allow. (kept, removed), or None when the client
        has no session on this node."""
        session = self.sessions.get(client_id)
        if session is None:
            return None
        removed = self._revoke_forbidden(session, username) if self.access.acl is not None else 0
        return len(session.subscriptions), removed

    def _revoke_forbidden(self, session: Session, username: str | None) -> int:
        access = self.access
        forbidden = [f for f in session.subscriptions if not access.may_subscribe(session.client_id, username, f)]
        if forbidden:
            self._unsubscribe(session, forbidden)
            self._metrics["subscription_revoked"] += len(forbidden)
            log.info("subscriptions removed: the ACL no longer allows them", client_id=session.client_id,
                     filters=forbidden)
        return len(forbidden)
