"""The only structlog.configure call of the node: JSON lines or console text on stderr."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _drop(_logger: Any, _name: str, _event: MutableMapping[str, Any]) -> Mapping[str, Any]:
    raise structlog.DropEvent


def configure(fmt: str = "console", level: str = "info", node: str | None = None) -> None:
    """Configure structlog once. `fmt` is console, json or off; context vars (node, client_id, peer) merge in."""
    threshold = _LEVELS[level] if fmt != "off" else logging.CRITICAL
    processors: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "off":
        processors = [_drop]
    elif fmt == "json":
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    if node is not None:
        structlog.contextvars.bind_contextvars(node=node)
