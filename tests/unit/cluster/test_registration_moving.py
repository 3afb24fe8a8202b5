"""A session on its way to another node (a `leave -k` drains its owner) is neither handed over nor absent: the old
owner says `moving` in its mig_begin, and the new owner refuses the resuming CONNECT for now (Server unavailable;
the client connects again once the session landed) and gives the client id's lock back. Before, the old owner
answered `absent` and the new owner opened a new session while the moving one landed elsewhere (the
simulation's churn seed 3: docs/testing.md, "What the simulation found"). One real RegistrationService over a
real Broker per test; the test plays the other node (tests/unit/cluster/registration_script.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cluster.owner_node import CLIENT_ID, alices_session, frames, handover_from_b, node
from tests.unit.cluster.registration_script import client_led_by_a, registered
from vmqpy.sessions.handover import RegistrationRefused, SessionImage
from vmqpy.sessions.owners import pack_user


@pytest.mark.parametrize("clean", [False, True], ids=["resume", "clean-start"])
async def test_the_old_owner_says_a_moving_session_is_moving(tmp_path: Path, clean: bool) -> None:
    with node(tmp_path, "a") as (broker, service, links):
        alices_session(broker, online=False)
        assert broker.migration.move_session(CLIENT_ID, "b")
        await handover_from_b(service, {"user": pack_user("alice")}, clean)
        [begin] = frames(links, "mig_begin")
        image = SessionImage.unpack(begin["image"])
        assert not image.present and begin.get("moving", False) is not clean  # a clean start needs nothing of it
        assert frames(links, "mig_ready") and not frames(links, "mig_batch")
        assert broker.sessions[CLIENT_ID].moving_to == "b", "the move under way goes on"


async def test_the_new_owner_refuses_the_connect_and_gives_the_lock_back(tmp_path: Path) -> None:
    client_id = client_led_by_a()
    with node(tmp_path, "b") as (broker, service, links):
        with pytest.raises(RegistrationRefused, match="moving to another node"):
            await registered(service, links, client_id, clean_start=False, user="alice", begin={"moving": True})
        release = links.take("reg_release")
        assert release["client_id"] == client_id and release["owner"] is None
        assert client_id not in broker.sessions, "no new session was opened"
        assert service.counters["registrations_refused"] == 1
