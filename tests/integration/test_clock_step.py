"""A step of one node's wall clock moves no timer (issue 19, "Time"): every timer, deadline and failure-detector
interval runs on monotonic time, only HLC stamps and log times read the wall clock.

Three real nodes; n1 and n2 run under libfaketime (their wall clocks read from files we rewrite, monotonic time
left alone, as the chaos `clock-skew` nemesis does). Their wall clocks step 60 s apart in opposite directions,
then swap, then go back, for 6 s each under a light publish load; no node logs a cluster link down in that time,
every publish arrives and the cluster stays ready.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.cluster import FAKETIME_LIBS, faketime_env
from tests.integration.clients import RawClient, unique
from tests.integration.cluster import ClusterNode, cluster_ready, join_all, start_all
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy clustering")]

FAKETIME = next((lib for lib in FAKETIME_LIBS if Path(lib).exists()), None)


@pytest.fixture
def skewable(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    if FAKETIME is None:
        pytest.skip("libfaketime is installed by make test (scripts/debian-deps.sh)")
    nodes = [ClusterNode(i, tmp_path) for i in (1, 2, 3)]
    for node in nodes[:2]:
        clock = node.workdir / "faketime.rc"
        clock.write_text("+0\n")
        node.env = {"LD_PRELOAD": FAKETIME, **faketime_env(clock)}
    try:
        start_all(nodes)
        join_all(nodes)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def links_down(nodes: list[ClusterNode]) -> int:
    return sum(node.log.read_text(errors="replace").count("cluster link down") for node in nodes)


def test_a_wall_clock_step_makes_no_link_flap(skewable: list[ClusterNode]) -> None:
    n1, n2, _n3 = skewable
    clocks = [n1.workdir / "faketime.rc", n2.workdir / "faketime.rc"]
    publisher = RawClient(n1.mqtt_port, n1.host, 5)
    publisher.connect(unique("pub-"))
    subscriber = RawClient(n2.mqtt_port, n2.host, 5)
    subscriber.connect(unique("sub-"))
    subscriber.subscribe(("step/#", 1))
    wait_until(lambda: all('"step/#"' in node.admin("subscription", "show", "--json").stdout for node in skewable),
               10, what="the subscription on every node")
    before = links_down(skewable)
    received = 0
    for steps in (("+60s", "-60s"), ("-60s", "+60s"), ("+0", "+0")):
        for clock, step in zip(clocks, steps, strict=True):
            clock.write_text(step + "\n")
        deadline = time.monotonic() + 6
        n = 0
        while time.monotonic() < deadline:
            publisher.publish(f"step/{n}", b"x", qos=1)
            n += 1
            time.sleep(0.1)
        received += len(subscriber.recv_publishes(n, 10))
        assert cluster_ready(skewable), [node.log_tail() for node in skewable]
    assert links_down(skewable) == before, [node.log_tail(15) for node in skewable]
    assert received > 0
    wait_until(lambda: cluster_ready(skewable), 10, interval=0.2, what="cluster ready")
