"""Sessions belong to their user across nodes even before the owner record has arrived (docs/security.md,
"Sessions belong to their user"). A node whose replica does not yet hold a client id's owner record cannot judge
the connecting user itself; the old owner node, which holds the session, does: the handover request names the
connecting user, and another user's session is never handed over. Likewise a newer owner record naming another
user ends the session here instead of moving it there.

One real RegistrationService over a real Broker and MetadataService per test; the test plays the other node
with the frames it sends (tests/unit/cluster/registration_script.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.cluster.owner_node import CLIENT_ID, alices_session, frames, handover_from_b, node
from tests.unit.cluster.registration_script import client_led_by_a, registered
from vmqpy.sessions import records
from vmqpy.sessions.handover import SessionImage
from vmqpy.sessions.owners import UNKNOWN_USER, pack_user


@pytest.mark.parametrize("online", [False, True], ids=["offline", "online"])
async def test_another_user_asking_for_the_session_gets_none_of_it_and_it_ends(tmp_path: Path,
                                                                                online: bool) -> None:
    """session.foreign_user = clean (the default): eve's connect on b starts clean and alice's session ends."""
    with node(tmp_path, "a") as (broker, service, links):
        sink = alices_session(broker, online)
        await handover_from_b(service, {"user": pack_user("eve")})
        [begin] = frames(links, "mig_begin")
        assert not SessionImage.unpack(begin["image"]).present and "foreign" not in begin
        assert frames(links, "mig_ready") and not frames(links, "mig_batch")
        assert CLIENT_ID not in broker.sessions  # ended: its queue is never delivered to anyone
        assert sink.taken_over == online
        assert broker.metrics["session_foreign_user_cleaned"] == 1


async def test_a_clean_start_of_another_user_ends_the_session_counted_once(tmp_path: Path) -> None:
    """The connecting node knew the owner and turned eve's CONNECT into a clean start (counting it there): the old
    owner ends alice's session as for any clean start, without counting it again."""
    with node(tmp_path, "a") as (broker, service, links):
        alices_session(broker, online=False)
        await handover_from_b(service, {"user": pack_user("eve")}, clean=True)
        [begin] = frames(links, "mig_begin")
        assert not SessionImage.unpack(begin["image"]).present and not frames(links, "mig_batch")
        assert CLIENT_ID not in broker.sessions
        assert broker.metrics["session_foreign_user_cleaned"] == 0


@pytest.mark.parametrize("clean", [False, True], ids=["resume", "clean-start"])
@pytest.mark.parametrize("online", [False, True], ids=["offline", "online"])
async def test_another_user_asking_for_the_session_is_refused_and_it_stays(tmp_path: Path, online: bool,
                                                                           clean: bool) -> None:
    """session.foreign_user = refuse: the session stays as it was (a live connection of alice is not kicked), even
    when eve's CONNECT asked for a clean start."""
    with node(tmp_path, "a", session_foreign_user="refuse") as (broker, service, links):
        sink = alices_session(broker, online)
        await handover_from_b(service, {"user": pack_user("eve")}, clean)
        [begin] = frames(links, "mig_begin")
        assert begin["foreign"] is True and not SessionImage.unpack(begin["image"]).present
        assert frames(links, "mig_ready") and not frames(links, "mig_batch")
        session = broker.sessions[CLIENT_ID]
        assert session.moving_to is None and len(session.pending(0)) == 3 and session.online == online
        assert not sink.taken_over


@pytest.mark.parametrize("body", [{"user": pack_user("alice")}, {}, {"user": pack_user(UNKNOWN_USER)}],
                         ids=["its-user", "earlier-version", "unknown"])
async def test_the_sessions_own_user_or_a_node_that_names_none_gets_it_handed_over(
        tmp_path: Path, body: dict[str, Any]) -> None:
    with node(tmp_path, "a", session_foreign_user="refuse") as (broker, service, links):
        alices_session(broker, online=False)
        await handover_from_b(service, body)
        [begin] = frames(links, "mig_begin")
        image = SessionImage.unpack(begin["image"])
        assert image.present and [e.topic_filter for e in image.subscriptions] == ["secret/#"]
        assert "foreign" not in begin
        batches = frames(links, "mig_batch")
        assert sum(len(b["messages"]) for b in batches) == 3


async def test_the_new_owner_learns_the_old_owner_refused(tmp_path: Path) -> None:
    """b registers eve's CONNECT without an owner record in its replica; the old owner a refuses (the session is
    alice's): the ticket says so and holds no image (none is rebuilt from b's store either)."""
    client_id = client_led_by_a()
    with node(tmp_path, "b") as (_broker, service, links):
        ticket, handover = await registered(service, links, client_id, clean_start=False, user="eve",
                                            begin={"foreign": True})
        assert handover is not None and handover["user"] == pack_user("eve")
        assert ticket.foreign and ticket.image is None
        service.connected(ticket, None)


@pytest.mark.parametrize(("user", "moved"), [("eve", False), ("alice", True)])
async def test_a_newer_owner_record_of_another_user_ends_the_session_instead_of_moving_it(
        tmp_path: Path, user: str, moved: bool) -> None:
    """b wrote an owner record for a connect of `user` (its replica had none of alice's yet): a moves alice's
    session there only when it is the same user; else it ends here, and nothing of it reaches b."""
    with node(tmp_path, "a") as (broker, _service, _links):
        moving: list[tuple[str, str]] = []
        broker.on_moving = lambda client_id, target: moving.append((client_id, target))
        alices_session(broker, online=False)
        broker.metadata.put(records.SESSION, records.session_key(CLIENT_ID),
                            records.session_value(broker.metadata.hlc_now(), "b", False, None, user=user))
        assert moving == ([(CLIENT_ID, "b")] if moved else [])
        assert (CLIENT_ID in broker.sessions) == moved
