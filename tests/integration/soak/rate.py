"""Metadata writes at the rate of issue 36's finding (about 200 a second across three nodes) for SECONDS, and
the size of each node's broker.db, its WAL and its rows every 30 s, one JSON line each (docs/operations.md,
"Database size on disk"):

    .venv/bin/python -m tests.integration.soak.rate WORKDIR SECONDS [BASE]

Three nodes (tests/integration/soak/nodes.py, from BASE, default 127.0.0.77); on each, one client rewriting
3,000 retained topics (200-byte payloads, QoS 0, 50 at a time then a QoS 1 publish to pace it) and one client
id after another connecting, subscribing at QoS 1 and disconnecting (clean sessions: owner and subscription
records made and deleted)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from chaos.cluster import Cluster
from tests.integration.clients import RawClient, enc_publish
from tests.integration.soak import probe
from tests.integration.soak.nodes import SoakNode


def _retained(node: SoakNode, index: int, stop: threading.Event, counts: Counter[str]) -> None:
    client = RawClient(node.mqtt_port, node.host, 5)
    client.connect(f"rate-retainer-{index}")
    n = 0
    while not stop.is_set():
        for _ in range(50):
            client.send(enc_publish(f"rate/{index}/{n % 3000}", b"x" * 200, 0, True, version=5))
            n += 1
        client.publish("rate/sync", b"", qos=1)
        counts["retained"] += 50
        time.sleep(0.4)
    client.disconnect()


def _churn(node: SoakNode, index: int, stop: threading.Event, counts: Counter[str]) -> None:
    n = 0
    while not stop.is_set():
        client = RawClient(node.mqtt_port, node.host, 5)
        client.connect(f"rate-client-{index}-{n}")
        client.subscribe((f"rate/sub/{n % 500}", 1))
        client.disconnect()
        n += 1
        counts["clients"] += 1
        time.sleep(0.05)


def main(workdir: Path, seconds: float, base: str) -> None:
    nodes = [SoakNode(i, workdir, base) for i in (1, 2, 3)]
    cluster = Cluster(list(nodes))
    stop = threading.Event()
    counts: Counter[str] = Counter()
    try:
        for node in nodes:
            node.start()
        cluster.join(30.0)
        threads = [threading.Thread(target=work, args=(node, i, stop, counts), daemon=True)
                   for work in (_retained, _churn) for i, node in enumerate(nodes)]
        for thread in threads:
            thread.start()
        t0 = time.monotonic()
        for _ in range(int(seconds // 30)):
            time.sleep(max(0.0, t0 + 30 * (_ + 1) - time.monotonic()))
            row: dict[str, object] = {"t": round(time.monotonic() - t0), **counts}
            for node in nodes:
                files = probe.files(node.data_dir)
                row[node.short] = {"db": files.get("broker.db", 0), "wal": files.get("broker.db-wal", 0),
                                   "tables": probe.tables(node.data_dir / "broker.db")}
            print(json.dumps(row), flush=True)
    finally:
        stop.set()
        time.sleep(1.0)
        cluster.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "127.0.0.77")
