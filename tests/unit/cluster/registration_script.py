"""Node b's side of a two-node cluster {a, b} for the registration tests: the frames b sends are kept, and the
test answers them as node a would (the client id's leader, and its previous owner).
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.loop_turns import settle
from vmqpy.cluster.leader import leader_for
from vmqpy.cluster.registration import RegistrationService
from vmqpy.sessions.handover import SessionImage, Ticket
from vmqpy.sessions.owners import UNKNOWN_USER


class ScriptedLinks:
    """Node b's view of a two-node cluster {a, b}; frames b sends are kept for the test to answer."""

    name = "b"

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def member_names(self) -> list[str]:
        return ["a", "b"]

    def is_reachable(self, node: str) -> bool:
        return True

    def send_control(self, node: str, body: dict[str, Any]) -> bool:
        self.sent.append((node, body))
        return True

    def take(self, op: str) -> dict[str, Any]:
        for i, (node, body) in enumerate(self.sent):
            if body["op"] == op:
                assert node == "a"
                del self.sent[i]
                return body
        raise AssertionError(f"b sent no {op}: {self.sent}")


def client_led_by_a() -> str:
    return next(c for c in (f"client-{i}" for i in range(100)) if leader_for(c, ["a", "b"]) == "a")


async def registered(service: RegistrationService, links: ScriptedLinks, client_id: str, *, clean_start: bool,
                     user: str | None = UNKNOWN_USER, owner: str | None = "a", grant_stamp: Any = None,
                     begin: dict[str, Any] | None = None) -> tuple[Ticket, dict[str, Any] | None]:
    """Register `client_id` on b: a, its leader, grants the lock naming `owner` (with `grant_stamp`); when that is
    a, it answers the handover with an empty session (`begin`: more fields of its mig_begin). The ticket, and the
    handover request b sent (None when it asked none)."""
    registering = asyncio.get_running_loop().create_task(service.register(client_id, clean_start, user))
    await settle(5)
    lock = links.take("reg_lock")
    service.on_control("a", {"op": "reg_grant", "client_id": client_id, "request": lock["request"],
                             "owner": owner, "stamp": grant_stamp})
    await settle(5)
    handover = None
    if owner == "a":
        handover = links.take("handover")
        service.on_control("a", {"op": "mig_begin", "client_id": client_id, "migration": handover["migration"],
                                 "image": SessionImage.absent(client_id).pack(), "stamp": None, **(begin or {})})
        service.on_control("a", {"op": "mig_ready", "client_id": client_id, "migration": handover["migration"]})
    return await asyncio.wait_for(registering, 5), handover
