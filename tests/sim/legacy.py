"""The replica with the rules of e10e260, before issue 19's fixes: GC counted watermark cells whatever view the
peer reported them under (and merged other nodes' watermarks), and gap dots were checkpointed only when an
exchange completed.  Kept so that the simulation and the model check can show what the old rules did."""

from __future__ import annotations

from typing import ClassVar

from vmqpy.metadata.replica import Replica


class LegacyReplica(Replica):
    GC_NEEDS_AGREED_VIEWS: ClassVar[bool] = False
    CHECKPOINT_GAPS_AT_ONCE: ClassVar[bool] = False
