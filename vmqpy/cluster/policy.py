"""The netsplit policy: what a node does while it is not ready (part of the cluster unreachable).

VerneMQ's default is to stop serving: while not ready a node refuses CONNECT, PUBLISH, SUBSCRIBE and
UNSUBSCRIBE. Each refusal can be lifted on its own (`allow_*_during_netsplit`), or all four at once
(`trade_consistency`). Beyond VerneMQ, `cluster.readiness = majority` keeps the nodes that see a strict
majority of the members ready, so one dead node no longer stops the whole cluster; only a minority side refuses.
Pure: the view and the settings in, decisions out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from vmqpy.cluster.view import View

if TYPE_CHECKING:
    from vmqpy.config import Config

OPERATIONS = ("register", "publish", "subscribe", "unsubscribe")
LEFT_REASON = "this node left its cluster: `vmq-admin cluster join discovery-node=...` to rejoin"
JOINING_REASON = "joining a cluster: the cluster's subscriptions and sessions have not all arrived yet"


@dataclass(frozen=True, slots=True)
class NetsplitSettings:
    allow_register: bool = False
    allow_publish: bool = False
    allow_subscribe: bool = False
    allow_unsubscribe: bool = False
    readiness: str = "all"  # all | majority

    def allows(self, operation: str) -> bool:
        allowed: bool = getattr(self, f"allow_{operation}")
        return allowed

    @classmethod
    def of(cls, config: Config) -> NetsplitSettings:
        """The netsplit settings of a node's configuration (`allow_*_during_netsplit`, `cluster.readiness`)."""
        return cls(config.allow_register_during_netsplit, config.allow_publish_during_netsplit,
                   config.allow_subscribe_during_netsplit, config.allow_unsubscribe_during_netsplit,
                   config.readiness)


class Policy:
    """Decides, per operation, whether this node serves it now; counts the refusals."""

    def __init__(self, settings: NetsplitSettings | None = None) -> None:
        self._settings = settings or NetsplitSettings()
        self._view: View | None = None  # None: a single node, always ready
        self.ready = True  # asked on every publish: kept up to date when the view or the settings change
        self.refused: Counter[str] = Counter()
        self._left = False
        self._joining = False

    @property
    def joining(self) -> bool:
        """A `cluster join` runs and this node's store does not hold the cluster's records yet: like a node that
        left, it refuses every operation (a publish acknowledged now would miss subscribers it does not know)."""
        return self._joining

    @joining.setter
    def joining(self, joining: bool) -> None:
        self._joining = joining
        self._refresh()

    @property
    def left(self) -> bool:
        """This node left its cluster (cluster/service.py): it refuses every operation, whatever the settings,
        until `cluster join` makes it a member again."""
        return self._left

    @left.setter
    def left(self, left: bool) -> None:
        self._left = left
        self._refresh()

    @property
    def settings(self) -> NetsplitSettings:
        return self._settings

    @settings.setter
    def settings(self, settings: NetsplitSettings) -> None:
        self._settings = settings
        self._refresh()

    @property
    def view(self) -> View | None:
        return self._view

    @view.setter
    def view(self, view: View | None) -> None:
        self._view = view
        self._refresh()

    def _refresh(self) -> None:
        view = self._view
        if self._left or self._joining:
            self.ready = False
        elif view is None:
            self.ready = True
        else:
            self.ready = view.in_majority if self._settings.readiness == "majority" else view.ready

    def reason(self) -> str:
        if self._left:
            return LEFT_REASON
        if self._joining:
            return JOINING_REASON
        view = self.view
        if view is None or self.ready:
            return "ready"
        missing = sorted(set(view.members) - set(view.reachable))
        rule = "a majority of" if self.settings.readiness == "majority" else "every"
        return f"not ready: {rule} member must be reachable; unreachable: {', '.join(missing)}"

    def may(self, operation: str) -> bool:
        """True when `operation` is served now; a refusal is counted."""
        if self.ready or (self.settings.allows(operation) and not self._left and not self._joining):
            return True
        self.refused[operation] += 1
        return False

    def update(self, **changes: object) -> None:
        self.settings = replace(self.settings, **changes)  # type: ignore[arg-type]
