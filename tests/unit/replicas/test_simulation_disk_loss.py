"""A seeded deterministic simulation of the queue replication protocol with two replica nodes and disk loss:
one owner writing to both replicas (write quorum: all three copies), the real pure parts (forwarding.py's
numbering and duplicate detection, ledger.py, copies.py, ops.py's `sync`) over in-memory links that drop,
reorder and break, with replica crashes that keep the disk and crashes that lose it. A replica that lost its disk
comes back empty and the owner fills it again as its rebalancer does (a `sync` of the session, then a `put` of
every message it holds, rebalance.py), over the same lossy link. The seed is printed (`REPLICA_SIM_SEED`,
`REPLICA_SIM_RUNS` repeat or lengthen a run).

A disk is only lost while the other replica holds every message of the owner ("while one replica with it
lives", issue 18); checked after every step: every message whose latest write the barrier passed is on the disk
of at least one replica (a failover would find it); and after the links heal and everything is delivered, both
replicas' copies equal the owner's state."""

from __future__ import annotations

import random

import pytest

from tests.unit.replicas.disk_loss_world import OWNER, REPLICAS, World, held_on_disk
from tests.unit.replicas.simulation import seeded_runs


def run(seed: int, steps: int = 160) -> int:
    """One history; how many disks it lost."""
    rng = random.Random(seed)
    world = World(rng)
    for _ in range(steps):
        name = rng.choice(REPLICAS)
        replica = world.replicas[name]
        other = REPLICAS[1 - REPLICAS.index(name)]
        roll = rng.random()
        if roll < 0.25:
            world.put()
        elif roll < 0.35:
            world.delete()
        elif roll < 0.62 and replica.to_replica:
            world.deliver(name, rng.randrange(len(replica.to_replica)))  # any order
        elif roll < 0.66 and replica.to_replica:
            replica.to_replica.pop(rng.randrange(len(replica.to_replica)))  # dropped
        elif roll < 0.82 and replica.to_owner:
            world.ack(name, rng.randrange(len(replica.to_owner)))
        elif roll < 0.88:
            world.break_link(name)  # what was on it is lost; the link comes back
        elif roll < 0.92:
            world.crash(name, lose_disk=False)
        elif roll < 0.97 and world.holds_everything(other):
            world.crash(name, lose_disk=True)  # only while the other replica holds every message
        elif replica.copies is not None:
            replica.copies.prune(OWNER, replica.receiver.acknowledgeable(OWNER)[1])
        world.check_passed_writes_are_on_a_replica()
    for name in REPLICAS:  # heal: everything unacknowledged goes again, in order, and is delivered
        world.resend(name)
    for _ in range(100_000):
        pending = [n for n in REPLICAS if world.replicas[n].to_replica or world.replicas[n].to_owner]
        if not pending:
            break
        replica = world.replicas[pending[0]]
        if replica.to_replica:
            world.deliver(pending[0], 0)
        else:
            world.ack(pending[0], 0)
    assert world.sender.pending_count() == 0
    for name in REPLICAS:
        assert world.replicas[name].messages() == world.owner_messages, f"replica {name} differs from the owner"
        assert held_on_disk(world.replicas[name].disk) == set(world.owner_messages), f"{name}'s disk differs"
    assert world.ledger.advance(lambda n: True, True) == world.ledger.last and world.ledger.pending() == 0
    return sum(r.disks_lost for r in world.replicas.values())


def test_simulated_histories_with_disk_loss() -> None:
    lost = seeded_runs("queue replica disk-loss simulation", run)
    assert sum(lost) > 0, "no history lost a disk: the simulation did not test what it says"


@pytest.mark.parametrize("seed", range(20))
def test_a_history_that_loses_a_disk_is_checked(seed: int) -> None:
    """Fixed seeds, so that a failure is reproduced as is."""
    run(seed)
