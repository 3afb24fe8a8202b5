"""`cluster leave` of a live member, step by step on simulated time: the members that stay never see the leaving
node as a netsplit, however the links' latencies fall (docs/clustering.md, "Leaving a cluster")."""

from __future__ import annotations

import asyncio

import pytest

from .harness import SimCluster, simulated_cluster

SAMPLE_EVERY = 0.005  # seconds of simulated time between two looks at a node's policy


async def joined(cluster: SimCluster) -> None:
    for slot in cluster.slots:
        await slot.start()
    for slot in cluster.slots[1:]:
        await cluster.join(slot, cluster.slots[0])
    await asyncio.sleep(2.0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_member_that_stays_keeps_taking_clients_while_another_is_removed(seed: int) -> None:
    """n1 removes n3 while the link n1-n2 is slow: n3 learns first (from n1) and drops its link to n2. Before
    the fix n2 saw a member it could not reach, a netsplit, and refused CONNECTs (Server unavailable) until the
    delete of n3's record came; a client that connected to n2 right after `cluster leave` answered was refused."""
    async def main(cluster: SimCluster) -> list[str]:
        await joined(cluster)
        n1, n2, n3 = cluster.slots
        assert n1.node is not None and n1.node.cluster is not None and n2.node is not None
        assert n2.node.policy.may("register")
        cluster.memory.slow(n1.name, n2.name, 0.3)
        refusals: list[str] = []
        loop = asyncio.get_running_loop()
        answer = loop.create_task(n1.node.cluster.leave(n3.name))
        deadline = loop.time() + 3.0
        while loop.time() < deadline:
            if not n2.node.policy.may("register"):
                refusals.append(f"{loop.time():.3f}: {n2.node.policy.reason()}")
            await asyncio.sleep(SAMPLE_EVERY)
        assert answer.done() and "Done" in answer.result(), answer
        assert n2.node.cluster is not None and n3.name not in n2.node.cluster.members
        return refusals

    refusals = simulated_cluster(main, seed)
    assert not refusals, f"seed {seed}: n2 refused registrations during the leave: {refusals[:3]} ..."
