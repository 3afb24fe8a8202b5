"""Cluster membership as records in the replicated metadata store: an add-wins set of members.

One key per member, `(name,)` -> `[stamp, incarnation, host, port]` under the `membership` prefix. A join
writes the joiner's record, a leave deletes it; a join concurrent with a leave keeps the member (a delete only
removes the versions it saw). The replica identity of a node is `name#incarnation`: a node that lost its data
comes back with a new incarnation, so it never reuses the dots of its former self.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MEMBERSHIP = "membership"
DEFAULT_CLUSTER_PORT = 44053
_NODE = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)@(?P<host>[A-Za-z0-9_.-]+)(?::(?P<port>\d+))?$")


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    incarnation: int
    host: str
    port: int

    @property
    def replica_id(self) -> str:
        return replica_id(self.name, self.incarnation)

    def value(self, stamp: Any) -> list[Any]:
        return [stamp.to_list() if hasattr(stamp, "to_list") else stamp, self.incarnation, self.host, self.port]


def replica_id(name: str, incarnation: int) -> str:
    return f"{name}#{incarnation}"


def member_of(key: Any, value: Any) -> Member:
    (name,) = key
    _stamp, incarnation, host, port = value
    return Member(str(name), int(incarnation), str(host), int(port))


def members(records: Iterable[tuple[Any, Any]]) -> dict[str, Member]:
    out: dict[str, Member] = {}
    for key, value in records:
        member = member_of(key, value)
        out[member.name] = member
    return out


def parse_node(text: str) -> tuple[str, str, int | None]:
    """`n1@127.0.0.11[:44053]` -> (node name without port, host, port or None); ValueError when malformed."""
    match = _NODE.match(text.strip())
    if not match:
        raise ValueError(f"expected NAME@HOST[:PORT], got {text!r}")
    port = match.group("port")
    return f"{match.group('name')}@{match.group('host')}", match.group("host"), None if port is None else int(port)


def load_incarnation(data_dir: Path) -> int:
    """This node's incarnation: made at the first start (milliseconds of the wall clock) and kept in the data
    directory. A node whose data directory was lost gets a new one."""
    path = data_dir / "incarnation"
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        incarnation = int(time.time() * 1000)
        data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{incarnation}\n")
        return incarnation


def replica_ids(members_: Iterable[Member], exclude: str) -> Iterator[str]:
    for member in members_:
        if member.name != exclude:
            yield member.replica_id
