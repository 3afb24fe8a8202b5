"""Under-replication windows for the replication log (docs/replication-log.md, `queue_replicas`), pure.

A node is *under-replicated* while some of its persistent sessions are not confirmed on all their replica nodes
(the rebalancer's count) or some acknowledged writes still miss a copy (trade_consistency accepted them with
fewer: the ledger's count). The node samples both once a second and where either count leaves zero or comes
back to it (the ledger's and the rebalancer's `on_edge`: a window shorter than a second went unlogged before);
`UnderReplication.sample` says when a window starts or ends, so the log gets two lines per window, not one per
second, and the Spark report counts the windows and their length (spark_analytics/replica_windows.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["EVENT", "UnderReplication"]

EVENT = "queue_replicas"


@dataclass(slots=True)
class UnderReplication:
    """Whether the node is within a window, and the peak counts seen in it."""

    within: bool = False
    peak_sessions: int = 0
    peak_messages: int = 0
    peak_writes: int = 0

    def sample(self, sessions: int, messages: int, writes: int, peak_writes: int = 0) -> dict[str, Any] | None:
        """The fields of the line to log now (a window starts or ends), or None. `peak_writes`: the highest
        write count since the last sample (the ledger's `take_peak`), when it is higher than `writes`."""
        under = sessions > 0 or writes > 0
        if self.within:
            self.peak_sessions = max(self.peak_sessions, sessions)
            self.peak_messages = max(self.peak_messages, messages)
            self.peak_writes = max(self.peak_writes, writes, peak_writes)
        if under == self.within:
            return None
        fields: dict[str, Any] = {"under_replicated": under, "sessions": sessions, "messages": messages,
                                  "writes": writes}
        if under:
            self.peak_sessions, self.peak_messages, self.peak_writes = sessions, messages, max(writes, peak_writes)
        else:
            fields.update(peak_sessions=self.peak_sessions, peak_messages=self.peak_messages,
                          peak_writes=self.peak_writes)
        self.within = under
        return fields
