"""A generated run for the report's end-to-end tests (test_cli, test_rotated_node_logs, and the integration test on
a standalone Spark cluster): `generated_run`, the log lines of three nodes with one partition, and
`clean_history`, a client history that the checks pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.spark.history import History
from tests.spark.logs import apply, exchange, gc, replicas, view, write

NODES = ("n1", "n2", "n3")
ALL = [list(NODES)]


def generated_run() -> list[dict[str, Any] | str]:
    """0-3 s normal, 3-5 s n3 partitioned away, healed at 5.002 s, then normal again; the last line at 7 s.

    Normal writes (29 before, 10 after the partition) reach the two other nodes 4 and 12 ms later. During the
    partition n1 writes 10 times (keys p0-p2) and n2 applies them 4 ms later; n3 writes q once. After the heal
    n3 gets the newest version of p0-p2 at 5.2 s, n1 and n2 get q at 5.3 and 5.4 s (with siblings on n2)."""
    lines: list[dict[str, Any] | str] = [view(n, 0, ALL) for n in NODES]
    counters = dict.fromkeys(NODES, 0)

    def put(node: str, at: float, key: str) -> tuple[str, int]:
        counters[node] += 1
        lines.append(write(node, at, key, counters[node]))
        return node, counters[node]

    def normal(i: int, at: float) -> None:
        node, c = put(NODES[i % 3], at, f"k{i % 4}")
        others = [n for n in NODES if n != node]
        lines.append(apply(others[0], at + 4, f"k{i % 4}", node, c))
        lines.append(apply(others[1], at + 12, f"k{i % 4}", node, c))

    for i in range(29):
        normal(i, 150 + 100 * i)
    split = [["n1", "n2"], ["n3"]]
    lines += [view("n3", 3000, [["n3"], ["n1", "n2"]]), view("n1", 3001, split), view("n2", 3002, split)]
    newest: dict[str, int] = {}
    for j in range(10):
        at = 3100 + 200 * j
        _, c = put("n1", at, f"p{j % 3}")
        newest[f"p{j % 3}"] = c
        lines.append(apply("n2", at + 4, f"p{j % 3}", "n1", c))
    _, q = put("n3", 3500, "q")
    lines += [view("n1", 5000, ALL), view("n2", 5001, ALL), view("n3", 5002, ALL)]
    lines += [apply("n3", 5200, key, "n1", c, via="exchange") for key, c in sorted(newest.items())]
    lines.append(apply("n1", 5300, "q", "n3", q, via="exchange"))
    lines.append(apply("n2", 5400, "q", "n3", q, via="exchange", siblings=2))
    lines += [exchange("n3", 5200, "n1", received=3, repaired=3), exchange("n1", 5300, "n3", received=1, repaired=1),
              exchange("n2", 5400, "n3", received=1, repaired=1)]
    lines += [exchange(n, 500 + 1000 * j, NODES[(k + 1) % 3]) for k, n in enumerate(NODES) for j in range(7)]
    for i in range(10):
        normal(i, 5550 + 100 * i)
    lines += [gc(n, 7000, 5) for n in NODES]
    # n1's queue replicas on n3 are cut off with it: under-replicated from 3.1 s to 5.6 s (peak 4 sessions, 40
    # messages, 3 writes accepted with fewer copies); n2 starts a window at 6.5 s that is open when its log ends
    lines += [replicas("n1", 3100, True, 2, 20), replicas("n1", 5600, False, peaks=(4, 40, 3)),
              replicas("n2", 6500, True, 1, 5, 0)]
    lines += ["garbage", '{"schema":1,"ts":"x","node":"n1","hlc":[1,0,"n1#1"],"event":"md_gc"}',
              '{"schema":1,"ts":1,"node":"n1","hlc":[1,0,"n1#1"],"event":"md_write","prefix":"retain","key":[""],'
              '"op":"put"}']
    return lines


def clean_history(path: Path) -> Path:
    """A client history at `path` that the checks pass (m2 delivered twice, as QoS 1 allows): the file's path."""
    h = History()
    h.op("p1", "subscribe", {"client": "c1", "filter": "t/#"})
    h.publish("p2", "t/1", "m1", expect=["c1"])
    h.publish("p2", "t/2", "m2", retain=True, expect=["c1"])
    h.drain("c1", ["m1", "m2", "m2"])  # m2 delivered twice
    h.read({"t/2": "m2"}, {"c1": ["t/#"]})
    return h.write(path)
