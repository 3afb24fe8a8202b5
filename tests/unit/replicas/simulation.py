"""What the seeded simulations of queue replication share (test_simulation, test_simulation_disk_loss,
test_simulation_owner_loss): the owner's side of a world, and `seeded_runs`, which runs a history per seed from a
printed base and names the seed of a failure."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from tests import randomness
from vmqpy.cluster.forwarding import ForwardSender, new_epoch
from vmqpy.replicas.ledger import WriteLedger

RUNS = int(os.environ.get("REPLICA_SIM_RUNS", "200"))
T = TypeVar("T")


@dataclass
class Owner:
    """The owner's side of a simulated world: its randomness, its numbered links and its barrier."""

    rng: random.Random
    sender: ForwardSender = field(default_factory=ForwardSender)
    epoch: int = field(default_factory=new_epoch)
    ledger: WriteLedger = field(default_factory=WriteLedger)

    def unacknowledged(self, peer: str) -> list[tuple[int, int, Any]]:
        """What the owner sends `peer` again when its link comes back: every unacknowledged record, in order."""
        low = self.sender.low(peer)
        return [(seq, low, record) for seq, record, _size in self.sender.unacknowledged(peer)]


def seeded_runs(what: str, run: Callable[[int], T]) -> list[T]:
    """`run` for RUNS seeds from a printed base (REPLICA_SIM_SEED repeats it); a failure names its seed."""
    base = randomness.seed("REPLICA_SIM_SEED", 1129)
    print(f"{what} seed {base} ({RUNS} runs; REPLICA_SIM_SEED={base} to repeat)")
    results = []
    for i in range(RUNS):
        try:
            results.append(run(base + i))
        except AssertionError as exc:
            pytest.fail(f"seed {base + i}: {exc}")
    return results
