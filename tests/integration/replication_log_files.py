"""A node's replication log files on disk (the live one and the rotated, gzip-compressed ones), read back, and a
client that rewrites one retained topic to fill them."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

from tests.integration.conftest import Broker


def log_files(data_dir: Path) -> list[Path]:
    """The replication log files under `data_dir`, the live one and the rotated ones, by name."""
    return sorted(p for p in data_dir.iterdir() if p.name.startswith("replication.log"))


def log_text(path: Path) -> bytes:
    """The text of one log file (a rotated one decompressed)."""
    return gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()


def exposes(text: bytes, marker: bytes) -> bool:
    """`marker` is in the log text: in clear, or in a base64 field (how values used to be logged)."""
    if marker in text:
        return True
    for line in text.splitlines():
        for field in json.loads(line).values():
            if isinstance(field, str) and len(field) >= len(marker):
                try:
                    if marker in base64.b64decode(field, validate=True):
                        return True
                except ValueError:
                    continue
    return False


def rotation_done(data_dir: Path) -> bool:
    """No rotated file waiting for the compressor (`replication.log.N`) or half written (`.N.gz.tmp`)."""
    return all(p.name == "replication.log" or p.name.endswith(".gz") for p in log_files(data_dir))


def rewrite(broker: Broker, clients: Any, topic: str, marker: bytes, times: int) -> None:
    """`times` retained publishes of ~4 KB to one topic, each payload carrying `marker`; the last one QoS 1."""
    pub = clients.raw(broker, 4)
    body = (marker + b"-") * (4096 // (len(marker) + 1))
    for i in range(times - 1):
        pub.publish(topic, body + str(i).encode(), qos=0, retain=True)
    pub.publish(topic, body + b"last", qos=1, retain=True)
