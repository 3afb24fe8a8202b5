"""The owner record a registration writes is stamped after every owner record it replaces (issue 19's CI find:
two records written in one millisecond on two nodes, the later one lost to the earlier by the HLC tie-break and
the client id ended with no live session anywhere).

One real RegistrationService (node b) over a real Broker and MetadataService whose wall clock stands still;
the test plays the leader and the old owner (node a) with the frames they send. Whichever frame names the
replaced record's stamp (the leader's grant, the old owner's mig_begin), b's next stamp is greater.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.cluster.registration_script import ScriptedLinks, client_led_by_a, registered
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.cluster.registration import RegistrationService
from vmqpy.config import Config
from vmqpy.metadata.hlc import Stamp
from vmqpy.metadata.service import MetadataService
from vmqpy.storage import Storage

WALL = 1_795_600_000.0  # seconds; stands still
WALL_MS = int(WALL * 1000)


@pytest.mark.parametrize(("grant_stamp", "begin_stamp"), [
    ([WALL_MS, 7, "a"], None),  # the leader knows the record (a release named it)
    (None, [WALL_MS, 9, "a"]),  # only the old owner knows it (the leader restarted meanwhile)
    ([WALL_MS, 7, "a"], [WALL_MS, 9, "a"]),
    ([WALL_MS + 5, 0, "a"], None),  # a record from a clock ahead of b's
])
async def test_the_new_owner_record_is_stamped_after_the_one_it_replaces(
        tmp_path: Path, grant_stamp: list[Any] | None, begin_stamp: list[Any] | None) -> None:
    storage = Storage(tmp_path / "b.db")
    storage.open()
    metadata = MetadataService("b", storage, wall=lambda: WALL)
    metadata.start()
    broker = Broker(Config(nodename="b@127.0.0.1"), SessionStore(storage), metadata)
    links = ScriptedLinks()
    service = RegistrationService(links, broker.migration, None, allow_without_leader=lambda: False,
                                  majority_serves=lambda: False)
    client_id = client_led_by_a()
    try:
        metadata.hlc_now()  # b has issued stamps in this millisecond already
        ticket, _handover = await registered(service, links, client_id, clean_start=True, grant_stamp=grant_stamp,
                                             begin={"stamp": begin_stamp})
        assert ticket.source == "a"
        replaced = max(Stamp.from_list(s) for s in (grant_stamp, begin_stamp) if s is not None)
        assert metadata.hlc_now() > replaced
    finally:
        metadata.stop()
        storage.close()
