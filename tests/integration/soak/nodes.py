"""The soak's nodes: test-cluster nodes (tests/integration/cluster.py) on addresses of their own, 127.0.0.71
upwards by default, so that a long run neither needs the integration lock nor meets another test's nodes."""

from __future__ import annotations

from pathlib import Path

from chaos.node import Node
from chaos.ports import free_port, host_of
from tests.integration.cluster import ClusterNode

__all__ = ["LOG_COUNT", "LOG_MAX_SIZE", "SETTINGS", "SoakNode"]

LOG_MAX_SIZE, LOG_COUNT = 64 * 1024, 2
SETTINGS = {
    # The replication log rotates at 64 KiB and keeps two compressed files: it reaches its bound within seconds
    # (at the default 64 MiB it would take hours, its growth until then not a leak; tests/integration/
    # test_replication_log_bounds.py checks the bound itself).
    "metadata.replication_log.max_size": str(LOG_MAX_SIZE),
    "metadata.replication_log.count": str(LOG_COUNT),
    "metadata.replication_log.values": "off",
}


class SoakNode(ClusterNode):
    """Node `index` (from 1) on `base` + index - 1, in `workdir`/n{index}."""

    def __init__(self, index: int, workdir: Path, base: str) -> None:
        host = host_of(base, index - 1)
        Node.__init__(self, index - 1, host, free_port(host), free_port(host), free_port(host),
                      workdir / f"n{index}", {"distributed_cookie": "soak-cookie", **SETTINGS})
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.clients = []
        self.started_at = 0.0
