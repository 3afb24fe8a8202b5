"""SIGHUP, whatever the node is configured with: the certificates of the TLS listeners and of the cluster links,
and the ACL and password files (as `vmq-admin acl reload`), each read again; one that cannot be used keeps its
previous version in force and is logged. The node keeps running (docs/security.md, "Renewing certificates").
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from vmqpy.broker.core.broker import Broker
from vmqpy.broker.listeners.tls import ClusterContexts, ListenerContexts
from vmqpy.config_values import ConfigError

log = structlog.get_logger("vmqpy.node")

__all__ = ["Hangup", "reload_on_hangup"]


class Hangup:
    """Where a node's SIGHUP goes from the start of its start. Until the node can reload (its listeners are open)
    a SIGHUP is kept and acted on then: the files it names may have changed after the node read them. Without
    this a SIGHUP in that window took the signal's default action and ended the node."""

    def __init__(self) -> None:
        self.pending = False
        self._reload: Callable[[], None] | None = None

    def signalled(self) -> None:
        """The SIGHUP handler."""
        if self._reload is None:
            if not self.pending:
                log.info("SIGHUP while the node starts: it reloads once its listeners are open")
            self.pending = True
            return
        self._reload()

    def serve(self, reload: Callable[[], None] | None) -> None:
        """From now on a SIGHUP calls `reload` (None: it is kept again); a SIGHUP kept until now is acted on."""
        self._reload = reload
        if reload is not None and self.pending:
            self.pending = False
            reload()


def reload_on_hangup(tls: ListenerContexts, cluster_tls: ClusterContexts | None, broker: Broker) -> None:
    """Reload the listeners' TLS files (`tls`), the cluster links' (`cluster_tls`, when set) and the access
    files of `broker`."""
    log.info("SIGHUP: reloading certificates and access files")
    if tls.settings:
        # New connections get the new certificates; live connections keep theirs. Files that cannot be used
        # leave every listener as it was.
        try:
            count = tls.reload()
        except ConfigError as exc:
            log.error("TLS certificates not reloaded: the listeners keep the previous ones", error=str(exc))
        else:
            log.info("TLS certificates reloaded", listeners=count)
    if cluster_tls is not None:
        try:
            cluster_tls.reload()
        except ConfigError as exc:
            log.error("cluster TLS certificates not reloaded: new links keep the previous ones", error=str(exc))
        else:
            log.info("cluster TLS certificates reloaded")
    try:
        broker.enforcer.reload(force=True)
    except Exception:
        log.exception("access file reload failed")
