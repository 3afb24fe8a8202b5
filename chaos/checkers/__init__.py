"""Pure checkers: a history (and final reads, replication-log records) in, a `Check` out. No I/O."""

from chaos.checkers.result import Check

__all__ = ["Check"]
