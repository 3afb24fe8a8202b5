"""The node's file descriptors: the soft `RLIMIT_NOFILE` raised to the hard limit at start, and how many of them
the MQTT listeners may hold, so that the admin API (`/health`, `vmq-admin`), the cluster links and the node's own
files always find one.

systemd starts services with a soft limit of 1,024 (and a hard one of 524,288): a node that kept the soft one
would refuse clients long before its memory is used. `raise_open_files_limit` lifts the soft limit to the hard one
(as far as the kernel allows) and says what it did.

`mqtt_socket_budget` is the node-wide number of MQTT sockets (before and after CONNECT, every listener together):
the soft limit, minus what the node had open before its listeners opened, minus the admin listeners' own caps
(`listener.http.max_connections` each), minus the cluster port's sockets before their handshake
(`cluster.max_pending_links`, vmqpy.cluster.pending_links), minus SPARE descriptors for established cluster links,
log and store files and TLS reloads. A listener over it accepts the socket and closes it at once
(vmqpy.broker.listeners.listener_limit), so a flood of sockets never takes the descriptor an operator's `vmq-admin`
needs.
It is also the default of `listener.max_connections` (an explicit value below it limits one listener further).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

import structlog

log = structlog.get_logger("vmqpy.node")

#: descriptors kept for what is not an MQTT socket and not an admin connection: cluster links (two per peer),
#: the store's and the logs' files, the certificates a TLS reload reads, the event loop's own
SPARE = 64
#: the budget never falls below this, whatever the limit (a node with fewer descriptors is misconfigured; it says so)
MINIMUM_BUDGET = 16


@dataclass(frozen=True, slots=True)
class OpenFilesLimit:
    """The soft limit before and after `raise_open_files_limit`, and the hard one (None: unlimited)."""

    before: int | None
    soft: int | None
    hard: int | None


def _value(limit: int) -> int | None:
    return None if limit == resource.RLIM_INFINITY else limit


def raise_open_files_limit() -> OpenFilesLimit:
    """Raise the soft RLIMIT_NOFILE to the hard limit (an unlimited hard limit: to the kernel's `nr_open`), and log
    the before and after at info. A refusal by the kernel leaves the soft limit as it was, logged as a warning."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        target = _kernel_nr_open() or soft
    if soft != resource.RLIM_INFINITY and target != resource.RLIM_INFINITY and soft >= target:
        log.info("open files limit", soft=_value(soft), hard=_value(hard), raised=False)
        return OpenFilesLimit(_value(soft), _value(soft), _value(hard))
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("open files limit could not be raised", soft=_value(soft), hard=_value(hard), error=str(exc))
        return OpenFilesLimit(_value(soft), _value(soft), _value(hard))
    log.info("open files limit raised", before=_value(soft), soft=_value(target), hard=_value(hard))
    return OpenFilesLimit(_value(soft), _value(target), _value(hard))


def _kernel_nr_open() -> int | None:
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def open_descriptors() -> int | None:
    """How many descriptors this process has open now (None where /proc/self/fd cannot be read)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def mqtt_socket_budget(soft_limit: int | None, open_now: int, admin_connections: int,
                       cluster_pending: int = 0) -> int | None:
    """How many MQTT sockets the node may hold at once: `soft_limit` less the `open_now` descriptors, the
    `admin_connections` the admin listeners may hold, the `cluster_pending` sockets the cluster port may hold
    before their handshake and SPARE, at least MINIMUM_BUDGET; None: no limit."""
    if soft_limit is None:
        return None
    return max(MINIMUM_BUDGET, soft_limit - open_now - admin_connections - cluster_pending - SPARE)


def per_address(setting: int | str | None, budget: int | None, share: int) -> int | None:
    """A per-address limit in force: `setting` when it is a number or None (infinity); `auto`: 1/`share` of the
    node's MQTT socket budget (None when the budget has no limit)."""
    if setting != "auto":
        assert setting is None or isinstance(setting, int)
        return setting
    return None if budget is None else max(1, budget // share)
