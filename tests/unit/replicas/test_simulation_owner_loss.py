"""A seeded deterministic simulation of the loss of a persistent session's owner with its disk, and the failover
that follows (issue 18): no acknowledged message lost while a replica with it lives, no QoS 2 duplicate.

The world (owner_loss_world.py): the owner runs the client's real `Session`, its journal replicated to two
replica nodes over lossy, reordering, breaking links with the real pure parts (forwarding numbering, ledger.py's
barrier with write quorum 3, copies.py, ops.py); a publisher's QoS 1/2 messages for the session, acknowledged
once the barrier passed their write; the client, a QoS 1/2 receiver that also publishes QoS 2 itself, its
connection breaking and coming back. At a random step the owner is lost with its disk (and the client's
connection); one replica may be down or cut off; the recovering node runs the real failover (`Failover.recover`:
fetch, `merge_copies`, `SessionMigration.adopt_messages`, `Lineage.admit`, `Session.adopt`) and the client goes on
there until every exchange is over.

The client's rules: a QoS 2 PUBLISH reaches its application once per packet id until the PUBREL (MQTT 4.3.3:
any PUBLISH with an id it holds, DUP or not, is answered PUBREC and not delivered again); a PUBREL of an unknown
id is answered PUBCOMP; every QoS 1 PUBLISH is delivered (duplicates allowed, counted).

Checked at the end of every history:
- every message acknowledged to the publisher reached the client's application;
- no QoS 2 message reached it twice;
- every QoS 2 message of the client's that got a PUBREC was routed; one whose PUBREC left the lost owner was
  routed exactly once.
Not a violation (counted in `routed_again`): a message of the client's that the lost owner routed before it
acknowledged it, sent again by the client and routed again by the recovering node (vmqpy routes a PUBLISH on
receipt, before its state is durable). A violation is reported with its seed and the trace of the message and
the failover (`REPLICA_SIM_SEED`, `REPLICA_SIM_RUNS` repeat or lengthen the seeded run).

Found by this simulation (2026-11-27), and fixed: the connection wrote a QoS 2 PUBLISH, a PUBREL, a PUBCOMP and
the PUBREC of a resent PUBLISH at once, before the replica writes they follow from passed the barrier, and the
exactly-once invariants failed (`BEFORE_THE_FIX`, test_with_the_four_written_at_once_qos2_breaks); with those
four held for the barrier (`HOLDING_SENDS`, what the connection does now: tests/unit/broker/driver/test_qos2_held.py)
they hold, and removing any one hold fails them again (test_a_mutation_is_caught).
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.unit.replicas.owner_loss_world import AS_THE_BROKER_DOES, BEFORE_THE_FIX, HOLDING_SENDS, Rules, World
from tests.unit.replicas.simulation import seeded_runs

STEPS = 160


@dataclass
class Outcome:
    """What one history found: its violations (kind, and what with the trace), and what it went through."""

    violations: list[tuple[str, str]]
    fault: str  # of a replica at the failover: none, crashed, cut off
    recovered: Counter[str]  # in-flight states and incoming ids the recovering node adopted
    qos1_duplicates: int
    routed_again: int  # the client's messages routed twice: by the lost owner before it acknowledged them, and
    # by the recovering node when they were sent again (not a violation: see the module doc)


def run(seed: int, rules: Rules = AS_THE_BROKER_DOES, steps: int = STEPS) -> Outcome:
    """One history."""
    world = World(random.Random(seed), rules=rules)
    rng = world.rng
    world.start()
    loss_at = rng.randrange(steps // 4, steps)
    for step in range(steps):
        world.now = float(step)
        if step == loss_at:
            world.fail_over(world.lose_owner())
        roll = rng.random()
        if not world.owner_lost and roll < 0.10:
            world.publish()
        elif not world.owner_lost and roll < 0.60:
            world.replica_step((roll - 0.10) / 0.50)
        else:
            world.client_step(rng.random())
        world.settle()
    if not world.owner_lost:
        world.fail_over(world.lose_owner())
    drain(world)
    delivered, routed = world.client.delivered, world.routed
    return Outcome(check(world), world.fault, world.recovered,
                   sum(n - 1 for mid, n in delivered.items() if n > 1 and world.qos_of.get(mid) == 1),
                   sum(1 for mid in set(routed) - world.pubrec_left_owner if routed[mid] > 1))


def drain(world: World) -> None:
    """The client stays connected to the recovering node until every exchange is over."""
    for _ in range(10_000):
        world.now += 1
        if not world.connected:
            world.connect()
        elif world.to_client:
            world.to_the_client()
        elif world.to_broker:
            world.to_the_broker()
        else:
            break
    assert world.endpoint is not None
    session = world.endpoint.session
    assert not world.to_client and not world.to_broker and not session.inflight and not session.queue, \
        "the exchanges did not end"
    assert not world.client.unacked and not world.client.released, "the client's publishes did not end"


def check(world: World) -> list[tuple[str, str]]:
    """The invariants the history broke: (kind, what and its trace); kinds: lost (a message acknowledged to the
    publisher), duplicate (a QoS 2 message delivered twice), unrouted (a message of the client's acknowledged,
    never routed), routed twice (one the lost owner acknowledged)."""
    delivered, routed = world.client.delivered, world.routed
    found = [("lost", violation(world, mid, f"message {mid}, acknowledged to its publisher, never reached the "
                                            "client")) for mid in sorted(world.acknowledged) if delivered[mid] == 0]
    found += [("duplicate", violation(world, mid, f"QoS 2 message {mid} reached the client's application "
                                                  f"{delivered[mid]} times"))
              for mid, qos in world.qos_of.items() if qos == 2 and delivered[mid] > 1]
    found += [("unrouted", violation(world, mid, f"the client's QoS 2 message {mid} got its PUBREC but was never "
                                                 "routed"))
              for mid in sorted(world.client.acknowledged) if not routed[mid]]
    found += [("routed twice", violation(world, mid, f"the client's QoS 2 message {mid}, acknowledged with PUBREC "
                                                     f"by the lost owner, was routed {routed[mid]} times"))
              for mid in sorted(world.pubrec_left_owner) if routed[mid] > 1]
    return found


def violation(world: World, mid: str, what: str) -> str:
    """`what`, and the lines of the history's trace about `mid`, its packet id (a message of the client's) and
    the failover."""
    sent = re.search(rf"publish_in\((\d+) {mid}\b", "\n".join(world.lines))
    pid = rf"|_in\({sent.group(1)}\b|: in {sent.group(1)} " if sent else ""
    pattern = re.compile(rf"\b{mid}\b|!{pid}")
    return what + "\n  " + "\n  ".join(line for line in world.lines if pattern.search(line))


def holds(rules: Rules, kinds: tuple[str, ...] = ("lost", "duplicate", "unrouted", "routed twice")
          ) -> Callable[[int], Outcome]:
    """`run` with `rules`, failing on a violation of one of `kinds`."""
    def one(seed: int) -> Outcome:
        outcome = run(seed, rules)
        broken = [what for kind, what in outcome.violations if kind in kinds]
        assert not broken, broken[0]
        return outcome
    return one


def first_violation(rules: Rules, seeds: range) -> str | None:
    return next((o.violations[0][1] for o in map(lambda s: run(s, rules), seeds) if o.violations), None)


def test_owner_loss_with_sends_held_for_the_barrier() -> None:
    """With PUBLISH, PUBREL, PUBCOMP and a repeated PUBREC held until the replicas have the state they follow from,
    nothing acknowledged is lost and no QoS 2 message is duplicated, whatever the history."""
    outcomes = seeded_runs("owner-loss simulation (sends held for the barrier)", holds(HOLDING_SENDS))
    if len(outcomes) >= 100:  # the histories went through what they are meant to
        assert {o.fault for o in outcomes} == {"none", "crashed", "cut off"}
        recovered = sum((o.recovered for o in outcomes), Counter[str]())
        assert all(recovered[k] for k in ("PUBLISHED", "RELEASED", "QUEUED", "incoming")), recovered


@pytest.mark.parametrize("seed", range(20))
def test_a_fixed_history_with_sends_held_for_the_barrier(seed: int) -> None:
    holds(HOLDING_SENDS)(seed)


MUTATIONS = {
    "ack_before_barrier": {"ack_before_barrier": True},
    "forget_pubrec_received": {"forget_pubrec_received": True},
    "forget_incoming": {"forget_incoming": True},
    "publish_at_once": {"hold_publish": False},
    "pubrel_at_once": {"hold_pubrel": False},
    "pubcomp_at_once": {"hold_pubcomp": False},
    "repeated_pubrec_at_once": {"hold_repeated_pubrec": False},
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_mutation_is_caught(mutation: str) -> None:
    """Each mutation of the acknowledgement, of the replicated state or of the holds breaks an invariant in some of
    300 fixed histories (a simulation that misses them would test nothing)."""
    rules = dataclasses.replace(HOLDING_SENDS, **MUTATIONS[mutation])
    assert first_violation(rules, range(300)) is not None, f"the simulation does not notice {mutation}"


def test_as_the_broker_behaves_no_message_acknowledged_to_its_publisher_is_lost() -> None:
    """The at-least-once half holds with the connection as vmqpy has it: every message acknowledged to its
    publisher reaches the subscriber after the owner's loss (QoS 1 duplicates allowed)."""
    seeded_runs("owner-loss simulation (as the broker behaves)", holds(AS_THE_BROKER_DOES, ("lost",)))


def test_with_the_four_written_at_once_qos2_breaks() -> None:
    """The connection before 2026-11-27 (a QoS 2 PUBLISH, a PUBREL, a PUBCOMP and a repeated PUBREC written at
    once): the failover after the owner's loss duplicates QoS 2 messages (14 of these 20 histories break)."""
    found = first_violation(BEFORE_THE_FIX, range(20))
    assert found is not None and "reached the client's application 2 times" in found
