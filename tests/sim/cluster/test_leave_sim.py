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


LEAVES = {
    # how n3 is made to leave: (the slowed link, which node runs which command)
    "run-on-another": ("n1", "cluster leave node=n3 on n1"),
    "run-on-itself": ("n3", "cluster leave node=n3 on n3"),
    "drained": ("n3", "cluster leave node=n3 -k on n1"),
}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("how", sorted(LEAVES))
def test_the_members_that_stay_keep_taking_clients_while_one_leaves(how: str, seed: int) -> None:
    """n3 leaves while the link from the node that tells n3 of its removal to n2 is slow. Run on n1 (before the
    fix), n1 told n3 first; n3 dropped its link to n2, and n2, which the delete had not reached, saw a member it
    could not reach, a netsplit, and refused CONNECTs (Server unavailable) until the delete came: a client that
    connected to n2 right after `cluster leave` answered was refused (CI, tests/integration/test_store_gc.py)."""
    slowed, command = LEAVES[how]

    async def main(cluster: SimCluster) -> list[str]:
        await joined(cluster)
        n1, n2, n3 = cluster.slots
        assert n1.node is not None and n2.node is not None and n3.node is not None
        assert n1.node.cluster is not None and n3.node.cluster is not None and n1.node.departure is not None
        assert n1.node.policy.may("register") and n2.node.policy.may("register")
        cluster.memory.slow(cluster[slowed].name, n2.name, 0.3)
        loop = asyncio.get_running_loop()
        if how == "run-on-another":
            answer = loop.create_task(n1.node.cluster.leave(n3.name))
        elif how == "run-on-itself":
            answer = loop.create_task(n3.node.cluster.leave(n3.name))
        else:
            answer = loop.create_task(n1.node.departure.leave(n3.name, 0.5, 10.0))
        refusals: list[str] = []
        deadline = loop.time() + 4.0
        while loop.time() < deadline:
            for slot in (n1, n2):
                assert slot.node is not None
                if not slot.node.policy.may("register"):
                    refusals.append(f"{loop.time():.3f} {slot.label}: {slot.node.policy.reason()}")
            await asyncio.sleep(SAMPLE_EVERY)
        assert answer.done() and "Done" in answer.result(), answer
        for slot in (n1, n2):
            assert slot.node is not None and slot.node.cluster is not None
            assert n3.name not in slot.node.cluster.members
        return refusals

    refusals = simulated_cluster(main, seed)
    assert not refusals, f"{command}, seed {seed}: registrations refused during the leave: {refusals[:3]} ..."


def test_the_commanding_node_fails_what_it_forwarded_to_the_removed_member() -> None:
    """When the commanding node drops n3's link (after the others hold the removal), its forward drivers let go
    of n3 too: a publish forwarded to n3 and never acknowledged fails (its publisher is not acknowledged) rather
    than waiting for a node that left."""
    from unittest import mock

    from vmqpy.cluster.forward_driver import ForwardDriver

    dropped: list[tuple[ForwardDriver, str]] = []
    original = ForwardDriver.drop_peer

    def drop_peer(self: ForwardDriver, node: str) -> None:
        dropped.append((self, node))
        original(self, node)

    async def main(cluster: SimCluster) -> None:
        await joined(cluster)
        n1, _n2, n3 = cluster.slots
        assert n1.node is not None and n1.node.cluster is not None
        with mock.patch.object(ForwardDriver, "drop_peer", drop_peer):
            assert "Done" in await n1.node.cluster.leave(n3.name)
        drivers = n1.node.cluster._drivers  # the node's forwarding drivers (publishes, queue replicas)
        assert drivers and all((driver, n3.name) in dropped for driver in drivers), dropped

    simulated_cluster(main, 1)
