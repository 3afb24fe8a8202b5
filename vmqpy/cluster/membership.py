"""Cluster membership as records in the replicated metadata store: an add-wins set of members.

One key per member, `(name,)` -> `[stamp, incarnation, host, port]` under the `membership` prefix. A join
writes the joiner's record, a leave deletes it; a join concurrent with a leave keeps the member (a delete only
removes the versions it saw). The replica identity of a node is `name#incarnation`: a node that lost its data
comes back with a new incarnation, so it never reuses the dots of its former self.

A member that is removed (`cluster leave`) also gets a record under the `departed` prefix, `(name,
incarnation)` -> `[stamp]`, that is never deleted: it lets every node tell a dialer "you were removed" (and
the dialer stop) rather than "I do not know you yet" (a join that has not reached this node: try again). The
node itself keeps the fact in `DATA_DIR/left` (see `LeftState`), so a restart does not bring it back.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MEMBERSHIP = "membership"
DEPARTED = "departed"
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


def departed_key(name: str, incarnation: int) -> tuple[str, int]:
    return (name, incarnation)


def _write_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text`, durably: a crash leaves the old content or the new, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_incarnation(data_dir: Path, incarnation: int) -> None:
    _write_atomically(data_dir / "incarnation", f"{incarnation}\n")


def next_incarnation(previous: int) -> int:
    """A new incarnation for a node that joins again: the wall clock in milliseconds, and always above the
    previous one (a clock set back must not give an old identity again)."""
    return max(int(time.time() * 1000), previous + 1)


@dataclass(frozen=True, slots=True)
class LeftState:
    """This node was removed from its cluster, as incarnation `incarnation` (kept in `DATA_DIR/left`): it
    links to no one and serves no client until `cluster join` makes it a new incarnation."""

    incarnation: int
    by: str  # the member that told us (or this node's own name when the removal arrived through the store)
    at: float  # wall clock seconds

    @staticmethod
    def load(data_dir: Path) -> LeftState | None:
        try:
            raw = json.loads((data_dir / "left").read_text())
            return LeftState(int(raw["incarnation"]), str(raw["by"]), float(raw["at"]))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            # A damaged marker must not let a removed node back in: treat it as left, as whoever we are now.
            return LeftState(load_incarnation(data_dir), f"a damaged {data_dir / 'left'} ({exc})", 0.0)

    def save(self, data_dir: Path) -> None:
        _write_atomically(data_dir / "left", json.dumps({"incarnation": self.incarnation, "by": self.by,
                                                          "at": self.at}) + "\n")

    @staticmethod
    def clear(data_dir: Path) -> None:
        try:
            (data_dir / "left").unlink()
        except FileNotFoundError:
            return


def replica_ids(members_: Iterable[Member], exclude: str) -> Iterator[str]:
    for member in members_:
        if member.name != exclude:
            yield member.replica_id
