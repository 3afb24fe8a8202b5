"""The handover duration histogram (vmqpy.client_metrics.HANDOVER_DURATION) of a registration: observed
once when a session taken over from another node is live here, never for a registration without a handover or a
connect that failed. One real RegistrationService (node b) over a real Broker; the test plays the leader and the
old owner (node a) with tests/unit/cluster/registration_script.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cluster.registration_script import ScriptedLinks, client_led_by_a, registered
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.cluster.registration import RegistrationService
from vmqpy.config import Config
from vmqpy.metadata.service import MetadataService
from vmqpy.storage import Storage


def observations(service: RegistrationService) -> int:
    """How many handovers the service's histogram holds (the total of its buckets)."""
    return sum(v for k, v in service.stats().items() if k.startswith("handover_duration_le_"))


@pytest.mark.parametrize(("owner", "connected_on", "observed"), [
    ("a", "b", 1),  # taken over from a, live here
    ("a", None, 0),  # taken over from a, but the connect failed
    (None, "b", 0),  # nobody owned it: no handover
])
async def test_a_handover_is_observed_once_the_session_is_live_here(
        tmp_path: Path, owner: str | None, connected_on: str | None, observed: int) -> None:
    storage = Storage(tmp_path / "b.db")
    storage.open()
    metadata = MetadataService("b", storage)
    metadata.start()
    broker = Broker(Config(nodename="b@127.0.0.1"), SessionStore(storage), metadata)
    links = ScriptedLinks()
    service = RegistrationService(links, broker.migration, None, allow_without_leader=lambda: False,
                                  majority_serves=lambda: False)
    try:
        ticket, _handover = await registered(service, links, client_led_by_a(), clean_start=False, owner=owner)
        assert observations(service) == 0
        service.connected(ticket, connected_on)
        assert observations(service) == observed
        assert ("handover_duration_sum_us" in service.stats()) == bool(observed)
        service.connected(ticket, connected_on)  # a second call (it does not happen) would not count twice
        assert observations(service) == observed
    finally:
        await service.stop()
        metadata.stop()
        storage.close()
