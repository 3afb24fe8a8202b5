"""The named experiments, as data (`python -m chaos list`)."""

from __future__ import annotations

from chaos.schedule import Experiment

#: Owner loss: a subscriber of the lost node that reconnects elsewhere takes its copies after 5 s (majority mode
#: serves meanwhile; the default 30 s would not fit in the 12 s before the replacement).
OWNER_LOSS_SETTINGS = (("queue.failover_timeout", "5s"),)

EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("partition-halves", "the cluster split into two random halves, then healed", ("halves",)),
    Experiment("partition-isolate", "one node cut off from all others, then healed", ("isolate",)),
    Experiment("partition-bridge", "two halves that cannot talk and one node both reach", ("bridge",)),
    Experiment("partition-ring", "a majorities ring: each node reaches a majority, no two the same one",
               ("ring",)),
    Experiment("flapping", "random halves cut and healed every few seconds", ("flap",), fault_s=10.0),
    Experiment("kill-restart", "kill -9 of a node, restarted a few seconds later", ("kill",)),
    Experiment("pause-resume", "SIGSTOP of a node, SIGCONT a few seconds later", ("pause",)),
    Experiment("clock-skew", "one node's wall clock offset by 5 to 60 seconds either way", ("skew",)),
    Experiment("membership-churn", "a member leaves (-k) and joins again while the others are split in two",
               ("churn",), fault_s=10.0),
    Experiment("mixed", "every fault in turn", ("halves", "kill", "isolate", "pause", "bridge", "skew", "ring"),
               duration=110.0),
    Experiment("rolling-restart", "every node drained, stopped, started and rejoined once, one at a time; clients "
               "through HAProxy", (), workloads=("steady", "registration"), duration=45.0, rolling=True,
               balancer=True, tags=("haproxy",)),
    Experiment("short-partition", "one random-halves partition and heal, for CI", ("halves",), duration=18.0,
               fault_s=6.0, cycles=1, tags=("ci",)),
    Experiment("owner-loss", "kill -9 and disk loss of the node with the most persistent sessions, removed with "
               "leave -k, an empty node joins in its place; queue replicas R = 2", ("ownerloss",),
               workloads=("queues-roaming",), duration=40.0, fault_s=12.0, cycles=1, first_fault_s=12.0,
               settings=OWNER_LOSS_SETTINGS),
    Experiment("owner-loss-r1", "owner-loss with queue.replicas = 1: the loss it must show", ("ownerloss",),
               workloads=("queues-roaming",), duration=40.0, fault_s=12.0, cycles=1, first_fault_s=12.0,
               settings=(*OWNER_LOSS_SETTINGS, ("queue.replicas", "1"))),
)

#: The suite run by `python -m chaos run --all` (and `make chaos`).
SUITE: tuple[str, ...] = ("partition-halves", "partition-isolate", "partition-bridge", "partition-ring",
                          "flapping", "kill-restart", "pause-resume", "clock-skew", "membership-churn", "owner-loss")


def by_name(name: str) -> Experiment:
    for experiment in EXPERIMENTS:
        if experiment.name == name:
            return experiment
    known = ", ".join(e.name for e in EXPERIMENTS)
    raise KeyError(f"unknown experiment {name!r}; known: {known}")
