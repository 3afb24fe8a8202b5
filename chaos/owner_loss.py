"""The owner-loss nemesis (issue 18): the node holding the most persistent sessions dies with its disk, and the
operator replaces it.

`lose`: ask the cluster which node holds the most persistent sessions (`vmq-admin session show`, ties broken by
the most queued messages, then by name), `kill -9` it by PID and delete its data directory. Then what an
operator does after a disk loss (docs/cluster.md, "Leaving"; docs/replication.md section 11): `remove` the dead
member with `vmq-admin cluster leave node=DEAD -k` run on a survivor (its sessions are recreated on the
survivors, with the messages the queue replicas hold), and later `rejoin`: start a node with the same name and
addresses on an empty disk, `vmq-admin cluster join` it (a new incarnation with an empty store) and wait until
every member sees every member ready. A node whose disk is gone is not restarted as the old member: it never
had the state the others expect of it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from typing import Any

from chaos.cluster import Cluster, HarnessError, Node

#: How long the replacement may take to be ready in every member's view.
REPLACE_READY_S = 60.0
#: `session show` lists at most this many rows (every session of an experiment fits).
SESSION_ROWS = 100_000


def persistent_per_node(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """(persistent sessions, their queued messages) per node, from `session show --json` rows with the columns
    node, clean_session and queued. A row without a node is skipped; a non-numeric `queued` counts 0."""
    counts: dict[str, tuple[int, int]] = {}
    for row in rows:
        node = row.get("node")
        if not node or row.get("clean_session") in (True, "true"):
            continue
        queued = row.get("queued")
        sessions, messages = counts.get(str(node), (0, 0))
        counts[str(node)] = (sessions + 1, messages + (queued if isinstance(queued, int) else 0))
    return counts


def choose_victim(rows: Iterable[Mapping[str, Any]], members: list[str]) -> str:
    """The member holding the most persistent sessions (then the most queued messages, then the first name).
    With no persistent session anywhere: the first member. Raises ValueError without members."""
    if not members:
        raise ValueError("no member to choose from")
    counts = persistent_per_node(rows)
    return min(members, key=lambda name: (-counts.get(name, (0, 0))[0], -counts.get(name, (0, 0))[1], name))


def session_rows(asker: Node) -> list[dict[str, Any]]:
    """Every session of the cluster with its node, persistence and queue length, through the real vmq-admin."""
    answer = asker.admin_cli("session", "show", "--client_id", "--node", "--clean_session", "--queued",
                             f"--limit={SESSION_ROWS}", "--json", timeout=60)
    if answer.returncode != 0:
        raise HarnessError(f"session show on {asker.name} failed: {(answer.stderr or answer.stdout).strip()[-300:]}")
    try:
        rows = json.loads(answer.stdout)
    except ValueError as exc:
        raise HarnessError(f"session show on {asker.name}: not JSON ({exc}): {answer.stdout[:200]!r}") from None
    if not isinstance(rows, list):
        raise HarnessError(f"session show on {asker.name}: not a list of rows: {answer.stdout[:200]!r}")
    return [row for row in rows if isinstance(row, dict)]


def lose(cluster: Cluster) -> tuple[Node, dict[str, tuple[int, int]]]:
    """Kill -9 the node with the most persistent sessions and delete its data directory; the node and the
    (sessions, queued) counts per node it was chosen by."""
    live = [n for n in cluster.nodes if n.pid is not None]
    if not live:
        raise HarnessError("no live node to ask which one holds the most persistent sessions")
    rows = session_rows(live[0])
    name = choose_victim(rows, [n.name for n in live])
    victim = next(n for n in live if n.name == name)
    victim.kill9()
    shutil.rmtree(victim.data_dir, ignore_errors=True)
    if victim.data_dir.exists():
        raise HarnessError(f"the data directory of {victim.name} could not be deleted: {victim.data_dir}")
    return victim, persistent_per_node(rows)


def remove(cluster: Cluster, victim: Node) -> str:
    """`cluster leave node=VICTIM -k` on a survivor: the dead member is removed and its persistent sessions are
    recreated on the survivors. The command's output."""
    survivors = [n for n in cluster.nodes if n is not victim and n.pid is not None]
    if not survivors:
        raise HarnessError(f"no survivor to remove {victim.name} from the cluster")
    commander = survivors[0]
    left = commander.admin_cli("cluster", "leave", f"node={victim.name}", "-k", timeout=120)
    if left.returncode != 0:
        raise HarnessError(f"leave of {victim.name} on {commander.name} failed: "
                           f"{(left.stderr or left.stdout).strip()[-300:]}")
    return left.stdout.strip()


def rejoin(cluster: Cluster, victim: Node) -> None:
    """The replacement: the victim's name and addresses on an empty disk, joined through a survivor; waits until
    every member sees every member ready. Until its join it is a cluster of its own that serves clients, which is
    why the nemesis runs it only once the workloads stopped (docs/chaos.md, "Owner loss")."""
    survivors = [n for n in cluster.nodes if n is not victim and n.pid is not None]
    if not survivors:
        raise HarnessError(f"no survivor for {victim.name} to join")
    if victim.pid is None:
        victim.start()
    joined = victim.admin_cli("cluster", "join", f"discovery-node={survivors[0].discovery}", timeout=60)
    if joined.returncode != 0:
        raise HarnessError(f"join of the replacement {victim.name} failed: "
                           f"{(joined.stderr or joined.stdout).strip()[-300:]}")
    if not cluster.wait_ready(REPLACE_READY_S):
        raise HarnessError(f"the cluster was not ready {REPLACE_READY_S:.0f} s after {victim.name} joined again: "
                           f"{cluster.views()}")
